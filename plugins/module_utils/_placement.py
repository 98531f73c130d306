# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""Topology-aware placement: which GPUs, CPUs and NUMA nodes each vLLM instance of a host gets.

vllm_placement(instances, gpu, numa, reserved_cpus, host) is the one decision function; the filter
llmops.vllm.vllm_placement wraps it. Instances are placed one after the other, in list order, and each
placement depends only on the facts and on the instances before it: the same input gives the same output,
and appending an instance never moves the ones before it (a restart never reshuffles a running fleet).

GPUs (device cuda, tensor_parallel_size x pipeline_parallel_size of them): among the free GPUs without an
NVML error and, unless the instance sets allow_degraded_pcie, without a degraded PCIe link, the set whose
worst GPU pair is nearest wins. A pair's distance is (NVLink or not, locality) with locality 1 = same PCIe
switch, 2 = same NUMA node, 3 = same socket, 4 = farther or unknown; sets compare by their pair distances,
worst first. Ties go to fewer degraded GPUs, then to GPUs next to GPUs that earlier instances hold (best
fit, which keeps larger groups free), then to the lowest indexes. Sets of up to MAX_EXHAUSTIVE_SUBSETS
candidates are all scored; beyond that a set is grown greedily from every free GPU. With pipeline
parallelism, consecutive tensor_parallel_size GPUs form a stage and are ordered to keep a stage on one
socket; a tensor-parallel group that spans sockets without NVLink on every pair gets a warning.

CPUs of a cuda instance: every GPU owns a fixed CPU slice. The non-reserved online CPUs of a NUMA node are
cut into equal slices of whole cores (SMT siblings stay together), one per GPU attached to the node (all
GPUs of the facts, by index; the k-th GPU gets the k-th slice); the remainder stays unassigned. A GPU with
an unknown NUMA node uses its NVML CPU affinity instead of a node, or any online CPU when that is unknown
too. An instance gets the slices of its GPUs, so instances that share a node share it fairly without
knowing about later instances, and two instances never meet. When CPUs of its slice are held by an
explicit cpus of an earlier instance, it makes up from the node's unassigned remainder and the slices of
taken or broken GPUs, else gets fewer CPUs (with a warning). cpus_per_instance on a cuda instance replaces
the slice size (CPUs per GPU); beyond the remainder and those slices it may take slices of free GPUs (with
a warning) and must fit the node.

CPUs of a cpu instance (one rank per tensor_parallel_size x pipeline_parallel_size; vLLM indexes
VLLM_CPU_OMP_THREADS_BIND by global rank): never from a GPU slice. With cpus_per_instance (CPUs per rank),
each rank gets that many CPUs of one NUMA node, a different node per rank while there is one, on the
socket of the first rank when possible, lowest node first. Without it, each rank gets all free CPUs of its
own node (largest free pool first); ranks outnumbering the nodes split a node evenly. Each rank's range
lies in one NUMA node, because vLLM binds a rank's memory to the node of its first CPU. A rank's OpenMP
threads get one CPU per physical core of its range, less the last core, left to vLLM's scheduler and API
server.

Explicit gpus/cpus are honoured after checks. Every refusal raises PlacementError with one message that
names the host, the instance, what it asked for, what is free and a fix.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import itertools
import math

from collections.abc import Mapping

from ansible_collections.llmops.vllm.plugins.module_utils._cpulist import format_cpulist, parse_cpulist
from ansible_collections.llmops.vllm.plugins.module_utils._gpu import link_lookup
from ansible_collections.llmops.vllm.plugins.module_utils._topology_findings import gpu_numa_node

DEVICES = ("cuda", "cpu")
# Larger GPU searches than this many subsets grow sets greedily instead of scoring every subset.
MAX_EXHAUSTIVE_SUBSETS = 5000
# Locality of a GPU pair, nearest first.
SAME_PCIE_SWITCH, SAME_NUMA_NODE, SAME_SOCKET, FAR = 1, 2, 3, 4
_NOT_NEXT_TO_ANYTHING = (FAR + 1, FAR + 1)
_TRUE_STRINGS = ("true", "yes", "on", "1")
_FALSE_STRINGS = ("false", "no", "off", "0", "")


class PlacementError(ValueError):
    """The instances cannot be placed; the message names host, instance, request, what is free and a fix.

    instance is the instance's name (or "#N" when it has none) and position its 0-based place in the list;
    both are None for problems with the facts or the arguments.
    """

    def __init__(self, message, instance=None, position=None):
        super(PlacementError, self).__init__(message)
        self.instance = instance
        self.position = position


def _type_name(value):
    return "null" if value is None else type(value).__name__


