"""Verify instances that span two lab hosts, with real vLLM CPU: completions through the head's edge from PP=2 and
TP=2 across the hosts, a killed worker rank that restarts its instance as a whole, a Ray cluster whose task runs on
both hosts, vLLM on Ray with GPUs rendered from recorded facts, and a removed instance that leaves no rank.

The tests run in file order: the last ones change the hosts (a removed instance, then the GPU rendering).
"""

import json
import os
import re
import ssl
import subprocess
import sys
import urllib.request

import pytest
import testinfra
import yaml
from conftest import wait_for

PKI = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "pki")
INSTANCES = {"pp": ("tiny-pp", 8101), "tp": ("tiny-tp", 8102)}
EDGE_PORT = 8000


@pytest.fixture(scope="module")
def head():
    return testinfra.get_host("podman://mn-head")


@pytest.fixture(scope="module")
def rank():
    return testinfra.get_host("podman://mn-rank")


def address(node):
    return node.check_output("hostname -I").split()[0]


def through_edge(node, model, timeout=60):
    """A completion through the head's TLS edge, from this machine with the fleet's client certificate."""
    context = ssl.create_default_context(cafile=os.path.join(PKI, "ca.crt"))
    context.check_hostname = False
    context.load_cert_chain(os.path.join(PKI, "clients", "multinode-client.crt"),
                            os.path.join(PKI, "clients", "multinode-client.key"))
    body = json.dumps({"model": model, "prompt": "across hosts", "max_tokens": 4}).encode()
    request = urllib.request.Request("https://%s:%d/v1/completions" % (address(node), EDGE_PORT), body,
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
        return json.load(response)


def serves(node, model):
    try:
        return len(through_edge(node, model, timeout=20)["choices"]) == 1
    except OSError:
        return False


def main_pid(node, name):
    return int(node.check_output("systemctl show -p MainPID --value vllm-%s", name))


def converge(extra):
    cmd = ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"],
           os.path.join(os.environ["MOLECULE_SCENARIO_DIRECTORY"], "converge.yml"), "-e", json.dumps(extra)]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False,
                            env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0"))
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    return result.stdout


@pytest.mark.parametrize("name", sorted(INSTANCES))
def test_the_instance_serves_through_the_heads_edge(head, name):
    model, _port = INSTANCES[name]
    assert through_edge(head, model)["choices"][0]["text"]


def test_the_head_serves_and_the_other_host_runs_its_rank_headless(head, rank):
    for name, (_model, port) in INSTANCES.items():
        head_unit = head.file("/etc/systemd/system/vllm-%s.service" % name).content_string
        rank_unit = rank.file("/etc/systemd/system/vllm-%s.service" % name).content_string
        assert "--node-rank 0" in head_unit and "--headless" not in head_unit
        assert "--node-rank 1" in rank_unit and "--headless" in rank_unit
        for unit, node in ((head_unit, head), (rank_unit, rank)):
            assert "--master-addr %s" % address(head) in unit and "--nnodes 2" in unit
            assert 'Environment="VLLM_HOST_IP=%s"' % address(node) in unit
            assert 'Environment="GLOO_SOCKET_IFNAME=eth0"' in unit
            assert "ExecStart=/usr/bin/python3 -I /usr/local/libexec/llmops/vllm-span-rank" in unit
        assert head.socket("tcp://127.0.0.1:%d" % port).is_listening
        assert not rank.socket("tcp://127.0.0.1:%d" % port).is_listening
    # The edge is on the head only.
    assert head.service("nginx").is_running and not rank.file("/etc/nginx/conf.d").exists


def test_killing_the_worker_ranks_vllm_restarts_the_instance_as_a_whole(head, rank):
    head_before, rank_before = main_pid(head, "pp"), main_pid(rank, "pp")
    # The worker rank's vLLM (the guard's child), as a crash would end it.
    vllm = rank.check_output("pgrep -P %s", str(rank_before)).split()
    assert vllm
    rank.run("kill -9 %s" % " ".join(vllm))
    # Both guards end, systemd starts them again, the ranks meet and serve, with no Ansible run.
    assert wait_for(lambda: main_pid(head, "pp") not in (0, head_before), timeout=120, step=2)
    assert main_pid(rank, "pp") not in (0, rank_before)
    assert wait_for(lambda: serves(head, "tiny-pp"), timeout=600, step=5)
    assert "a rank left" in head.check_output("journalctl -u vllm-pp --no-pager -o cat")
    # The other instance never noticed.
    assert serves(head, "tiny-tp")


RAY_TASK = """
import socket, ray
from ray.util.placement_group import placement_group
ray.init(logging_level="ERROR", log_to_driver=False)
group = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_SPREAD")
ray.get(group.ready(), timeout=120)
@ray.remote(num_cpus=1)
def where():
    return socket.gethostname()
print(sorted(ray.get([where.options(placement_group=group, placement_group_bundle_index=i).remote() for i in (0, 1)])))
"""


