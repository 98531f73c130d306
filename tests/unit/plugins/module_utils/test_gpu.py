# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import inspect
import re

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils import _gpu
from ansible_collections.llmops.vllm.plugins.module_utils._gpu import (
    NO_LIBRARY_REASON,
    collect_gpu,
    cuda_version_string,
    link_lookup,
    normalize_bus_id,
    pcie_degradation,
)
from ansible_collections.llmops.vllm.tests.unit.fakes import nvml as fake_module
from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import (
    KUNPENG920_8xA100,
    KUNPENG920_8xA100_GPU3_LOST,
    KUNPENG920_8xA100_GPU5_GEN3_X8,
    LAB_2CORE_CPU_ONLY,
    WORKSTATION_1GPU,
    X86_8xA800_NVLINK,
    fake_nvml,
    variant,
)

DEVICE_KEYS = ['index', 'uuid', 'name', 'pci_bus_id', 'numa_node', 'cpu_affinity', 'memory_total_mib',
               'memory_used_mib', 'compute_capability', 'mig_mode', 'pcie', 'error']
PCIE_KEYS = ['gen_current', 'gen_max', 'gen_max_gpu', 'width_current', 'width_max', 'degraded', 'degraded_reason']
LINK_KEYS = ['a', 'b', 'type', 'nvlinks', 'common_ancestor', 'same_pcie_switch', 'same_numa_node']


def _collect(sysfs, topo, **fake_options):
    return collect_gpu(fake_nvml(topo, **fake_options), sysfs(topo))