def _plural(count, word, plural=None):
    return "%d %s" % (count, word if count == 1 else plural or word + "s")


def _comma_list(values):
    return ", ".join(str(v) for v in values)


def _ranges(values):
    return format_cpulist(values) if values else "none"


def _holders(held, items, noun=""):
    """ "0-3 are held by a; 5 is held by b" for the items in held (a dict item -> holder); noun "CPU" prefixes."""
    by_holder = {}
    for item in sorted(items):
        by_holder.setdefault(held[item], []).append(item)
    return "; ".join(
        "%s%s %s held by %s"
        % (
            noun and noun + ("s " if len(ids) > 1 else " "),
            format_cpulist(ids),
            "is" if len(ids) == 1 else "are",
            holder,
        )
        for holder, ids in sorted(by_holder.items(), key=lambda entry: entry[1][0])
    )


def _parse_cpus(value):
    """Sorted CPU numbers of a cpulist string, a CPU number or a list of them; ValueError otherwise."""
    if isinstance(value, str):
        return parse_cpulist(value)
    if isinstance(value, bool):
        raise ValueError("expected a cpulist or a list of CPU numbers, got %s" % value)
    if isinstance(value, int):
        cpus = [value]
    elif isinstance(value, (list, tuple)):
        cpus = []
        for item in value:
            if isinstance(item, str):
                cpus.extend(parse_cpulist(item))
            elif isinstance(item, int) and not isinstance(item, bool):
                cpus.append(item)
            else:
                raise ValueError("expected CPU numbers, got %r (%s)" % (item, _type_name(item)))
    else:
        raise ValueError('expected a cpulist such as "0-7,16" or a list of CPU numbers, got %s' % _type_name(value))
    if any(cpu < 0 for cpu in cpus):
        raise ValueError("CPU numbers cannot be negative")
    return sorted(set(cpus))


class _Host(object):
    """What placement needs from the gpu and numa facts, and what earlier instances hold."""

    def __init__(self, gpu, numa, reserved, label):
        self.label = label
        self.reserved = reserved
        self.reserved_set = set(reserved)
        self.held_gpus = {}
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
                "ansible_facts['numa']." % (self.label, _type_name(numa))
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
        self._infer_cores(numa.get("cpu") or {})

    def _infer_cores(self, cpu_info):
        """Group SMT siblings into cores; the numa fact has threads_per_core but no sibling lists.

        x86 Linux numbers the second thread of every core after all first threads (siblings c, c + N); other
        architectures number siblings next to each other. A guess that puts more than threads_per_core CPUs,
        or CPUs of different NUMA nodes, into one core is dropped: every CPU is then its own core.
        """
        threads = cpu_info.get("threads_per_core")
        online = sorted(self.online)
        self.threads_per_core = threads if isinstance(threads, int) and not isinstance(threads, bool) else 1
        self.core_of = dict((cpu, cpu) for cpu in online)
        if self.threads_per_core > 1:
            if cpu_info.get("architecture") == "x86_64":
                step = (online[-1] + 1) // self.threads_per_core
                guess = dict((cpu, cpu % step) for cpu in online) if step else {}
            else:
                guess = dict((cpu, cpu - cpu % self.threads_per_core) for cpu in online)
            cores = {}
            for cpu, core in guess.items():
                cores.setdefault(core, []).append(cpu)
            if guess and all(
                len(members) <= self.threads_per_core and len(set(self.cpu_node.get(c) for c in members)) == 1
                for members in cores.values()
            ):
                self.core_of = guess
        self.core_threads = {}
        for cpu in online:
            self.core_threads.setdefault(self.core_of[cpu], []).append(cpu)

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
            "free: %s" % _ranges(sorted(c for c in cpus if c not in self.held_cpus and c not in self.reserved_set))
        ]
        held = [cpu for cpu in cpus if cpu in self.held_cpus]
        if held:
            parts.append(_holders(self.held_cpus, held))
        reserved = sorted(cpus & self.reserved_set)
        if reserved:
            parts.append("reserved: %s" % format_cpulist(reserved))
        return "; ".join(parts)


