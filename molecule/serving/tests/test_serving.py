"""Verify vllm_server with a real vLLM CPU: pinning of every thread, completions, change handling, and beta's
model sealed at rest (ciphertext on disk, plaintext only in the unit's own mount namespace, a wrong key, a rotation).

The tests run in file order: the last ones change the instances (restart one, kill a worker, a wrong key, a key
rotation, remove one).
"""

import copy
import json
import os
import re
import subprocess
import sys

import yaml
from conftest import wait_for

INSTANCES = {"alpha": ("0", 8101, "tiny-alpha"), "beta": ("1", 8102, "tiny-beta")}


def main_pid(host, name):
    return int(host.check_output("systemctl show --property MainPID --value vllm-%s.service", name))


def pids_of_unit(host, name):
    """The instance's main process and its descendants: API server, engine core, workers."""
    parents = {}
    for line in host.check_output("ps -e -o pid= -o ppid=").splitlines():
        pid, ppid = (int(x) for x in line.split())
        parents.setdefault(ppid, []).append(pid)
    pids, todo = [], [main_pid(host, name)]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        todo.extend(parents.get(pid, []))
    return pids


def completion(host, port, model, path="completions"):
    if path == "completions":
        body = {"model": model, "prompt": "hello world", "max_tokens": 8}
    else:
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    # The lab image has no curl: Python's urllib does the request on the host.
    script = ("import sys, urllib.request; r = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(), "
              "headers={'Content-Type': 'application/json'}); "
              "print(urllib.request.urlopen(r, timeout=60).read().decode())")
    url = "http://127.0.0.1:%d/v1/%s" % (port, path)
    out = host.check_output("python3 -c %s %s %s", script, url, json.dumps(body))
    return json.loads(out)


def answers(host, port, model):
    try:
        return bool(completion(host, port, model)["choices"])
    except AssertionError:  # check_output's failure: not up yet
        return False


def converge(instances=None, extra=None, passes=True, check=False):
    """Run converge.yml again, optionally with other instances, more extra vars or in check mode; returns its
    output."""
    cmd = ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"],
           os.path.join(os.environ["MOLECULE_SCENARIO_DIRECTORY"], "converge.yml")]
    if instances is not None:
        cmd += ["-e", json.dumps({"vllm_instances": instances})]
    if extra:
        cmd += ["-e", json.dumps(extra)]
    if check:
        cmd.append("--check")
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    result = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    assert (result.returncode == 0) == passes, result.stdout[-5000:] + result.stderr[-2000:]
    return result.stdout + result.stderr


def scenario_instances():
    with open(os.path.join(os.environ["MOLECULE_SCENARIO_DIRECTORY"], "molecule.yml")) as f:
        config = yaml.safe_load(os.path.expandvars(f.read()))
    return copy.deepcopy(config["provisioner"]["inventory"]["group_vars"]["vllm_nodes"]["vllm_instances"])


def test_units_run_as_the_service_user_on_loopback(host):
    for name, (_cpus, port, _model) in INSTANCES.items():
        unit = host.service("vllm-%s" % name)
        assert unit.is_running and unit.is_enabled
        assert host.check_output("ps -o user= -p %s", str(main_pid(host, name))).strip() == "vllm"
        assert host.socket("tcp://127.0.0.1:%d" % port).is_listening
        assert not host.socket("tcp://0.0.0.0:%d" % port).is_listening


def test_every_thread_is_pinned_to_its_planned_cpu(host):
    for name, (cpus, _port, _model) in INSTANCES.items():
        pids = pids_of_unit(host, name)
        assert len(pids) >= 2, pids  # API server and engine
        threads = 0
        for pid in pids:
            # One line per thread: /proc/<pid>/task/<tid>/status:Cpus_allowed_list:\t<cpus>
            out = host.check_output("grep -H Cpus_allowed_list /proc/%s/task/*/status", str(pid))
            for line in out.splitlines():
                threads += 1
                assert line.split()[-1] == cpus, (name, line)
        assert threads > len(pids)


