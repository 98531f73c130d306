# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""Preflight findings about a host's GPU and NUMA topology, from the gpu and numa facts.

A finding is {code, severity, message, fix, gpus, numa_nodes, sockets}; severity is "warning",
or "failure" for the codes the caller lists in fail_on.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.llmops.vllm.plugins.module_utils._cuda import driver_supports, parse_cuda_version

CODES = (
    'too_many_gpus_per_socket',
    'pcie_degraded',
    'gpu_numa_node_unknown',
    'numa_node_without_memory',
    'cuda_driver_too_old',
    'gpu_query_error',
)

DEFAULT_OPTIONS = {
    'max_gpus_per_socket': 4,
    'min_cuda_driver': None,
    'fail_on': [],
    'ignore': [],
}


def _finding(code, message, fix, gpus=(), numa_nodes=(), sockets=()):
    return {'code': code, 'severity': 'warning', 'message': message, 'fix': fix,
            'gpus': list(gpus), 'numa_nodes': list(numa_nodes), 'sockets': list(sockets)}


def _gpu_label(device):
    return 'GPU %s (%s)' % (device.get('index'), device.get('pci_bus_id') or 'unknown bus')


def _devices(gpu):
    return list(gpu.get('devices') or []) if gpu and gpu.get('available') else []


def _nodes(numa):
    return list((numa or {}).get('nodes') or [])


def gpu_numa_node(device, nodes):
    """NUMA node of a GPU; on a single-node host an unknown node can only be that node."""
    node = device.get('numa_node')
    if node is None and len(nodes) == 1:
        return nodes[0].get('id')
    return node


def version_tuple(version):
    """(12, 8) for "12.8"; ValueError for text that is not dotted numbers."""
    return tuple(int(part) for part in str(version).strip().split('.'))


def check_gpus_per_socket(devices, nodes, max_gpus_per_socket):
    socket_of_node = dict((node.get('id'), node.get('socket')) for node in nodes)
    by_socket = {}
    for device in devices:
        socket = socket_of_node.get(gpu_numa_node(device, nodes))
        if socket is not None:
            by_socket.setdefault(socket, []).append(device)
    findings = []
    for socket in sorted(by_socket):
        attached = by_socket[socket]
        if len(attached) > max_gpus_per_socket:
            findings.append(_finding(
                'too_many_gpus_per_socket',
                '%d GPUs hang off socket %d (at most %d advised): their host threads share its cores and '
                'memory bandwidth.' % (len(attached), socket, max_gpus_per_socket),
                'Spread the GPUs over the sockets, or run fewer GPU instances on socket %d.' % socket,
                gpus=[d.get('index') for d in attached],
                numa_nodes=sorted(set(gpu_numa_node(d, nodes) for d in attached)),
                sockets=[socket]))
    return findings


def check_pcie_degraded(devices, nodes):
    findings = []
    for device in devices:
        pcie = device.get('pcie') or {}
        if pcie.get('degraded'):
            node = gpu_numa_node(device, nodes)
            findings.append(_finding(
                'pcie_degraded',
                '%s PCIe link is degraded: %s (now Gen%s x%s, max Gen%s x%s).' % (
                    _gpu_label(device), pcie.get('degraded_reason'), pcie.get('gen_current'),
                    pcie.get('width_current'), pcie.get('gen_max_gpu') or pcie.get('gen_max'), pcie.get('width_max')),
                'Reseat the GPU and its riser, check the slot link speed and bifurcation in the BIOS, and compare '
                'LnkCap with LnkSta in lspci -vv -s %s.' % device.get('pci_bus_id'),
                gpus=[device.get('index')], numa_nodes=[] if node is None else [node]))
    return findings


def check_gpu_numa_unknown(devices, nodes):
    findings = []
    for device in devices:
        if gpu_numa_node(device, nodes) is None:
            findings.append(_finding(
                'gpu_numa_node_unknown',
                '%s has no known NUMA node, so its host threads cannot be pinned near it.' % _gpu_label(device),
                'Enable NUMA and PCI proximity (ACPI SRAT/_PXM) in the BIOS; in a VM, give the guest the host '
                'NUMA layout. Check /sys/bus/pci/devices/%s/numa_node.' % device.get('pci_bus_id'),
                gpus=[device.get('index')]))
    return findings


