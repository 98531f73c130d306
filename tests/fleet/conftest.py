"""Shared by the fleet verifiers: every test here runs against the lab that `make lab` (or `scripts/fleet.py up`)
brought up, through its own inventory (inventories/lab), with this machine as the controller and the client.

Tests marked `alone` have deadlines of seconds (ejection, failover): `make test` runs them after every other gate,
by themselves. A test that changes the fleet puts it back as it found it, or says in its module's docstring why it
runs last.

awx_job runs a playbook the way AWX runs a job: ansible-runner over a private data directory (extra vars,
settings), the project where AWX checks it out, no terminal and none of this process's Ansible environment; it
returns what the runner kept (status, rc, job events, stdout).
"""

import json
import os
import pathlib
import subprocess
import sys
import time

import pytest
import testinfra

PROJECT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(PROJECT / "lab"))
import lvs_probe  # noqa: E402  (the lab's inventory, read once, and its client helpers)

INVENTORY = lvs_probe.INVENTORY
PKI = pathlib.Path(lvs_probe.PKI)  # the lab's CA and application clients on this machine
CA_PASSPHRASE = lvs_probe.CA_PASSPHRASE  # of the lab CA's keys
NODES = lvs_probe.NODES  # {name: address} of the vLLM nodes
DIRECTORS = lvs_probe.DIRECTORS
MONITORING = "lab-mon1"
VIP = lvs_probe.VIP


def pytest_configure(config):
    config.addinivalue_line("markers", "alone: deadlines of seconds; make test runs these after every other gate")


def get_host(name):
    """A lab container, through podman exec (many short commands, without a module run each)."""
    return testinfra.get_host("podman://" + name)


def wait_for(check, timeout=180, step=3):
    """Whether check() became true within timeout seconds, asked every step seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(step)
    return False


def play(playbook, *args, passes=True, env=None):
    """ansible-playbook PLAYBOOK (a path in this repository) on the lab's inventory with ARGS: its stdout and stderr.
    It must pass, or (passes=False) fail. env: more environment variables (fleet.py's fast_run(), say)."""
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_CONFIG=str(PROJECT / "ansible.cfg"),
               **(env or {}))
    result = subprocess.run([str(pathlib.Path(sys.executable).parent / "ansible-playbook"), "-i", INVENTORY,
                             str(PROJECT / playbook), *args], capture_output=True, text=True, check=False,
                            cwd=PROJECT, env=env, stdin=subprocess.DEVNULL)
    output = result.stdout + result.stderr
    if (result.returncode == 0) != passes:
        raise AssertionError("%s %s: exit %d\n%s\n...\n%s" % (
            playbook, " ".join(args), result.returncode, "\n".join(lvs_probe.failed_tasks(output)), output[-5000:]))
    return output


class AwxJob:
    """What ansible-runner kept of one job: its artifact directory, status, rc, job events and stdout."""

    def __init__(self, artifacts):
        self.artifacts = artifacts
        self.status = (artifacts / "status").read_text().strip()
        self.rc = int((artifacts / "rc").read_text())
        events = sorted((artifacts / "job_events").glob("*.json"), key=lambda p: int(p.name.split("-", 1)[0]))
        self.events = [json.loads(p.read_text()) for p in events]
        self.stdout = (artifacts / "stdout").read_text()

    def events_of(self, kind):
        return [e for e in self.events if e.get("event") == kind]

    @property
    def stats(self):
        """The play recap's counts per host, and the set_stats data AWX keeps as the job's artifacts."""
        (stats,) = self.events_of("playbook_on_stats")
        return stats["event_data"]

    @property
    def summary(self):
        """The closing summary's lines (the callback llmops.vllm.job_summary)."""
        lines = self.stdout.splitlines()
        return lines[lines.index("JOB SUMMARY"):]


@pytest.fixture
def awx_job(tmp_path):
    """run(playbook, extravars=None, cmdline=""): the job's AwxJob, however it ended. The job reads the lab's
    inventory where it is (its group_vars find the lab's caches relative to it)."""
    runs = iter(range(1, 100))

    def run(playbook, extravars=None, cmdline=""):
        data = tmp_path / ("job%d" % next(runs))
        (data / "env").mkdir(parents=True)
        (data / "env" / "extravars").write_text(json.dumps(extravars or {}))
        (data / "env" / "settings").write_text(json.dumps({"idle_timeout": 900, "job_timeout": 1800}))
        if cmdline:
            (data / "env" / "cmdline").write_text(cmdline)
        # As on an execution node: no Ansible settings from this process, only the project's.
        env = {k: v for k, v in os.environ.items()
               if k in ("HOME", "LANG", "LC_ALL", "TMPDIR", "CONTAINERS_CONF", "XDG_RUNTIME_DIR")}
        env["PATH"] = "%s:%s" % (pathlib.Path(sys.executable).parent, os.environ["PATH"])
        subprocess.run([str(pathlib.Path(sys.executable).parent / "ansible-runner"), "run", str(data), "--quiet",
                        "-p", playbook, "--project-dir", str(PROJECT), "--inventory", INVENTORY, "--ident", "job"],
                       env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       start_new_session=True, check=False, timeout=2400)
        return AwxJob(data / "artifacts" / "job")

    return run


@pytest.fixture(autouse=True)
def no_load_left():
    """A test that fails before it stops its load at the VIP leaves none running."""
    yield
    lvs_probe.Load.stop_all()
