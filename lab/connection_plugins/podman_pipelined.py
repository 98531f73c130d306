# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""containers.podman.podman with Ansible's pipelining: the lab's and the tests' connection to their containers."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = """
name: podman_pipelined
short_description: Run tasks in a lab container with podman exec, pipelined
description:
  - The connection plugin C(containers.podman.podman), with the module sent on the standard input of one
    C(podman exec --interactive) (Ansible's pipelining) instead of a temporary file, C(chmod), run and clean-up
    (four C(podman exec) per task). A play takes about two thirds of the time (docs/benchmarks.md).
  - C(containers.podman.podman) does not attach the standard input, so it cannot pipeline; Podman 4.3 passes
    a 3 MB input whole (measured on the lab machines).
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

import shlex

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

    @ensure_connect
    def exec_command(self, cmd, in_data=None, sudoable=False):
        """containers.podman.podman's, with the standard input attached when there is input."""
        super(PodmanConnection, self).exec_command(cmd, in_data=in_data, sudoable=sudoable)
        args = ["exec", "--interactive"] if in_data is not None else ["exec"]
        if self.user:
            args += ["--user", self.user]
        return self._podman(args, shlex.split(to_native(cmd, errors="surrogate_or_strict")), in_data)
