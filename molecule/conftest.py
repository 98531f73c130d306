"""Shared by every scenario's testinfra verifier.

testinfra knows no podman connection in an Ansible inventory, so its `host` fixture runs each command as a
separate `ansible -m shell` process (about 2 s each). Here the same commands go straight through `podman exec`
into the same container; `host.ansible(...)` still goes through Ansible.

awx_job runs a playbook the way AWX runs a job: ansible-runner over a private data directory (the scenario's
inventory, extra vars, settings), the project where AWX checks it out, no terminal and none of this process's
Ansible or molecule environment; it returns what the runner kept (status, rc, job events, stdout).
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import pytest
import testinfra


@pytest.fixture(scope="module")
def host(_testinfra_host):
    backend = _testinfra_host.backend
    connection = backend.ansible_runner.get_variables(backend.host).get("ansible_connection", "")
    if backend.NAME == "ansible" and connection in ("podman_pipelined", "containers.podman.podman"):
        backend.run = testinfra.get_host("podman://" + backend.host).backend.run
    return _testinfra_host


def wait_for(check, timeout=180, step=3):
    """Whether check() became true within timeout seconds, asked every step seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(step)
    return False


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
    """run(playbook, extravars=None, cmdline=""): the job's AwxJob, however it ended."""
    project = os.environ["MOLECULE_PROJECT_DIRECTORY"]
    inventory = os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"])
    runs = iter(range(1, 100))

    def run(playbook, extravars=None, cmdline=""):
        data = tmp_path / ("job%d" % next(runs))
        shutil.copytree(inventory, data / "inventory")
        (data / "env").mkdir()
        (data / "env" / "extravars").write_text(json.dumps(extravars or {}))
        (data / "env" / "settings").write_text(json.dumps({"idle_timeout": 900, "job_timeout": 1800}))
        if cmdline:
            (data / "env" / "cmdline").write_text(cmdline)
        # As on an execution node: no Ansible or molecule settings from this process, only the project's.
        env = {k: v for k, v in os.environ.items()
               if k in ("HOME", "LANG", "LC_ALL", "TMPDIR", "CONTAINERS_CONF", "XDG_RUNTIME_DIR")}
        env["PATH"] = "%s:%s" % (pathlib.Path(sys.executable).parent, os.environ["PATH"])
        subprocess.run([str(pathlib.Path(sys.executable).parent / "ansible-runner"), "run", str(data), "--quiet",
                        "-p", playbook, "--project-dir", project, "--ident", "job"],
                       env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       start_new_session=True, check=False, timeout=2400)
        return AwxJob(data / "artifacts" / "job")

    return run
