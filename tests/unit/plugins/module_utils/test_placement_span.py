# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Instances that span hosts: each host's share placed by vllm_placement over the discovery fixtures (facts collected
through the real collectors), and span_check across the hosts."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._placement import PlacementError, vllm_placement
from ansible_collections.llmops.vllm.plugins.module_utils._placement_span import span_check
from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import (
    KUNPENG920_8xA100,
    LAB_2CORE_CPU_ONLY,
    X86_8xA800_NVLINK,
)

HOSTS = ["gpu-node01", "gpu-node02"]


def big(tp=4, pp=2, hosts=None, device="cuda", **span):
    span = dict({"hosts": list(hosts or HOSTS)}, **span)
    return dict(name="big", device=device, tensor_parallel_size=tp, pipeline_parallel_size=pp, port=8000,
                model="some/405b", span=span)


def place(facts, topo, instances, host, reserved_cpus="0-1"):
    gpu, numa = facts(topo)
    return vllm_placement(instances, gpu, numa, reserved_cpus=reserved_cpus, host=host)


def test_tp4_pp2_over_two_kunpeng_hosts_puts_one_stage_on_one_socket_of_each(facts):
    for rank, host in enumerate(HOSTS):
        (placed,) = place(facts, KUNPENG920_8xA100, [big()], host)
        assert placed["gpu_indices"] == [0, 1, 2, 3] and placed["sockets"] == [0] and placed["numa_nodes"] == [0]
        # vLLM's flags keep the instance's own sizes; the share is this host's stage.
        assert (placed["tensor_parallel_size"], placed["pipeline_parallel_size"]) == (4, 2)
        assert placed["span"] == {"hosts": HOSTS, "head": "gpu-node01", "nnodes": 2, "node_rank": rank, "port": 29500,
                                  "backend": "launcher", "ranks": 4, "tensor_parallel_size": 4,
                                  "pipeline_parallel_size": 1}
        assert placed["warnings"] == []


def test_the_share_goes_around_the_hosts_own_instances(facts):
    """On the second host a TP4 instance already holds socket 0: the stage takes socket 1's GPUs."""
    own = dict(name="qwen", device="cuda", tensor_parallel_size=4, port=8001, model="qwen")
    qwen, placed = place(facts, KUNPENG920_8xA100, [own, big()], "gpu-node02")
    assert qwen["gpu_indices"] == [0, 1, 2, 3]
    assert placed["gpu_indices"] == [4, 5, 6, 7] and placed["sockets"] == [1] and placed["span"]["node_rank"] == 1


def test_two_stages_on_each_of_two_hosts(facts):
    """TP2 x PP4 over two hosts: two stages per host, each stage a GPU pair of one socket."""
    (placed,) = place(facts, X86_8xA800_NVLINK, [big(tp=2, pp=4)], "gpu-node01")
    assert len(placed["gpu_indices"]) == 4
    assert (placed["span"]["tensor_parallel_size"], placed["span"]["pipeline_parallel_size"]) == (2, 2)


def test_a_tensor_parallel_group_over_hosts_is_placed_with_a_warning(facts):
    (placed,) = place(facts, KUNPENG920_8xA100, [big(tp=8, pp=1)], "gpu-node02")
    assert placed["gpu_indices"] == [0, 1, 2, 3] and placed["span"]["ranks"] == 4
    (warning,) = placed["warnings"]
    assert "tensor-parallel groups of 8 span 2 hosts (4 ranks on each)" in warning
    assert "prefer tensor_parallel_size 4 per host and pipeline_parallel_size across the hosts" in warning


@pytest.mark.parametrize("tp, pp", [(2, 1), (1, 2)], ids=["tp2", "pp2"])
def test_a_cpu_instance_over_two_lab_hosts_takes_one_rank_on_each(facts, tp, pp):
    """The lab's multi-node case: two 2-CPU hosts, one rank each on the CPU the host does not reserve."""
    for rank, host in enumerate(HOSTS):
        (placed,) = place(facts, LAB_2CORE_CPU_ONLY, [big(tp=tp, pp=pp, device="cpu")], host, reserved_cpus="0")
        assert placed["cpus"] == [1] and placed["omp_threads_bind"] == "1" and placed["span"]["node_rank"] == rank
        assert placed["span"]["ranks"] == 1 and (placed["tensor_parallel_size"], placed["pipeline_parallel_size"]) \
            == (tp, pp)
        assert [w for w in placed["warnings"] if "span" in w] == ([] if tp == 1 else placed["warnings"])


