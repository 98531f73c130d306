# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""NUMA nodes, CPU topology and CPU model of a Linux host, read from sysfs and /proc/cpuinfo.

Reads only, below ``root``: sys/devices/system/node/{online,node*/cpulist,node*/meminfo,node*/distance},
sys/devices/system/cpu/{online,cpu*/topology/physical_package_id,cpu*/topology/thread_siblings_list},
cpu*/topology/core_id of the CPUs without thread_siblings_list, and proc/cpuinfo. A missing optional file
turns its field into None.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import platform
import re

from ansible_collections.llmops.vllm.plugins.module_utils._cpu_models import identify_cpu
from ansible_collections.llmops.vllm.plugins.module_utils._cpulist import format_cpulist, parse_cpulist

NODE_DIR = 'sys/devices/system/node'
CPU_DIR = 'sys/devices/system/cpu'
CPUINFO = 'proc/cpuinfo'

_PROCESSOR_RE = re.compile(r'^processor\s*:\s*(\d+)', re.MULTILINE)
_PHYSICAL_ID_RE = re.compile(r'^physical id\s*:\s*(\d+)', re.MULTILINE)
_MEMTOTAL_RE = re.compile(r'MemTotal:\s*(\d+)\s*kB')
_NODE_DIR_RE = re.compile(r'^node(\d+)$')
_MACHINE_ALIASES = {'arm64': 'aarch64', 'amd64': 'x86_64'}


class NumaFactsError(Exception):
    """The host's CPUs cannot be determined at all."""


def read_text(path):
    """Return the stripped content of a file, or None when it cannot be read."""
    try:
        with open(path, 'rb') as f:  # binary: no text-codec set-up, measurably faster for ~300 tiny files
            return f.read().decode('utf-8', 'replace').strip()
    except (IOError, OSError):
        return None


def parse_cpuinfo(text):
    """Return (fields of the first processor block, processor numbers, distinct physical ids)."""
    first_block = {}
    for line in text.split('\n\n', 1)[0].splitlines():
        key, sep, value = line.partition(':')
        if sep:
            first_block[key.strip()] = value.strip()
    processors = sorted(int(n) for n in _PROCESSOR_RE.findall(text))
    physical_ids = set(_PHYSICAL_ID_RE.findall(text))
    return first_block, processors, physical_ids


def detect_architecture(root, cpuinfo):
    """Return "aarch64", "x86_64", ... : the running machine for root "/", else what cpuinfo shows."""
    if os.path.abspath(root) == '/':
        machine = platform.machine().lower()
        return _MACHINE_ALIASES.get(machine, machine) or None
    if 'CPU implementer' in cpuinfo:
        return 'aarch64'
    if 'vendor_id' in cpuinfo:
        return 'x86_64'
    return None


def _read_int(path):
    text = read_text(path)
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def _read_cpulist(path):
    text = read_text(path)
    return None if text is None else parse_cpulist(text)


def _node_ids(node_dir):
    online = _read_cpulist(os.path.join(node_dir, 'online'))
    if online is not None:
        return online
    try:
        names = os.listdir(node_dir)
    except OSError:
        return []
    return sorted(int(m.group(1)) for m in map(_NODE_DIR_RE.match, names) if m)


def _memory_total_mib(path):
    match = _MEMTOTAL_RE.search(read_text(path) or '')
    return int(match.group(1)) // 1024 if match else None


def _distances(path):
    text = read_text(path)
    return None if text is None else [int(d) for d in text.split()]


def read_nodes(root):
    """Return the NUMA nodes the kernel exposes (empty list when it exposes none)."""
    node_dir = os.path.join(root, NODE_DIR)
    nodes = []
    for node_id in _node_ids(node_dir):
        path = os.path.join(node_dir, 'node%d' % node_id)
        cpus = _read_cpulist(os.path.join(path, 'cpulist'))
        nodes.append({
            'id': node_id,
            'socket': None,
            'cpus': cpus,
            'cpulist': None if cpus is None else format_cpulist(cpus),
            'memory_total_mib': _memory_total_mib(os.path.join(path, 'meminfo')),
            'distances': _distances(os.path.join(path, 'distance')),
        })
    return nodes


