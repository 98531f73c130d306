# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import os
import platform
import re
import statistics
import time
from pathlib import Path

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils import _numa
from ansible_collections.llmops.vllm.plugins.module_utils._numa import NumaFactsError, collect_numa, parse_cpuinfo
from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import (
    KUNPENG920_8xA100,
    LAB_2CORE_CPU_ONLY,
    WORKSTATION_1GPU,
    X86_8xA800_NVLINK,
    X86_VM_ADJACENT_SMT_1GPU,
    variant,
)

KUNPENG_FLAGS = ['-march=armv8.2-a', '-mtune=tsv110']

# topology, (architecture, vendor, model, microarchitecture, flags), (sockets, cores/socket, threads/core),
# nodes as (id, socket, cpulist, memory MiB, distances), online cpulist, nodes synthesized
CASES = [
    (KUNPENG920_8xA100, ('aarch64', 'HiSilicon', 'Kunpeng-920', 'tsv110', KUNPENG_FLAGS), (2, 64, 1),
     [(0, 0, '0-31', 128468, [10, 12, 20, 22]), (1, 0, '32-63', 128990, [12, 10, 22, 24]),
      (2, 1, '64-95', 128990, [20, 22, 10, 12]), (3, 1, '96-127', 128964, [22, 24, 12, 10])],
     '0-127', False),
    (X86_8xA800_NVLINK, ('x86_64', 'Intel', 'Intel(R) Xeon(R) Platinum 8358 CPU @ 2.60GHz', None,
                         ['-march=x86-64-v3']), (2, 32, 2),
     [(0, 0, '0-31,64-95', 515565, [10, 20]), (1, 1, '32-63,96-127', 516055, [20, 10])], '0-127', False),
    (WORKSTATION_1GPU, ('x86_64', 'AMD', 'AMD Ryzen 9 7950X 16-Core Processor', None, ['-march=x86-64-v3']),
     (1, 16, 2), [(0, 0, '0-31', 63648, [10])], '0-31', False),
    (LAB_2CORE_CPU_ONLY, ('x86_64', 'AMD', 'QEMU Virtual CPU version 2.5+', None, ['-march=x86-64']), (1, 2, 1),
     [(0, 0, '0-1', None, [10])], '0-1', True),
    (X86_VM_ADJACENT_SMT_1GPU, ('x86_64', 'Intel', 'Intel(R) Xeon(R) Platinum 8358 CPU @ 2.60GHz', None,
                                ['-march=x86-64-v3']), (1, 8, 2),
     [(0, 0, '0-7', 32095, [10, 20]), (1, 0, '8-15', 32246, [20, 10])], '0-15', False),
]


@pytest.mark.parametrize('topo, cpu, shape, nodes, online, synthesized', CASES, ids=[c[0]['name'] for c in CASES])
def test_collect_numa(sysfs, topo, cpu, shape, nodes, online, synthesized):
    numa = collect_numa(sysfs(topo))
    got_cpu = numa['cpu']
    assert (got_cpu['architecture'], got_cpu['vendor'], got_cpu['model_name'], got_cpu['microarchitecture'],
            got_cpu['compiler_flags']) == cpu
    assert (got_cpu['sockets'], got_cpu['cores_per_socket'], got_cpu['threads_per_core']) == shape
    assert [(n['id'], n['socket'], n['cpulist'], n['memory_total_mib'], n['distances'])
            for n in numa['nodes']] == nodes
    assert numa['online_cpulist'] == online
    assert numa['nodes_synthesized'] is synthesized
    assert numa['online_cpus'] == sorted(cpu for n in numa['nodes'] for cpu in n['cpus'])


def test_fact_keys(sysfs):
    numa = collect_numa(sysfs(KUNPENG920_8xA100))
    assert sorted(numa) == ['cores', 'cpu', 'nodes', 'nodes_synthesized', 'online_cpulist', 'online_cpus']
    assert list(numa['nodes'][0]) == ['id', 'socket', 'cpus', 'cpulist', 'memory_total_mib', 'distances']
    assert sorted(numa['cpu']) == sorted([
        'architecture', 'vendor', 'model_name', 'implementer', 'part', 'microarchitecture', 'sockets',
        'cores_per_socket', 'threads_per_core', 'compiler_flags'])
    assert (numa['cpu']['implementer'], numa['cpu']['part']) == ('0x48', '0xd01')
    assert numa['nodes'][1]['cpus'] == list(range(32, 64))


# topology, its cores as numa_facts reports them: the kernel's sibling lists, however they are numbered
CORE_CASES = [
    (KUNPENG920_8xA100, [[cpu] for cpu in range(128)]),
    (X86_8xA800_NVLINK, [[core, core + 64] for core in range(64)]),
    (WORKSTATION_1GPU, [[core, core + 16] for core in range(16)]),
    (LAB_2CORE_CPU_ONLY, [[0], [1]]),
    (X86_VM_ADJACENT_SMT_1GPU, [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11], [12, 13], [14, 15]]),
]