def test_units_carry_the_plan(host):
    unit = host.file("/etc/systemd/system/vllm-alpha.service").content_string
    assert "CPUAffinity=0\n" in unit and "NUMAPolicy" not in unit  # one NUMA node: nothing to bind
    assert 'Environment="VLLM_CPU_OMP_THREADS_BIND=0"' in unit and 'Environment="HF_HUB_OFFLINE=1"' in unit
    assert "--host 127.0.0.1 --port 8101" in unit and "--max-num-seqs 8" in unit
    assert "--shutdown-timeout 30" in unit and "TimeoutStopSec=60" in unit and "Restart=always" in unit
    assert "ProtectSystem=strict" in unit and "NoNewPrivileges=true" in unit


def test_completions_and_chat_from_each_instance(host):
    for _name, (_cpus, port, model) in INSTANCES.items():
        text = completion(host, port, model)
        assert text["model"] == model and text["choices"][0]["text"]
        chat = completion(host, port, model, "chat/completions")
        assert chat["choices"][0]["message"]["role"] == "assistant"


# beta's model, sealed at rest for the key lab by prepare.yml (playbooks/model_seal.yml).
SEALED = "/var/lib/vllm/models/tiny-llama.sealed"
PLAIN = "/run/vllm-models/beta/model"
KEYS = os.path.join(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", ""), "model-keys")


def secret(name):
    with open(os.path.join(KEYS, name + ".txt")) as f:
        return [line for line in f.read().splitlines() if line.startswith("AGE-SECRET-KEY-1")][0]


def manifest(host):
    return json.loads(host.file(SEALED + "/llmops-sealed.json").content_string)


def plaintext_mounts(host):
    """The processes whose mount namespace holds a sealed model's tmpfs."""
    return host.run("grep -ls ' /run/vllm-models/' /proc/[0-9]*/mountinfo").stdout.split()


def test_the_sealed_model_is_ciphertext_on_the_disk(host):
    files = manifest(host)["files"]
    assert "model.safetensors" in files and manifest(host)["clear"] == ["config.json"]
    for path in files:
        if path == "config.json":
            continue
        content = host.file("%s/%s.age" % (SEALED, path))
        assert content.content[:22] == b"age-encryption.org/v1\n", path
    assert not host.file(SEALED + "/model.safetensors").exists
    # No safetensors header (its JSON names each tensor's dtype) anywhere in the sealed directory.
    assert host.run("grep -rl --exclude=config.json --exclude=llmops-sealed.json dtype %s", SEALED).stdout == ""
    # The key is on the disk only as a credential encrypted with the host's key.
    assert host.run("grep -rlF %s /etc /var/lib/vllm", secret("lab")).stdout == ""
    assert host.file("/etc/llmops/credentials/model-lab.cred").mode == 0o600


def test_the_plaintext_is_seen_only_inside_the_units_mount_namespace(host):
    pid = main_pid(host, "beta")
    # Inside the unit's namespace (through its root, as the service user): a tmpfs, with the verified plaintext.
    inside = host.check_output("runuser -u vllm -- sha256sum /proc/%s/root%s/model.safetensors", str(pid), PLAIN)
    assert inside.split()[0] == manifest(host)["files"]["model.safetensors"]["sha256"]
    mounts = [line.split() for line in host.file("/proc/%d/mountinfo" % pid).content_string.splitlines()]
    assert [m[m.index("-") + 1] for m in mounts if m[4] == "/run/vllm-models/beta"] == ["tmpfs"]
    # Outside it: neither the host nor another user sees it.
    assert not host.file(PLAIN).exists
    assert host.run("grep -qs /run/vllm-models /proc/1/mountinfo").rc != 0
    other = host.run("runuser -u nobody -- cat /proc/%s/root%s/config.json", str(pid), PLAIN)
    assert other.rc != 0 and "Permission denied" in other.stderr


def test_a_missing_model_key_is_refused_before_any_change(host):
    unit = host.file("/etc/systemd/system/vllm-beta.service")
    before = (unit.content_string, unit.mtime, main_pid(host, "beta"))
    out = " ".join(converge(extra={"vllm_server_model_keys": {}}, passes=False).split())
    assert ("host serving-node, instance beta: model_key lab is not in vllm_server_model_keys (it holds no key). "
            "Fix: add the key") in out
    assert (unit.content_string, unit.mtime, main_pid(host, "beta")) == before


def test_second_converge_restarts_nothing(host):
    before = {name: main_pid(host, name) for name in INSTANCES}
    out = converge()
    changed = re.findall(r"^TASK \[([^\]]+)\][^\n]*\n(?:[^\n]*\n)*?changed:", out, re.M)
    assert re.search(r"^serving-node\s+: ok=\d+\s+changed=0\s", out, re.M), changed
    assert {name: main_pid(host, name) for name in INSTANCES} == before


def test_changing_alpha_restarts_alpha_only(host):
    before = {name: main_pid(host, name) for name in INSTANCES}
    instances = scenario_instances()
    instances[0]["max_num_seqs"] = 4
    converge(instances)
    assert main_pid(host, "beta") == before["beta"]
    assert main_pid(host, "alpha") != before["alpha"]
    assert "--max-num-seqs 4" in host.file("/etc/systemd/system/vllm-alpha.service").content_string
    assert completion(host, 8101, "tiny-alpha")["choices"]


def test_a_killed_worker_comes_back(host):
    old_main = main_pid(host, "alpha")
    workers = [p for p in pids_of_unit(host, "alpha") if p != old_main]
    assert workers
    assert host.run("kill -9 " + " ".join(str(p) for p in workers)).rc == 0
    # The API server exits when its engine dies; Restart=always brings the unit back, with no Ansible run.
    assert wait_for(lambda: main_pid(host, "alpha") not in (0, old_main) and answers(host, 8101, "tiny-alpha"),
                    timeout=600, step=2)
    assert completion(host, 8101, "tiny-alpha")["choices"]


def current_instances():
    """The scenario's instances as test_changing_alpha_restarts_alpha_only left them."""
    instances = scenario_instances()
    instances[0]["max_num_seqs"] = 4
    return instances


def test_a_wrong_key_fails_the_start_naming_the_instance_and_the_fix(host):
    """Another key in beta's credential (as from a mistaken hand on the node): the start is refused, not retried."""
    cred = "/etc/llmops/credentials/model-lab.cred"
    host.check_output("age-keygen 2>/dev/null | grep AGE- | systemd-creds encrypt --name=model-key - %s", cred)
    host.run("systemctl restart vllm-beta")
    assert wait_for(lambda: host.run("systemctl is-failed vllm-beta").stdout.strip() == "failed", timeout=60, step=1)
    show = host.check_output("systemctl show vllm-beta -p ExecMainStatus -p NRestarts")
    assert "ExecMainStatus=78" in show and "NRestarts=0" in show
    journal = " ".join(host.check_output("journalctl -u vllm-beta -n 20 --no-pager -o cat").split())
    assert ("vLLM instance beta: the model key lab does not open %s, which is sealed for %s"
            % (SEALED, manifest(host)["recipient"])) in journal
    assert "Fix: deliver the key it was sealed for (vllm_server_model_keys.lab in the vault, then site.yml)" in journal
    assert plaintext_mounts(host) == []
    # The next run would put the right key back: the credential is compared by decrypting it (check mode here; the
    # rotation below starts beta again).
    out = converge(current_instances(), check=True)
    assert re.search(r"TASK \[llmops.vllm.vllm_server : Deliver the model keys as systemd credentials\][^\n]*\n"
                     r"(?:(?!TASK \[)[^\n]*\n)*?changed: \[serving-node\] => \(item=\(censored", out), out[-3000:]


def test_a_key_rotation_restarts_only_its_instance(host):
    """Seal beta's model again for the key rotated on the controller, then converge: beta alone restarts."""
    before = {name: main_pid(host, name) for name in INSTANCES}
    project, ephemeral = os.environ["MOLECULE_PROJECT_DIRECTORY"], os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]
    seal = subprocess.run(["ansible-playbook", os.path.join(project, "playbooks", "model_seal.yml"),
                           "-e", "model_seal_src=%s/.cache/models/tiny-llama" % project,
                           "-e", "model_seal_dest=%s/sealed/tiny-llama" % ephemeral,
                           "-e", json.dumps({"vllm_server_model_keys": {"rotated": secret("rotated")}}),
                           "-e", "model_seal_key=rotated"], capture_output=True, text=True, check=False)
    assert seal.returncode == 0 and "this run encrypted 5, copied 0" in " ".join(seal.stdout.split()), seal.stdout
    instances = current_instances()
    instances[1]["model_key"] = "rotated"
    converge(instances)
    assert main_pid(host, "alpha") == before["alpha"] and main_pid(host, "beta") != before["beta"]
    assert manifest(host)["recipient"] == subprocess.run(["age-keygen", "-y", os.path.join(KEYS, "rotated.txt")],
                                                         capture_output=True, text=True, check=True).stdout.strip()
    assert host.file("/etc/llmops/credentials/model-rotated.cred").exists
    assert not host.file("/etc/llmops/credentials/model-lab.cred").exists  # no instance names lab now
    assert completion(host, 8102, "tiny-beta")["choices"]


