# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pytest

from ansible_collections.llmops.vllm.plugins.modules import numa_facts
from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import (
    KUNPENG920_8xA100,
    LAB_2CORE_CPU_ONLY,
    X86_8xA800_NVLINK,
    X86_VM_ADJACENT_SMT_1GPU,
)


@pytest.mark.parametrize('topo, nodes, flags, synthesized', [
    (KUNPENG920_8xA100, ['0-31', '32-63', '64-95', '96-127'], ['-march=armv8.2-a', '-mtune=tsv110'], False),
    (X86_8xA800_NVLINK, ['0-31,64-95', '32-63,96-127'], ['-march=x86-64-v3'], False),
    (LAB_2CORE_CPU_ONLY, ['0-1'], ['-march=x86-64'], True),
], ids=lambda v: v['name'] if isinstance(v, dict) else None)
@pytest.mark.parametrize('check_mode', [False, True])
def test_reports_numa(run_module, sysfs, topo, nodes, flags, synthesized, check_mode):
    result = run_module(numa_facts, {'root': sysfs(topo), '_ansible_check_mode': check_mode})
    assert (result['rc'], result['changed']) == (0, False)
    assert list(result['ansible_facts']) == ['numa']
    numa = result['ansible_facts']['numa']
    assert [n['cpulist'] for n in numa['nodes']] == nodes
    assert numa['cpu']['compiler_flags'] == flags
    assert numa['nodes_synthesized'] is synthesized


@pytest.mark.parametrize('topo, first_cores', [
    (X86_VM_ADJACENT_SMT_1GPU, [[0, 1], [2, 3], [4, 5]]),
    (X86_8xA800_NVLINK, [[0, 64], [1, 65], [2, 66]]),
    (KUNPENG920_8xA100, [[0], [1], [2]]),
], ids=lambda v: v['name'] if isinstance(v, dict) else None)
def test_reports_each_cores_sibling_cpus(run_module, sysfs, topo, first_cores):
    numa = run_module(numa_facts, {'root': sysfs(topo)})['ansible_facts']['numa']
    assert numa['cores'][:3] == first_cores
    assert sorted(cpu for core in numa['cores'] for cpu in core) == numa['online_cpus']


def test_missing_root_fails_clearly(run_module, tmp_path):
    result = run_module(numa_facts, {'root': str(tmp_path / 'nope')})
    assert (result['rc'], result['failed']) == (1, True)
    assert result['msg'].startswith('Cannot tell the online CPUs')


def test_default_root_reads_this_machine(run_module):
    result = run_module(numa_facts, {})
    numa = result['ansible_facts']['numa']
    assert result['rc'] == 0 and numa['online_cpus'] and numa['nodes']
