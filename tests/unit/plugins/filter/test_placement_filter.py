# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Wiring of the llmops.vllm.vllm_placement and vllm_span_check filters (the decisions are tested in module_utils)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.filter import placement
from ansible_collections.llmops.vllm.plugins.module_utils._placement import PlacementError, vllm_placement
from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import KUNPENG920_8xA100, LAB_2CORE_CPU_ONLY

FILTERS = placement.FilterModule().filters()
DOCS = Path(inspect.getsourcefile(placement)).parent / "vllm_placement.yml"


def test_filter_names():
    assert sorted(FILTERS) == ["vllm_placement", "vllm_span_check", "vllm_span_members"]


def test_filter_passes_facts_and_keyword_arguments(facts):
    gpu, numa = facts(KUNPENG920_8xA100)
    instances = [{"name": "qwen", "device": "cuda", "tensor_parallel_size": 4, "port": 8001}]
    result = FILTERS["vllm_placement"](instances, gpu, numa, reserved_cpus="0-1", host="gpu-node01")
    assert result == vllm_placement(instances, gpu, numa, reserved_cpus="0-1", host="gpu-node01")
    assert result[0]["gpu_indices"] == [0, 1, 2, 3] and result[0]["cpulist"] == "2-29"
    positional = FILTERS["vllm_placement"](instances, gpu, numa, [0, 1], "gpu-node01")
    assert positional == result


def test_filter_defaults(facts):
    gpu, numa = facts(LAB_2CORE_CPU_ONLY)
    result = FILTERS["vllm_placement"]([{"name": "a", "device": "cpu"}], gpu, numa)
    assert result[0]["cpulist"] == "0-1" and result[0]["omp_threads_bind"] == "0"


def test_filter_turns_placement_errors_into_filter_errors(facts):
    gpu, numa = facts(LAB_2CORE_CPU_ONLY)
    instances = [{"name": "llama", "device": "cuda"}]
    with pytest.raises(PlacementError) as expected:
        vllm_placement(instances, gpu, numa, host="lab1")
    with pytest.raises(AnsibleFilterError) as error:
        FILTERS["vllm_placement"](instances, gpu, numa, host="lab1")
    assert error.value.message == str(expected.value)
    assert str(error.value).startswith("host lab1, instance llama: asks for device cuda")
    assert isinstance(error.value.__cause__, PlacementError)


def test_filter_wraps_bad_arguments(facts):
    gpu, numa = facts(LAB_2CORE_CPU_ONLY)
    with pytest.raises(AnsibleFilterError, match="^this host: reserved_cpus"):
        FILTERS["vllm_placement"]([], gpu, numa, reserved_cpus="zero")


def test_documentation_matches_signature():
    docs = yaml.safe_load(DOCS.read_text())
    assert DOCS.read_text().startswith("---\n")
    assert set(docs) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}
    assert docs["DOCUMENTATION"]["name"] == "vllm_placement"
    parameters = list(inspect.signature(FILTERS["vllm_placement"]).parameters)
    assert ["_input"] + parameters[1:] == list(docs["DOCUMENTATION"]["options"])
    assert docs["DOCUMENTATION"]["positional"] == "_input, gpu, numa"
    assert "llmops.vllm.vllm_placement" in docs["EXAMPLES"]
    yaml.safe_load(docs["EXAMPLES"])


def test_documented_return_keys_match_the_output(facts):
    docs = yaml.safe_load(DOCS.read_text())
    gpu, numa = facts(KUNPENG920_8xA100)
    result = FILTERS["vllm_placement"]([{"name": "a"}], gpu, numa)
    assert list(docs["RETURN"]["_value"]["contains"]) == list(result[0])


SPAN_DOCS = Path(inspect.getsourcefile(placement)).parent / "vllm_span_check.yml"


def test_the_span_check_is_documented_as_called():
    docs = yaml.safe_load(SPAN_DOCS.read_text())
    assert docs["DOCUMENTATION"]["name"] == "vllm_span_check" and docs["DOCUMENTATION"]["positional"] == "_input, name"
    parameters = list(inspect.signature(FILTERS["vllm_span_check"]).parameters)
    assert ["_input"] + parameters[1:] == list(docs["DOCUMENTATION"]["options"])
    yaml.safe_load(docs["EXAMPLES"])


def test_the_span_check_raises_filter_errors(facts):
    gpu, _numa = facts(KUNPENG920_8xA100)
    item = {"name": "big", "tensor_parallel_size": 8, "span": {"hosts": ["a", "b"]}}
    members = {"a": {"item": item, "gpu": gpu, "gpu_indices": [0, 1, 2, 3]},
               "b": {"item": None, "gpu": gpu, "gpu_indices": []}}
    with pytest.raises(AnsibleFilterError, match="instance big: spans a, b, but b does not list it"):
        FILTERS["vllm_span_check"](members, "big")
    members["b"] = dict(members["a"])
    assert FILTERS["vllm_span_check"](members, "big") == ["a", "b"]
    with pytest.raises(AnsibleFilterError, match="expected"):
        FILTERS["vllm_span_check"](["a"], "big")