def test_removing_beta_removes_its_unit(host):
    converge(current_instances()[:1])
    assert not host.file("/etc/systemd/system/vllm-beta.service").exists
    assert not host.service("vllm-beta").is_running
    assert not host.socket("tcp://127.0.0.1:8102").is_listening
    assert host.service("vllm-alpha").is_running
    # Nothing of the sealed model's plaintext is left in any mount namespace, nor its key's credential.
    assert plaintext_mounts(host) == []
    assert host.run("ls /etc/llmops/credentials").stdout.split() == []


GPU_INSTANCES = [
    {"name": "gpu-llama70b", "model": "/models/llama-70b-w8a16", "port": 8201, "tensor_parallel_size": 2,
     "pipeline_parallel_size": 2, "precision": {"weight": "int8", "activation": "fp16"}, "max_model_len": 8192,
     "max_num_seqs": 64, "max_num_batched_tokens": 8192, "gpu_memory_utilization": 0.9},
    {"name": "gpu-llama8b", "model": "/models/llama-70b-w8a16", "port": 8202, "tensor_parallel_size": 4,
     "dtype": "bfloat16", "max_num_seqs": 128},
]


def kunpeng_facts(tmp_path):
    """gpu and numa facts of the recorded Kunpeng 920 + 8 x A100 topology, from the real collectors."""
    sys.path.insert(0, os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "collections"))
    from ansible_collections.llmops.vllm.plugins.module_utils._gpu import collect_gpu
    from ansible_collections.llmops.vllm.plugins.module_utils._numa import collect_numa
    from ansible_collections.llmops.vllm.plugins.module_utils._placement import vllm_placement
    from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import (
        KUNPENG920_8xA100, fake_nvml, write_sysfs)

    root = write_sysfs(tmp_path / "sysfs", KUNPENG920_8xA100)
    gpu, numa = collect_gpu(fake_nvml(KUNPENG920_8xA100)), collect_numa(root)
    return gpu, numa, vllm_placement(GPU_INSTANCES, gpu, numa)