class _Instance(object):
    """One validated item of the instance list."""

    def __init__(self, host, item, position, names):
        self.host = host
        self.position = position
        name = item.get("name") if isinstance(item, Mapping) else None
        self.label = str(name) if isinstance(name, str) and name.strip() else "#%d" % (position + 1)
        if not isinstance(item, Mapping):
            self.fail(
                "is %s, not a dict." % _type_name(item),
                "make every item of the instance list a dict with at least name and device.",
            )
        if not isinstance(name, (str, type(None))):
            self.fail(
                "name must be a string, got %r (%s)." % (name, _type_name(name)),
                'quote the name in the inventory, e.g. name: "%s".' % (name,),
            )
        if not (name and name.strip()):
            self.fail(
                "has no name (item %d of the list; got %r)." % (position + 1, name),
                "give every instance a unique name.",
            )
        self.name = str(name)
        if self.name in names:
            self.fail(
                "the name is already used by item %d of the list." % (names[self.name] + 1),
                "give every instance a unique name.",
            )
        device = item.get("device")
        device = "cuda" if device is None else device
        if not isinstance(device, str) or device.strip().lower() not in DEVICES:
            self.fail("device must be cuda or cpu, got %r." % (device,), "set device: cuda or device: cpu.")
        self.device = device.strip().lower()
        self.tp = self._positive_int(item, "tensor_parallel_size", 1)
        self.pp = self._positive_int(item, "pipeline_parallel_size", 1)
        self.ranks = self.tp * self.pp
        self.cpus_per_instance = self._positive_int(item, "cpus_per_instance", None)
        self.allow_degraded = self._bool(item, "allow_degraded_pcie")
        self.gpus = self._gpu_refs(item.get("gpus"))
        self.cpus = None
        if item.get("cpus") is not None:
            try:
                self.cpus = _parse_cpus(item.get("cpus"))
            except ValueError as e:
                self.fail(
                    "cpus %r is not a CPU list (%s)." % (item.get("cpus"), e), 'write cpus as "0-7,16" or [0, 1].'
                )
            if not self.cpus:
                self.fail("cpus is empty.", "list the CPUs it may use, or drop cpus to let placement choose.")
            if self.cpus_per_instance is not None:
                self.fail(
                    "sets both cpus and cpus_per_instance.",
                    "keep one of them: cpus picks the CPUs, cpus_per_instance the count.",
                )
        if self.device == "cpu" and self.gpus is not None:
            self.fail("has device cpu but lists gpus %s." % (item.get("gpus"),), "drop gpus, or set device: cuda.")

    def fail(self, problem, fix):
        raise PlacementError(
            "%s, instance %s: %s Fix: %s" % (self.host.label, self.label, problem, fix),
            instance=self.label,
            position=self.position,
        )

    def asks(self):
        """ "8 GPUs (tensor_parallel_size 4 x pipeline_parallel_size 2)", or ranks for a cpu instance."""
        what = "GPU" if self.device == "cuda" else "rank"
        return "%s (tensor_parallel_size %d x pipeline_parallel_size %d)" % (
            _plural(self.ranks, what),
            self.tp,
            self.pp,
        )

    def _positive_int(self, item, key, default):
        value = item.get(key)
        if value is None:
            return default
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            self.fail("%s must be a positive integer, got %r." % (key, value), "set %s to 1 or more." % key)
        return int(value)

    def _bool(self, item, key):
        value = item.get(key)
        if value is None or isinstance(value, bool):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in _TRUE_STRINGS + _FALSE_STRINGS:
            return value.strip().lower() in _TRUE_STRINGS
        self.fail("%s must be true or false, got %r." % (key, value), "set %s: true or false." % key)
        return False

    def _gpu_refs(self, value):
        if value is None:
            return None
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        elif isinstance(value, int) and not isinstance(value, bool):
            value = [value]
        if not isinstance(value, (list, tuple)) or not value:
            self.fail(
                "gpus must be a non-empty list of GPU indexes or UUIDs, got %r." % (value,),
                "write gpus as [0, 1] or [GPU-..., GPU-...], or drop it to let placement choose.",
            )
        refs = []
        for ref in value:
            if isinstance(ref, str) and ref.strip().isdigit():
                ref = int(ref)
            if isinstance(ref, bool) or not isinstance(ref, (int, str)):
                self.fail(
                    "gpus lists %r, which is neither a GPU index nor a UUID." % (ref,),
                    "write gpus as [0, 1] or [GPU-..., GPU-...].",
                )
            refs.append(ref.strip() if isinstance(ref, str) else int(ref))
        return refs


# -- GPUs ---------------------------------------------------------------------------------------


def _unusable_notes(host, indexes, allow_degraded):
    notes = []
    for index in indexes:
        device = host.gpus[index]
        if device["error"]:
            notes.append("%d has an NVML error (%s)" % (index, device["error"]))
        elif device["degraded"] and not allow_degraded:
            notes.append(
                "%d has a degraded PCIe link (%s; allow_degraded_pcie: true would accept it)"
                % (index, device["degraded_reason"])
            )
    return notes


def _no_gpu_host(inst):
    inst.fail(
        "asks for device cuda (%s) but the host has no usable GPU: %s"
        % (inst.asks(), inst.host.gpu_reason.rstrip(".") + "."),
        "set device: cpu for this instance, fix the GPU stack as the reason says, or move the instance to a GPU host.",
    )


