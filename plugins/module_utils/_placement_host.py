# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""The host model of placement: one host's gpu and numa facts, read into what placing instances needs.

Host(gpu, numa, reserved, label) reads the facts once and then carries what earlier instances hold
(held_gpus, held_cpus: index or CPU -> instance name). It knows nothing of instances, so placement over
several hosts can build one per host.

Cores: the numa fact's cores (the SMT siblings of each physical core, as numa_facts reads them from sysfs).
Facts without cores make every CPU its own core; sibling numbering is never guessed.

GPUs: a GPU's NUMA node is its sysfs node, else the one node its NVML CPU affinity lies in. Its socket is
that of its node. A GPU pair's distance is (NVLink or not, locality) with locality SAME_PCIE_SWITCH, then
SAME_NUMA_NODE, SAME_SOCKET and FAR (farther or unknown).

CPU slices: every GPU owns a fixed CPU slice. The non-reserved online CPUs of a NUMA node are cut into equal
slices of whole cores (SMT siblings stay together), one per GPU attached to the node (all GPUs of the facts,
by index; the k-th GPU gets the k-th slice); the remainder stays unassigned. A GPU with an unknown NUMA node
uses its NVML CPU affinity instead of a node, or any online CPU when that is unknown too; such GPUs share
what the GPUs with a node leave over.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import itertools

from collections.abc import Mapping

from ansible_collections.llmops.vllm.plugins.module_utils._cpulist import format_cpulist, parse_cpulist
from ansible_collections.llmops.vllm.plugins.module_utils._gpu import link_lookup
from ansible_collections.llmops.vllm.plugins.module_utils._placement_text import (
    PlacementError,
    holders,
    id_ranges,
    type_name,
)
from ansible_collections.llmops.vllm.plugins.module_utils._topology_findings import gpu_numa_node

# Locality of a GPU pair, nearest first.
SAME_PCIE_SWITCH, SAME_NUMA_NODE, SAME_SOCKET, FAR = 1, 2, 3, 4


