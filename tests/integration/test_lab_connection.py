"""The lab's connection (lab/connection_plugins/podman_pipelined.py) against a real container: a task runs in the
container's namespaces with its capabilities and environment, files go in and out, and a restarted container (a
new process) is found again."""

import json
import os
import tempfile

from conftest import ansible_playbook_file, podman, wait_for_systemd

PLAY = """
- name: Probe the container through podman_pipelined
  hosts: all
  gather_facts: false
  tasks:
    - name: Read what a task sees
      ansible.builtin.shell: |
        hostname; cat /proc/1/comm; grep -E '^Cap(Bnd|Eff):' /proc/self/status; env | sort
      register: seen
      changed_when: false
    - name: Copy a file in
      ansible.builtin.copy:
        content: "{{ marker }}\\n"
        dest: /root/marker
        mode: "0600"
    - name: Fetch it back
      ansible.builtin.fetch:
        src: /root/marker
        dest: "{{ fetched }}"
        flat: true
    - name: Keep what the task saw on the controller
      ansible.builtin.copy:
        content: "{{ seen.stdout }}\n"
        dest: "{{ fetched }}.seen"
        mode: "0600"
      delegate_to: localhost
"""


def probe(tmp_path, host, marker):
    (tmp_path / "play.yml").write_text(PLAY)
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": {host: {
        "ansible_connection": "podman_pipelined", "ansible_python_interpreter": "/usr/bin/python3"}}}}))
    fetched = tmp_path / ("fetched-" + marker)
    result = ansible_playbook_file(str(tmp_path / "play.yml"), inventory,
                                   "-e", json.dumps({"marker": marker, "fetched": str(fetched)}))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert fetched.read_text() == marker + "\n"
    return [line.rstrip() for line in (tmp_path / ("fetched-%s.seen" % marker)).read_text().splitlines()]


def entered_pid(host):
    """The process the connection entered last (its cache), so the tests know nsenter ran, not podman exec."""
    with open(os.path.join(tempfile.gettempdir(), "podman_pipelined-%d" % os.geteuid(), host)) as f:
        return json.load(f)["pid"]


def podman_exec_view(host):
    """What `podman exec` gives a command: the reference the connection must match."""
    out = podman("exec", host, "sh", "-c", "grep -E '^Cap(Bnd|Eff):' /proc/self/status; env | sort").stdout
    return [line for line in out.splitlines() if not line.startswith(("PWD=", "SHLVL=", "_="))]


def test_a_task_runs_in_the_container_as_podman_exec_would(lab_host, tmp_path):
    lines = probe(tmp_path, lab_host, "first")
    assert lines[:2] == [lab_host, "systemd"]  # the container's UTS and PID namespaces
    seen = [line for line in lines[2:] if not line.startswith(("PWD=", "SHLVL=", "_=", "LC_CTYPE="))]
    assert seen == podman_exec_view(lab_host)  # capabilities and environment
    assert podman("exec", lab_host, "cat", "/root/marker").stdout == "first\n"
    assert str(entered_pid(lab_host)) == podman("inspect", "--format", "{{.State.Pid}}", lab_host).stdout.strip()


def test_a_restarted_container_is_found_again(lab_host, tmp_path):
    probe(tmp_path, lab_host, "before")
    pid = podman("inspect", "--format", "{{.State.Pid}}", lab_host).stdout.strip()
    podman("restart", "--time", "2", lab_host)
    assert podman("inspect", "--format", "{{.State.Pid}}", lab_host).stdout.strip() != pid
    # Booting, systemd mounts a fresh /tmp, where a task's payload lies: wait, as for any new container.
    wait_for_systemd(lab_host)
    lines = probe(tmp_path, lab_host, "after")
    assert lines[:2] == [lab_host, "systemd"]
    assert str(entered_pid(lab_host)) == podman("inspect", "--format", "{{.State.Pid}}", lab_host).stdout.strip()
    assert podman("exec", lab_host, "cat", "/root/marker").stdout == "after\n"
