# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""Topology-aware placement: which GPUs, CPUs and NUMA nodes each vLLM instance of a host gets.

vllm_placement(instances, gpu, numa, reserved_cpus, host) is the one decision function; the filter
llmops.vllm.vllm_placement wraps it. It reads the facts into a host model (_placement_host), checks each
instance (_placement_instance) and chooses its GPUs and CPUs here; messages are worded by _placement_text.
Instances are placed one after the other, in list order, and each placement depends only on the facts and on
the instances before it: the same input gives the same output, and appending an instance never moves the
ones before it (a restart never reshuffles a running fleet).

GPUs (device cuda, tensor_parallel_size x pipeline_parallel_size of them): among the free GPUs without an
NVML error and, unless the instance sets allow_degraded_pcie, without a degraded PCIe link, the set whose
worst GPU pair is nearest (the host model's pair distance) wins; sets compare by their pair distances, worst
first. Ties go to fewer degraded GPUs, then to GPUs next to GPUs that earlier instances hold (best fit, which
keeps larger groups free), then to the lowest indexes. Sets of up to MAX_EXHAUSTIVE_SUBSETS candidates are
all scored; beyond that a set is grown greedily from every free GPU. With pipeline parallelism, consecutive
tensor_parallel_size GPUs form a stage and are ordered to keep a stage on one socket; a tensor-parallel group
that spans sockets without NVLink on every pair gets a warning.

CPUs of a cuda instance: the CPU slices of its GPUs (see _placement_host), so instances that share a node
share it fairly without knowing about later instances, and two instances never meet. When CPUs of its slice
are held by an explicit cpus of an earlier instance, it makes up from the node's unassigned remainder and the
slices of taken or broken GPUs, else gets fewer CPUs (with a warning). cpus_per_instance on a cuda instance
replaces the slice size (CPUs per GPU); beyond the remainder and those slices it may take slices of free GPUs
(with a warning) and must fit the node.

CPUs of a cpu instance (one rank per tensor_parallel_size x pipeline_parallel_size; vLLM indexes
VLLM_CPU_OMP_THREADS_BIND by global rank): never from a GPU slice. With cpus_per_instance (CPUs per rank),
each rank gets that many CPUs of one NUMA node, whole cores first, a different node per rank while there is
one, on the socket of the first rank when possible, lowest node first. Without it, each rank gets all free
CPUs of its own node (largest free pool first); ranks outnumbering the nodes split a node evenly, in whole
cores. Each rank's range lies in one NUMA node, because vLLM binds a rank's memory to the node of its first
CPU. A rank's OpenMP threads get one CPU per physical core of its range (the cores of the numa fact), less
the last core, left to vLLM's scheduler and API server.

An instance with span (over several hosts, _placement_span) is placed like any other, with this host's share of
its ranks; its tensor_parallel_size and pipeline_parallel_size stay the instance's own in the output (vLLM's flags),
and the output's span says the host's node rank and share.

Explicit gpus/cpus are honoured after checks; instances that set gpu_memory_utilization may name the same GPU
(the serving plan checks that their shares fit, _serving_rules). Every refusal raises PlacementError with one
message that names the host, the instance, what it asked for, what is free and a fix.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import itertools
import math

from ansible_collections.llmops.vllm.plugins.module_utils._cpulist import format_cpulist
from ansible_collections.llmops.vllm.plugins.module_utils._placement_host import FAR, Host
from ansible_collections.llmops.vllm.plugins.module_utils._placement_instance import Instance, parse_cpus
from ansible_collections.llmops.vllm.plugins.module_utils._placement_text import (
    PlacementError,
    comma_list,
    cpus_are,
    cpus_word,
    holders,
    id_ranges,
    node_name,
    plural,
    type_name,
)

__all__ = ["PlacementError", "vllm_placement"]

# Larger GPU searches than this many subsets grow sets greedily instead of scoring every subset.
MAX_EXHAUSTIVE_SUBSETS = 5000
_NOT_NEXT_TO_ANYTHING = (FAR + 1, FAR + 1)


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
            known = id_ranges(sorted(host.gpus))
            if isinstance(ref, str):
                known += ": " + ", ".join("%d = %s" % (i, host.gpus[i]["uuid"]) for i in sorted(host.gpus))
            inst.fail(
                "asks for GPU %s, which the host does not have (it has GPUs %s)." % (ref, known),
                "use indexes or UUIDs from ansible_facts['gpu']['devices'], or drop gpus to let placement choose.",
            )
        if index in chosen:
            inst.fail("lists GPU %s twice in gpus." % ref, "list each GPU once.")
        if index in host.held_gpus and not (inst.shares_gpus and host.held_gpus[index] in host.sharing):
            free = [i for i in sorted(host.gpus) if i not in host.held_gpus and not host.broken(i, inst.allow_degraded)]
            inst.fail(
                "asks for GPU %d but it is already held by %s; free GPUs: %s."
                % (index, host.held_gpus[index], comma_list(free) or "none"),
                "give each instance its own GPUs, drop gpus to let placement choose, or set gpu_memory_utilization "
                "on both instances to share the GPU.",
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
            "lists %s in gpus but asks for %s." % (plural(len(chosen), "GPU"), inst.asks()),
            "list exactly %d GPUs, or change tensor_parallel_size/pipeline_parallel_size." % inst.ranks,
        )
    return chosen


def _auto_gpus(host, inst):
    candidates = [i for i in sorted(host.gpus) if i not in host.held_gpus and not host.broken(i, inst.allow_degraded)]
    if len(candidates) < inst.ranks:
        notes = [comma_list(candidates)] if candidates else []
        held = [i for i in sorted(host.gpus) if i in host.held_gpus]
        if held:
            notes.append(holders(host.held_gpus, held))
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
            % (comma_list(group), " and ".join(str(s) for s in sockets), advice)
        )
    return warnings


