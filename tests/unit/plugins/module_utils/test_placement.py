# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""vllm_placement over the discovery fixtures, with facts collected through the real collectors."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils import _placement
from ansible_collections.llmops.vllm.plugins.module_utils._placement import PlacementError, vllm_placement
from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import (
    KUNPENG920_8xA100,
    KUNPENG920_8xA100_GPU3_LOST,
    KUNPENG920_8xA100_GPU5_GEN3_X8,
    LAB_2CORE_CPU_ONLY,
    WORKSTATION_1GPU,
    X86_8xA800_NVLINK,
    X86_VM_ADJACENT_SMT_1GPU,
    variant,
)

KUNPENG = KUNPENG920_8xA100
A800 = X86_8xA800_NVLINK
KUNPENG_GPU5_DEGRADED = KUNPENG920_8xA100_GPU5_GEN3_X8
KUNPENG_GPU3_LOST = KUNPENG920_8xA100_GPU3_LOST
# GPU 0's PCI device reports no NUMA node (firmware without _PXM); its NVML CPU affinity is still 0-31.
KUNPENG_GPU0_NO_NODE = variant(KUNPENG, "kunpeng920-8xa100-gpu0-no-numa-node", devices={0: {"numa_node": -1}})
# CPU 127 was taken offline (echo 0 > /sys/devices/system/cpu/cpu127/online).
KUNPENG_CPU127_OFFLINE = variant(KUNPENG, "kunpeng920-8xa100-cpu127-offline", cpu_online="0-126")
HOST = "gpu-node01"
RANKS_0_7 = [0, 1, 2, 3, 4, 5, 6, 7]


def uuid(index):
    """UUID of GPU index in the fixtures."""
    return "GPU-%08x-7d3e-4c1a-9b2f-%012x" % (0x5A100000 + index, index)


def cuda(name, tp=1, **extra):
    return dict(name=name, device="cuda", tensor_parallel_size=tp, port=8000, model="some/model", **extra)


def cpu(name, tp=1, **extra):
    return dict(name=name, device="cpu", tensor_parallel_size=tp, port=9000, **extra)


def place(facts, topo, instances, reserved_cpus=None, host=HOST):
    gpu, numa = facts(topo)
    return vllm_placement(instances, gpu, numa, reserved_cpus=reserved_cpus, host=host)


