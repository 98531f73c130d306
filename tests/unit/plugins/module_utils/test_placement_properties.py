# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Properties of vllm_placement over random topologies and random instance lists.

The facts are generated directly in the shape gpu_facts and numa_facts return: sockets, NUMA nodes with
(c, c + N) or adjacent SMT numbering, the cores of the numa fact or none (facts of an older numa_facts),
offline CPUs, reserved CPUs, GPUs on known or unknown nodes, PCIe switches, NVLink (none, bridged pairs or an
NVSwitch), degraded links and NVML errors.
"""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ansible_collections.llmops.vllm.plugins.module_utils._cpulist import format_cpulist, parse_cpulist
from ansible_collections.llmops.vllm.plugins.module_utils._placement import PlacementError, vllm_placement

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _one_in(draw, n):
    """True about once in n draws (a middle value: Hypothesis favours the ends of a range)."""
    return draw(st.integers(0, n - 1)) == n // 2


def _uuid(index):
    return "GPU-%08x-0000-4000-8000-%012x" % (index, index)


@st.composite
def topologies(draw):
    """(gpu fact, numa fact, reserved_cpus) of a random host."""
    sockets = draw(st.integers(1, 2))
    nodes_per_socket = draw(st.integers(1, 3))
    cores_per_node = draw(st.sampled_from([8, 6, 4, 3, 2, 12]))
    smt = draw(st.sampled_from([1, 1, 2]))
    arch = draw(st.sampled_from(["x86_64", "aarch64"]))
    adjacent = arch == "aarch64" or _one_in(draw, 3)
    with_cores = draw(st.booleans())
    node_count = sockets * nodes_per_socket
    total_cores = node_count * cores_per_node
    node_cpus = {node: [] for node in range(node_count)}
    core_cpus = []
    for core in range(total_cores):
        core_cpus.append([core * smt + thread if adjacent else core + thread * total_cores for thread in range(smt)])
        node_cpus[core // cores_per_node].extend(core_cpus[-1])
    all_cpus = sorted(cpu for cpus in node_cpus.values() for cpu in cpus)
    offline = draw(st.sets(st.sampled_from(all_cpus), max_size=len(all_cpus) // 4))
    online = [cpu for cpu in all_cpus if cpu not in offline] or all_cpus[:1]
    nodes = []
    for node in range(node_count):
        cpus = sorted(set(node_cpus[node]) & set(online))
        nodes.append(
            {
                "id": node,
                "socket": node // nodes_per_socket if cpus else None,
                "cpus": cpus,
                "cpulist": format_cpulist(cpus),
                "memory_total_mib": 65536,
                "distances": [10 if other == node else 20 for other in range(node_count)],
            }
        )
    numa = {
        "nodes": nodes,
        "nodes_synthesized": False,
        "online_cpus": online,
        "online_cpulist": format_cpulist(online),
        "cpu": {
            "architecture": arch,
            "sockets": sockets,
            "cores_per_socket": total_cores // sockets,
            "threads_per_core": smt,
        },
    }
    if with_cores:
        cores = [sorted(set(cpus) & set(online)) for cpus in core_cpus]
        numa["cores"] = sorted(core for core in cores if core)
    reserved = draw(
        st.one_of(
            st.none(),
            st.sets(st.integers(0, max(all_cpus) + 2), max_size=3).map(sorted),
            st.sets(st.sampled_from(all_cpus), max_size=2).map(format_cpulist),
        )
    )
    return _gpu_fact(draw, nodes, node_count), numa, reserved


def _gpu_fact(draw, nodes, node_count):
    if _one_in(draw, 6):
        return {
            "available": False,
            "reason": "NVML (libnvidia-ml.so.1) is not installed.",
            "driver_version": None,
            "cuda_driver_version": None,
            "count": 0,
            "devices": [],
            "links": [],
        }
    count = draw(st.sampled_from([8, 4, 8, 2, 4, 16, 6, 3, 1]))
    nvlink = draw(st.sampled_from(["none", "none", "pairs", "nvswitch"]))
    devices = []
    switch = {}
    for index in range(count):
        node = draw(st.one_of(st.integers(0, node_count - 1), st.just(None)))
        affinity_node = node if node is not None else draw(st.one_of(st.integers(0, node_count - 1), st.just(None)))
        affinity = nodes[affinity_node]["cpulist"] if affinity_node is not None else None
        degraded = _one_in(draw, 10)
        error = "nvmlDeviceGetMemoryInfo: GPU is lost" if _one_in(draw, 15) else None
        switch[index] = (node, draw(st.integers(0, 1)))
        devices.append(
            {
                "index": index,
                "uuid": _uuid(index),
                "name": "NVIDIA A100",
                "pci_bus_id": "0000:%02x:00.0" % index,
                "numa_node": node,
                "cpu_affinity": affinity or None,
                "memory_total_mib": 81920,
                "memory_used_mib": 0,
                "compute_capability": "8.0",
                "mig_mode": None,
                "pcie": {
                    "gen_current": 1,
                    "gen_max": 3 if degraded else 4,
                    "gen_max_gpu": 4,
                    "width_current": 16,
                    "width_max": 16,
                    "degraded": degraded,
                    "degraded_reason": "link max Gen3 below GPU max Gen4" if degraded else None,
                },
                "error": error,
            }
        )
    links = []
    for a in range(count):
        for b in range(a + 1, count):
            node_a, node_b = devices[a]["numa_node"], devices[b]["numa_node"]
            if node_a is None or node_b is None:
                ancestor = draw(st.sampled_from([None, "NODE", "SYSTEM"]))
            elif switch[a] == switch[b]:
                ancestor = draw(st.sampled_from(["SINGLE", "MULTIPLE"]))
            elif node_a == node_b:
                ancestor = draw(st.sampled_from(["HOSTBRIDGE", "NODE"]))
            else:
                ancestor = "SYSTEM"
            count_nv = {"none": 0, "pairs": 4 if a // 2 == b // 2 else 0, "nvswitch": 12}[nvlink]
            links.append(
                {
                    "a": a,
                    "b": b,
                    "type": "NVLINK" if count_nv else ancestor,
                    "nvlinks": count_nv,
                    "common_ancestor": ancestor,
                    "same_pcie_switch": None if ancestor is None else ancestor in ("INTERNAL", "SINGLE", "MULTIPLE"),
                    "same_numa_node": None if ancestor is None else ancestor != "SYSTEM",
                }
            )
    return {
        "available": True,
        "reason": None,
        "driver_version": "550.54.15",
        "cuda_driver_version": "12.4",
        "count": count,
        "devices": devices,
        "links": links,
    }


GPU_REFS = st.one_of(st.integers(0, 7), st.integers(0, 7).map(_uuid), st.just("GPU-unknown"), st.just(17))
CPU_REFS = st.one_of(
    st.lists(st.integers(0, 40), min_size=1, max_size=4),
    st.sampled_from(["0", "1", "0-1", "2-3", "0-3", "4-7,12", "30-31"]),
)
# One mistake per broken item; most items are valid so that lists get placed far enough to be interesting.
MISTAKES = st.sampled_from(
    [
        ("device", "rocm"),
        ("name", None),
        ("name", ""),
        ("name", "i0"),
        ("tensor_parallel_size", 0),
        ("tensor_parallel_size", "two"),
        ("pipeline_parallel_size", -1),
        ("cpus_per_instance", 0),
        ("allow_degraded_pcie", "maybe"),
        ("gpus", []),
        ("cpus", ""),
        ("cpus", [-1]),
        ("cpus", "x-y"),
        ("gpus", [True]),
        ("gpus", [0]),
    ]
)


@st.composite
def instances(draw, min_size=1, max_size=5):
    items = []
    for position in range(draw(st.sampled_from(list(range(max_size, min_size - 1, -1))))):
        item = {
            "name": "i%d" % position,
            "device": draw(st.sampled_from(["cuda", "cuda", "cpu", "cpu", None])),
            "port": 8000 + position,
        }
        if not _one_in(draw, 4):
            sizes = [1, 1, 2, "2"] if item["device"] == "cpu" else [1, 1, 1, 2, 2, 4, 8, "2"]
            item["tensor_parallel_size"] = draw(st.sampled_from(sizes))
        if _one_in(draw, 5):
            item["pipeline_parallel_size"] = draw(st.sampled_from([1, 2]))
        if item["device"] != "cpu" and _one_in(draw, 10):
            item["gpus"] = draw(st.lists(GPU_REFS, min_size=1, max_size=4))
        choice = draw(st.integers(0, 9))
        if choice == 5:
            item["cpus"] = draw(CPU_REFS)
        elif choice < 5:
            item["cpus_per_instance"] = draw(st.sampled_from([1, 1, 2, 3, 4]))
        if _one_in(draw, 4):
            item["allow_degraded_pcie"] = draw(st.sampled_from([True, False, "yes"]))
        if _one_in(draw, 20):
            key, value = draw(MISTAKES)
            item[key] = value
        items.append(item)
    return items


def _place(items, gpu, numa, reserved):
    """The placements, or the PlacementError; any other exception fails the test."""
    try:
        return vllm_placement(
            copy.deepcopy(items), copy.deepcopy(gpu), copy.deepcopy(numa), reserved_cpus=reserved, host="h1"
        )
    except PlacementError as e:
        assert str(e).startswith("host h1") and " Fix: " in str(e)
        return e


def _reserved(reserved):
    if reserved is None:
        return set()
    return set(parse_cpulist(reserved) if isinstance(reserved, str) else reserved)


def _check(placements, items, gpu, numa, reserved):
    online = set(numa["online_cpus"])
    cpu_node = {cpu: node["id"] for node in numa["nodes"] for cpu in node["cpus"]}
    devices = {d["index"]: d for d in gpu["devices"]}
    node_has_cpus = {node["id"]: bool(node["cpus"]) for node in numa["nodes"]}
    core_of = {cpu: ("core", core[0]) for core in numa.get("cores") or [] for cpu in core}
    reserved = _reserved(reserved)
    seen_gpus, seen_cpus = set(), set()
    assert [p["name"] for p in placements] == [i["name"] for i in items]
    for placement, item in zip(placements, items):
        ranks = int(item.get("tensor_parallel_size") or 1) * int(item.get("pipeline_parallel_size") or 1)
        gpus, cpus = placement["gpu_indices"], placement["cpus"]
        assert cpus and cpus == sorted(set(cpus)) and placement["cpulist"] == format_cpulist(cpus)
        assert set(cpus) <= online, "offline CPU given"
        assert not set(cpus) & reserved, "reserved CPU given"
        assert not set(cpus) & seen_cpus, "CPU shared"
        assert not set(gpus) & seen_gpus, "GPU shared"
        seen_cpus.update(cpus)
        seen_gpus.update(gpus)
        assert placement["numa_nodes"] == sorted(set(cpu_node[c] for c in cpus if c in cpu_node))
        if item.get("cpus") is not None:
            explicit = item["cpus"]
            assert set(cpus) == set(parse_cpulist(explicit) if isinstance(explicit, str) else explicit)
        if item.get("gpus") is not None:
            assert gpus == [ref if isinstance(ref, int) else int(ref[4:12], 16) for ref in item["gpus"]]
        if placement["device"] == "cuda":
            assert len(gpus) == len(set(gpus)) == ranks and placement["omp_threads_bind"] is None
            gpu_nodes = set(devices[i]["numa_node"] for i in gpus)
            if item.get("cpus") is None and None not in gpu_nodes and all(node_has_cpus[n] for n in gpu_nodes):
                assert set(placement["numa_nodes"]) <= gpu_nodes, "CPUs away from the GPUs' NUMA nodes"
            for index in gpus:
                assert not devices[index]["error"], "GPU with an NVML error given"
                if devices[index]["pcie"]["degraded"]:
                    assert item.get("allow_degraded_pcie") in (True, "yes")
                    assert any("degraded" in w for w in placement["warnings"])
            assert placement["gpu_uuids"] == [devices[i]["uuid"] for i in gpus]
            assert placement["cuda_visible_devices"] == ",".join(placement["gpu_uuids"])
        else:
            assert gpus == [] and placement["cuda_visible_devices"] == ""
            ranges = placement["omp_threads_bind"].split("|")
            assert len(ranges) == ranks
            parts = [parse_cpulist(r) for r in ranges]
            omp = [c for part in parts for c in part]
            assert len(omp) == len(set(omp)) and set(omp) <= set(cpus)
            # OpenMP threads leave CPUs to the scheduler and API server whenever the instance has more than one.
            assert len(omp) < len(cpus) or len(cpus) == ranks
            for part in parts:
                assert part and len(set(cpu_node.get(c) for c in part)) == 1, "rank range spans NUMA nodes"
                assert len(set(core_of.get(c, c) for c in part)) == len(part), "two OpenMP threads on one core"


@SETTINGS
@given(topologies(), instances(), instances(min_size=0, max_size=1))
def test_placement_properties(topology, items, extra):
    gpu, numa, reserved = topology
    result = _place(items, gpu, numa, reserved)

    again = _place(items, gpu, numa, reserved)
    placed = items[: result.position] if isinstance(result, PlacementError) else items
    event("placed %d of %d instances" % (len(placed), len(items)))
    event("placed %d cuda instances" % sum(1 for i in placed if i.get("device") in ("cuda", None)))
    event("placed %d cpu instances" % sum(1 for i in placed if i.get("device") == "cpu"))
    if isinstance(result, PlacementError):
        assert isinstance(again, PlacementError) and str(again) == str(result), "not deterministic"
    else:
        assert again == result, "not deterministic"
        _check(result, items, gpu, numa, reserved)

    for appended_item in extra:
        appended = _place(items + [appended_item], gpu, numa, reserved)
        if isinstance(result, PlacementError):
            assert isinstance(appended, PlacementError) and str(appended) == str(result)
        elif isinstance(appended, PlacementError):
            assert appended.position == len(items), "an appended instance broke an earlier one"
        else:
            assert appended[:-1] == result, "an appended instance moved an earlier one"
            _check(appended, items + [appended_item], gpu, numa, reserved)


@SETTINGS
@given(topologies(), instances(min_size=0, max_size=6))
def test_prefixes_are_stable(topology, items):
    """Every prefix of a list places exactly like the start of the whole list."""
    gpu, numa, reserved = topology
    whole = _place(items, gpu, numa, reserved)
    failed_at = whole.position if isinstance(whole, PlacementError) else None
    assert not isinstance(whole, PlacementError) or failed_at is not None
    for length in range(len(items)):
        prefix = _place(items[:length], gpu, numa, reserved)
        if failed_at is None or length <= failed_at:
            assert not isinstance(prefix, PlacementError), "a prefix fails although the whole list gets further"
            if failed_at is None:
                assert prefix == whole[:length]
        else:
            assert isinstance(prefix, PlacementError) and str(prefix) == str(whole)
