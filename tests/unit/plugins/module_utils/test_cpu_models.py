# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._cpu_models import identify_cpu, normalize_hex, x86_march
from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import ICELAKE_SP_FLAGS, QEMU64_FLAGS, ZEN4_FLAGS

V2_ONLY_FLAGS = 'fpu sse sse2 pni ssse3 cx16 sse4_1 sse4_2 popcnt lahf_lm avx'  # e.g. Sandy Bridge


@pytest.mark.parametrize('implementer, part, vendor, model, uarch, flags', [
    ('0x48', '0xd01', 'HiSilicon', 'Kunpeng-920', 'tsv110', ['-march=armv8.2-a', '-mtune=tsv110']),
    ('0x41', '0xd0c', 'Arm', 'Neoverse-N1', 'neoverse-n1', ['-march=armv8.2-a', '-mtune=neoverse-n1']),
    ('0x41', '0xd49', 'Arm', 'Neoverse-N2', 'neoverse-n2', ['-march=armv9-a', '-mtune=neoverse-n2']),
    ('0x41', '0xd40', 'Arm', 'Neoverse-V1', 'neoverse-v1', ['-march=armv8.4-a+sve', '-mtune=neoverse-v1']),
    ('0x41', '0xd4f', 'Arm', 'Neoverse-V2', 'neoverse-v2', ['-march=armv9-a', '-mtune=neoverse-n2']),
    ('0X48', '0xD01', 'HiSilicon', 'Kunpeng-920', 'tsv110', ['-march=armv8.2-a', '-mtune=tsv110']),
    # Cortex-A72 and an unknown implementer: baseline flags, no guessed model.
    ('0x41', '0xd08', 'Arm', None, None, ['-march=armv8-a']),
    ('0x99', '0x001', None, None, None, ['-march=armv8-a']),
])
def test_identify_arm(implementer, part, vendor, model, uarch, flags):
    cpu = identify_cpu('aarch64', {'CPU implementer': implementer, 'CPU part': part})
    assert (cpu['vendor'], cpu['model_name'], cpu['microarchitecture'], cpu['compiler_flags']) == (
        vendor, model, uarch, flags)
    assert cpu['implementer'] == implementer.lower()


@pytest.mark.parametrize('vendor_id, vendor, flags, march', [
    ('GenuineIntel', 'Intel', ICELAKE_SP_FLAGS, '-march=x86-64-v3'),
    ('AuthenticAMD', 'AMD', ZEN4_FLAGS, '-march=x86-64-v3'),
    ('GenuineIntel', 'Intel', V2_ONLY_FLAGS, '-march=x86-64-v2'),
    ('AuthenticAMD', 'AMD', QEMU64_FLAGS, '-march=x86-64'),
    ('CentaurHauls', 'CentaurHauls', '', '-march=x86-64'),
])
def test_identify_x86(vendor_id, vendor, flags, march):
    cpu = identify_cpu('x86_64', {'vendor_id': vendor_id, 'model name': 'Some CPU', 'flags': flags})
    assert cpu == {'vendor': vendor, 'model_name': 'Some CPU', 'implementer': None, 'part': None,
                   'microarchitecture': None, 'compiler_flags': [march]}


def test_unknown_architecture_gets_no_flags():
    cpu = identify_cpu('riscv64', {'isa': 'rv64imafdc'})
    assert cpu['compiler_flags'] == [] and cpu['vendor'] is None


def test_x86_march_needs_every_v3_flag():
    flags = set(ICELAKE_SP_FLAGS.split()) - {'movbe'}
    assert x86_march(flags) == '-march=x86-64-v2'


@pytest.mark.parametrize('value, expected', [('0x48', '0x48'), ('0xd01', '0xd01'), ('0XD4F', '0xd4f'),
                                             ('nope', None), (None, None)])
def test_normalize_hex(value, expected):
    assert normalize_hex(value) == expected