# (name, gpu_indices, cpulist, numa_nodes, sockets, omp_threads_bind, substrings expected in its warnings)
PLACEMENTS = [
    pytest.param(
        KUNPENG,
        [cuda("llama-405b", 8)],
        "0-1",
        [
            (
                "llama-405b",
                RANKS_0_7,
                "2-29,64-95",
                [0, 2],
                [0, 1],
                None,
                [
                    "GPUs 0, 1, 2, 3, 4, 5, 6, 7 spans sockets 0 and 1",
                    "every all-reduce",
                    "inter-socket link",
                    "2 instances with tensor_parallel_size 4",
                    "tensor_parallel_size 4 x pipeline_parallel_size 2",
                ],
            ),
        ],
        id="kunpeng-1xtp8-cross-socket-warning",
    ),
    # NVSwitch: the all-reduce stays on NVLink, so no warning; every GPU keeps the CPUs of its own node.
    pytest.param(
        A800,
        [cuda("llama-405b", 8)],
        "0-1",
        [
            ("llama-405b", RANKS_0_7, "2-29,32-63,66-93,96-127", [0, 1], [0, 1], None, []),
        ],
        id="a800-1xtp8-nvlink-no-warning",
    ),
    pytest.param(
        KUNPENG,
        [cuda("qwen-a", 4), cuda("qwen-b", 4)],
        "0-1",
        [
            ("qwen-a", [0, 1, 2, 3], "2-29", [0], [0], None, []),
            ("qwen-b", [4, 5, 6, 7], "64-95", [2], [1], None, []),
        ],
        id="kunpeng-2xtp4-one-socket-each",
    ),
    pytest.param(
        A800,
        [cuda("qwen-a", 4), cuda("qwen-b", 4)],
        None,
        [
            ("qwen-a", [0, 1, 2, 3], "0-31,64-95", [0], [0], None, []),
            ("qwen-b", [4, 5, 6, 7], "32-63,96-127", [1], [1], None, []),
        ],
        id="a800-2xtp4-one-socket-each",
    ),
    pytest.param(
        KUNPENG,
        [cuda(n, 2) for n in "abcd"],
        "0-1",
        [
            ("a", [0, 1], "2-15", [0], [0], None, []),
            ("b", [2, 3], "16-29", [0], [0], None, []),
            ("c", [4, 5], "64-79", [2], [1], None, []),
            ("d", [6, 7], "80-95", [2], [1], None, []),
        ],
        id="kunpeng-4xtp2-pairs-on-one-pcie-switch",
    ),
    # SMT: slices are whole cores, thread t of core c being CPU c + 64 t.
    pytest.param(
        A800,
        [cuda(n, 2) for n in "abcd"],
        None,
        [
            ("a", [0, 1], "0-15,64-79", [0], [0], None, []),
            ("b", [2, 3], "16-31,80-95", [0], [0], None, []),
            ("c", [4, 5], "32-47,96-111", [1], [1], None, []),
            ("d", [6, 7], "48-63,112-127", [1], [1], None, []),
        ],
        id="a800-4xtp2-whole-cores",
    ),
    pytest.param(
        KUNPENG,
        [cuda(n) for n in "abcdefgh"],
        "0-1",
        [
            ("a", [0], "2-8", [0], [0], None, []),
            ("b", [1], "9-15", [0], [0], None, []),
            ("c", [2], "16-22", [0], [0], None, []),
            ("d", [3], "23-29", [0], [0], None, []),
            ("e", [4], "64-71", [2], [1], None, []),
            ("f", [5], "72-79", [2], [1], None, []),
            ("g", [6], "80-87", [2], [1], None, []),
            ("h", [7], "88-95", [2], [1], None, []),
        ],
        id="kunpeng-8xtp1-7-cpus-each-with-0-1-reserved",
    ),
    pytest.param(
        A800,
        [cuda(n) for n in "abcdefgh"],
        None,
        [
            ("a", [0], "0-7,64-71", [0], [0], None, []),
            ("b", [1], "8-15,72-79", [0], [0], None, []),
            ("c", [2], "16-23,80-87", [0], [0], None, []),
            ("d", [3], "24-31,88-95", [0], [0], None, []),
            ("e", [4], "32-39,96-103", [1], [1], None, []),
            ("f", [5], "40-47,104-111", [1], [1], None, []),
            ("g", [6], "48-55,112-119", [1], [1], None, []),
            ("h", [7], "56-63,120-127", [1], [1], None, []),
        ],
        id="a800-8xtp1",
    ),
    pytest.param(
        KUNPENG,
        [cuda("a", 4), cuda("b", 2), cuda("c"), cuda("d")],
        "0-1",
        [
            ("a", [0, 1, 2, 3], "2-29", [0], [0], None, []),
            ("b", [4, 5], "64-79", [2], [1], None, []),
            ("c", [6], "80-87", [2], [1], None, []),
            ("d", [7], "88-95", [2], [1], None, []),
        ],
        id="kunpeng-mixed-large-first",
    ),
    # Best fit: the TP2 takes the untouched switch pair 2-3 and the TP4 the other socket; d fills GPU 1.
    pytest.param(
        KUNPENG,
        [cuda("a"), cuda("b", 2), cuda("c", 4), cuda("d")],
        None,
        [
            ("a", [0], "0-7", [0], [0], None, []),
            ("b", [2, 3], "16-31", [0], [0], None, []),
            ("c", [4, 5, 6, 7], "64-95", [2], [1], None, []),
            ("d", [1], "8-15", [0], [0], None, []),
        ],
        id="kunpeng-mixed-small-first",
    ),
    # Each pipeline stage stays on one socket: no warning.
    pytest.param(
        KUNPENG,
        [cuda("llama-70b", 4, pipeline_parallel_size=2)],
        None,
        [
            ("llama-70b", RANKS_0_7, "0-31,64-95", [0, 2], [0, 1], None, []),
        ],
        id="kunpeng-tp4xpp2-stage-per-socket",
    ),
    pytest.param(
        A800,
        [cuda("a", 2, pipeline_parallel_size=2), cuda("b", 4)],
        None,
        [
            ("a", [0, 1, 2, 3], "0-31,64-95", [0], [0], None, []),
            ("b", [4, 5, 6, 7], "32-63,96-127", [1], [1], None, []),
        ],
        id="a800-tp2xpp2-and-tp4",
    ),
    pytest.param(
        WORKSTATION_1GPU,
        [cuda("llama-8b")],
        "0-1",
        [
            ("llama-8b", [0], "2-31", [0], [0], None, []),
        ],
        id="workstation-1gpu-unknown-node-on-single-node-host",
    ),
    pytest.param(
        KUNPENG_GPU0_NO_NODE,
        [cuda("a"), cuda("b")],
        None,
        [
            ("a", [0], "0-7", [0], [0], None, ["GPU 0 has no known NUMA node", "NVML CPU affinity"]),
            ("b", [1], "8-15", [0], [0], None, []),
        ],
        id="kunpeng-gpu-without-numa-node-uses-cpu-affinity",
    ),
    # The molecule lab: two CPU instances pinned to CPU 0 and CPU 1.
    pytest.param(
        LAB_2CORE_CPU_ONLY,
        [cpu("lab-a", cpus_per_instance=1), cpu("lab-b", cpus_per_instance=1)],
        None,
        [
            ("lab-a", [], "0", [0], [0], "0", []),
            ("lab-b", [], "1", [0], [0], "1", []),
        ],
        id="lab-2x-cpu-cpus_per_instance-1",
    ),
    pytest.param(
        LAB_2CORE_CPU_ONLY,
        [cpu("lab-a", cpus="0"), cpu("lab-b", cpus=[1])],
        None,
        [
            ("lab-a", [], "0", [0], [0], "0", []),
            ("lab-b", [], "1", [0], [0], "1", []),
        ],
        id="lab-2x-cpu-explicit-cpus",
    ),
    pytest.param(
        LAB_2CORE_CPU_ONLY,
        [cpu("lab-tp2", 2)],
        None,
        [
            ("lab-tp2", [], "0-1", [0], [0], "0|1", []),
        ],
        id="lab-cpu-tp2-default-splits-the-node",
    ),
    pytest.param(
        KUNPENG,
        [cpu("a", 2, cpus_per_instance=8), cpu("b"), cpu("c"), cpu("d")],
        "0-1",
        [
            ("a", [], "32-39,96-103", [1, 3], [0, 1], "32-38|96-102", []),
            ("b", [], "40-63", [1], [0], "40-62", []),
            ("c", [], "104-127", [3], [1], "104-126", []),
            ("d", [], "30-31", [0], [0], "30", []),
        ],
        id="kunpeng-cpu-instances-avoid-gpu-slices",
    ),
    pytest.param(
        KUNPENG,
        [cuda("qwen", 4), cpu("embed", 2)],
        "0-1",
        [
            ("qwen", [0, 1, 2, 3], "2-29", [0], [0], None, []),
            ("embed", [], "32-63,96-127", [1, 3], [0, 1], "32-62|96-126", []),
        ],
        id="kunpeng-cuda-and-cpu-tp2-one-node-per-rank",
    ),
    pytest.param(
        KUNPENG,
        [cpu("a", 2, cpus="30-33")],
        None,
        [
            ("a", [], "30-33", [0, 1], [0], "30|32", ["CPUs 30-31 belong to the CPU slice of GPU 3"]),
        ],
        id="kunpeng-cpu-explicit-cpus-one-range-per-node",
    ),
    pytest.param(
        KUNPENG_GPU5_DEGRADED,
        [cuda("a", 4), cuda("b", 2), cuda("c")],
        None,
        [
            ("a", [0, 1, 2, 3], "0-31", [0], [0], None, []),
            ("b", [6, 7], "80-95", [2], [1], None, []),
            ("c", [4], "64-71", [2], [1], None, []),
        ],
        id="degraded-gpu-skipped",
    ),
    pytest.param(
        KUNPENG_GPU5_DEGRADED,
        [cuda("a", 4), cuda("b", 4, allow_degraded_pcie=True)],
        None,
        [
            ("a", [0, 1, 2, 3], "0-31", [0], [0], None, []),
            (
                "b",
                [4, 5, 6, 7],
                "64-95",
                [2],
                [1],
                None,
                ["GPU 5 has a degraded PCIe link (width x8 below x16", "allow_degraded_pcie is true"],
            ),
        ],
        id="degraded-gpu-opted-in-with-warning",
    ),
    pytest.param(
        KUNPENG_GPU3_LOST,
        [cuda("a", 4), cuda("b", 2)],
        None,
        [
            ("a", [4, 5, 6, 7], "64-95", [2], [1], None, []),
            ("b", [0, 1], "0-15", [0], [0], None, []),
        ],
        id="gpu-with-nvml-error-skipped",
    ),
    pytest.param(
        KUNPENG,
        [cuda("a", 2, gpus=[uuid(6), "7"]), cuda("b", gpus=3)],
        None,
        [
            ("a", [6, 7], "80-95", [2], [1], None, []),
            ("b", [3], "24-31", [0], [0], None, []),
        ],
        id="explicit-gpus-by-uuid-and-index",
    ),
    pytest.param(
        KUNPENG,
        [cuda("a", cpus_per_instance=4), cuda("b")],
        "0-1",
        [
            ("a", [0], "2-5", [0], [0], None, []),
            ("b", [1], "9-15", [0], [0], None, []),
        ],
        id="cuda-cpus_per_instance-below-the-slice",
    ),
    pytest.param(
        KUNPENG,
        [cuda("a", cpus_per_instance=10), cuda("b")],
        "0-1",
        [
            ("a", [0], "2-9,30-31", [0], [0], None, ["CPU 9 belongs to the CPU slice of GPU 1"]),
            ("b", [1], "10-15", [0], [0], None, ["GPU 1 gets 6 of the 7 CPUs of its slice: 9 is held by a"]),
        ],
        id="cuda-cpus_per_instance-above-the-slice",
    ),
    pytest.param(
        KUNPENG,
        [cuda("a", cpus="40-47")],
        None,
        [
            ("a", [0], "40-47", [1], [0], None, ["CPUs 40-47 are not on NUMA node 0 of its GPUs"]),
        ],
        id="cuda-explicit-cpus-off-node-warning",
    ),
]