def check_nodes_without_memory(nodes):
    # Memory-only nodes (CXL, HBM) are fine; a node with CPUs but no memory makes all its allocations remote.
    findings = []
    for node in nodes:
        if node.get('cpus') and node.get('memory_total_mib') == 0:
            findings.append(_finding(
                'numa_node_without_memory',
                'NUMA node %s has CPUs (%s) but no memory: every allocation from them is remote.' % (
                    node.get('id'), node.get('cpulist')),
                'Populate the DIMM channels of that die/socket, or keep workloads off CPUs %s.' % node.get('cpulist'),
                numa_nodes=[node.get('id')],
                sockets=[] if node.get('socket') is None else [node.get('socket')]))
    return findings


def check_cuda_driver(gpu, min_cuda_driver):
    problem = driver_supports(gpu, min_cuda_driver)
    if not problem:
        return []
    return [_finding(
        'cuda_driver_too_old',
        problem + '.',
        'Upgrade the NVIDIA driver to a branch that supports CUDA %s (nvidia-smi shows "CUDA Version"), or '
        'install the matching cuda-compat package on data-center GPUs.' % str(min_cuda_driver).strip(),
        gpus=[d.get('index') for d in _devices(gpu)])]


def check_gpu_errors(devices, nodes):
    findings = []
    for device in devices:
        if device.get('error'):
            node = gpu_numa_node(device, nodes)
            findings.append(_finding(
                'gpu_query_error',
                '%s failed while being queried: %s.' % (_gpu_label(device), device.get('error')),
                'Look for Xid errors in the kernel log (dmesg | grep -i xid), reset the GPU (nvidia-smi -r -i %s) or '
                'reboot; replace it if it keeps falling off the bus.' % device.get('index'),
                gpus=[device.get('index')], numa_nodes=[] if node is None else [node]))
    return findings


def _merged_options(options):
    merged = dict(DEFAULT_OPTIONS)
    unknown = sorted(set(options or {}) - set(DEFAULT_OPTIONS))
    if unknown:
        raise ValueError('unknown option(s) %s; known: %s' % (', '.join(unknown), ', '.join(sorted(DEFAULT_OPTIONS))))
    merged.update(dict((k, v) for k, v in (options or {}).items() if v is not None))
    for key in ('fail_on', 'ignore'):
        codes = [merged[key]] if isinstance(merged[key], str) else list(merged[key])
        unknown = sorted(set(codes) - set(CODES))
        if unknown:
            raise ValueError('%s lists unknown finding code(s) %s; known: %s' % (
                key, ', '.join(unknown), ', '.join(CODES)))
        merged[key] = codes
    merged['max_gpus_per_socket'] = int(merged['max_gpus_per_socket'])
    if merged['min_cuda_driver'] is not None and str(merged['min_cuda_driver']).strip():
        try:
            parse_cuda_version(merged['min_cuda_driver'])
        except ValueError as e:
            raise ValueError('min_cuda_driver: %s' % e) from e
    return merged


def topology_findings(gpu, numa, options=None):
    """Return the findings for the gpu and numa facts.

    options: max_gpus_per_socket (default 4), min_cuda_driver (the CUDA of the vLLM build, "12.8", compared by
    _cuda.driver_supports; default or empty: no check),
    fail_on (codes whose findings get severity "failure"), ignore (codes to drop).
    Raises ValueError for unknown options or codes.
    """
    opts = _merged_options(options)
    devices, nodes = _devices(gpu), _nodes(numa)
    findings = (check_gpus_per_socket(devices, nodes, opts['max_gpus_per_socket'])
                + check_pcie_degraded(devices, nodes)
                + check_gpu_numa_unknown(devices, nodes)
                + check_nodes_without_memory(nodes)
                + check_cuda_driver(gpu, opts['min_cuda_driver'])
                + check_gpu_errors(devices, nodes))
    findings = [f for f in findings if f['code'] not in opts['ignore']]
    for finding in findings:
        if finding['code'] in opts['fail_on']:
            finding['severity'] = 'failure'
    return findings