@pytest.mark.parametrize('topo, cores', CORE_CASES, ids=[c[0]['name'] for c in CORE_CASES])
def test_cores_are_the_sibling_lists(sysfs, topo, cores):
    numa = collect_numa(sysfs(topo))
    assert numa['cores'] == cores
    assert sorted(cpu for core in numa['cores'] for cpu in core) == numa['online_cpus']
    threads = numa['cpu']['threads_per_core']
    assert max(len(core) for core in numa['cores']) == threads
    assert len(numa['cores']) == numa['cpu']['sockets'] * numa['cpu']['cores_per_socket']


def test_adjacent_siblings_stay_in_their_numa_node(sysfs):
    numa = collect_numa(sysfs(X86_VM_ADJACENT_SMT_1GPU))
    node_of = dict((cpu, node['id']) for node in numa['nodes'] for cpu in node['cpus'])
    assert all(len(set(node_of[cpu] for cpu in core)) == 1 for core in numa['cores'])


def test_cores_leave_out_offline_siblings(sysfs):
    numa = collect_numa(sysfs(variant(X86_VM_ADJACENT_SMT_1GPU, 'vm-cpu3-offline', cpu_online='0-2,4-15')))
    assert numa['cores'][:3] == [[0, 1], [2], [4, 5]]


def _remove(root, patterns):
    for pattern in patterns:
        matches = list(Path(root).glob(pattern))
        assert matches, pattern
        for path in matches:
            path.unlink()


# topology, files removed (globs below root), expected values as {dotted path: value}
MISSING_FILE_CASES = [
    ('meminfo', KUNPENG920_8xA100, ['sys/devices/system/node/node1/meminfo'], {'nodes.1.memory_total_mib': None}),
    ('distance', KUNPENG920_8xA100, ['sys/devices/system/node/node2/distance'], {'nodes.2.distances': None}),
    ('node cpulist', KUNPENG920_8xA100, ['sys/devices/system/node/node3/cpulist'],
     {'nodes.3.cpus': None, 'nodes.3.cpulist': None, 'nodes.3.socket': None, 'online_cpulist': '0-127'}),
    ('node online', KUNPENG920_8xA100, ['sys/devices/system/node/online'], {'nodes.3.cpulist': '96-127'}),
    ('package ids arm', KUNPENG920_8xA100, ['sys/devices/system/cpu/cpu*/topology/physical_package_id'],
     {'cpu.sockets': None, 'cpu.cores_per_socket': None, 'cpu.threads_per_core': 1, 'nodes.0.socket': None}),
    ('package ids x86', X86_8xA800_NVLINK, ['sys/devices/system/cpu/cpu*/topology/physical_package_id'],
     {'cpu.sockets': 2, 'cpu.cores_per_socket': 32, 'cpu.threads_per_core': 2}),
    ('siblings', X86_8xA800_NVLINK, ['sys/devices/system/cpu/cpu*/topology/thread_siblings_list'],
     {'cpu.sockets': 2, 'cpu.cores_per_socket': None, 'cpu.threads_per_core': None}),
    # Without sibling lists, cores come from core_id within each package (core ids repeat across the sockets).
    ('siblings, cores from core ids', X86_8xA800_NVLINK,
     ['sys/devices/system/cpu/cpu*/topology/thread_siblings_list'],
     {'cores.0': [0, 64], 'cores.32': [32, 96], 'cores.63': [63, 127]}),
    ('one sibling list', X86_VM_ADJACENT_SMT_1GPU, ['sys/devices/system/cpu/cpu2/topology/thread_siblings_list'],
     {'cores.1': [2, 3], 'cpu.threads_per_core': None}),
    ('one sibling list and its core id', X86_VM_ADJACENT_SMT_1GPU,
     ['sys/devices/system/cpu/cpu3/topology/thread_siblings_list', 'sys/devices/system/cpu/cpu3/topology/core_id'],
     {'cores.1': [2, 3]}),
    ('siblings and core ids', X86_8xA800_NVLINK,
     ['sys/devices/system/cpu/cpu*/topology/thread_siblings_list', 'sys/devices/system/cpu/cpu*/topology/core_id'],
     {'cores': None}),
    ('siblings and package ids', X86_VM_ADJACENT_SMT_1GPU,
     ['sys/devices/system/cpu/cpu*/topology/thread_siblings_list',
      'sys/devices/system/cpu/cpu*/topology/physical_package_id'],
     {'cores': None}),
    ('cpuinfo', KUNPENG920_8xA100, ['proc/cpuinfo'],
     {'cpu.architecture': None, 'cpu.vendor': None, 'cpu.compiler_flags': [], 'online_cpulist': '0-127'}),
    ('cpu online', X86_8xA800_NVLINK, ['sys/devices/system/cpu/online'], {'online_cpulist': '0-127'}),
    ('cpu online and cpuinfo', KUNPENG920_8xA100, ['sys/devices/system/cpu/online', 'proc/cpuinfo'],
     {'online_cpulist': '0-127', 'cpu.sockets': 2}),
    ('lab cpu online', LAB_2CORE_CPU_ONLY, ['sys/devices/system/cpu/online'],
     {'online_cpulist': '0-1', 'nodes.0.cpulist': '0-1'}),
]