@pytest.mark.parametrize("topo, instances, reserved, expected", PLACEMENTS)
def test_placement(facts, topo, instances, reserved, expected):
    placements = place(facts, topo, copy.deepcopy(instances), reserved)
    got = [
        (p["name"], p["gpu_indices"], p["cpulist"], p["numa_nodes"], p["sockets"], p["omp_threads_bind"])
        for p in placements
    ]
    assert got == [row[:6] for row in expected]
    for placement, row in zip(placements, expected):
        warnings = " | ".join(placement["warnings"])
        for fragment in row[6]:
            assert fragment in warnings
        if not row[6]:
            assert placement["warnings"] == []
        assert placement["gpu_uuids"] == [uuid(i) for i in placement["gpu_indices"]]
        assert placement["cuda_visible_devices"] == ",".join(placement["gpu_uuids"])


def test_output_schema(facts):
    placements = place(facts, KUNPENG, [cuda("a", 2), cpu("b", 2, cpus_per_instance=2)], "0-1")
    for placement in placements:
        assert list(placement) == [
            "name",
            "device",
            "tensor_parallel_size",
            "pipeline_parallel_size",
            "gpu_indices",
            "gpu_uuids",
            "cuda_visible_devices",
            "cpus",
            "cpulist",
            "numa_nodes",
            "sockets",
            "omp_threads_bind",
            "span",
            "warnings",
        ]
    gpu_instance, cpu_instance = placements
    assert gpu_instance == {
        "name": "a",
        "device": "cuda",
        "tensor_parallel_size": 2,
        "pipeline_parallel_size": 1,
        "gpu_indices": [0, 1],
        "gpu_uuids": [uuid(0), uuid(1)],
        "cuda_visible_devices": "%s,%s" % (uuid(0), uuid(1)),
        "cpus": list(range(2, 16)),
        "cpulist": "2-15",
        "numa_nodes": [0],
        "sockets": [0],
        "omp_threads_bind": None,
        "span": None,
        "warnings": [],
    }
    assert cpu_instance == {
        "name": "b",
        "device": "cpu",
        "tensor_parallel_size": 2,
        "pipeline_parallel_size": 1,
        "gpu_indices": [],
        "gpu_uuids": [],
        "cuda_visible_devices": "",
        "cpus": [30, 31, 32, 33],
        "cpulist": "30-33",
        "numa_nodes": [0, 1],
        "sockets": [0],
        "omp_threads_bind": "30|32",
        "span": None,
        "warnings": [],
    }


