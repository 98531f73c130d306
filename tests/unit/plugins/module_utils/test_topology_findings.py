# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import copy

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._topology_findings import (
    CODES,
    topology_findings,
    version_tuple,
)
from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import (
    KUNPENG920_8xA100,
    KUNPENG920_8xA100_GPU3_LOST,
    KUNPENG920_8xA100_GPU5_GEN3_X8,
    LAB_2CORE_CPU_ONLY,
    WORKSTATION_1GPU,
    X86_8xA800_NVLINK,
    variant,
)

ALL_ON_SOCKET_0 = variant(KUNPENG920_8xA100, 'kunpeng-8-gpus-socket0', devices=dict(
    (i, {'numa_node': i // 4, 'cpu_affinity': ('0-31', '32-63')[i // 4], 'host_bridge': 'hb%d' % (i // 4)})
    for i in range(4, 8)))
NODE1_NO_MEMORY = variant(KUNPENG920_8xA100, 'kunpeng-node1-no-dimms', nodes=[
    dict(node, mem_total_kb=0) if node['id'] == 1 else node for node in KUNPENG920_8xA100['nodes']])
NODE1_MEMORY_UNKNOWN = variant(KUNPENG920_8xA100, 'kunpeng-node1-no-meminfo', nodes=[
    dict(node, mem_total_kb=None) if node['id'] == 1 else node for node in KUNPENG920_8xA100['nodes']])
CXL_MEMORY_NODE = variant(X86_8xA800_NVLINK, 'x86-cxl', nodes=X86_8xA800_NVLINK['nodes'] + [
    {'id': 2, 'cpulist': '', 'mem_total_kb': 268435456, 'distances': [24, 24, 10]}])
GPU6_NUMA_UNKNOWN = variant(KUNPENG920_8xA100, 'kunpeng-gpu6-no-pxm', devices={6: {'numa_node': -1}})
WORKSTATION_NUMA_UNKNOWN = WORKSTATION_1GPU  # sysfs numa_node -1, but one node only

# name, topology, options, expected [(code, severity, gpus, numa nodes, sockets)]
CASES = [
    ('kunpeng healthy', KUNPENG920_8xA100, None, []),
    ('a800 healthy', X86_8xA800_NVLINK, None, []),
    ('workstation, single node with unknown GPU node', WORKSTATION_NUMA_UNKNOWN, None, []),
    ('lab cpu only', LAB_2CORE_CPU_ONLY, {'min_cuda_driver': '12.8', 'fail_on': list(CODES)}, []),
    ('max 3 per socket', KUNPENG920_8xA100, {'max_gpus_per_socket': 3}, [
        ('too_many_gpus_per_socket', 'warning', [0, 1, 2, 3], [0], [0]),
        ('too_many_gpus_per_socket', 'warning', [4, 5, 6, 7], [2], [1])]),
    ('8 GPUs on socket 0', ALL_ON_SOCKET_0, None, [
        ('too_many_gpus_per_socket', 'warning', list(range(8)), [0, 1], [0])]),
    ('degraded link', KUNPENG920_8xA100_GPU5_GEN3_X8, None, [('pcie_degraded', 'warning', [5], [2], [])]),
    ('degraded link fails', KUNPENG920_8xA100_GPU5_GEN3_X8, {'fail_on': ['pcie_degraded']}, [
        ('pcie_degraded', 'failure', [5], [2], [])]),
    ('degraded link ignored', KUNPENG920_8xA100_GPU5_GEN3_X8, {'ignore': ['pcie_degraded']}, []),
    ('gpu numa unknown', GPU6_NUMA_UNKNOWN, None, [('gpu_numa_node_unknown', 'warning', [6], [], [])]),
    ('node without memory', NODE1_NO_MEMORY, None, [('numa_node_without_memory', 'warning', [], [1], [0])]),
    ('node memory unknown', NODE1_MEMORY_UNKNOWN, None, []),
    ('memory-only node', CXL_MEMORY_NODE, None, []),
    ('old driver', X86_8xA800_NVLINK, {'min_cuda_driver': '12.8'}, [
        ('cuda_driver_too_old', 'warning', list(range(8)), [], [])]),
    ('old driver fails', X86_8xA800_NVLINK, {'min_cuda_driver': '12.8', 'fail_on': 'cuda_driver_too_old'}, [
        ('cuda_driver_too_old', 'failure', list(range(8)), [], [])]),
    ('driver new enough', X86_8xA800_NVLINK, {'min_cuda_driver': '12.2'}, []),
    ('gpu lost', KUNPENG920_8xA100_GPU3_LOST, None, [('gpu_query_error', 'warning', [3], [0], [])]),
]


@pytest.mark.parametrize('topo, options, expected', [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_findings(facts, topo, options, expected):
    gpu, numa = facts(topo)
    findings = topology_findings(gpu, numa, options)
    assert [(f['code'], f['severity'], f['gpus'], f['numa_nodes'], f['sockets']) for f in findings] == expected
    for finding in findings:
        assert sorted(finding) == ['code', 'fix', 'gpus', 'message', 'numa_nodes', 'severity', 'sockets']
        assert finding['message'] and finding['fix']


def test_messages_name_what_is_wrong(facts):
    gpu, numa = facts(KUNPENG920_8xA100_GPU5_GEN3_X8)
    (finding,) = topology_findings(gpu, numa)
    assert '0000:85:00.0' in finding['message'] and 'width x8 below x16' in finding['message']
    assert 'lspci -vv -s 0000:85:00.0' in finding['fix']


def test_newer_minor_versions_compare_numerically(facts):
    gpu, numa = facts(X86_8xA800_NVLINK)
    gpu = dict(gpu, cuda_driver_version='12.10')
    assert topology_findings(gpu, numa, {'min_cuda_driver': '12.8'}) == []
    assert [f['code'] for f in topology_findings(gpu, numa, {'min_cuda_driver': '13.0'})] == ['cuda_driver_too_old']


def test_findings_do_not_change_the_facts(facts):
    gpu, numa = facts(KUNPENG920_8xA100_GPU5_GEN3_X8)
    before = copy.deepcopy((gpu, numa))
    topology_findings(gpu, numa, {'fail_on': ['pcie_degraded']})
    assert (gpu, numa) == before


@pytest.mark.parametrize('gpu, numa', [(None, None), ({}, {}), ({'available': False}, {'nodes': []})])
def test_missing_facts_give_no_findings(gpu, numa):
    assert topology_findings(gpu, numa, {'min_cuda_driver': '12.8'}) == []


@pytest.mark.parametrize('options, message', [
    ({'max_gpu_per_socket': 2}, 'unknown option'),
    ({'fail_on': ['pcie_degrade']}, 'unknown finding code'),
    ({'ignore': ['nope']}, 'unknown finding code'),
    ({'min_cuda_driver': 'twelve'}, 'min_cuda_driver: CUDA version .twelve. is not of the form major.minor'),
])
def test_bad_options_raise(options, message):
    with pytest.raises(ValueError, match=message):
        topology_findings({}, {}, options)


@pytest.mark.parametrize('text, expected', [('12.8', (12, 8)), ('12.10', (12, 10)), (' 13.0 ', (13, 0)), (12, (12,))])
def test_version_tuple(text, expected):
    assert version_tuple(text) == expected
