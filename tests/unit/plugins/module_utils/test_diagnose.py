# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import json

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._diagnose import (
    explain,
    SIGNATURES,
    matches,
    message_of,
    parse_journal,
    scan,
)

# The two error lines of the deployment's runbook, as vLLM's logs carry them.
OOM = 'WARNING 12-03 10:00:01 [scheduler.py:412] OOM detected, retrying with reduced batch size'
CUDA_700 = ('ERROR 12-03 10:02:17 [core.py:710] RuntimeError: CUDA error 700: an illegal memory access was '
            'encountered')


def record(message, unit='vllm-tiny.service', stamp=1764756000000000):
    return {'MESSAGE': message, '_SYSTEMD_UNIT': unit, '__REALTIME_TIMESTAMP': str(stamp)}


@pytest.mark.parametrize('line, expected', [
    (OOM, ['oom']),
    ('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB', ['oom']),
    (CUDA_700, ['cuda_illegal_memory_access']),
    ('NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.', ['xid']),
    ('[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7) ran for 600000 ms', ['nccl_timeout']),
    ('vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.', ['engine_died']),
    # vLLM 0.32's own words when its engine core process is killed (vllm/v1/engine/core_client.py).
    ('WARNING 12-04 02:40:00 [core_client.py:817] [shutdown] MPClient: engine core exited unexpectedly; starting '
     'cleanup', ['engine_died']),
    ('RuntimeError: Engine core process EngineCore_DP0 died unexpectedly.', ['engine_died']),
    ('INFO 12-03 10:00:00 [api_server.py:1] Started server process', []),
    ('GPU 0 reported Xid 79', ['xid']),
    ('INFO xidle timer', []),
])
def test_each_signature_matches_its_lines_and_only_them(line, expected):
    assert matches(line) == expected


def test_every_signature_says_what_it_means_and_what_to_do():
    assert len({sid for sid, _p, _m, _f in SIGNATURES}) == len(SIGNATURES)
    for _sid, _pattern, meaning, fix in SIGNATURES:
        assert meaning and fix


def test_the_runbook_lines_give_their_fixes():
    findings = scan([record(OOM), record('INFO fine'), record(CUDA_700, stamp=1764756137000000)])
    assert [(f['unit'], f['signature'], f['count']) for f in findings] == [
        ('vllm-tiny.service', 'oom', 1), ('vllm-tiny.service', 'cuda_illegal_memory_access', 1)]
    assert 'max_num_seqs' in findings[0]['fix']
    assert 'lspci -vvv' in findings[1]['fix'] and 'bandwidthTest' in findings[1]['fix']
    assert findings[1]['sample'] == CUDA_700


def test_repeats_count_per_unit_with_first_and_last_times():
    findings = scan([record(OOM, stamp=3), record(OOM, stamp=1), record(OOM, unit='vllm-big.service', stamp=2),
                     record(OOM, stamp=9)])
    assert [(f['unit'], f['count'], f['first'], f['last']) for f in findings] == [
        ('vllm-tiny.service', 3, 3, 9), ('vllm-big.service', 1, 2, 2)]


def test_a_message_that_is_not_utf8_is_read_as_bytes():
    raw = list(b'OOM detected \xff')
    assert message_of({'MESSAGE': raw}) == 'OOM detected \ufffd'
    assert scan([{'MESSAGE': raw, 'SYSLOG_IDENTIFIER': 'vllm'}])[0]['unit'] == 'vllm'
    assert message_of({'MESSAGE': None}) == '' and message_of({}) == ''


def test_a_long_line_is_cut_in_the_sample():
    assert len(scan([record(OOM + 'x' * 1000)])[0]['sample']) == 500


def test_journal_output_skips_what_is_not_a_json_object():
    out = '\n'.join([json.dumps(record(OOM)), '', 'not json', '[1, 2]', json.dumps(record('fine'))])
    assert [message_of(r) for r in parse_journal(out)] == [OOM, 'fine']


def test_with_units_only_their_own_lines_count():
    systemd_about_it = {'MESSAGE': "Starting vllm-tiny.service - sh -c 'echo OOM detected'",
                        '_SYSTEMD_UNIT': 'init.scope', 'UNIT': 'vllm-tiny.service'}
    assert scan([systemd_about_it, record(OOM, unit='vllm-other.service')], ['vllm-tiny.service']) == []
    assert [f['unit'] for f in scan([systemd_about_it])] == ['init.scope']


def test_explain_adds_what_the_host_says_to_each_signature():
    context = {'gpu': 'GPU driver 550.54.15 (CUDA 12.4); the fleet expects CUDA 12.8',
               'degraded_pcie': ['00000000:41:00.0'], 'numa_memory_mib': {0: 128000, 1: 129000}, 'warnings': []}
    cuda = {'unit': 'vllm-a.service', 'signature': 'cuda_illegal_memory_access', 'count': 2,
            'sample': 'CUDA error 700', 'meaning': 'a kernel touched memory', 'fix': 'check the driver'}
    assert explain(cuda, context) == (
        'vllm-a.service: a kernel touched memory (2 lines, e.g. "CUDA error 700"). Fix: check the driver. On this '
        'host: GPU driver 550.54.15 (CUDA 12.4); the fleet expects CUDA 12.8; degraded PCIe links: 00000000:41:00.0.')
    oom = dict(cuda, signature='oom', count=1)
    assert explain(oom, context).endswith(
        '(1 line, e.g. "CUDA error 700"). Fix: check the driver. On this host: memory per NUMA node: node 0 128000 '
        'MiB, node 1 129000 MiB.')
    assert explain(dict(cuda, signature='engine_died'), context).endswith('On this host: preflight warnings: none.')
    assert explain(cuda).endswith('Fix: check the driver.')