def test_same_input_same_output_and_input_untouched(facts):
    instances = [cuda("a", 4), cuda("b", 2), cpu("c", cpus_per_instance=4), cuda("d")]
    original = copy.deepcopy(instances)
    first = place(facts, KUNPENG, instances, "0-1")
    assert place(facts, KUNPENG, instances, "0-1") == first
    assert instances == original


@pytest.mark.parametrize("topo", [KUNPENG, A800], ids=lambda t: t["name"])
def test_appending_never_moves_earlier_instances(facts, topo):
    fleet = [cuda("a", 2), cuda("b"), cpu("c", cpus_per_instance=2), cuda("d", 2), cuda("e")]
    whole = place(facts, topo, fleet, "0-1")
    for length in range(len(fleet)):
        assert place(facts, topo, fleet[:length], "0-1") == whole[:length]
    with pytest.raises(PlacementError) as error:
        place(facts, topo, fleet + [cuda("too-big", 8)], "0-1")
    assert error.value.instance == "too-big" and error.value.position == len(fleet)


def test_greedy_search_matches_exhaustive_one(facts, monkeypatch):
    instances = [cuda("a", 2), cuda("b", 4), cuda("c", 2)]
    exhaustive = place(facts, KUNPENG, instances)
    monkeypatch.setattr(_placement, "MAX_EXHAUSTIVE_SUBSETS", 0)
    assert place(facts, KUNPENG, instances) == exhaustive
    assert [p["gpu_indices"] for p in exhaustive] == [[0, 1], [4, 5, 6, 7], [2, 3]]