def _set_key(host, indexes, neighbours):
    cost = sorted((host.pair(a, b) for a, b in itertools.combinations(indexes, 2)), reverse=True)
    degraded = sum(1 for index in indexes if host.gpus[index]["degraded"])
    packing = sorted(min([host.pair(i, n) for n in neighbours if n != i] or [_NOT_NEXT_TO_ANYTHING]) for i in indexes)
    return (cost, degraded, packing, sorted(indexes))


def _best_gpu_set(host, candidates, count, neighbours):
    if math.comb(len(candidates), count) <= MAX_EXHAUSTIVE_SUBSETS:
        subsets = itertools.combinations(candidates, count)
    else:
        subsets = []
        for seed in candidates:
            chosen = [seed]
            while len(chosen) < count:
                rest = [c for c in candidates if c not in chosen]
                chosen.append(min(rest, key=lambda c, chosen=chosen: _set_key(host, chosen + [c], neighbours)))
            subsets.append(chosen)
    return sorted(min(subsets, key=lambda s: _set_key(host, list(s), neighbours)))


def _order_for_pipeline(host, chosen, tp):
    """Consecutive tensor_parallel_size GPUs form a pipeline stage: keep a stage on one socket and node."""
    if len(chosen) <= tp:
        return chosen

    def locality(index):
        device = host.gpus[index]
        return (device["socket"] is None, device["socket"] or 0, device["node"] is None, device["node"] or 0, index)

    return sorted(chosen, key=locality)


def _explicit_gpus(host, inst):
    chosen = []
    for ref in inst.gpus:
        index = ref if isinstance(ref, int) else host.by_uuid.get(ref)
        if index not in host.gpus:
            known = _ranges(sorted(host.gpus))
            if isinstance(ref, str):
                known += ": " + ", ".join("%d = %s" % (i, host.gpus[i]["uuid"]) for i in sorted(host.gpus))
            inst.fail(
                "asks for GPU %s, which the host does not have (it has GPUs %s)." % (ref, known),
                "use indexes or UUIDs from ansible_facts['gpu']['devices'], or drop gpus to let placement choose.",
            )
        if index in chosen:
            inst.fail("lists GPU %s twice in gpus." % ref, "list each GPU once.")
        if index in host.held_gpus:
            free = [i for i in sorted(host.gpus) if i not in host.held_gpus and not host.broken(i, inst.allow_degraded)]
            inst.fail(
                "asks for GPU %d but it is already held by %s; free GPUs: %s."
                % (index, host.held_gpus[index], _comma_list(free) or "none"),
                "give each instance its own GPUs, or drop gpus to let placement choose.",
            )
        device = host.gpus[index]
        if device["error"]:
            inst.fail(
                "asks for GPU %d, which has an NVML error (%s)." % (index, device["error"]),
                "pick another GPU, or repair this one (see the gpu_query_error finding of topology_findings).",
            )
        if device["degraded"] and not inst.allow_degraded:
            inst.fail(
                "asks for GPU %d, whose PCIe link is degraded (%s)." % (index, device["degraded_reason"]),
                "reseat the GPU, pick another one, or set allow_degraded_pcie: true to accept the slower link.",
            )
        chosen.append(index)
    if len(chosen) != inst.ranks:
        inst.fail(
            "lists %s in gpus but asks for %s." % (_plural(len(chosen), "GPU"), inst.asks()),
            "list exactly %d GPUs, or change tensor_parallel_size/pipeline_parallel_size." % inst.ranks,
        )
    return chosen


def _auto_gpus(host, inst):
    candidates = [i for i in sorted(host.gpus) if i not in host.held_gpus and not host.broken(i, inst.allow_degraded)]
    if len(candidates) < inst.ranks:
        notes = [_comma_list(candidates)] if candidates else []
        held = [i for i in sorted(host.gpus) if i in host.held_gpus]
        if held:
            notes.append(_holders(host.held_gpus, held))
        notes.extend(
            _unusable_notes(host, [i for i in sorted(host.gpus) if i not in host.held_gpus], inst.allow_degraded)
        )
        if candidates:
            free = "only %d %s free" % (len(candidates), "is" if len(candidates) == 1 else "are")
        else:
            free = "none is free"
        fix = "lower tensor_parallel_size/pipeline_parallel_size, remove an instance, or move it to another host."
        if not inst.allow_degraded and any(
            host.gpus[i]["degraded"] and not host.gpus[i]["error"] for i in host.gpus if i not in host.held_gpus
        ):
            fix = fix[:-1] + "; or set allow_degraded_pcie: true to accept GPUs with a degraded PCIe link."
        inst.fail("asks for %s but %s (%s)." % (inst.asks(), free, "; ".join(notes) or "the host has fewer GPUs"), fix)
    neighbours = [i for i in sorted(host.gpus) if i in host.held_gpus]
    chosen = _best_gpu_set(host, candidates, inst.ranks, neighbours)
    return _order_for_pipeline(host, chosen, inst.tp) if inst.pp > 1 else chosen