class Host(object):
    """What placement needs from one host's gpu and numa facts, and what earlier instances hold there."""

    def __init__(self, gpu, numa, reserved, label):
        self.label = label
        self.reserved = reserved
        self.reserved_set = set(reserved)
        self.held_gpus = {}
        # Instances that set gpu_memory_utilization: they may share a GPU they name in gpus.
        self.sharing = set()
        self.held_cpus = {}
        try:
            self._read_numa(numa)
            self._read_gpu(gpu, numa.get("nodes") or [])
        except PlacementError:
            raise
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise PlacementError(
                "%s: the gpu or numa facts are malformed (%s: %s). Fix: gather them with llmops.vllm.gpu_facts and "
                "llmops.vllm.numa_facts and pass ansible_facts['gpu'] and ansible_facts['numa'] unchanged."
                % (label, type(e).__name__, e)
            ) from e
        self._slice_cpus()
        self._pairs = {}
        for a, b in itertools.permutations(sorted(self.gpus), 2):
            self._pairs[(a, b)] = self._pair_key(a, b)

    # -- facts ----------------------------------------------------------------------------------

    def _read_numa(self, numa):
        if not isinstance(numa, Mapping):
            raise PlacementError(
                "%s: the numa fact is missing (got %s). Fix: gather it with llmops.vllm.numa_facts and pass "
                "ansible_facts['numa']." % (self.label, type_name(numa))
            )
        online = numa.get("online_cpus")
        if online is None:
            online = parse_cpulist(numa.get("online_cpulist") or "")
        self.online = set(int(cpu) for cpu in online)
        self.node_cpus, self.node_socket, self.cpu_node = {}, {}, {}
        for node in numa.get("nodes") or []:
            node_id = int(node["id"])
            cpus = sorted(set(int(cpu) for cpu in node.get("cpus") or []) & self.online)
            self.node_cpus[node_id] = cpus
            self.node_socket[node_id] = node.get("socket")
            for cpu in cpus:
                self.cpu_node.setdefault(cpu, node_id)
        if not self.online:
            raise PlacementError(
                "%s: the numa fact lists no online CPU. Fix: gather it again with llmops.vllm.numa_facts." % self.label
            )
        self.usable_cpus = sorted(self.online - self.reserved_set)
        self._read_cores(numa)

    def _read_cores(self, numa):
        """Group the online CPUs into physical cores from the numa fact's cores (each a list of SMT siblings).

        A numa fact without cores (gathered by numa_facts before it reported them) or with cores null makes
        every CPU its own core: sibling numbering differs between machines (c and c + N on many x86 servers,
        c and c + 1 on some virtual machines and client CPUs), so it is not guessed. A core is keyed by its
        lowest online CPU; online CPUs that no core lists are cores of their own. threads_per_core still
        rounds slice sizes to whole cores (whole_cores); without it, the largest core of the fact decides.
        """
        cores = numa.get("cores") or []
        self.core_of = dict((cpu, cpu) for cpu in self.online)
        for core in cores:
            members = sorted(set(int(cpu) for cpu in core) & self.online)
            for cpu in members:
                self.core_of[cpu] = members[0]
        self.core_threads = {}
        for cpu in sorted(self.online):
            self.core_threads.setdefault(self.core_of[cpu], []).append(cpu)
        threads = (numa.get("cpu") or {}).get("threads_per_core")
        if isinstance(threads, int) and not isinstance(threads, bool):
            self.threads_per_core = threads
        else:
            self.threads_per_core = max([len(core) for core in cores] + [1])

    def by_core(self, cpus):
        """cpus core by core (SMT siblings next to each other), cores whose threads are all in cpus first."""
        present = set(cpus)

        def key(cpu):
            core = self.core_of.get(cpu, cpu)
            whole = all(thread in present for thread in self.core_threads.get(core, [cpu]))
            return (not whole, core, cpu)

        return sorted(present, key=key)

    def whole_cores(self, size):
        """size rounded down to whole cores when SMT is on and at least one core fits."""
        if self.threads_per_core > 1 and size >= self.threads_per_core:
            return size - size % self.threads_per_core
        return size

    def _read_gpu(self, gpu, nodes):
        self.gpu_available = isinstance(gpu, Mapping) and bool(gpu.get("available"))
        if not isinstance(gpu, Mapping):
            self.gpu_reason = "the gpu fact is missing (gather it with llmops.vllm.gpu_facts)"
        else:
            self.gpu_reason = gpu.get("reason") or "NVML reports no GPU"
        self.gpus, self.by_uuid = {}, {}
        devices = (gpu.get("devices") or []) if self.gpu_available else []
        for device in devices:
            index = int(device["index"])
            node = gpu_numa_node(device, nodes)
            affinity = device.get("cpu_affinity")
            affinity = sorted(set(parse_cpulist(affinity)) & self.online) if affinity else []
            node_unknown = node is None
            affinity_nodes = set(self.cpu_node.get(cpu) for cpu in affinity)
            if node_unknown and len(affinity_nodes) == 1 and None not in affinity_nodes:
                node = affinity_nodes.pop()  # the CPUs NVML calls local all lie in one node: that is its node
            pcie = device.get("pcie") or {}
            self.gpus[index] = {
                "index": index,
                "uuid": device.get("uuid"),
                "node": node,
                "node_unknown": node_unknown,
                "affinity": affinity,
                "socket": self._gpu_socket(node, affinity),
                "degraded": pcie.get("degraded") is True,
                "degraded_reason": pcie.get("degraded_reason") or "below its maximum generation or width",
                "error": device.get("error"),
            }
            if device.get("uuid"):
                self.by_uuid[str(device["uuid"])] = index
        self.links = link_lookup(gpu.get("links") or []) if self.gpu_available else {}

    def _gpu_socket(self, node, affinity):
        if node is not None:
            return self.node_socket.get(node)
        sockets = set(self.node_socket.get(self.cpu_node.get(cpu)) for cpu in affinity)
        return sockets.pop() if len(sockets) == 1 else None

    def socket_of_node(self, node):
        return self.node_socket.get(node)

    # -- CPU slices -----------------------------------------------------------------------------

    def _group_key(self, index):
        device = self.gpus[index]
        if device["node"] is not None and self.node_cpus.get(device["node"]):
            return ("node", device["node"])
        if device["affinity"]:
            return ("affinity", tuple(device["affinity"]))
        return ("any",)

    def group_cpus(self, key):
        if key[0] == "node":
            return self.node_cpus[key[1]]
        if key[0] == "affinity":
            return list(key[1])
        return sorted(self.online)

    def group_name(self, index):
        key = self.group[index]
        if key[0] == "node" and self.gpus[index]["node_unknown"]:
            return "NUMA node %d (where its NVML CPU affinity lies)" % key[1]
        if key[0] == "node":
            return "NUMA node %d" % key[1]
        if key[0] == "affinity":
            return "the NVML CPU affinity %s of GPU %d" % (format_cpulist(key[1]), index)
        return "the online CPUs (GPU %d has no known NUMA node or CPU affinity)" % index

    def _slice_cpus(self):
        """Cut each GPU group's non-reserved CPUs into one equal slice of whole cores per GPU, by GPU index."""
        members = {}
        self.group = {}
        for index in sorted(self.gpus):
            self.group[index] = self._group_key(index)
            members.setdefault(self.group[index], []).append(index)
        self.slice, self.group_pool, self.group_rest, self.group_members = {}, {}, {}, members
        node_group_cpus = set(cpu for key in members if key[0] == "node" for cpu in self.node_cpus[key[1]])
        for key in sorted(members):
            indexes = members[key]
            pool = [cpu for cpu in self.group_cpus(key) if cpu not in self.reserved_set]
            if key[0] != "node":
                # GPUs without a node share what the GPUs with one leave over, unless nothing is left.
                pool = [cpu for cpu in pool if cpu not in node_group_cpus] or pool
            pool = self.by_core(pool)
            size = self.whole_cores(len(pool) // len(indexes))
            for k, index in enumerate(indexes):
                self.slice[index] = pool[k * size : (k + 1) * size]
            self.group_pool[key] = pool
            self.group_rest[key] = pool[len(indexes) * size :]
        self.slice_owner = {}
        for index in sorted(self.slice):
            for cpu in self.slice[index]:
                self.slice_owner.setdefault(cpu, index)

    # -- GPU pairs ------------------------------------------------------------------------------

    def _pair_key(self, a, b):
        link = self.links.get((a, b)) or {}
        nvlink = link.get("type") == "NVLINK" or (link.get("nvlinks") or 0) > 0
        ga, gb = self.gpus[a], self.gpus[b]
        if link.get("same_pcie_switch"):
            locality = SAME_PCIE_SWITCH
        elif (ga["node"] == gb["node"]) if None not in (ga["node"], gb["node"]) else link.get("same_numa_node"):
            locality = SAME_NUMA_NODE
        elif ga["socket"] is not None and ga["socket"] == gb["socket"]:
            locality = SAME_SOCKET
        else:
            locality = FAR
        return (0 if nvlink else locality, locality)

    def pair(self, a, b):
        return self._pairs[(a, b)]

    def nvlinked(self, a, b):
        return self._pairs[(a, b)][0] == 0

    # -- state ----------------------------------------------------------------------------------

    def broken(self, index, allow_degraded):
        device = self.gpus[index]
        return bool(device["error"]) or (device["degraded"] and not allow_degraded)

    def describe_cpus(self, cpus):
        """ "free: 30-31; 2-15 are held by a; reserved: 0-1" for the CPUs of a scope."""
        cpus = set(cpus)
        parts = [
            "free: %s" % id_ranges(sorted(c for c in cpus if c not in self.held_cpus and c not in self.reserved_set))
        ]
        held = [cpu for cpu in cpus if cpu in self.held_cpus]
        if held:
            parts.append(holders(self.held_cpus, held))
        reserved = sorted(cpus & self.reserved_set)
        if reserved:
            parts.append("reserved: %s" % format_cpulist(reserved))
        return "; ".join(parts)