# topology, driver, cuda, [(name, bus id, numa node, cpu affinity, compute capability, mig)]
MACHINES = [
    (KUNPENG920_8xA100, '550.54.15', '12.4',
     [('NVIDIA A100 80GB PCIe', bus, node, cpus, '8.0', 'disabled') for bus, node, cpus in [
         ('0000:04:00.0', 0, '0-31'), ('0000:05:00.0', 0, '0-31'), ('0000:08:00.0', 0, '0-31'),
         ('0000:09:00.0', 0, '0-31'), ('0000:84:00.0', 2, '64-95'), ('0000:85:00.0', 2, '64-95'),
         ('0000:88:00.0', 2, '64-95'), ('0000:89:00.0', 2, '64-95')]]),
    (X86_8xA800_NVLINK, '535.161.08', '12.2',
     [('NVIDIA A800-SXM4-80GB', bus, i // 4, ('0-31,64-95', '32-63,96-127')[i // 4], '8.0', 'disabled')
      for i, bus in enumerate(['0000:1b:00.0', '0000:21:00.0', '0000:51:00.0', '0000:57:00.0',
                               '0000:9e:00.0', '0000:a4:00.0', '0000:c3:00.0', '0000:c9:00.0'])]),
    (WORKSTATION_1GPU, '550.120', '12.4', [('NVIDIA GeForce RTX 4090', '0000:01:00.0', None, '0-31', '8.9', None)]),
]


@pytest.mark.parametrize('topo, driver, cuda, devices', MACHINES, ids=[m[0]['name'] for m in MACHINES])
def test_collect_gpu(sysfs, topo, driver, cuda, devices):
    gpu = _collect(sysfs, topo)
    assert (gpu['available'], gpu['reason'], gpu['driver_version'], gpu['cuda_driver_version'], gpu['count']) == (
        True, None, driver, cuda, len(devices))
    assert [(d['name'], d['pci_bus_id'], d['numa_node'], d['cpu_affinity'], d['compute_capability'], d['mig_mode'])
            for d in gpu['devices']] == devices
    assert [d['index'] for d in gpu['devices']] == list(range(len(devices)))
    for device in gpu['devices']:
        assert list(device) == DEVICE_KEYS
        assert list(device['pcie']) == PCIE_KEYS
        assert device['error'] is None
        assert device['pcie']['degraded'] is False, 'idle Gen1 is not degradation'
        assert device['uuid'].startswith('GPU-')
    assert len(gpu['links']) == len(devices) * (len(devices) - 1) // 2
    assert all(list(link) == LINK_KEYS and link['a'] < link['b'] for link in gpu['links'])


def test_fact_keys_when_unavailable():
    assert collect_gpu(None) == {'available': False, 'reason': NO_LIBRARY_REASON, 'driver_version': None,
                                 'cuda_driver_version': None, 'count': 0, 'devices': [], 'links': []}


def test_memory_is_reported_in_mib(sysfs):
    device = _collect(sysfs, KUNPENG920_8xA100)['devices'][0]
    assert (device['memory_total_mib'], device['memory_used_mib']) == (81920, 4)


# (a, b): (type, nvlinks, common ancestor, same PCIe switch, same NUMA node)
KUNPENG_LINKS = {
    (0, 1): ('SINGLE', 0, 'SINGLE', True, True),
    (0, 2): ('HOSTBRIDGE', 0, 'HOSTBRIDGE', False, True),
    (2, 3): ('SINGLE', 0, 'SINGLE', True, True),
    (0, 4): ('SYSTEM', 0, 'SYSTEM', False, False),
    (3, 7): ('SYSTEM', 0, 'SYSTEM', False, False),
    (6, 7): ('SINGLE', 0, 'SINGLE', True, True),
}
A800_LINKS = {
    (0, 1): ('NVLINK', 8, 'MULTIPLE', True, True),
    (0, 2): ('NVLINK', 8, 'NODE', False, True),
    (0, 4): ('NVLINK', 8, 'SYSTEM', False, False),
    (5, 7): ('NVLINK', 8, 'NODE', False, True),
}


@pytest.mark.parametrize('topo, expected', [(KUNPENG920_8xA100, KUNPENG_LINKS), (X86_8xA800_NVLINK, A800_LINKS)],
                         ids=['kunpeng-pcie', 'a800-nvswitch'])
def test_links(sysfs, topo, expected):
    lookup = link_lookup(_collect(sysfs, topo)['links'])
    for (a, b), values in expected.items():
        for pair in ((a, b), (b, a)):
            link = lookup[pair]
            assert (link['type'], link['nvlinks'], link['common_ancestor'], link['same_pcie_switch'],
                    link['same_numa_node']) == values, pair


def test_every_a800_pair_is_nvlinked(sysfs):
    links = _collect(sysfs, X86_8xA800_NVLINK)['links']
    assert len(links) == 28
    assert set((link['type'], link['nvlinks']) for link in links) == {('NVLINK', 8)}


def test_nvswitch_peers_are_found_without_remote_device_type(sysfs):
    links = _collect(sysfs, X86_8xA800_NVLINK, missing=['nvmlDeviceGetNvLinkRemoteDeviceType'])['links']
    assert set((link['type'], link['nvlinks']) for link in links) == {('NVLINK', 8)}


BRIDGED = variant(KUNPENG920_8xA100, 'kunpeng-2-nvlink-bridges', devices={
    0: {'nvlinks': [{'gpu': 1}] * 4}, 1: {'nvlinks': [{'gpu': 0}] * 4},
    2: {'nvlinks': [{'gpu': 3}] * 4}, 3: {'nvlinks': [{'gpu': 2}] * 4},
})


@pytest.mark.parametrize('missing', [(), ('nvmlDeviceGetNvLinkRemoteDeviceType',)], ids=['typed', 'inferred'])
def test_nvlink_bridges_link_only_their_pair(sysfs, missing):
    lookup = link_lookup(_collect(sysfs, BRIDGED, missing=missing)['links'])
    assert (lookup[(0, 1)]['type'], lookup[(0, 1)]['nvlinks']) == ('NVLINK', 4)
    assert (lookup[(3, 2)]['type'], lookup[(3, 2)]['nvlinks']) == ('NVLINK', 4)
    assert (lookup[(1, 2)]['type'], lookup[(1, 2)]['nvlinks']) == ('HOSTBRIDGE', 0)
    assert (lookup[(4, 5)]['type'], lookup[(4, 5)]['nvlinks']) == ('SINGLE', 0)


def test_degraded_link(sysfs):
    devices = _collect(sysfs, KUNPENG920_8xA100_GPU5_GEN3_X8)['devices']
    assert devices[5]['pcie'] == {'gen_current': 3, 'gen_max': 3, 'gen_max_gpu': 4, 'width_current': 8,
                                  'width_max': 16, 'degraded': True,
                                  'degraded_reason': 'width x8 below x16; link max Gen3 below GPU max Gen4'}
    assert [d['index'] for d in devices if d['pcie']['degraded']] == [5]


@pytest.mark.parametrize('gen_max, gen_max_gpu, width_current, width_max, expected', [
    (4, 4, 16, 16, (False, None)),
    (4, None, 16, 16, (False, None)),
    (4, 4, 8, 16, (True, 'width x8 below x16')),
    (3, 4, 16, 16, (True, 'link max Gen3 below GPU max Gen4')),
    (3, None, 16, 16, (False, None)),
    (None, None, None, None, (None, None)),
    (5, 5, None, 16, (False, None)),
])
def test_pcie_degradation_ignores_idle_generation(gen_max, gen_max_gpu, width_current, width_max, expected):
    assert pcie_degradation(gen_max, gen_max_gpu, width_current, width_max) == expected


def test_old_library_without_gpu_max_generation(sysfs):
    topo = variant(KUNPENG920_8xA100_GPU5_GEN3_X8, 'old-pynvml')
    devices = _collect(sysfs, topo, missing=['nvmlDeviceGetGpuMaxPcieLinkGeneration'])['devices']
    assert (devices[5]['pcie']['gen_max_gpu'], devices[5]['pcie']['degraded_reason']) == (None, 'width x8 below x16')


def test_gpu_lost_mid_query_keeps_the_device(sysfs):
    fake = fake_nvml(KUNPENG920_8xA100_GPU3_LOST)
    gpu = collect_gpu(fake, sysfs(KUNPENG920_8xA100_GPU3_LOST))
    assert gpu['available'] is True and gpu['count'] == 8
    lost = gpu['devices'][3]
    assert lost['error'] == 'nvmlDeviceGetMemoryInfo: GPU is lost'
    assert (lost['memory_total_mib'], lost['memory_used_mib']) == (None, None)
    assert (lost['name'], lost['pci_bus_id'], lost['numa_node']) == ('NVIDIA A100 80GB PCIe', '0000:09:00.0', 0)
    assert [d['index'] for d in gpu['devices'] if d['error']] == [3]
    assert fake.shutdown_calls == 1


def test_device_without_handle_is_listed_and_left_out_of_links(sysfs):
    topo = variant(KUNPENG920_8xA100, 'gpu7-no-handle',
                   devices={7: {'failures': {'nvmlDeviceGetHandleByIndex': 'GPU_IS_LOST'}}})
    gpu = _collect(sysfs, topo)
    assert gpu['devices'][7]['error'] == 'nvmlDeviceGetHandleByIndex: GPU is lost'
    assert gpu['devices'][7]['name'] is None
    assert list(gpu['devices'][7]) == DEVICE_KEYS and set(gpu['devices'][7]['pcie'].values()) == {None}
    assert len(gpu['links']) == 21 and all(7 not in (link['a'], link['b']) for link in gpu['links'])


@pytest.mark.parametrize('nvml_node, sysfs_node, expected', [
    (1, 0, 1),          # NVML knows the node
    (-1, 2, 2),         # NVML says unknown: sysfs
    (None, 2, 2),       # NVML not supported: sysfs
    (None, -1, None),   # nobody knows
    (None, None, None),  # sysfs file missing
])
def test_numa_node_source(sysfs, nvml_node, sysfs_node, expected):
    topo = variant(WORKSTATION_1GPU, 'ws-numa', devices={0: {'nvml_numa_node': nvml_node, 'numa_node': sysfs_node}})
    assert _collect(sysfs, topo)['devices'][0]['numa_node'] == expected


def test_mig_enabled(sysfs):
    topo = variant(KUNPENG920_8xA100, 'kunpeng-mig', devices={2: {'mig': 1}})
    assert [d['mig_mode'] for d in _collect(sysfs, topo)['devices']][1:4] == ['disabled', 'enabled', 'disabled']


def test_no_library():
    gpu = collect_gpu(None)
    assert (gpu['available'], gpu['reason']) == (False, NO_LIBRARY_REASON)
    assert 'nvidia-ml-py' in gpu['reason']


@pytest.mark.parametrize('init_error, reason', [
    ('DRIVER_NOT_LOADED', 'NVIDIA kernel driver is not loaded'),
    ('LIBRARY_NOT_FOUND', 'libnvidia-ml.so.1'),
    ('LIB_RM_VERSION_MISMATCH', 'reboot'),
    ('NO_PERMISSION', 'become'),
    ('UNKNOWN', 'nvmlInit failed: Unknown Error'),
])
def test_init_failure_is_not_an_error(init_error, reason):
    topo = variant(KUNPENG920_8xA100, 'init-' + init_error, gpu=dict(KUNPENG920_8xA100['gpu'], init_error=init_error))
    fake = fake_nvml(topo)
    gpu = collect_gpu(fake)
    assert gpu['available'] is False and reason in gpu['reason']
    assert (gpu['count'], gpu['devices'], gpu['links']) == (0, [], [])
    assert (fake.init_calls, fake.shutdown_calls) == (1, 0)


def test_cpu_only_host_without_driver():
    gpu = collect_gpu(fake_nvml(LAB_2CORE_CPU_ONLY))
    assert gpu['available'] is False and 'install the NVIDIA driver' in gpu['reason']


def test_failure_after_init_still_shuts_down(sysfs):
    fake = fake_nvml(KUNPENG920_8xA100)

    def count_fails():
        raise fake_module.error('UNKNOWN')

    fake.nvmlDeviceGetCount = count_fails
    gpu = collect_gpu(fake, sysfs(KUNPENG920_8xA100))
    assert gpu['available'] is False and 'Unknown Error' in gpu['reason']
    assert gpu['driver_version'] == '550.54.15'
    assert fake.shutdown_calls == 1


def test_unexpected_exception_still_shuts_down():
    fake = fake_nvml(KUNPENG920_8xA100)

    def broken(index):
        raise RuntimeError('boom')

    fake.nvmlDeviceGetHandleByIndex = broken
    with pytest.raises(RuntimeError):
        collect_gpu(fake)
    assert fake.shutdown_calls == 1


def test_driver_without_gpus():
    topo = variant(KUNPENG920_8xA100, 'no-gpus', gpu=dict(KUNPENG920_8xA100['gpu'], devices=[]))
    gpu = collect_gpu(fake_nvml(topo))
    assert (gpu['available'], gpu['driver_version'], gpu['count']) == (False, '550.54.15', 0)
    assert 'reports no GPU' in gpu['reason']


@pytest.mark.parametrize('bus_id, expected', [
    ('00000000:3B:00.0', '0000:3b:00.0'),
    (b'00000000:3B:00.0', '0000:3b:00.0'),
    ('0000:3b:00.0', '0000:3b:00.0'),
    ('00010000:01:00.0', '10000:01:00.0'),
    ('3B:00.0', '0000:3b:00.0'),
    ('', None),
    (None, None),
    ('garbage', 'garbage'),
])
def test_normalize_bus_id(bus_id, expected):
    assert normalize_bus_id(bus_id) == expected


@pytest.mark.parametrize('version, expected', [(12040, '12.4'), (12080, '12.8'), (11080, '11.8'), (13000, '13.0'),
                                               (12100, '12.10'), (None, None)])
def test_cuda_version_string(version, expected):
    assert cuda_version_string(version) == expected


# Contract between the fake and the real pynvml (nvidia-ml-py), when it is installed.

def _nvml_names_used():
    return set(re.findall(r"'(nvml[A-Za-z_0-9]+)'", inspect.getsource(_gpu))) | {'nvmlInit', 'nvmlShutdown'}


def test_fake_implements_every_function_the_collector_uses():
    fake = fake_nvml(KUNPENG920_8xA100)
    assert [name for name in sorted(_nvml_names_used()) if not callable(getattr(fake, name, None))] == []


def test_fake_matches_real_pynvml():
    pynvml = pytest.importorskip('pynvml')
    assert [name for name in sorted(_nvml_names_used()) if not hasattr(pynvml, name)] == []
    fake = fake_nvml(KUNPENG920_8xA100)
    constants = [name for name in dir(fake) if name.startswith('NVML_')]
    assert constants
    assert dict((n, getattr(fake, n)) for n in constants) == dict((n, getattr(pynvml, n)) for n in constants)
    assert pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST).value == 15