def test_host_defaults_to_this_host(facts):
    with pytest.raises(PlacementError, match=r"^this host, instance b: asks for 1 GPU"):
        place(facts, WORKSTATION_1GPU, [cuda("a"), cuda("b")], host=None)


# (topology, instances, reserved_cpus, failing instance, fragments of the message)
ERRORS = [
    pytest.param(
        KUNPENG,
        [cuda("qwen-tp4", 4), cuda("llama-70b", 4, pipeline_parallel_size=2)],
        None,
        "llama-70b",
        [
            "host gpu-node01, instance llama-70b: asks for 8 GPUs (tensor_parallel_size 4 x "
            "pipeline_parallel_size 2) but only 4 are free (4, 5, 6, 7; 0-3 are held by qwen-tp4). "
            "Fix: lower tensor_parallel_size/pipeline_parallel_size, remove an instance, or move it to another host."
        ],
        id="tp-x-pp-above-free-gpus",
    ),
    pytest.param(
        KUNPENG_GPU5_DEGRADED,
        [cuda("a", 4), cuda("b", 4)],
        None,
        "b",
        [
            "asks for 4 GPUs",
            "only 3 are free (4, 6, 7",
            "0-3 are held by a",
            "5 has a degraded PCIe link",
            "Fix: ",
            "allow_degraded_pcie: true",
        ],
        id="degraded-gpu-not-counted-as-free",
    ),
    pytest.param(
        KUNPENG_GPU3_LOST,
        [cuda("a", 4), cuda("b", 4)],
        None,
        "b",
        [
            "asks for 4 GPUs",
            "only 3 are free (0, 1, 2",
            "4-7 are held by a",
            "3 has an NVML error (nvmlDeviceGetMemoryInfo",
            "Fix: lower tensor_parallel_size",
        ],
        id="gpu-with-error-not-counted-as-free",
    ),
    pytest.param(
        WORKSTATION_1GPU,
        [cuda("a"), cuda("b")],
        None,
        "b",
        ["asks for 1 GPU", "but none is free (0 is held by a)", "Fix: "],
        id="no-gpu-left",
    ),
    pytest.param(
        KUNPENG,
        [cuda("a", gpus=[1]), cuda("b", gpus=[uuid(1)])],
        None,
        "b",
        [
            "asks for GPU 1 but it is already held by a",
            "free GPUs: 0, 2, 3, 4, 5, 6, 7",
            "Fix: give each instance its own GPUs",
        ],
        id="two-instances-claim-one-gpu",
    ),
    pytest.param(
        LAB_2CORE_CPU_ONLY,
        [cuda("llama")],
        None,
        "llama",
        [
            "asks for device cuda (1 GPU",
            "the host has no usable GPU: NVML (libnvidia-ml.so.1) is not installed",
            "Fix: set device: cpu",
        ],
        id="cuda-on-cpu-only-host",
    ),
    pytest.param(
        LAB_2CORE_CPU_ONLY,
        [cpu("a"), cpu("b")],
        None,
        "b",
        [
            "asks for the free CPUs of a NUMA node for 1 rank",
            "none is free (0-1 are held by a)",
            "Fix: set cpus_per_instance",
        ],
        id="cpus-exhausted-by-a-default-cpu-instance",
    ),
    pytest.param(
        LAB_2CORE_CPU_ONLY,
        [cpu(n, cpus_per_instance=1) for n in "abc"],
        None,
        "c",
        [
            "asks for 1 CPU per rank (cpus_per_instance) for 1 rank",
            "none is free (0 is held by a; 1 is held by b)",
            "Fix: lower cpus_per_instance",
        ],
        id="cpus-exhausted-cpus_per_instance",
    ),
    pytest.param(
        A800,
        [cpu("embed")],
        None,
        "embed",
        ["none is free (all CPUs that are not reserved lie in the CPU slices of the GPUs)", "give explicit cpus"],
        id="cpu-instance-on-host-whose-cpus-are-all-gpu-slices",
    ),
    pytest.param(
        KUNPENG,
        [cuda("a", cpus_per_instance=32), cuda("b")],
        None,
        "b",
        [
            "asks for 8 CPUs near GPU 1 (NUMA node 0) but none is free there (free: none; 0-31 are held by a)",
            "Fix: lower cpus_per_instance",
        ],
        id="cpus-exhausted-near-gpu",
    ),
    pytest.param(
        KUNPENG,
        [cuda("a", cpus_per_instance=40)],
        "0-1",
        "a",
        [
            "asks for cpus_per_instance 40 (CPUs per GPU) but NUMA node 0 has only 30 CPUs that are not reserved",
            "Fix: set cpus_per_instance to 30 or less",
        ],
        id="cpus_per_instance-does-not-fit-the-node",
    ),
    pytest.param(
        KUNPENG_CPU127_OFFLINE,
        [cuda("a", cpus="120-127")],
        None,
        "a",
        ["asks for CPUs 120-127 but CPU 127 is not online (online: 0-126)", "Fix: list online CPUs only"],
        id="explicit-cpu-offline",
    ),
    pytest.param(
        KUNPENG,
        [cuda("a", cpus=[0, 1, 2, 3])],
        "0-1",
        "a",
        [
            "asks for CPUs 0-3 but CPUs 0-1 are reserved for the host (reserved_cpus 0-1)",
            "Fix: leave the reserved CPUs out",
        ],
        id="explicit-cpu-reserved",
    ),
    pytest.param(
        KUNPENG,
        [cuda("a", cpus="0-3"), cuda("b", cpus="3-4")],
        None,
        "b",
        ["asks for CPUs 3-4 but CPU 3 is held by a", "free: 4-127", "Fix: give each instance its own CPUs"],
        id="explicit-cpu-held",
    ),
    pytest.param(
        KUNPENG,
        [cuda("a", gpus=[9])],
        None,
        "a",
        ["asks for GPU 9, which the host does not have (it has GPUs 0-7)", "Fix: use indexes or UUIDs"],
        id="unknown-gpu-index",
    ),
    pytest.param(
        KUNPENG,
        [cuda("a", gpus=["GPU-00000000-dead-beef"])],
        None,
        "a",
        ["asks for GPU GPU-00000000-dead-beef, which the host does not have", "0 = %s" % uuid(0)],
        id="unknown-gpu-uuid",
    ),
    pytest.param(
        KUNPENG_GPU5_DEGRADED,
        [cuda("a", gpus=[5])],
        None,
        "a",
        ["asks for GPU 5, whose PCIe link is degraded", "set allow_degraded_pcie: true"],
        id="explicit-degraded-gpu",
    ),
    pytest.param(
        KUNPENG_GPU3_LOST,
        [cuda("a", gpus=[3])],
        None,
        "a",
        ["asks for GPU 3, which has an NVML error"],
        id="explicit-gpu-with-error",
    ),
    pytest.param(
        KUNPENG,
        [cuda("a", 2, gpus=[0])],
        None,
        "a",
        ["lists 1 GPU in gpus but asks for 2 GPUs", "Fix: list exactly 2 GPUs"],
        id="explicit-gpu-count-mismatch",
    ),
    pytest.param(KUNPENG, [cuda("a", 2, gpus=[0, 0])], None, "a", ["lists GPU 0 twice"], id="explicit-gpu-twice"),
    pytest.param(
        KUNPENG,
        [cpu("a", cpus="30-33")],
        None,
        "a",
        ["asks for CPUs 30-33 for its one rank, but they span NUMA nodes (NUMA node 0: 30-31; NUMA node 1: 32-33)"],
        id="cpu-rank-across-numa-nodes",
    ),
    pytest.param(
        KUNPENG,
        [cpu("a", 2, cpus="0-2")],
        None,
        "a",
        ["cannot be cut into 2 equal ranges that each lie in one NUMA node"],
        id="cpu-ranks-cannot-be-split",
    ),
    pytest.param(
        KUNPENG,
        [cuda("a", 0)],
        None,
        "a",
        ["tensor_parallel_size must be a positive integer, got 0", "Fix: set tensor_parallel_size to 1 or more"],
        id="tp-0",
    ),
    pytest.param(
        KUNPENG,
        [cuda("a", "four")],
        None,
        "a",
        ["tensor_parallel_size must be a positive integer, got 'four'"],
        id="tp-not-a-number",
    ),
    pytest.param(
        KUNPENG,
        [cuda("a", pipeline_parallel_size=-1)],
        None,
        "a",
        ["pipeline_parallel_size must be a positive integer, got -1"],
        id="pp-negative",
    ),
    pytest.param(
        KUNPENG,
        [cuda("a", cpus_per_instance=True)],
        None,
        "a",
        ["cpus_per_instance must be a positive integer, got True"],
        id="cpus_per_instance-bool",
    ),
    pytest.param(
        KUNPENG,
        [{"name": "a", "device": "rocm"}],
        None,
        "a",
        ["device must be cuda or cpu, got 'rocm'", "Fix: set device: cuda or device: cpu"],
        id="unknown-device",
    ),
    pytest.param(
        KUNPENG,
        [cuda("a"), {"device": "cuda"}],
        None,
        "#2",
        ["has no name (item 2 of the list; got None)", "Fix: give every instance a unique name"],
        id="missing-name",
    ),
    pytest.param(
        KUNPENG,
        [cuda("a"), cuda("a")],
        None,
        "a",
        ["the name is already used by item 1 of the list"],
        id="duplicate-name",
    ),
    pytest.param(KUNPENG, ["a"], None, "#1", ["is str, not a dict"], id="instance-not-a-dict"),
    pytest.param(KUNPENG, [cuda(7)], None, "#1", ["name must be a string, got 7 (int)"], id="name-not-a-string"),
    pytest.param(
        KUNPENG,
        [cuda("a", cpus="0-3", cpus_per_instance=2)],
        None,
        "a",
        ["sets both cpus and cpus_per_instance"],
        id="cpus-and-cpus_per_instance",
    ),
    pytest.param(
        KUNPENG, [cpu("a", gpus=[0])], None, "a", ["has device cpu but lists gpus [0]"], id="gpus-on-cpu-instance"
    ),
    pytest.param(KUNPENG, [cuda("a", cpus="zz")], None, "a", ["cpus 'zz' is not a CPU list"], id="cpus-not-a-cpulist"),
    pytest.param(KUNPENG, [cuda("a", cpus=[])], None, "a", ["cpus is empty"], id="cpus-empty"),
    pytest.param(KUNPENG, [cuda("a", gpus=[True])], None, "a", ["gpus lists True"], id="gpus-bool"),
    pytest.param(
        KUNPENG,
        [cuda("a", allow_degraded_pcie="maybe")],
        None,
        "a",
        ["allow_degraded_pcie must be true or false, got 'maybe'"],
        id="allow_degraded_pcie-not-a-bool",
    ),
]