def _gpu_warnings(host, inst, gpus):
    warnings = []
    for index in gpus:
        device = host.gpus[index]
        if device["node_unknown"]:
            warnings.append(
                "GPU %d has no known NUMA node, so its CPUs come from %s; enable PCI proximity (ACPI _PXM) in the "
                "BIOS so the kernel reports it." % (index, host.group_name(index))
            )
        if device["degraded"]:
            warnings.append(
                "GPU %d has a degraded PCIe link (%s): host-GPU transfers (model loading, swapping, PCIe all-reduce) "
                "run slower; used because allow_degraded_pcie is true." % (index, device["degraded_reason"])
            )
    for stage in range(inst.pp):
        group = gpus[stage * inst.tp : (stage + 1) * inst.tp]
        sockets = set(host.gpus[i]["socket"] for i in group)
        if len(sockets) < 2 or None in sockets:
            continue
        sockets = sorted(sockets)
        if all(host.nvlinked(a, b) for a, b in itertools.combinations(group, 2)):
            continue
        if inst.tp % len(sockets) == 0:
            split = inst.tp // len(sockets)
            advice = (
                "prefer %d instances with tensor_parallel_size %d (one per socket), or tensor_parallel_size %d x "
                "pipeline_parallel_size %d" % (len(sockets), split, split, inst.pp * len(sockets))
            )
        else:
            advice = "prefer a tensor_parallel_size that fits one socket and pipeline_parallel_size across sockets"
        warnings.append(
            "the tensor-parallel group of GPUs %s spans sockets %s without NVLink: every all-reduce (several per "
            "layer, on every step) crosses the inter-socket link, which costs latency and throughput; %s."
            % (_comma_list(group), " and ".join(str(s) for s in sockets), advice)
        )
    return warnings


# -- CPUs ---------------------------------------------------------------------------------------


def _cpus_word(cpus):
    return "CPU %s" % cpus[0] if len(cpus) == 1 else "CPUs %s" % format_cpulist(cpus)


def _cpus_are(cpus):
    return _cpus_word(cpus) + (" is" if len(cpus) == 1 else " are")


def _check_explicit_cpus(host, inst):
    cpus = inst.cpus
    offline = [cpu for cpu in cpus if cpu not in host.online]
    if offline:
        inst.fail(
            "asks for %s but %s not online (online: %s)."
            % (_cpus_word(cpus), _cpus_are(offline), format_cpulist(host.online)),
            "list online CPUs only (ansible_facts['numa']['online_cpulist']), or bring the CPUs online.",
        )
    reserved = [cpu for cpu in cpus if cpu in host.reserved_set]
    if reserved:
        inst.fail(
            "asks for %s but %s reserved for the host (reserved_cpus %s)."
            % (_cpus_word(cpus), _cpus_are(reserved), format_cpulist(host.reserved)),
            "leave the reserved CPUs out of cpus, or shrink reserved_cpus.",
        )
    held = [cpu for cpu in cpus if cpu in host.held_cpus]
    if held:
        inst.fail(
            "asks for %s but %s." % (_cpus_word(cpus), _holders(host.held_cpus, held, "CPU")),
            "give each instance its own CPUs (free: %s), or drop cpus to let placement choose."
            % _ranges(sorted(c for c in host.usable_cpus if c not in host.held_cpus)),
        )


def _slice_warning(host, cpus, own=()):
    """Warn when CPUs come from the slices of GPUs that no instance holds yet (other than its own GPUs)."""
    owners = sorted(set(host.slice_owner[c] for c in cpus if c in host.slice_owner) - set(host.held_gpus) - set(own))
    owners = [i for i in owners if not host.broken(i, False)]
    if not owners:
        return []
    taken = sorted(c for c in cpus if host.slice_owner.get(c) in owners)
    return [
        "%s %s to the CPU slice of GPU%s %s, which no instance holds yet: an instance placed there later gets "
        "fewer CPUs near its GPU."
        % (
            _cpus_word(taken),
            "belongs" if len(taken) == 1 else "belong",
            "s" if len(owners) > 1 else "",
            _comma_list(owners),
        )
    ]


