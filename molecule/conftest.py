"""Shared by every scenario's testinfra verifier.

testinfra knows no podman connection in an Ansible inventory, so its `host` fixture runs each command as a
separate `ansible -m shell` process (about 2 s each). Here the same commands go straight through `podman exec`
into the same container; `host.ansible(...)` still goes through Ansible.
"""

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
