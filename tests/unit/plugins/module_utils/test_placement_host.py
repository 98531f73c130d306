# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The host model of placement: facts read into cores, GPU nodes and CPU slices, without any instance."""

from __future__ import annotations

import ast
import inspect

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils import _placement_host
from ansible_collections.llmops.vllm.plugins.module_utils._placement_host import Host
from ansible_collections.llmops.vllm.plugins.module_utils._placement_text import PlacementError
from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import (
    KUNPENG920_8xA100,
    X86_8xA800_NVLINK,
    X86_VM_ADJACENT_SMT_1GPU,
)

VM = X86_VM_ADJACENT_SMT_1GPU


def _numa(cores="absent", threads_per_core=2, online=range(16)):
    """A numa fact of the 16-CPU guest, two nodes of 8 CPUs; cores left out unless given."""
    online = list(online)
    numa = {
        "nodes": [
            {"id": 0, "socket": 0, "cpus": [c for c in online if c < 8]},
            {"id": 1, "socket": 0, "cpus": [c for c in online if c >= 8]},
        ],
        "online_cpus": online,
        "cpu": {"architecture": "x86_64", "threads_per_core": threads_per_core},
    }
    if cores != "absent":
        numa["cores"] = cores
    return numa


PAIRS = [[c, c + 1] for c in range(0, 16, 2)]


def test_cores_come_from_the_fact(facts):
    gpu, numa = facts(VM)
    host = Host(gpu, numa, [], "host vm1")
    assert host.core_threads == dict((c, [c, c + 1]) for c in range(0, 16, 2))
    assert (host.core_of[9], host.core_of[8], host.threads_per_core) == (8, 8, 2)
    # whole cores first, each core's threads together
    assert host.by_core([3, 4, 5, 6, 7, 9]) == [4, 5, 6, 7, 3, 9]
    assert host.slice[0] == [0, 1, 2, 3, 4, 5, 6, 7] and host.group_rest[("node", 0)] == []


def test_slices_are_cut_in_whole_cores(facts):
    gpu, numa = facts(VM)
    host = Host(gpu, numa, [0], "host vm1")
    assert host.slice[0] == [2, 3, 4, 5, 6, 7] and host.group_rest[("node", 0)] == [1]


@pytest.mark.parametrize("cores", ["absent", None, []], ids=["no-cores-key", "cores-null", "cores-empty"])
def test_without_cores_every_cpu_is_its_own_core(cores):
    """Facts of an older numa_facts: no sibling is guessed from the numbering, threads_per_core still rounds."""
    host = Host(None, _numa(cores), [], "host vm1")
    assert host.core_threads == dict((c, [c]) for c in range(16))
    assert host.by_core([9, 10, 11]) == [9, 10, 11]
    assert (host.threads_per_core, host.whole_cores(7), host.whole_cores(1)) == (2, 6, 1)


def test_online_cpus_that_no_core_lists_are_their_own_cores():
    host = Host(None, _numa([[0, 1], [2, 3, 99]], online=[0, 1, 2, 3, 4, 5]), [], "h")
    assert host.core_threads == {0: [0, 1], 2: [2, 3], 4: [4], 5: [5]}


def test_a_core_with_an_offline_thread_is_keyed_by_its_online_one():
    host = Host(None, _numa(PAIRS, online=[0, 1, 3, 4, 5]), [], "h")
    assert host.core_threads == {0: [0, 1], 3: [3], 4: [4, 5]}
    assert host.by_core([1, 3, 4, 5]) == [3, 4, 5, 1]


def test_threads_per_core_falls_back_to_the_largest_core():
    assert Host(None, _numa(PAIRS, threads_per_core=None), [], "h").threads_per_core == 2
    assert Host(None, _numa(threads_per_core=None), [], "h").threads_per_core == 1


@pytest.mark.parametrize("cores", [[0, 1], ["0-1"], "0-1,2-3"])
def test_malformed_cores_fail_clearly(cores):
    with pytest.raises(PlacementError, match=r"^h1: the gpu or numa facts are malformed"):
        Host(None, _numa(cores), [], "h1")


def test_x86_servers_keep_their_c_and_c_plus_n_siblings(facts):
    host = Host(*facts(X86_8xA800_NVLINK), [], "h")
    assert host.core_threads[0] == [0, 64] and host.core_threads[63] == [63, 127]
    assert host.slice[0] == [0, 64, 1, 65, 2, 66, 3, 67, 4, 68, 5, 69, 6, 70, 7, 71]


def test_gpu_pairs_and_nodes(facts):
    host = Host(*facts(KUNPENG920_8xA100), [], "h")
    assert [host.gpus[i]["node"] for i in range(8)] == [0, 0, 0, 0, 2, 2, 2, 2]
    assert host.pair(0, 1) == (_placement_host.SAME_PCIE_SWITCH, _placement_host.SAME_PCIE_SWITCH)
    assert host.pair(0, 2)[1] == _placement_host.SAME_NUMA_NODE
    assert host.pair(0, 4)[1] == _placement_host.FAR
    assert (host.held_gpus, host.held_cpus) == ({}, {})


def test_host_model_does_not_depend_on_instances():
    """Placement over several hosts builds one Host per host; the model must not need instance validation."""
    tree = ast.parse(inspect.getsource(_placement_host))
    imported = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert not [name for name in imported if name.endswith(("_placement", "_placement_instance"))]