def _explicit_cuda_cpus(host, inst, gpus):
    _check_explicit_cpus(host, inst)
    gpu_nodes = set(host.gpus[i]["node"] for i in gpus) - {None}
    away = [cpu for cpu in inst.cpus if gpu_nodes and host.cpu_node.get(cpu) not in gpu_nodes]
    warnings = _slice_warning(host, inst.cpus, gpus)
    if away:
        warnings.append(
            "%s not on NUMA node%s %s of its GPUs: the GPU threads pay remote memory and PCIe latency."
            % (_cpus_are(away), "s" if len(gpu_nodes) > 1 else "", _comma_list(sorted(gpu_nodes)))
        )
    return list(inst.cpus), warnings


def _cuda_cpus(host, inst, gpus):
    """The CPU slices of the instance's GPUs, or cpus_per_instance CPUs per GPU from the GPU's node."""
    if inst.cpus is not None:
        return _explicit_cuda_cpus(host, inst, gpus)
    taken, chosen, warnings = set(host.held_cpus), [], []
    for index in gpus:
        key = host.group[index]
        pool = host.group_pool[key]
        if inst.cpus_per_instance and inst.cpus_per_instance > len(pool):
            inst.fail(
                "asks for cpus_per_instance %d (CPUs per GPU) but %s has only %s that %s not reserved."
                % (
                    inst.cpus_per_instance,
                    host.group_name(index),
                    _plural(len(pool), "CPU"),
                    "is" if len(pool) == 1 else "are",
                ),
                "set cpus_per_instance to %d or less, or shrink reserved_cpus." % len(pool),
            )
        want = inst.cpus_per_instance or len(host.slice[index])
        if not want:
            inst.fail(
                "needs CPUs near GPU %d, but %s has %s that %s not reserved for %s, so the GPU's CPU slice is empty."
                % (
                    index,
                    host.group_name(index),
                    _plural(len(pool), "CPU"),
                    "is" if len(pool) == 1 else "are",
                    _plural(len(host.group_members[key]), "GPU"),
                ),
                "set cpus_per_instance or cpus for this instance, or shrink reserved_cpus.",
            )
        # Own slice, then the node's unassigned rest, then slices of GPUs that are taken or broken; only an
        # explicit cpus_per_instance reaches into the slices of free GPUs, so a default never cascades.
        others = [i for i in host.group_members[key] if i != index and i not in gpus]
        spare = [i for i in others if i in host.held_gpus or host.broken(i, False)]
        order = host.slice[index] + host.by_core(host.group_rest[key]) + [c for i in spare for c in host.slice[i]]
        if inst.cpus_per_instance:
            order += [c for i in others if i not in spare for c in host.slice[i]]
        picked = [cpu for cpu in order if cpu not in taken][:want]
        if not picked or (inst.cpus_per_instance and len(picked) < want):
            inst.fail(
                "asks for %s near GPU %d (%s) but %s free there (%s)."
                % (
                    _plural(want, "CPU"),
                    index,
                    host.group_name(index),
                    "only %d %s" % (len(picked), "is" if len(picked) == 1 else "are") if picked else "none is",
                    host.describe_cpus(host.group_cpus(key)),
                ),
                "lower cpus_per_instance, give explicit cpus, shrink reserved_cpus, or remove an instance.",
            )
        if len(picked) < want:
            missing = [cpu for cpu in host.slice[index] if cpu in taken]
            held = [cpu for cpu in missing if cpu in host.held_cpus]
            notes = [_holders(host.held_cpus, held)] if held else []
            if len(held) < len(missing):
                notes.append("%s went to its other GPUs" % _cpus_word([c for c in missing if c not in held]))
            warnings.append(
                "GPU %d gets %d of the %d CPUs of its slice: %s." % (index, len(picked), want, "; ".join(notes))
            )
        taken.update(picked)
        chosen.extend(picked)
    return sorted(chosen), warnings + _slice_warning(host, chosen, gpus)


def _cpu_pools(host):
    """{node: free CPUs outside every GPU slice} for the nodes with CPUs, None for CPUs of no known node."""
    pools = {}
    for cpu in host.usable_cpus:
        if cpu not in host.held_cpus and cpu not in host.slice_owner:
            pools.setdefault(host.cpu_node.get(cpu), []).append(cpu)
    return pools


def _node_sort(node):
    return (node is None, node or 0)


def _node_name(node):
    return "an unknown NUMA node" if node is None else "NUMA node %d" % node


