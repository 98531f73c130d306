"""The dcgm_exporter role on a lab container, as site.yml applies it after the edge: nothing on a node that serves
on CPUs, clear refusals before any change, then the binary, the fields file and the unit on a node whose summary
names an instance on cuda, in check mode first, idempotent, and run by systemd with the arguments it wrote.

There is no GPU, no DCGM and no dcgm-exporter here (NVIDIA ships it as source and container images, neither
reachable): the binary the role copies is a stand-in that keeps its arguments and stays up, so systemd's view of
the running unit is what is checked, never GPU metrics."""

import json
import re

from conftest import ansible_playbook_file, podman

PLAY = """
- name: GPU exporter
  hosts: all
  gather_facts: false
  tasks:
    - name: Apply the role
      ansible.builtin.include_role:
        name: llmops.vllm.dcgm_exporter
"""
STAND_IN = "#!/bin/sh\n# Stands in for NVIDIA's dcgm-exporter (no GPU here): keeps its argv, stays up.\n" \
           "while :; do sleep 3600; done\n"


def summary(device):
    return {"host": "node1", "address": "10.0.0.5", "port": 8000, "instances": [
        {"name": "big", "device": device, "loopback_url": "http://127.0.0.1:8101", "unit": "vllm-big.service"}]}


def run(tmp_path, container, hosts, *args):
    inventory = tmp_path / "inventory.json"
    base = {"ansible_connection": "podman_pipelined", "ansible_host": container,
            "ansible_python_interpreter": "/usr/bin/python3", "dcgm_exporter_dcgm_packages": []}
    inventory.write_text(json.dumps({"all": {"hosts": dict((name, dict(base, **v)) for name, v in hosts.items())}}))
    (tmp_path / "play.yml").write_text(PLAY)
    result = ansible_playbook_file(str(tmp_path / "play.yml"), inventory, *args)
    return result, " ".join((result.stdout + result.stderr).split())


def recap(output, host):
    match = re.search(r"%s\s*: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)" % re.escape(host), output)
    assert match, output[-3000:]
    return dict(zip(("ok", "changed", "unreachable", "failed"), map(int, match.groups())))


def service(container, prop):
    return podman("exec", container, "systemctl", "show", "-P", prop, "dcgm-exporter.service").stdout.strip()


def main_process(container):
    pid = service(container, "MainPID")
    assert pid != "0"
    argv = podman("exec", container, "cat", "/proc/%s/cmdline" % pid).stdout.split("\0")
    user = podman("exec", container, "stat", "-c", "%U", "/proc/%s" % pid).stdout.strip()
    return argv, user


def test_cpu_nodes_get_nothing_and_bad_input_is_refused_before_any_change(lab_host, tmp_path):
    binary = tmp_path / "dcgm-exporter"
    binary.write_text(STAND_IN)
    result, output = run(tmp_path, lab_host, {
        "cpu-node": {"llmops_node": summary("cpu")},
        "no-source": {"llmops_node": summary("cuda")},
        "port-taken": {"llmops_node": summary("cuda"), "dcgm_exporter_binary": str(binary),
                       "llmops_dcgm_exporter_port": 8101},
        "fields-dropped": {"llmops_node": summary("cuda"), "dcgm_exporter_binary": str(binary),
                           "dcgm_exporter_counters": [{"field": "DCGM_FI_DEV_GPU_UTIL", "type": "gauge", "help": "x"}]},
    })
    assert result.returncode != 0
    cpu_node = recap(output, "cpu-node")
    assert cpu_node["changed"] == 0 and cpu_node["failed"] == 0
    assert "host no-source: dcgm_exporter: this node serves big on GPUs, and dcgm-exporter must come from exactly " \
           "one of dcgm_exporter_binary" in output and "Fix: build it" in output
    assert "host port-taken: dcgm_exporter: llmops_dcgm_exporter_port 8101 is not a free port on this node " \
           "(the edge and the instances use 8000, 8101)" in output
    assert "host fields-dropped: dcgm_exporter:" in output
    assert "it lacks DCGM_FI_DEV_FB_USED, DCGM_FI_DEV_XID_ERRORS" in output
    for name in ("no-source", "port-taken", "fields-dropped"):
        assert recap(output, name)["failed"] == 1 and recap(output, name)["changed"] == 0
    for path in ("/usr/local/bin/dcgm-exporter", "/etc/dcgm-exporter", "/etc/systemd/system/dcgm-exporter.service"):
        assert podman("exec", lab_host, "test", "-e", path, check=False).returncode == 1, path


def test_a_gpu_node_runs_the_exporter_with_the_fields_the_alerts_read(lab_host, tmp_path):
    binary = tmp_path / "dcgm-exporter"
    binary.write_text(STAND_IN)
    hosts = {"node1": {"llmops_node": summary("cuda"), "dcgm_exporter_binary": str(binary)}}

    result, output = run(tmp_path, lab_host, hosts, "--check")
    assert result.returncode == 0, output[-4000:]
    assert recap(output, "node1")["changed"] >= 3
    assert podman("exec", lab_host, "test", "-e", "/usr/local/bin/dcgm-exporter", check=False).returncode == 1

    result, output = run(tmp_path, lab_host, hosts)
    assert result.returncode == 0, output[-4000:]
    assert service(lab_host, "ActiveState") == "active" and service(lab_host, "UnitFileState") == "enabled"
    argv, user = main_process(lab_host)
    assert argv[1:] == ["/usr/local/bin/dcgm-exporter", "--collectors", "/etc/dcgm-exporter/llmops-counters.csv",
                        "--address", ":9400", "--collect-interval", "15000", "--remote-hostengine-info",
                        "localhost:5555", ""]
    assert user == "dcgm-exporter"  # it only talks to nv-hostengine
    assert "nvidia-dcgm.service" in service(lab_host, "After")
    fields = [line.split(",")[0] for line in podman("exec", lab_host, "cat", "/etc/dcgm-exporter/llmops-counters.csv")
              .stdout.splitlines() if line and not line.startswith("#")]
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_XID_ERRORS",
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"} <= set(fields)

    result, output = run(tmp_path, lab_host, hosts)
    assert result.returncode == 0 and recap(output, "node1")["changed"] == 0, output[-4000:]

    # An embedded engine: the unit changes, the exporter restarts as root without nv-hostengine's unit.
    pid = service(lab_host, "MainPID")
    hosts["node1"]["dcgm_exporter_hostengine"] = ""
    result, output = run(tmp_path, lab_host, hosts)
    assert result.returncode == 0, output[-4000:]
    argv, user = main_process(lab_host)
    assert service(lab_host, "MainPID") != pid and user == "root"
    assert "--remote-hostengine-info" not in argv and "nvidia-dcgm.service" not in service(lab_host, "After")
