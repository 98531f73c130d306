# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""NVIDIA GPU inventory through NVML.

The collector takes the NVML module (``pynvml`` from PyPI package nvidia-ml-py) as a parameter,
so tests can hand it a fake. It never changes GPU state.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import contextlib
import os

from ansible_collections.llmops.vllm.plugins.module_utils._cpulist import cpus_from_mask_words, format_cpulist

# 64 words of 64 bits: CPU affinity masks for up to 4096 CPUs.
CPU_SET_WORDS = 64
MIB = 1024 * 1024
PCIE_KEYS = ('gen_current', 'gen_max', 'gen_max_gpu', 'width_current', 'width_max', 'degraded', 'degraded_reason')

# NVML topology levels, nearest first, with nvidia-smi topo -m abbreviations.
TOPOLOGY_LEVELS = ('INTERNAL', 'SINGLE', 'MULTIPLE', 'HOSTBRIDGE', 'NODE', 'SYSTEM')
SAME_PCIE_SWITCH_LEVELS = ('INTERNAL', 'SINGLE', 'MULTIPLE')
SAME_NUMA_NODE_LEVELS = SAME_PCIE_SWITCH_LEVELS + ('HOSTBRIDGE', 'NODE')

# NVML return codes used here; pynvml defines the same values as NVML_ERROR_*.
_ERROR_CODES = {
    'INVALID_ARGUMENT': 2,
    'NOT_SUPPORTED': 3,
    'NO_PERMISSION': 4,
    'DRIVER_NOT_LOADED': 9,
    'LIBRARY_NOT_FOUND': 12,
    'FUNCTION_NOT_FOUND': 13,
    'LIB_RM_VERSION_MISMATCH': 18,
}
# NVLink remote device types (nvmlIntNvLinkDeviceType_t).
_NVLINK_REMOTE_GPU = 0
_NVLINK_REMOTE_SWITCH = 2

NO_LIBRARY_REASON = ('The Python library pynvml (PyPI package nvidia-ml-py) is not installed on the target: '
                     'install it, e.g. pip install nvidia-ml-py.')

_INIT_REASONS = {
    'LIBRARY_NOT_FOUND': 'NVML (libnvidia-ml.so.1) is not installed: install the NVIDIA driver on the target.',
    'DRIVER_NOT_LOADED': 'The NVIDIA kernel driver is not loaded: install the NVIDIA driver and load it '
                         '(modprobe nvidia) or reboot.',
    'LIB_RM_VERSION_MISMATCH': 'The NVIDIA kernel module and NVML library versions differ (driver upgraded '
                               'without reboot): reboot or reload the nvidia kernel modules.',
    'NO_PERMISSION': 'No permission to use the NVIDIA devices (/dev/nvidia*): run as root (become: true).',
}


def _error_code(nvml, name):
    return getattr(nvml, 'NVML_ERROR_' + name, _ERROR_CODES[name])


def _text(value):
    if isinstance(value, bytes):
        return value.decode('utf-8', 'replace')
    return value


def normalize_bus_id(bus_id):
    """Return the sysfs spelling of a PCI address: "00000000:3B:00.0" -> "0000:3b:00.0"."""
    bus_id = (_text(bus_id) or '').strip().lower()
    if not bus_id:
        return None
    parts = bus_id.split(':')
    if len(parts) == 2:
        parts.insert(0, '0')
    try:
        return '%04x:%s:%s' % (int(parts[0], 16), parts[1], parts[2])
    except (IndexError, ValueError):
        return bus_id