def _split_explicit(host, inst):
    cpus = inst.cpus
    by_node = {}
    for cpu in cpus:
        by_node.setdefault(host.cpu_node.get(cpu), []).append(cpu)
    if len(by_node) == inst.ranks:
        return [by_node[node] for node in sorted(by_node, key=_node_sort)]
    if len(cpus) % inst.ranks == 0:
        size = len(cpus) // inst.ranks
        ranges = [cpus[k * size : (k + 1) * size] for k in range(inst.ranks)]
        if all(len(set(host.cpu_node.get(cpu) for cpu in part)) == 1 for part in ranges):
            return ranges
    nodes = "; ".join(
        "%s: %s" % (_node_name(n), format_cpulist(c))
        for n, c in sorted(by_node.items(), key=lambda e: _node_sort(e[0]))
    )
    if inst.ranks == 1:
        inst.fail(
            "asks for CPUs %s for its one rank, but they span NUMA nodes (%s); vLLM binds a rank's memory to the node "
            "of its first CPU." % (format_cpulist(cpus), nodes),
            "give CPUs of one NUMA node, or raise tensor_parallel_size to one rank per node.",
        )
    inst.fail(
        "asks for CPUs %s for %s, but they cannot be cut into %d equal ranges that each lie in one NUMA node (%s); "
        "vLLM binds each rank's memory to the node of its first CPU."
        % (format_cpulist(cpus), inst.asks(), inst.ranks, nodes),
        "give the CPUs of exactly %d NUMA nodes, or a count divisible by %d whose parts each stay in one node."
        % (inst.ranks, inst.ranks),
    )
    return []


def _cpu_exhausted(host, inst, asked, pools):
    free = "; ".join(
        "%s: %s" % (_node_name(n), format_cpulist(pools[n])) for n in sorted(pools, key=_node_sort) if pools[n]
    )
    held = [cpu for cpu in host.usable_cpus if cpu in host.held_cpus]
    notes = ["free%s: %s" % (" outside the GPUs' CPU slices" if host.slice_owner else "", free)] if free else []
    if held:
        notes.append(_holders(host.held_cpus, held))
    inst.fail(
        "asks for %s but %s (%s)."
        % (
            asked,
            "no NUMA node has that many free" if free else "none is free",
            "; ".join(notes)
            or (
                "all CPUs that are not reserved lie in the CPU slices of the GPUs"
                if host.slice_owner
                else "no CPU is left after reserved_cpus"
            ),
        ),
        "lower cpus_per_instance, give explicit cpus, shrink reserved_cpus, remove an instance or move it to another "
        "host; note that a cpu instance without cpus_per_instance takes all free CPUs of its node."
        if inst.cpus_per_instance
        else "set cpus_per_instance on the cpu instances of this host (one without it takes all free CPUs of its "
        "node), give explicit cpus, or move it to another host.",
    )


