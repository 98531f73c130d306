"""The provisioned lab node image: the lab base image, vLLM installed by the vllm_install role from the lab
wheelhouse, and the tiny model in place, committed and tagged with a hash of everything that went into it.

Usage: node_image.py build | tag | inputs
  build   build the image unless one with this tag exists; print its reference
  tag     print the tag the current tree asks for
  inputs  list the files the tag is made of

Scenarios that test something other than installation start their vLLM nodes from it, and so does make lab;
vllm_install then finds its install done.
"""

import hashlib
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
IMAGE = "localhost/llmops-lab-node"
ROLE = "roles/vllm_install"
# The recipe besides the role and the plugins it calls: the base image, the provisioning, the wheelhouse,
# the model, and the Ansible that runs the role.
RECIPE = [
    "lab/image/build.sh",
    "lab/image/packages.txt",
    "lab/node_image.py",
    "lab/node-image/provision.yml",
    "lab/wheelhouse/build.sh",
    "lab/wheelhouse/requirements.txt",
    "lab/model/build.sh",
    "lab/model/build_tiny_model.py",
    "requirements/test.txt",
    "requirements/constraints.txt",
    "ansible.cfg",
]
PLUGIN_NAME = re.compile(r"\bllmops\.vllm\.(\w+)")
# Another role's task file that the role includes: include_role/import_role with name and tasks_from.
ROLE_INCLUDE = re.compile(r"\bname:\s*llmops\.vllm\.(\w+)\s*\n\s*tasks_from:\s*(\w+)")
MODULE_UTIL = re.compile(r"\bplugins\.module_utils\.(_\w+)")
# Removed before the commit: the unpacked wheelhouse (the install is done), package lists, Ansible's leftovers.
CLEANUP = """rm -rf /var/cache/vllm/wheelhouse /var/lib/apt/lists/* /var/cache/apt/archives/*.deb /root/.ansible \
/root/.cache /var/log/journal/* /tmp/* /var/tmp/*
touch -d 2000-01-01 /var/lib/apt/lists
: >/etc/machine-id"""


def plugins_of(repo, texts):
    """The plugin files (modules and filters) the texts call by FQCN, and the module_utils they import."""
    names = set()
    for text in texts:
        names.update(PLUGIN_NAME.findall(text))
    found = set()
    filters = sorted((repo / "plugins" / "filter").glob("*.py"))
    for name in names:
        for kind in ("modules", "action"):
            plugin = repo / "plugins" / kind / (name + ".py")
            if plugin.is_file():
                found.add(plugin)
        found.update(f for f in filters if re.search(r"['\"]%s['\"]\s*:" % re.escape(name), f.read_text()))
    todo = list(found)
    while todo:
        for util in MODULE_UTIL.findall(todo.pop().read_text()):
            path = repo / "plugins" / "module_utils" / (util + ".py")
            if path.is_file() and path not in found:
                found.add(path)
                todo.append(path)
    return found


def included(repo, texts):
    """The task files of other roles that the texts include (tasks_from), with those roles' defaults."""
    found = set()
    for text in texts:
        for role, tasks in ROLE_INCLUDE.findall(text):
            base = repo / "roles" / role
            found.update(p for p in (base / "tasks" / (tasks + ".yml"), base / "defaults" / "main.yml") if p.is_file())
    return found


def inputs(repo=REPO):
    """The files the tag is made of, relative to the repository, sorted."""
    role = [p for p in (repo / ROLE).rglob("*") if p.is_file()]
    role += sorted(included(repo, [p.read_text() for p in role]))
    plugins = plugins_of(repo, [p.read_text() for p in role] + [(repo / "lab/node-image/provision.yml").read_text()])
    return sorted({p.relative_to(repo).as_posix() for p in role + list(plugins)} | set(RECIPE))


def tag(repo=REPO):
    """12 hex digits of the sha256 over the inputs' names and contents."""
    digest = hashlib.sha256()
    for name in inputs(repo):
        digest.update(name.encode() + b"\0" + (repo / name).read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def run(*args, capture=True, **kwargs):
    result = subprocess.run(args, text=True, capture_output=capture, check=False, **kwargs)
    if result.returncode != 0:
        output = (result.stdout or "") + (result.stderr or "")
        sys.exit("node image: %s failed (rc %d)\n%s" % (" ".join(args[:3]), result.returncode, output))
    return result.stdout if capture else ""


def podman(*args, **kwargs):
    return run("podman", *args, **kwargs)


def wait_for_systemd(name, attempts=120):
    for _attempt in range(attempts):
        state = subprocess.run(["podman", "exec", name, "systemctl", "is-system-running"], text=True,
                               capture_output=True, check=False).stdout.strip()
        if state in ("running", "degraded"):
            return
        time.sleep(0.5)
    sys.exit("node image: systemd in %s did not come up (last state %r)" % (name, state))


def provision(name, base):
    """Run lab/node-image/provision.yml in a container of the base image, as the lab runs site.yml."""
    podman("run", "--detach", "--name", name, "--hostname", "lab-node-image", "--systemd=always",
           "--shm-size", "1g", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096", base, "/sbin/init")
    wait_for_systemd(name)
    with tempfile.TemporaryDirectory() as tmp:
        inventory = pathlib.Path(tmp) / "inventory.json"
        inventory.write_text(json.dumps({"all": {"hosts": {name: {
            "ansible_connection": "podman_pipelined",
            "ansible_python_interpreter": "/usr/bin/python3"}}}}))
        env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
                   ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks")
        run(str(pathlib.Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
            str(REPO / "lab" / "node-image" / "provision.yml"), capture=False, cwd=REPO, env=env,
            stdout=sys.stderr)
    podman("exec", name, "sh", "-c", CLEANUP)
    podman("stop", "--time", "10", name)


def build():
    """The image reference for this tree; built (minutes) when it does not exist yet."""
    base = run(str(REPO / "lab" / "image" / "build.sh")).strip()
    image = "%s:%s" % (IMAGE, tag())
    if subprocess.run(["podman", "image", "exists", image], check=False).returncode != 0:
        print("node image: building %s from %s (a few minutes)" % (image, base), file=sys.stderr)
        name = "llmops-node-image-%d" % os.getpid()
        start = time.monotonic()
        try:
            provision(name, base)
            podman("commit", "--quiet", "--change", 'CMD ["/sbin/init"]', "--change", "STOPSIGNAL SIGRTMIN+3",
                   "--change", "ENV container=podman", "--change", "LABEL llmops.lab.base=" + base, name, image)
        finally:
            subprocess.run(["podman", "rm", "--force", "--time", "2", name], capture_output=True, check=False)
        print("node image: built %s in %.0f s" % (image, time.monotonic() - start), file=sys.stderr)
    podman("tag", image, IMAGE + ":latest")
    # Images of older trees are no longer used.
    for old in podman("images", "--format", "{{.Repository}}:{{.Tag}}", "--filter", "reference=" + IMAGE).split():
        if old not in (image, IMAGE + ":latest"):
            subprocess.run(["podman", "rmi", old], capture_output=True, check=False)
    return image


def main():
    os.environ.setdefault("CONTAINERS_CONF", str(REPO / ".cache" / "containers.conf"))
    action = sys.argv[1] if len(sys.argv) == 2 else ""
    if action == "build":
        print(build())
    elif action == "tag":
        print(tag())
    elif action == "inputs":
        print("\n".join(inputs()))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