def _get(data, dotted):
    for key in dotted.split('.'):
        data = data[int(key)] if isinstance(data, list) else data[key]
    return data


@pytest.mark.parametrize('topo, removed, expected', [c[1:] for c in MISSING_FILE_CASES],
                         ids=[c[0] for c in MISSING_FILE_CASES])
def test_missing_optional_files_degrade_to_null(sysfs, topo, removed, expected):
    root = sysfs(topo)
    _remove(root, removed)
    numa = collect_numa(root)
    assert dict((path, _get(numa, path)) for path in expected) == expected


@pytest.mark.parametrize('removed', [
    ['sys/devices/system/cpu/online', 'proc/cpuinfo', 'sys/devices/system/node/node*/cpulist'],
    ['sys/devices/system/cpu/online', 'proc/cpuinfo'],
])
def test_no_way_to_tell_cpus_fails_clearly(sysfs, removed):
    root = sysfs(KUNPENG920_8xA100 if len(removed) == 3 else LAB_2CORE_CPU_ONLY)
    _remove(root, removed)
    with pytest.raises(NumaFactsError, match='Cannot tell the online CPUs'):
        collect_numa(root)


def test_empty_root_fails_clearly(tmp_path):
    with pytest.raises(NumaFactsError, match=re.escape(str(tmp_path))):
        collect_numa(str(tmp_path))


def test_memory_only_node_has_no_socket(sysfs):
    topo = variant(X86_8xA800_NVLINK, 'x86-with-cxl-node', nodes=X86_8xA800_NVLINK['nodes'] + [
        {'id': 2, 'cpulist': '', 'mem_total_kb': 268435456, 'distances': [24, 24, 10]}])
    node = collect_numa(sysfs(topo))['nodes'][2]
    assert (node['cpus'], node['cpulist'], node['socket'], node['memory_total_mib']) == ([], '', None, 262144)


ALLOWED_READS = re.compile(
    r'^(proc/cpuinfo'
    r'|sys/devices/system/node/(online|node\d+/(cpulist|meminfo|distance))'
    r'|sys/devices/system/cpu/(online|cpu\d+/topology/(physical_package_id|core_id|thread_siblings_list)))$')


@pytest.mark.parametrize('topo', [KUNPENG920_8xA100, LAB_2CORE_CPU_ONLY], ids=lambda t: t['name'])
def test_reads_only_documented_files(sysfs, monkeypatch, topo):
    root = sysfs(topo)
    opened = []

    def recording_open(path, *args, **kwargs):
        opened.append(os.path.relpath(path, root))
        return open(path, *args, **kwargs)

    monkeypatch.setattr(_numa, 'open', recording_open, raising=False)
    collect_numa(root)
    assert opened
    assert [path for path in opened if not ALLOWED_READS.match(path)] == []


def test_root_slash_uses_running_machine():
    machine = platform.machine().lower()
    assert _numa.detect_architecture('/', {'CPU implementer': '0x48'}) == {'arm64': 'aarch64'}.get(machine, machine)


@pytest.mark.parametrize('cpuinfo, architecture', [
    ({'CPU implementer': '0x48'}, 'aarch64'),
    ({'vendor_id': 'GenuineIntel'}, 'x86_64'),
    ({}, None),
])
def test_architecture_of_another_tree_comes_from_cpuinfo(cpuinfo, architecture):
    assert _numa.detect_architecture('/srv/hosts/kp01', cpuinfo) == architecture


def test_parse_cpuinfo_reads_first_block_and_processors():
    first, processors, physical_ids = parse_cpuinfo(X86_8xA800_NVLINK['cpuinfo'])
    assert first['vendor_id'] == 'GenuineIntel' and first['processor'] == '0'
    assert processors == list(range(128))
    assert physical_ids == {'0', '1'}


def test_collect_is_fast_on_128_cores(sysfs):
    root = sysfs(KUNPENG920_8xA100)
    collect_numa(root)
    timings = []
    for _run in range(5):
        start = time.perf_counter()
        collect_numa(root)
        timings.append(time.perf_counter() - start)
    assert statistics.median(timings) < 0.050