def render_gpu(host, tmp_path, instances, *args, **install):
    """Run render_gpu.yml with the recorded Kunpeng facts and these instances (install: overrides of the recorded
    install, such as venv); returns the finished process."""
    gpu, numa = kunpeng_facts(tmp_path / "render")[:2]
    installed = json.loads(host.file("/etc/ansible/facts.d/vllm.fact").content_string)
    installed = dict(installed, device="cuda", package="vllm", **install)
    facts = {"gpu": gpu, "numa": numa, "ansible_local": {"vllm": installed}}
    fixture = tmp_path / "facts.json"
    fixture.write_text(json.dumps(facts))
    config = {"max_position_embeddings": 8192, "quantization_config": {"quant_method": "gptq", "bits": 8}}
    host.run("mkdir -p /models/llama-70b-w8a16 && echo %s > /models/llama-70b-w8a16/config.json",
             json.dumps(config))
    cmd = ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"],
           os.path.join(os.environ["MOLECULE_SCENARIO_DIRECTORY"], "render_gpu.yml"), "--skip-tags", "vllm_server_run",
           "-e", json.dumps({"fixture_file": str(fixture), "gpu_instances": instances,
                             "vllm_server_nccl_env": {"NCCL_IB_DISABLE": "1"}}), *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=False,
                          env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0"))