@pytest.mark.parametrize("instance, host, expected", [
    (big(hosts=HOSTS + ["gpu-node03"]), "gpu-node01",
     "instance big: spreads 8 ranks (tensor_parallel_size 4 x pipeline_parallel_size 2) over 3 hosts, which do not "
     "split evenly. Fix: make tensor_parallel_size x pipeline_parallel_size a multiple of the number of hosts"),
    (big(tp=4, pp=3), "gpu-node01",
     "instance big: puts 6 ranks on each of its 2 hosts, which cut its tensor-parallel groups of 4 unevenly."),
    (big(), "gpu-node09",
     "instance big: spans hosts gpu-node01, gpu-node02, which do not include this host. Fix: list the instance only "
     "on the hosts of its span.hosts"),
    (big(hosts=["gpu-node01"]), "gpu-node01", "span.hosts must list two or more inventory hosts, the head first"),
    (big(hosts=["gpu-node01", "gpu-node01"]), "gpu-node01", "span.hosts lists gpu-node01 twice."),
    (big(port=80), "gpu-node01",
     "span.port must be a port from 1024 to 65534 (the rank guard takes the next one), got 80."),
    (big(backend="mpi"), "gpu-node01", "span.backend must be launcher or ray, got 'mpi'."),
    (big(head="gpu-node01"), "gpu-node01", "span has unknown keys head. Fix: keep only hosts, port, backend."),
    (dict(big(), span=["gpu-node01", "gpu-node02"]), "gpu-node01", "span must be a dict with hosts"),
], ids=["uneven-hosts", "uneven-groups", "not-a-member", "one-host", "twice", "port", "backend", "unknown-key",
        "not-a-dict"])
def test_a_span_that_cannot_work_is_refused_naming_the_host_and_the_instance(facts, instance, host, expected):
    with pytest.raises(PlacementError) as refused:
        place(facts, KUNPENG920_8xA100, [instance], host)
    assert str(refused.value).startswith("host %s, instance big: " % host) and expected.split("instance big: ")[-1] \
        in str(refused.value), str(refused.value)


def test_a_share_that_does_not_fit_the_host_is_refused_with_the_hosts_share(facts):
    own = dict(name="qwen", device="cuda", tensor_parallel_size=8, port=8001, model="qwen")
    with pytest.raises(PlacementError, match=r"host gpu-node02, instance big: asks for 4 GPUs \(tensor_parallel_size 4 "
                                             r"x pipeline_parallel_size 2 over 2 hosts, 4 here\) but none is free"):
        place(facts, KUNPENG920_8xA100, [own, big()], "gpu-node02")


# -- across the hosts -----------------------------------------------------------------------------


def members(facts, topos=None):
    out = {}
    for host, topo in zip(HOSTS, topos or [KUNPENG920_8xA100] * 2):
        gpu, numa = facts(topo)
        (placed,) = vllm_placement([big()], gpu, numa, reserved_cpus="0-1", host=host)
        out[host] = {"item": big(), "gpu": gpu, "gpu_indices": placed["gpu_indices"]}
    return out


def test_hosts_that_agree_pass_in_node_rank_order(facts):
    assert span_check("big", members(facts)) == HOSTS


def test_a_host_that_does_not_list_the_instance_is_refused(facts):
    found = members(facts)
    found["gpu-node02"]["item"] = None
    with pytest.raises(PlacementError, match="instance big: spans gpu-node01, gpu-node02, but gpu-node02 does not list "
                                             "it in vllm_instances. Fix: define the instance once"):
        span_check("big", found)


def test_hosts_that_list_it_differently_are_refused_naming_what_differs(facts):
    found = members(facts)
    found["gpu-node02"]["item"] = dict(big(), max_model_len=4096)
    with pytest.raises(PlacementError, match=r"instance big: its hosts list it differently \(max_model_len differ: "
                                             r"gpu-node01; gpu-node02\)"):
        span_check("big", found)


def test_mixed_gpu_models_are_refused(facts):
    with pytest.raises(PlacementError) as refused:
        span_check("big", members(facts, [KUNPENG920_8xA100, X86_8xA800_NVLINK]))
    message = str(refused.value)
    assert message.startswith("instance big: its ranks would run on mixed GPU models (") and "A800" in message
    assert "Fix: span hosts of one kind, on one driver version." in message


def test_mixed_driver_versions_are_refused(facts):
    found = members(facts)
    found["gpu-node02"]["gpu"] = dict(copy.deepcopy(found["gpu-node02"]["gpu"]), driver_version="535.54.03")
    with pytest.raises(PlacementError, match="instance big: its ranks would run on mixed NVIDIA driver versions "
                                             r"\(\S+ on gpu-node01; 535.54.03 on gpu-node02\)"):
        span_check("big", found)