def read_cpu_topology(root, cpus):
    """Return ({cpu: package id or None}, {cpu: frozenset of SMT siblings or None})."""
    packages, siblings = {}, {}
    cpu_dir = os.path.join(root, CPU_DIR)
    for cpu in cpus:
        topology = '%s/cpu%d/topology/' % (cpu_dir, cpu)
        package = _read_int(topology + 'physical_package_id')
        packages[cpu] = package if package is not None and package >= 0 else None
        sibling_list = _read_cpulist(topology + 'thread_siblings_list')
        siblings[cpu] = frozenset(sibling_list) if sibling_list else None
    return packages, siblings


def group_cores(root, cpus, packages, siblings):
    """Return the physical cores of cpus: one sorted list of CPUs (SMT siblings) per core, ordered by first CPU.

    A core is a CPU's thread_siblings_list, less CPUs not in cpus. A CPU without one is grouped with the CPUs
    of the same physical_package_id and core_id (core_id alone repeats across sockets). Returns None when
    neither tells the core of some CPU. Every CPU lands in exactly one core, even when sysfs disagrees with
    itself: a CPU goes to the first core that lists it.
    """
    wanted = set(cpus)
    core_of = {}
    cores = []
    for cpu in sorted(wanted):
        if cpu in core_of or not siblings.get(cpu):
            continue
        members = sorted(c for c in (siblings[cpu] & wanted) | {cpu} if c not in core_of)
        for member in members:
            core_of[member] = len(cores)
        cores.append(members)
    by_id = {}
    cpu_dir = os.path.join(root, CPU_DIR)
    for cpu in sorted(wanted - set(core_of)):
        core_id = _read_int('%s/cpu%d/topology/core_id' % (cpu_dir, cpu))
        if core_id is None or core_id < 0 or packages.get(cpu) is None:
            return None
        by_id.setdefault((packages[cpu], core_id), []).append(cpu)
    return sorted(cores + list(by_id.values()))


def summarize_sockets(packages, siblings, cpuinfo_physical_ids):
    """Return (sockets, cores_per_socket, threads_per_core); each None when it cannot be told.

    Cores are counted as distinct SMT sibling sets, which stays right where core_id repeats
    across clusters (some arm64 firmware).
    """
    package_ids = set(packages.values())
    known_ids = cpuinfo_physical_ids if None in package_ids else package_ids
    sockets = len(known_ids) or None
    sibling_sets = set(siblings.values())
    if not sibling_sets or None in sibling_sets:
        return sockets, None, None
    threads_per_core = max(len(s) for s in sibling_sets)
    cores_per_socket = len(sibling_sets) // sockets if sockets else None
    return sockets, cores_per_socket, threads_per_core


def _online_cpus(root, processors, nodes):
    online = _read_cpulist(os.path.join(root, CPU_DIR, 'online'))
    if online:
        return online
    if processors:
        return processors
    node_cpus = sorted(set(cpu for node in nodes for cpu in node['cpus'] or []))
    if node_cpus:
        return node_cpus
    raise NumaFactsError(
        'Cannot tell the online CPUs: %s, %s and the NUMA node cpulists are all missing or empty. '
        'Check that root points at a Linux system tree with /sys and /proc mounted.'
        % (os.path.join(root, CPU_DIR, 'online'), os.path.join(root, CPUINFO)))


def collect_numa(root='/'):
    """Return the ``numa`` fact: NUMA nodes, online CPUs and CPU description of the tree at root."""
    cpuinfo, processors, physical_ids = parse_cpuinfo(read_text(os.path.join(root, CPUINFO)) or '')
    nodes = read_nodes(root)
    online = _online_cpus(root, processors, nodes)
    nodes_synthesized = not nodes
    if nodes_synthesized:
        nodes = [{'id': 0, 'socket': None, 'cpus': online, 'cpulist': format_cpulist(online),
                  'memory_total_mib': None, 'distances': [10]}]

    packages, siblings = read_cpu_topology(root, online)
    for node in nodes:
        node_packages = [packages.get(cpu) for cpu in node['cpus'] or []]
        node['socket'] = node_packages[0] if node_packages and None not in node_packages else None

    architecture = detect_architecture(root, cpuinfo)
    cpu = identify_cpu(architecture, cpuinfo)
    cpu['architecture'] = architecture
    cpu['sockets'], cpu['cores_per_socket'], cpu['threads_per_core'] = summarize_sockets(
        packages, siblings, physical_ids)
    return {
        'nodes': nodes,
        'nodes_synthesized': nodes_synthesized,
        'online_cpus': online,
        'online_cpulist': format_cpulist(online),
        'cores': group_cores(root, online, packages, siblings),
        'cpu': cpu,
    }