@pytest.mark.parametrize("topo, instances, reserved, instance, fragments", ERRORS)
def test_infeasible_requests_fail_with_one_clear_message(facts, topo, instances, reserved, instance, fragments):
    with pytest.raises(PlacementError) as error:
        place(facts, topo, instances, reserved)
    message = str(error.value)
    assert message.startswith("host gpu-node01, instance %s: " % instance)
    assert " Fix: " in message and message.count("Fix:") == 1
    for fragment in fragments:
        assert fragment in message
    assert error.value.instance == instance
    assert isinstance(error.value, ValueError)


@pytest.mark.parametrize(
    "args, fragment",
    [
        (("not a list", {}), "host gpu-node01: the instances must be a list of dicts, got str"),
        (([], {"reserved_cpus": "x"}), "host gpu-node01: reserved_cpus 'x' is not a CPU list"),
        (([], {"reserved_cpus": [-1]}), "CPU numbers cannot be negative"),
    ],
)
def test_bad_arguments(facts, args, fragment):
    instances, kwargs = args
    with pytest.raises(PlacementError) as error:
        place(facts, KUNPENG, instances, **kwargs)
    assert fragment in str(error.value) and "Fix: " in str(error.value)
    assert error.value.instance is None and error.value.position is None


@pytest.mark.parametrize(
    "gpu, numa, fragment",
    [
        ({"available": False, "reason": "x"}, None, "the numa fact is missing (got null)"),
        (None, {"nodes": [{"id": "zero"}], "online_cpus": [0]}, "the gpu or numa facts are malformed (ValueError"),
        (None, {"nodes": [], "online_cpus": []}, "the numa fact lists no online CPU"),
    ],
)
def test_bad_facts(gpu, numa, fragment):
    with pytest.raises(PlacementError, match="^host h1: ") as error:
        vllm_placement([], gpu, numa, host="h1")
    assert fragment in str(error.value)


