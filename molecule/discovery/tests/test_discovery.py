"""Verify the discovery facts against the lab host's real /sys, and the written reports."""

import os
import pathlib
import xml.etree.ElementTree as ET

import pytest


def read_cpulist(text):
    cpus = []
    for part in text.strip().split(","):
        low, _sep, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


@pytest.fixture(scope="module")
def numa(host):
    result = host.ansible("llmops.vllm.numa_facts", check=True)
    assert result.get("changed") is False, result
    return result["ansible_facts"]["numa"]


@pytest.fixture(scope="module")
def gpu(host):
    result = host.ansible("llmops.vllm.gpu_facts", check=True)
    assert result.get("changed") is False, result
    return result["ansible_facts"]["gpu"]


def test_online_cpus_match_sysfs(host, numa):
    online = read_cpulist(host.file("/sys/devices/system/cpu/online").content_string)
    assert numa["online_cpus"] == online


def test_numa_nodes_match_sysfs(host, numa):
    node_dirs = host.check_output("ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null || true").split()
    if node_dirs:
        assert [n["id"] for n in numa["nodes"]] == sorted(int(d.rsplit("node", 1)[1]) for d in node_dirs)
        for node in numa["nodes"]:
            cpulist = host.file("/sys/devices/system/node/node%d/cpulist" % node["id"]).content_string
            assert node["cpus"] == read_cpulist(cpulist)
            assert node["memory_total_mib"] > 0
    else:
        assert numa["nodes_synthesized"] is True


def test_cpu_model_from_cpuinfo(host, numa):
    cpu = numa["cpu"]
    assert cpu["architecture"] == host.check_output("uname -m")
    model = host.check_output("grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2-").strip()
    assert cpu["model_name"] == model
    assert cpu["compiler_flags"], "an x86-64 or aarch64 host always gets at least a -march flag"


def test_gpu_unavailable_without_nvml(gpu):
    assert gpu["available"] is False
    assert gpu["count"] == 0 and gpu["devices"] == []
    assert "nvidia-ml-py" in gpu["reason"]


def test_gpu_required_fails_clearly(host):
    # ansible-core 2.19's tree output, which testinfra reads, drops "failed": a failed module
    # is the one that returned a message and no gpu fact.
    try:
        result = host.ansible("llmops.vllm.gpu_facts", "required=true", check=True)
    except host.ansible.AnsibleException as failure:
        result = failure.result
    assert "gpu" not in result.get("ansible_facts", {})
    assert "Failed to import the required Python library (nvidia-ml-py)" in result["msg"]


@pytest.mark.parametrize("suffix", ["md", "svg"])
def test_report_written(suffix):
    report = pathlib.Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "reports" / ("instance.%s" % suffix)
    text = report.read_text()
    assert "Topology of instance" in text
    if suffix == "svg":
        root = ET.fromstring(text)
        assert root.tag.endswith("svg")
    else:
        assert "## NUMA nodes" in text


def test_report_draws_the_planned_placement():
    report = pathlib.Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "reports" / "instance.md"
    rows = [line for line in report.read_text().splitlines() if line.startswith("| alpha") or line.startswith("| beta")]
    assert rows == ["| alpha | - | 0 | 0 |", "| beta | - | 1 | 0 |"]
    assert "alpha" in (report.parent / "instance.svg").read_text()