def test_a_cross_socket_tensor_parallel_group_is_warned_of_and_summarised(host, tmp_path):
    """TP 8 over the 4 + 4 A100s of two sockets without NVLink: the preflight shows the placement's warning as an
    Ansible warning naming host and instance, and the closing summary lists it again. Check mode: nothing lands."""
    wide = [{"name": "gpu-wide", "model": "/models/llama-70b-w8a16", "port": 8203, "tensor_parallel_size": 8,
             "dtype": "float16"}]
    try:
        result = render_gpu(host, tmp_path, wide, "--check")
        assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
        # Ansible shows warnings on stderr, wrapped at the terminal's width: compare with whitespace collapsed.
        shown = " ".join(result.stderr.split())
        summary = " ".join(result.stdout.split("TASK [List the run's warnings]", 1)[1].split())
        line = ("host serving-node: vllm_server: instance gpu-wide: the tensor-parallel group of GPUs 0, 1, 2, 3, 4, "
                "5, 6, 7 spans sockets 0 and 1 without NVLink")
        assert "[WARNING]: " + line in shown, shown[-5000:]
        assert line in summary, summary
        assert not host.file("/etc/systemd/system/vllm-gpu-wide.service").exists
    finally:
        host.run("rm -rf /models")


def test_a_unit_that_systemd_refuses_never_lands(host, tmp_path):
    """systemd-analyze verify checks the rendered unit before it is installed: an ExecStart that is not there
    (a vLLM venv that does not exist) fails the run, and no unit file is left to start on a later run."""
    instance = [dict(GPU_INSTANCES[1], name="gpu-refused")]
    try:
        result = render_gpu(host, tmp_path, instance, venv="/opt/vllm/not-installed/venv")
        output = " ".join((result.stdout + result.stderr).split())
        assert result.returncode != 0, output[-3000:]
        assert "failed to validate" in output and "/opt/vllm/not-installed/venv/bin/vllm" in output, output[-3000:]
        assert not host.file("/etc/systemd/system/vllm-gpu-refused.service").exists
    finally:
        host.run("rm -rf /models")


def test_gpu_units_render_from_recorded_kunpeng_facts(host, tmp_path):
    """The only fake is the facts: the role renders real units for 8 GPUs on this host, never starts them."""
    placements = kunpeng_facts(tmp_path)[2]
    result = render_gpu(host, tmp_path, GPU_INSTANCES)
    try:
        assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
        paths = []
        for instance, placement in zip(GPU_INSTANCES, placements):
            path = "/etc/systemd/system/vllm-%s.service" % instance["name"]
            paths.append(path)
            unit = host.file(path).content_string
            assert 'Environment="CUDA_VISIBLE_DEVICES=%s"' % placement["cuda_visible_devices"] in unit
            assert placement["cuda_visible_devices"].count("GPU-") == len(placement["gpu_indices"])
            assert 'Environment="CUDA_DEVICE_ORDER=PCI_BUS_ID"' in unit
            assert 'Environment="NCCL_IB_DISABLE=1"' in unit and 'Environment="NCCL_SOCKET_IFNAME=' in unit
            assert "CPUAffinity=%s\n" % placement["cpulist"] in unit
            assert "NUMAPolicy=bind\nNUMAMask=%s\n" % ",".join(str(n) for n in placement["numa_nodes"]) in unit
            assert "VLLM_CPU_OMP_THREADS_BIND" not in unit
            exec_start = re.search(r"^ExecStart=(.*)$", unit, re.M).group(1)
            assert "--tensor-parallel-size %d" % instance["tensor_parallel_size"] in exec_start
            assert "--max-num-seqs %d" % instance["max_num_seqs"] in exec_start
            assert host.service("vllm-%s" % instance["name"]).is_running is False
        first, second = (re.search(r"^ExecStart=(.*)$", host.file(p).content_string, re.M).group(1) for p in paths)
        for flag in ("--pipeline-parallel-size 2", "--dtype float16", "--max-model-len 8192",
                     "--max-num-batched-tokens 8192", "--gpu-memory-utilization 0.9"):
            assert flag in first
        assert "--quantization" not in first  # vLLM reads the GPTQ checkpoint's own config
        assert "--dtype bfloat16" in second and "--pipeline-parallel-size" not in second
        # Disjoint GPUs and CPUs, as placed.
        assert not set(placements[0]["gpu_indices"]) & set(placements[1]["gpu_indices"])
        assert not set(placements[0]["cpus"]) & set(placements[1]["cpus"])
        assert host.run("systemd-analyze verify %s", " ".join(paths)).rc == 0
    finally:
        host.run("rm -f /etc/systemd/system/vllm-gpu-*.service && systemctl daemon-reload && rm -rf /models")
