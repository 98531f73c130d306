# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A fake of the pynvml functions the collection uses, built from a topology description.

Only stands in for hardware the test machines lack. Constants and error codes have the values of
pynvml (tests/unit/plugins/module_utils/test_gpu.py checks them against the real module).
"""

from __future__ import annotations

from types import SimpleNamespace

from ansible_collections.llmops.vllm.tests.unit.fixtures.sysfs import expand_cpulist

MIB = 1024 * 1024

ERROR_CODES = {
    'UNINITIALIZED': 1,
    'INVALID_ARGUMENT': 2,
    'NOT_SUPPORTED': 3,
    'NO_PERMISSION': 4,
    'DRIVER_NOT_LOADED': 9,
    'LIBRARY_NOT_FOUND': 12,
    'FUNCTION_NOT_FOUND': 13,
    'GPU_IS_LOST': 15,
    'LIB_RM_VERSION_MISMATCH': 18,
    'UNKNOWN': 999,
}
ERROR_MESSAGES = {
    1: 'Uninitialized',
    2: 'Invalid Argument',
    3: 'Not Supported',
    4: 'Insufficient Permissions',
    9: 'Driver Not Loaded',
    12: 'NVML Shared Library Not Found',
    13: 'Function Not Found',
    15: 'GPU is lost',
    18: 'RM has detected an NVML/RM version mismatch.',
    999: 'Unknown Error',
}
TOPOLOGY_LEVELS = {'INTERNAL': 0, 'SINGLE': 10, 'MULTIPLE': 20, 'HOSTBRIDGE': 30, 'NODE': 40, 'SYSTEM': 50}
NVLINK_REMOTE_GPU = 0
NVLINK_REMOTE_SWITCH = 2


class NVMLError(Exception):
    """Like pynvml.NVMLError: carries the NVML return code in .value."""

    def __init__(self, value):
        super().__init__(value)
        self.value = value

    def __str__(self):
        return ERROR_MESSAGES.get(self.value, 'Unknown Error')


def error(name):
    return NVMLError(ERROR_CODES[name])


class FakeNvml:
    """Answers like pynvml for the GPUs of topo['gpu']; functions named in `missing` do not exist."""

    NVMLError = NVMLError
    NVML_FEATURE_DISABLED = 0
    NVML_FEATURE_ENABLED = 1
    NVML_DEVICE_MIG_DISABLE = 0
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_NVLINK_MAX_LINKS = 36

    def __init__(self, topo, missing=()):
        self._gpu = topo.get('gpu')
        self._devices = (self._gpu or {}).get('devices', [])
        self._missing = frozenset(missing)
        self.initialized = False
        self.init_calls = 0
        self.shutdown_calls = 0
        for name, code in ERROR_CODES.items():
            setattr(self, 'NVML_ERROR_' + name, code)
        for name, level in TOPOLOGY_LEVELS.items():
            setattr(self, 'NVML_TOPOLOGY_' + name, level)

    def __getattribute__(self, name):
        if name.startswith('nvml') and name in object.__getattribute__(self, '_missing'):
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    # -- system -----------------------------------------------------------------------------
    def nvmlInit(self):
        self.init_calls += 1
        if self._gpu is None:
            raise error('LIBRARY_NOT_FOUND')
        if self._gpu.get('init_error'):
            raise error(self._gpu['init_error'])
        self.initialized = True

    def nvmlShutdown(self):
        self._check_initialized()
        self.shutdown_calls += 1
        self.initialized = False

    def nvmlSystemGetDriverVersion(self):
        self._check_initialized()
        return self._gpu['driver_version']

    def nvmlSystemGetCudaDriverVersion(self):
        self._check_initialized()
        return self._gpu['cuda_driver_version']

    def nvmlDeviceGetCount(self):
        self._check_initialized()
        return len(self._devices)

    def nvmlDeviceGetHandleByIndex(self, index):
        self._check_initialized()
        if not 0 <= index < len(self._devices):
            raise error('INVALID_ARGUMENT')
        self._maybe_fail(index, 'nvmlDeviceGetHandleByIndex')
        return SimpleNamespace(index=index)

    # -- per device -------------------------------------------------------------------------
    def nvmlDeviceGetUUID(self, handle):
        return self._device(handle, 'nvmlDeviceGetUUID')['uuid']

    def nvmlDeviceGetName(self, handle):
        return self._device(handle, 'nvmlDeviceGetName')['name']

    def nvmlDeviceGetPciInfo(self, handle):
        return _pci_info(self._device(handle, 'nvmlDeviceGetPciInfo')['bus_id'])

    def nvmlDeviceGetNumaNodeId(self, handle):
        return self._supported(self._device(handle, 'nvmlDeviceGetNumaNodeId').get('nvml_numa_node'))

    def nvmlDeviceGetCpuAffinity(self, handle, cpu_set_size):
        cpus = expand_cpulist(self._device(handle, 'nvmlDeviceGetCpuAffinity')['cpu_affinity'])
        words = [0] * cpu_set_size
        for cpu in cpus:
            words[cpu // 64] |= 1 << (cpu % 64)
        return words

    def nvmlDeviceGetMemoryInfo(self, handle):
        device = self._device(handle, 'nvmlDeviceGetMemoryInfo')
        total, used = device['memory_total_mib'] * MIB, device['memory_used_mib'] * MIB
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        return tuple(self._device(handle, 'nvmlDeviceGetCudaComputeCapability')['compute_capability'])

    def nvmlDeviceGetMigMode(self, handle):
        mode = self._supported(self._device(handle, 'nvmlDeviceGetMigMode').get('mig'))
        return [mode, mode]

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle):
        return self._pcie(handle, 'nvmlDeviceGetCurrPcieLinkGeneration', 'gen_current')

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle):
        return self._pcie(handle, 'nvmlDeviceGetMaxPcieLinkGeneration', 'gen_max')

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, handle):
        return self._pcie(handle, 'nvmlDeviceGetGpuMaxPcieLinkGeneration', 'gen_max_gpu')

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle):
        return self._pcie(handle, 'nvmlDeviceGetCurrPcieLinkWidth', 'width_current')

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle):
        return self._pcie(handle, 'nvmlDeviceGetMaxPcieLinkWidth', 'width_max')

    # -- NVLink and topology ----------------------------------------------------------------
    def nvmlDeviceGetNvLinkState(self, handle, link):
        links = self._nvlinks(handle, 'nvmlDeviceGetNvLinkState', link)
        return self.NVML_FEATURE_ENABLED if link < len(links) else self.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle, link):
        remote = self._remote(handle, 'nvmlDeviceGetNvLinkRemotePciInfo', link)
        if 'gpu' in remote:
            return _pci_info(self._devices[remote['gpu']]['bus_id'])
        return _pci_info(remote['switch'])

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle, link):
        remote = self._remote(handle, 'nvmlDeviceGetNvLinkRemoteDeviceType', link)
        return NVLINK_REMOTE_GPU if 'gpu' in remote else NVLINK_REMOTE_SWITCH

    def nvmlDeviceGetTopologyCommonAncestor(self, handle1, handle2):
        a = self._device(handle1, 'nvmlDeviceGetTopologyCommonAncestor')
        b = self._device(handle2, 'nvmlDeviceGetTopologyCommonAncestor')
        return TOPOLOGY_LEVELS[common_ancestor(self._gpu, a, b)]

    # -- helpers ----------------------------------------------------------------------------
    def _check_initialized(self):
        if not self.initialized:
            raise error('UNINITIALIZED')

    def _maybe_fail(self, index, function):
        failure = self._devices[index].get('failures', {}).get(function)
        if failure:
            raise error(failure)

    def _device(self, handle, function):
        self._check_initialized()
        self._maybe_fail(handle.index, function)
        return self._devices[handle.index]

    @staticmethod
    def _supported(value):
        if value is None:
            raise error('NOT_SUPPORTED')
        return value

    def _pcie(self, handle, function, key):
        return self._supported(self._device(handle, function)['pcie'].get(key))

    def _nvlinks(self, handle, function, link):
        links = self._device(handle, function).get('nvlinks')
        if links is None:
            raise error('NOT_SUPPORTED')
        if not 0 <= link < self.NVML_NVLINK_MAX_LINKS:
            raise error('INVALID_ARGUMENT')
        return links

    def _remote(self, handle, function, link):
        links = self._nvlinks(handle, function, link)
        if link >= len(links):
            raise error('INVALID_ARGUMENT')
        return links[link]


def common_ancestor(gpu, a, b):
    """NVML topology level name between two described GPUs."""
    if a['bus_id'] == b['bus_id']:
        return 'INTERNAL'
    if a.get('pcie_switch') and a.get('pcie_switch') == b.get('pcie_switch'):
        return gpu.get('switch_level', 'SINGLE')
    if a.get('host_bridge') and a.get('host_bridge') == b.get('host_bridge'):
        return 'HOSTBRIDGE'
    if a['numa_node'] >= 0 and a['numa_node'] == b['numa_node']:
        return 'NODE'
    return 'SYSTEM'


def _pci_info(bus_id):
    # pynvml returns the bus id as bytes (a ctypes char array).
    return SimpleNamespace(busId=bus_id.encode('ascii'))


def fake_nvml(topo, missing=()):
    """Return a fake pynvml module object for the topology description."""
    return FakeNvml(topo, missing)