# -- CPUs ---------------------------------------------------------------------------------------


def _check_explicit_cpus(host, inst):
    cpus = inst.cpus
    offline = [cpu for cpu in cpus if cpu not in host.online]
    if offline:
        inst.fail(
            "asks for %s but %s not online (online: %s)."
            % (cpus_word(cpus), cpus_are(offline), format_cpulist(host.online)),
            "list online CPUs only (ansible_facts['numa']['online_cpulist']), or bring the CPUs online.",
        )
    reserved = [cpu for cpu in cpus if cpu in host.reserved_set]
    if reserved:
        inst.fail(
            "asks for %s but %s reserved for the host (reserved_cpus %s)."
            % (cpus_word(cpus), cpus_are(reserved), format_cpulist(host.reserved)),
            "leave the reserved CPUs out of cpus, or shrink reserved_cpus.",
        )
    held = [cpu for cpu in cpus if cpu in host.held_cpus]
    if held:
        inst.fail(
            "asks for %s but %s." % (cpus_word(cpus), holders(host.held_cpus, held, "CPU")),
            "give each instance its own CPUs (free: %s), or drop cpus to let placement choose."
            % id_ranges(sorted(c for c in host.usable_cpus if c not in host.held_cpus)),
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
            cpus_word(taken),
            "belongs" if len(taken) == 1 else "belong",
            "s" if len(owners) > 1 else "",
            comma_list(owners),
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
            % (cpus_are(away), "s" if len(gpu_nodes) > 1 else "", comma_list(sorted(gpu_nodes)))
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
                    plural(len(pool), "CPU"),
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
                    plural(len(pool), "CPU"),
                    "is" if len(pool) == 1 else "are",
                    plural(len(host.group_members[key]), "GPU"),
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
                    plural(want, "CPU"),
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
            notes = [holders(host.held_cpus, held)] if held else []
            if len(held) < len(missing):
                notes.append("%s went to its other GPUs" % cpus_word([c for c in missing if c not in held]))
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
        "%s: %s" % (node_name(n), format_cpulist(c))
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
        "%s: %s" % (node_name(n), format_cpulist(pools[n])) for n in sorted(pools, key=_node_sort) if pools[n]
    )
    held = [cpu for cpu in host.usable_cpus if cpu in host.held_cpus]
    notes = ["free%s: %s" % (" outside the GPUs' CPU slices" if host.slice_owner else "", free)] if free else []
    if held:
        notes.append(holders(host.held_cpus, held))
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
                    "%s per rank (cpus_per_instance) for %s" % (plural(want, "CPU"), inst.asks()),
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
                "CPUs for %s, %d of them from %s" % (inst.asks(), len(ranks), node_name(node)),
                pools,
            )
        ordered = host.by_core(pools[node])
        for k, rank in enumerate(ranks):
            by_rank[rank] = sorted(ordered[k * size : (k + 1) * size])
    return [by_rank[rank] for rank in range(inst.ranks)], []


def _cpus_of(ranges):
    return set(cpu for part in ranges for cpu in part)


def _omp_threads(host, ranges):
    """VLLM_CPU_OMP_THREADS_BIND for the ranks' CPU ranges: one OpenMP thread per physical core of the numa
    fact's cores (the core's lowest CPU in the range), and the last core of a rank with more than one left to
    vLLM's busy-polling scheduler and the API server, as vLLM's own auto binding does. OpenMP threads on
    every CPU of the instance leave those processes no CPU of their own (measured: 0.44x the throughput of
    bare vllm serve on 2 CPUs)."""
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
    warnings = list(inst.span_warnings)
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
        host.held_gpus.setdefault(index, inst.name)
    if inst.shares_gpus:
        host.sharing.add(inst.name)
    for cpu in cpus:
        host.held_cpus[cpu] = inst.name
    return {
        "name": inst.name,
        "device": inst.device,
        "tensor_parallel_size": inst.global_tp,
        "pipeline_parallel_size": inst.global_pp,
        "gpu_indices": list(gpus),
        "gpu_uuids": [None if u is None else str(u) for u in uuids],
        "cuda_visible_devices": ",".join(str(i if u is None else u) for i, u in zip(gpus, uuids)),
        "cpus": list(cpus),
        "cpulist": format_cpulist(cpus),
        "numa_nodes": nodes,
        "sockets": sorted(s for s in sockets if s is not None),
        "omp_threads_bind": omp_threads_bind,
        "span": dict(inst.span, ranks=inst.ranks, tensor_parallel_size=inst.tp, pipeline_parallel_size=inst.pp)
        if inst.span else None,
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
            reserved = parse_cpus(reserved_cpus)
        except ValueError as e:
            raise PlacementError(
                '%s: reserved_cpus %r is not a CPU list (%s). Fix: write it as "0-1" or [0, 1].'
                % (label, reserved_cpus, e)
            ) from e
    state = Host(gpu, numa, reserved, label)
    state.name = host
    if instances is None:
        instances = []
    if not isinstance(instances, (list, tuple)):
        raise PlacementError(
            "%s: the instances must be a list of dicts, got %s. Fix: pass the inventory's instance list, "
            "for example vllm_instances." % (label, type_name(instances))
        )
    names, placements = {}, []
    for position, item in enumerate(instances):
        inst = Instance(state, item, position, names)
        placements.append(_place(state, inst))
        names[inst.name] = position
    return placements
