# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import re

from ansible_collections.llmops.vllm.plugins.lookup.diagnose_signatures import LookupModule
from ansible_collections.llmops.vllm.plugins.module_utils._diagnose import SIGNATURES, matches


def test_the_lookup_gives_the_diagnosis_own_table():
    signatures = LookupModule().run([])
    assert [s['id'] for s in signatures] == [sid for sid, _pattern, _meaning, _fix in SIGNATURES]
    assert all(set(s) == {'id', 'pattern', 'meaning', 'fix'} for s in signatures)


def test_each_pattern_finds_what_the_diagnosis_finds():
    lines = {'oom': 'OOM detected, retrying with reduced batch size',
             'cuda_illegal_memory_access': 'RuntimeError: CUDA error 700: an illegal memory access was encountered',
             'xid': 'NVRM: Xid (PCI:0000:41:00): 79, pid=1234, GPU has fallen off the bus.',
             'nccl_timeout': 'Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)',
             'engine_died': 'vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue'}
    for signature in LookupModule().run([]):
        assert re.search(signature['pattern'], lines[signature['id']]), signature['id']
        assert matches(lines[signature['id']]) == [signature['id']]