def test_missing_gpu_fact_means_no_gpu(facts):
    numa = facts(LAB_2CORE_CPU_ONLY)[1]
    assert vllm_placement([cpu("a")], None, numa)[0]["cpulist"] == "0-1"
    with pytest.raises(PlacementError, match="the gpu fact is missing"):
        vllm_placement([cuda("a")], None, numa)


def test_empty_instance_list(facts):
    assert place(facts, KUNPENG, []) == []
    assert place(facts, KUNPENG, None) == []


# -- real SMT siblings -----------------------------------------------------------------------------
# The KVM guest numbers siblings N and N+1 (0-1, ..., 8-9, 10-11, ...); GPU 0's slice is node 0, so cpu
# instances land on node 1 (CPUs 8-15).

VM = X86_VM_ADJACENT_SMT_1GPU


def without_cores(numa):
    """The numa fact as numa_facts gathered it before it reported cores."""
    return dict((key, value) for key, value in numa.items() if key != "cores")


# instances, reserved_cpus, (name, cpulist, omp_threads_bind) per instance with the fact's cores, and the same
# for a fact without cores (every CPU its own core: no sibling is guessed from the numbering)
SIBLINGS = [
    pytest.param(
        [cpu("a", cpus_per_instance=2)], None, [("a", "8-9", "8")], [("a", "8-9", "8")],
        id="cpus_per_instance-2-is-one-whole-core",
    ),
    pytest.param(
        [cpu("a", cpus_per_instance=1), cpu("b", cpus_per_instance=2)],
        None,
        [("a", "8", "8"), ("b", "10-11", "10")],
        [("a", "8", "8"), ("b", "9-10", "9")],
        id="a-pair-skips-the-half-taken-core",
    ),
    pytest.param(
        [cpu("a", cpus_per_instance=8)], None, [("a", "8-15", "8,10,12")], [("a", "8-15", "8-14")],
        id="omp-one-cpu-per-core-less-the-last",
    ),
    pytest.param(
        [cpu("a", 2)], None, [("a", "8-15", "8|12")], [("a", "8-15", "8-10|12-14")],
        id="omp-one-cpu-per-core-of-each-rank",
    ),
    pytest.param(
        [cuda("a")], "0", [("a", "2-7", None)], [("a", "1-6", None)],
        id="gpu-slice-of-whole-cores-leaves-the-reserved-cpus-sibling",
    ),
    pytest.param(
        [cuda("a"), cpu("b", 2, cpus_per_instance=2)],
        "8",
        [("a", "0-7", None), ("b", "10-13", "10|12")],
        [("a", "0-7", None), ("b", "9-12", "9|11")],
        id="cpu-ranks-of-whole-cores-beside-a-reserved-cpu",
    ),
]


@pytest.mark.parametrize("instances, reserved, expected, expected_without_cores", SIBLINGS)
def test_placement_keeps_smt_siblings_together(facts, instances, reserved, expected, expected_without_cores):
    gpu, numa = facts(VM)
    assert numa["cores"][4:6] == [[8, 9], [10, 11]]
    for fact, rows in ((numa, expected), (without_cores(numa), expected_without_cores)):
        placements = vllm_placement(copy.deepcopy(instances), gpu, fact, reserved_cpus=reserved, host=HOST)
        assert [(p["name"], p["cpulist"], p["omp_threads_bind"]) for p in placements] == rows
        assert [p["warnings"] for p in placements] == [[]] * len(rows)


def test_cores_of_the_fact_replace_the_x86_numbering_guess(facts):
    """The A800's siblings are c and c + 64: its cores give the whole-core slices; without cores, none is guessed."""
    gpu, numa = facts(A800)
    instances = [cuda(n, 2) for n in "abcd"]
    assert numa["cores"][:2] == [[0, 64], [1, 65]]
    assert place(facts, A800, instances)[0]["cpulist"] == "0-15,64-79"
    assert vllm_placement(instances, gpu, without_cores(numa))[0]["cpulist"] == "0-31"