def _cpu_instance_cpus(host, inst):
    """One CPU range per rank, each inside one NUMA node, never from a GPU's CPU slice."""
    if inst.cpus is not None:
        _check_explicit_cpus(host, inst)
        return _split_explicit(host, inst), _slice_warning(host, inst.cpus)
    pools = _cpu_pools(host)
    nodes = []

    def preference(node):
        first = host.socket_of_node(nodes[0]) if nodes else None
        return (node in nodes, first is not None and host.socket_of_node(node) != first)

    if inst.cpus_per_instance:
        want, ranges = inst.cpus_per_instance, []
        while len(ranges) < inst.ranks:
            free = dict((n, host.by_core(c for c in pools[n] if c not in _cpus_of(ranges))) for n in pools)
            options = [n for n in free if len(free[n]) >= want]
            if not options:
                _cpu_exhausted(
                    host,
                    inst,
                    "%s per rank (cpus_per_instance) for %s" % (_plural(want, "CPU"), inst.asks()),
                    dict((n, c) for n, c in free.items() if c),
                )
            node = min(options, key=lambda n: preference(n) + (_node_sort(n),))
            nodes.append(node)
            ranges.append(sorted(free[node][:want]))
        return ranges, []
    options = [n for n in pools if pools[n]]
    if not options:
        _cpu_exhausted(host, inst, "the free CPUs of a NUMA node for %s" % inst.asks(), pools)
    while len(nodes) < min(inst.ranks, len(options)):
        nodes.append(min(options, key=lambda n: (n in nodes, -len(pools[n])) + preference(n)[1:] + (_node_sort(n),)))
    shares = {}
    for rank in range(inst.ranks):
        shares.setdefault(nodes[rank % len(nodes)], []).append(rank)
    by_rank = {}
    for node, ranks in shares.items():
        size = host.whole_cores(len(pools[node]) // len(ranks))
        if not size:
            _cpu_exhausted(
                host,
                inst,
                "CPUs for %s, %d of them from %s" % (inst.asks(), len(ranks), _node_name(node)),
                pools,
            )
        ordered = host.by_core(pools[node])
        for k, rank in enumerate(ranks):
            by_rank[rank] = sorted(ordered[k * size : (k + 1) * size])
    return [by_rank[rank] for rank in range(inst.ranks)], []


def _cpus_of(ranges):
    return set(cpu for part in ranges for cpu in part)


def _omp_threads(host, ranges):
    """VLLM_CPU_OMP_THREADS_BIND for the ranks' CPU ranges: one OpenMP thread per physical core (the core's
    lowest CPU), and the last core of a rank with more than one left to vLLM's busy-polling scheduler and
    the API server, as vLLM's own auto binding does. OpenMP threads on every CPU of the instance leave
    those processes no CPU of their own (measured: 0.44x the throughput of bare vllm serve on 2 CPUs)."""
    parts = []
    for part in ranges:
        cores = {}
        for cpu in sorted(part):
            cores.setdefault(host.core_of.get(cpu, cpu), []).append(cpu)
        firsts = sorted(cpus[0] for cpus in cores.values())
        parts.append(format_cpulist(firsts[:-1] if len(firsts) > 1 else firsts))
    return "|".join(parts)


# -- entry point --------------------------------------------------------------------------------


def _place(host, inst):
    warnings = []
    if inst.device == "cuda":
        if not host.gpu_available or not host.gpus:
            _no_gpu_host(inst)
        gpus = _explicit_gpus(host, inst) if inst.gpus is not None else _auto_gpus(host, inst)
        warnings.extend(_gpu_warnings(host, inst, gpus))
        cpus, cpu_warnings = _cuda_cpus(host, inst, gpus)
        warnings.extend(cpu_warnings)
        omp_threads_bind = None
    else:
        gpus = []
        ranges, cpu_warnings = _cpu_instance_cpus(host, inst)
        warnings.extend(cpu_warnings)
        cpus = sorted(cpu for part in ranges for cpu in part)
        omp_threads_bind = _omp_threads(host, ranges)
    nodes = sorted(set(host.cpu_node[cpu] for cpu in cpus if cpu in host.cpu_node))
    sockets = set(host.socket_of_node(node) for node in nodes) | set(host.gpus[i]["socket"] for i in gpus)
    uuids = [host.gpus[i]["uuid"] for i in gpus]
    if None in uuids:
        warnings.append("GPU UUIDs are unknown, so cuda_visible_devices uses indexes, which a reboot can renumber.")
    for index in gpus:
        host.held_gpus[index] = inst.name
    for cpu in cpus:
        host.held_cpus[cpu] = inst.name
    return {
        "name": inst.name,
        "device": inst.device,
        "tensor_parallel_size": inst.tp,
        "pipeline_parallel_size": inst.pp,
        "gpu_indices": list(gpus),
        "gpu_uuids": [None if u is None else str(u) for u in uuids],
        "cuda_visible_devices": ",".join(str(i if u is None else u) for i, u in zip(gpus, uuids)),
        "cpus": list(cpus),
        "cpulist": format_cpulist(cpus),
        "numa_nodes": nodes,
        "sockets": sorted(s for s in sockets if s is not None),
        "omp_threads_bind": omp_threads_bind,
        "warnings": warnings,
    }


def vllm_placement(instances, gpu, numa, reserved_cpus=None, host=None):
    """Return one placement per instance, in list order; raise PlacementError when one cannot be placed.

    instances: [{name, device (cuda|cpu, default cuda), tensor_parallel_size, pipeline_parallel_size, gpus,
    cpus, cpus_per_instance, allow_degraded_pcie, ...}]; other keys are ignored. gpu and numa: the facts of
    gpu_facts and numa_facts. reserved_cpus: a cpulist or CPU list that no instance gets. host: the name
    used in messages.
    """
    label = "host %s" % host if host not in (None, "") else "this host"
    if reserved_cpus in (None, ""):
        reserved = []
    else:
        try:
            reserved = _parse_cpus(reserved_cpus)
        except ValueError as e:
            raise PlacementError(
                '%s: reserved_cpus %r is not a CPU list (%s). Fix: write it as "0-1" or [0, 1].'
                % (label, reserved_cpus, e)
            ) from e
    state = _Host(gpu, numa, reserved, label)
    if instances is None:
        instances = []
    if not isinstance(instances, (list, tuple)):
        raise PlacementError(
            "%s: the instances must be a list of dicts, got %s. Fix: pass the inventory's instance list, "
            "for example vllm_instances." % (label, _type_name(instances))
        )
    names, placements = {}, []
    for position, item in enumerate(instances):
        inst = _Instance(state, item, position, names)
        placements.append(_place(state, inst))
        names[inst.name] = position
    return placements