def cuda_version_string(version):
    """Return "12.4" for the NVML CUDA driver version 12040."""
    if version is None:
        return None
    return '%d.%d' % (version // 1000, (version % 1000) // 10)


def pcie_degradation(gen_max, gen_max_gpu, width_current, width_max):
    """Return (degraded, reason) for a PCIe link; degraded is None when nothing could be checked.

    The current generation is ignored on purpose: NVIDIA GPUs lower it at idle to save power.
    A link is degraded when it trained narrower than it can, or when GPU and slot negotiated a
    lower maximum generation than the GPU supports.
    """
    reasons = []
    checked = False
    if width_current is not None and width_max is not None:
        checked = True
        if width_current < width_max:
            reasons.append('width x%d below x%d' % (width_current, width_max))
    if gen_max is not None and gen_max_gpu is not None:
        checked = True
        if gen_max < gen_max_gpu:
            reasons.append('link max Gen%d below GPU max Gen%d' % (gen_max, gen_max_gpu))
    if not checked:
        return None, None
    return bool(reasons), '; '.join(reasons) or None


def unavailable(reason, driver_version=None, cuda_driver_version=None):
    """Return the ``gpu`` fact of a host without usable NVIDIA GPUs."""
    return {
        'available': False,
        'reason': reason,
        'driver_version': driver_version,
        'cuda_driver_version': cuda_driver_version,
        'count': 0,
        'devices': [],
        'links': [],
    }


def init_failure_reason(nvml, error):
    """Return a reason with the fix for an nvmlInit error."""
    for name, reason in _INIT_REASONS.items():
        if getattr(error, 'value', None) == _error_code(nvml, name):
            return reason
    return 'nvmlInit failed: %s.' % error


class _Reader(object):
    """Calls NVML functions; unsupported answers become None, the first real failure is kept."""

    def __init__(self, nvml):
        self.nvml = nvml
        self.error = None
        self._unsupported = set(_error_code(nvml, name)
                                for name in ('NOT_SUPPORTED', 'FUNCTION_NOT_FOUND', 'INVALID_ARGUMENT'))

    def call(self, name, *args):
        function = getattr(self.nvml, name, None)
        if function is None:
            return None
        try:
            return function(*args)
        except self.nvml.NVMLError as e:
            if getattr(e, 'value', None) not in self._unsupported and self.error is None:
                self.error = '%s: %s' % (name, e)
            return None


def _sysfs_numa_node(root, bus_id):
    try:
        with open(os.path.join(root, 'sys/bus/pci/devices', bus_id, 'numa_node')) as f:
            node = int(f.read().strip())
    except (IOError, OSError, ValueError):
        return None
    return node if node >= 0 else None


def read_device(nvml, index, root='/'):
    """Return (device fact, NVML handle or None) for the GPU at index."""
    reader = _Reader(nvml)
    handle = reader.call('nvmlDeviceGetHandleByIndex', index)
    device = {'index': index, 'uuid': None, 'name': None, 'pci_bus_id': None, 'numa_node': None,
              'cpu_affinity': None, 'memory_total_mib': None, 'memory_used_mib': None,
              'compute_capability': None, 'mig_mode': None,
              'pcie': dict((key, None) for key in PCIE_KEYS), 'error': None}
    if handle is None:
        device['error'] = reader.error or 'nvmlDeviceGetHandleByIndex: no handle'
        return device, None

    device['uuid'] = _text(reader.call('nvmlDeviceGetUUID', handle))
    device['name'] = _text(reader.call('nvmlDeviceGetName', handle))
    pci = reader.call('nvmlDeviceGetPciInfo', handle)
    device['pci_bus_id'] = normalize_bus_id(getattr(pci, 'busId', None))

    numa_node = reader.call('nvmlDeviceGetNumaNodeId', handle)
    if (numa_node is None or numa_node < 0) and device['pci_bus_id']:
        numa_node = _sysfs_numa_node(root, device['pci_bus_id'])
    device['numa_node'] = numa_node if numa_node is not None and numa_node >= 0 else None

    mask = reader.call('nvmlDeviceGetCpuAffinity', handle, CPU_SET_WORDS)
    if mask is not None:
        device['cpu_affinity'] = format_cpulist(cpus_from_mask_words(mask)) or None

    memory = reader.call('nvmlDeviceGetMemoryInfo', handle)
    if memory is not None:
        device['memory_total_mib'] = memory.total // MIB
        device['memory_used_mib'] = memory.used // MIB

    capability = reader.call('nvmlDeviceGetCudaComputeCapability', handle)
    device['compute_capability'] = '%d.%d' % tuple(capability) if capability else None

    mig = reader.call('nvmlDeviceGetMigMode', handle)
    if mig:
        enabled = mig[0] == getattr(nvml, 'NVML_DEVICE_MIG_ENABLE', 1)
        device['mig_mode'] = 'enabled' if enabled else 'disabled'

    pcie = {
        'gen_current': reader.call('nvmlDeviceGetCurrPcieLinkGeneration', handle),
        'gen_max': reader.call('nvmlDeviceGetMaxPcieLinkGeneration', handle),
        'gen_max_gpu': reader.call('nvmlDeviceGetGpuMaxPcieLinkGeneration', handle),
        'width_current': reader.call('nvmlDeviceGetCurrPcieLinkWidth', handle),
        'width_max': reader.call('nvmlDeviceGetMaxPcieLinkWidth', handle),
    }
    pcie['degraded'], pcie['degraded_reason'] = pcie_degradation(
        pcie['gen_max'], pcie['gen_max_gpu'], pcie['width_current'], pcie['width_max'])
    device['pcie'] = pcie
    device['error'] = reader.error
    return device, handle


def read_nvlinks(nvml, handle, gpu_bus_ids):
    """Return ({peer bus id: active links}, {NVSwitch bus id: active links}) of one GPU."""
    reader = _Reader(nvml)
    to_gpus, to_switches = {}, {}
    for link in range(getattr(nvml, 'NVML_NVLINK_MAX_LINKS', 0)):
        if reader.call('nvmlDeviceGetNvLinkState', handle, link) != getattr(nvml, 'NVML_FEATURE_ENABLED', 1):
            continue
        remote = reader.call('nvmlDeviceGetNvLinkRemotePciInfo', handle, link)
        bus_id = normalize_bus_id(getattr(remote, 'busId', None))
        if bus_id is None:
            continue
        remote_type = reader.call('nvmlDeviceGetNvLinkRemoteDeviceType', handle, link)
        if remote_type is None:
            remote_type = _NVLINK_REMOTE_GPU if bus_id in gpu_bus_ids else _NVLINK_REMOTE_SWITCH
        target = to_gpus if remote_type == _NVLINK_REMOTE_GPU else to_switches
        target[bus_id] = target.get(bus_id, 0) + 1
    return to_gpus, to_switches


def _nvlink_count(a, b, nvlinks):
    """Active NVLinks between GPU a and b: direct links, else links into an NVSwitch both reach."""
    (a_gpus, a_switches), (b_gpus, b_switches) = nvlinks[a['index']], nvlinks[b['index']]
    direct = a_gpus.get(b['pci_bus_id'], 0) or b_gpus.get(a['pci_bus_id'], 0)
    if direct:
        return direct
    if set(a_switches) & set(b_switches):
        return min(sum(a_switches.values()), sum(b_switches.values()))
    return 0


def read_links(nvml, devices, handles):
    """Return one entry per unordered GPU pair (a < b); see the module documentation."""
    level_names = dict((getattr(nvml, 'NVML_TOPOLOGY_' + name, None), name) for name in TOPOLOGY_LEVELS)
    bus_ids = set(d['pci_bus_id'] for d in devices if d['pci_bus_id'])
    nvlinks = dict((d['index'], read_nvlinks(nvml, handles[d['index']], bus_ids))
                   for d in devices if d['index'] in handles)
    reader = _Reader(nvml)
    links = []
    for i, a in enumerate(devices):
        for b in devices[i + 1:]:
            if a['index'] not in handles or b['index'] not in handles:
                continue
            level = reader.call('nvmlDeviceGetTopologyCommonAncestor', handles[a['index']], handles[b['index']])
            ancestor = level_names.get(level)
            count = _nvlink_count(a, b, nvlinks)
            links.append({
                'a': a['index'],
                'b': b['index'],
                'type': 'NVLINK' if count else ancestor,
                'nvlinks': count,
                'common_ancestor': ancestor,
                'same_pcie_switch': None if ancestor is None else ancestor in SAME_PCIE_SWITCH_LEVELS,
                'same_numa_node': None if ancestor is None else ancestor in SAME_NUMA_NODE_LEVELS,
            })
    return links


def _collect_initialized(nvml, root):
    reader = _Reader(nvml)
    driver_version = _text(reader.call('nvmlSystemGetDriverVersion'))
    cuda_driver_version = cuda_version_string(reader.call('nvmlSystemGetCudaDriverVersion'))
    count = reader.call('nvmlDeviceGetCount')
    if count is None:
        return unavailable('NVML could not count the GPUs (%s).' % reader.error, driver_version, cuda_driver_version)
    if count == 0:
        return unavailable('The NVIDIA driver is loaded but reports no GPU.', driver_version, cuda_driver_version)
    devices, handles = [], {}
    for index in range(count):
        device, handle = read_device(nvml, index, root)
        devices.append(device)
        if handle is not None:
            handles[index] = handle
    return {
        'available': True,
        'reason': None,
        'driver_version': driver_version,
        'cuda_driver_version': cuda_driver_version,
        'count': count,
        'devices': devices,
        'links': read_links(nvml, devices, handles),
    }


def collect_gpu(nvml, root='/'):
    """Return the ``gpu`` fact. nvml is the pynvml module (or a fake), None when it is not importable."""
    if nvml is None:
        return unavailable(NO_LIBRARY_REASON)
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as e:
        return unavailable(init_failure_reason(nvml, e))
    try:
        return _collect_initialized(nvml, root)
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def link_lookup(links):
    """Return {(a, b): link} for both orders of every pair, for placement code."""
    lookup = {}
    for link in links:
        lookup[(link['a'], link['b'])] = link
        lookup[(link['b'], link['a'])] = link
    return lookup
