# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""containers.podman.podman with Ansible's pipelining: the lab's and the tests' connection to their containers."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = """
name: podman_pipelined
short_description: Run tasks in a lab container, pipelined, through nsenter or podman exec
description:
  - The connection plugin C(containers.podman.podman) with Ansible's pipelining, the module on the standard input of
    one command instead of a C(podman mount), a temporary file, C(chmod), run and clean-up (four C(podman exec))
    per task. A play takes 0.40 of the time and CPU (docs/benchmarks.md).
  - As root, that command enters the container's namespaces with C(nsenter) (3 ms) instead of C(podman exec)
    (conmon and runc, 0.13 CPU-seconds), with the container's capability bounding set and environment. It does
    not join the container's cgroups nor its seccomp filter. The container's process ID comes from
    C(podman inspect) once per container, kept in a file under the temporary directory and checked against the
    process's start time. Other users, and a stopped container, get C(podman exec --interactive) (Podman 4.3
    passes a 3 MB input whole; C(containers.podman.podman) does not attach the standard input).
  - The container's file system is mounted (C(podman mount)) only when a file is copied in or out.
author: llmops.vllm maintainers
options:
  remote_addr:
    description: The container's name or ID.
    default: inventory_hostname
    vars:
      - name: ansible_host
      - name: inventory_hostname
      - name: ansible_podman_host
  remote_user:
    description: User that runs the commands in the container.
    ini:
      - section: defaults
        key: remote_user
    env:
      - name: ANSIBLE_REMOTE_USER
    vars:
      - name: ansible_user
  podman_extra_args:
    description: Extra arguments of the podman command line.
    default: ''
    ini:
      - section: defaults
        key: podman_extra_args
    vars:
      - name: ansible_podman_extra_args
    env:
      - name: ANSIBLE_PODMAN_EXTRA_ARGS
  podman_executable:
    description: The podman command.
    default: podman
    vars:
      - name: ansible_podman_executable
    env:
      - name: ANSIBLE_PODMAN_EXECUTABLE
"""

import json
import os
import re
import shlex
import subprocess
import tempfile

from ansible import constants as C
from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.connection import ensure_connect
from ansible_collections.containers.podman.plugins.connection.podman import Connection as PodmanConnection


class Connection(PodmanConnection):
    transport = "podman_pipelined"
    has_pipelining = True

    def is_pipelining_enabled(self, wrap_async=False):
        # Always, except where Ansible cannot: kept remote files, or async tasks.
        return not C.DEFAULT_KEEP_REMOTE_FILES and not wrap_async

    def _connect(self):
        """Connected without `podman mount`: most tasks copy no file (see _mounted)."""
        super(PodmanConnection, self)._connect()
        self._mount_point = None
        self._connected = True

    def _mounted(self):
        """containers.podman.podman's connect (the mount), once, for a file copy."""
        if self._mount_point is None:
            PodmanConnection._connect(self)
            self._mount_point = self._mount_point or False
        return self._mount_point

    @ensure_connect
    def put_file(self, in_path, out_path):
        self._mounted()
        super(Connection, self).put_file(in_path, out_path)

    @ensure_connect
    def fetch_file(self, in_path, out_path):
        self._mounted()
        super(Connection, self).fetch_file(in_path, out_path)

    @ensure_connect
    def exec_command(self, cmd, in_data=None, sudoable=False):
        """In the container's namespaces with nsenter, else containers.podman.podman's with the standard input."""
        super(PodmanConnection, self).exec_command(cmd, in_data=in_data, sudoable=sudoable)
        argv = shlex.split(to_native(cmd, errors="surrogate_or_strict"))
        target = None if self.user not in (None, "root") or os.geteuid() != 0 else self._target()
        if target is None:
            args = ["exec", "--interactive"] if in_data is not None else ["exec"]
            if self.user:
                args += ["--user", self.user]
            return self._podman(args, argv, in_data)
        enter = ["nsenter", "--target", str(target["pid"]), "--all", "--",
                 "setpriv", "--bounding-set", target["caps"], "--", "env", "-i"] + target["env"]
        process = subprocess.Popen(enter + argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        stdout, stderr = process.communicate(input=in_data)
        return process.returncode, stdout, stderr

    def _target(self):
        """The container's init: process ID, capability bounding set and environment; None if not running."""
        cache = os.path.join(tempfile.gettempdir(), "podman_pipelined-%d" % os.geteuid())
        path = os.path.join(cache, os.path.basename(self._container_id))
        try:
            with open(path) as f:
                target = json.load(f)
            if _start_time(target["pid"]) == target["start"]:
                return target
        except (OSError, ValueError, KeyError):
            pass
        rc, stdout, _stderr = self._podman("inspect", ["--format", "json"])
        if rc != 0:
            return None
        try:
            state = json.loads(stdout)[0]
            pid = int(state["State"]["Pid"])
            with open("/proc/%d/status" % pid) as f:
                bounding = int(re.search(r"^CapBnd:\s*([0-9a-f]+)$", f.read(), re.M).group(1), 16)
            # container_uuid is for the container's systemd (podman's --systemd); podman exec leaves it out.
            env = [item for item in state["Config"]["Env"] or [] if not item.startswith("container_uuid=")]
            target = {"pid": pid, "start": _start_time(pid), "env": env,
                      "caps": ",".join(["-all"] + ["+" + name for bit, name in enumerate(CAPABILITIES)
                                                   if bounding >> bit & 1])}
        except (ValueError, KeyError, IndexError, TypeError, OSError, AttributeError):
            return None
        if not state["State"].get("Running") or not pid:
            return None
        if not os.path.isdir(cache):
            os.makedirs(cache, mode=0o700)
        with open(path + ".new", "w") as f:
            json.dump(target, f)
        os.rename(path + ".new", path)
        return target


def _start_time(pid):
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


# capabilities(7), by bit.
CAPABILITIES = [
    "chown", "dac_override", "dac_read_search", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap",
    "linux_immutable", "net_bind_service", "net_broadcast", "net_admin", "net_raw", "ipc_lock", "ipc_owner",
    "sys_module", "sys_rawio", "sys_chroot", "sys_ptrace", "sys_pacct", "sys_admin", "sys_boot", "sys_nice",
    "sys_resource", "sys_time", "sys_tty_config", "mknod", "lease", "audit_write", "audit_control", "setfcap",
    "mac_override", "mac_admin", "syslog", "wake_alarm", "block_suspend", "audit_read", "perfmon", "bpf",
    "checkpoint_restore",
]