def test_a_ray_task_runs_on_both_hosts(head):
    nodes = head.run("RAY_ADDRESS=%s:6379 /opt/vllm/current/venv/bin/python -c %s", address(head), RAY_TASK)
    assert nodes.rc == 0, nodes.stdout + nodes.stderr
    assert nodes.stdout.strip().splitlines()[-1] == "['mn-head', 'mn-rank']"
    unit = head.file("/etc/systemd/system/ray.service").content_string
    assert "--head --port 6379" in unit and "--include-dashboard=false" in unit
    assert "--object-store-memory 104857600" in unit


def test_a_removed_instance_leaves_no_rank(head, rank):
    tp_before = main_pid(head, "tp")
    converge({"vllm_instances": [i for i in scenario_instances() if i["name"] == "tp"],
              "llmops_only_stages": ["vllm_server", "edge"]})
    for node in (head, rank):
        assert not node.file("/etc/systemd/system/vllm-pp.service").exists
        assert not node.service("vllm-pp").is_running
    assert main_pid(head, "tp") == tp_before and serves(head, "tiny-tp")


def scenario_instances():
    with open(os.path.join(os.environ["MOLECULE_SCENARIO_DIRECTORY"], "molecule.yml")) as f:
        config = yaml.safe_load(os.path.expandvars(f.read()))
    return config["provisioner"]["inventory"]["group_vars"]["all"]["vllm_instances"]


GPU_INSTANCE = {"name": "gpu-big", "model": "/models/llama-70b", "port": 8201, "tensor_parallel_size": 4,
                "pipeline_parallel_size": 2, "dtype": "bfloat16", "max_num_seqs": 64,
                "span": {"hosts": ["mn-head", "mn-rank"], "port": 6379, "backend": "ray"}}


def test_vllm_on_ray_with_gpus_renders_from_two_kunpeng_hosts(head, rank, tmp_path):
    """TP4 x PP2 on Ray over two recorded 8-GPU Kunpeng 920 hosts: each holds one stage on the four GPUs of socket 0;
    the head's vLLM runs on Ray, both hosts' ray.service offer those GPUs. systemd-analyze verify checks every unit
    before it lands; nothing starts vLLM."""
    sys.path.insert(0, os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "collections"))
    from ansible_collections.llmops.vllm.plugins.module_utils._gpu import collect_gpu
    from ansible_collections.llmops.vllm.plugins.module_utils._numa import collect_numa
    from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import (
        KUNPENG920_8xA100, fake_nvml, write_sysfs)

    gpu = collect_gpu(fake_nvml(KUNPENG920_8xA100))
    numa = collect_numa(write_sysfs(tmp_path / "sysfs", KUNPENG920_8xA100))
    installed = json.loads(head.file("/etc/ansible/facts.d/vllm.fact").content_string)
    fixture = tmp_path / "facts.json"
    fixture.write_text(json.dumps({"gpu": gpu, "numa": numa,
                                   "ansible_local": {"vllm": dict(installed, device="cuda", package="vllm")}}))
    for node in (head, rank):
        node.run("mkdir -p /models/llama-70b && echo '{\"max_position_embeddings\": 8192}' "
                 "> /models/llama-70b/config.json")
    cmd = ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"],
           os.path.join(os.environ["MOLECULE_SCENARIO_DIRECTORY"], "render_gpu_ray.yml"),
           "--skip-tags", "vllm_server_run", "-e", json.dumps({"fixture_file": str(fixture),
                                                               "gpu_instances": [GPU_INSTANCE]})]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False,
                            env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0"))
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    socket0 = [g["uuid"] for g in gpu["devices"] if g["index"] in (0, 1, 2, 3)]
    vllm = head.file("/etc/systemd/system/vllm-gpu-big.service").content_string
    exec_start = re.search(r"^ExecStart=(.*)$", vllm, re.M).group(1)
    assert exec_start.startswith(installed["venv"] + "/bin/vllm serve /models/llama-70b")
    for flag in ("--tensor-parallel-size 4", "--pipeline-parallel-size 2", "--distributed-executor-backend ray"):
        assert flag in exec_start
    assert "--nnodes" not in exec_start and "vllm-span-rank" not in exec_start
    assert 'Environment="RAY_ADDRESS=%s:6379"' % address(head) in vllm
    assert "Requires=ray.service" in vllm and 'Environment="NCCL_SOCKET_IFNAME=eth0"' in vllm
    assert 'Environment="CUDA_VISIBLE_DEVICES=%s"' % ",".join(socket0) in vllm
    # The other host runs no vLLM for it: Ray places its ranks there.
    assert not rank.file("/etc/systemd/system/vllm-gpu-big.service").exists
    for node, role in ((head, "--head --port 6379"), (rank, "--address %s:6379" % address(head))):
        ray = node.file("/etc/systemd/system/ray.service").content_string
        assert role in ray and "--num-gpus 4" in ray
        assert 'Environment="CUDA_VISIBLE_DEVICES=%s"' % ",".join(socket0) in ray
        assert "CPUAffinity=" in ray and not node.service("vllm-gpu-big").is_running
