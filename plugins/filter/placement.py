# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Filters that place vLLM instances on a host's GPUs, CPUs and NUMA nodes (vllm_placement), and check an instance
that spans hosts across them (vllm_span_check, over vllm_span_members).

Documentation: vllm_placement.yml and vllm_span_check.yml next to this file.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.module_utils._placement import PlacementError
from ansible_collections.llmops.vllm.plugins.module_utils._placement import vllm_placement as _placement
from ansible_collections.llmops.vllm.plugins.module_utils._placement_span import span_check


def vllm_placement(instances, gpu, numa, reserved_cpus=None, host=None):
    """GPUs, CPUs and NUMA nodes for each instance; see vllm_placement.yml."""
    try:
        return _placement(instances, gpu, numa, reserved_cpus=reserved_cpus, host=host)
    except PlacementError as e:
        raise AnsibleFilterError(str(e)) from e


def vllm_span_members(hosts, name, hostvars):
    """{host: {item, gpu, gpu_indices}} of instance `name` on `hosts`, from hostvars; see vllm_span_members.yml."""
    if not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError("vllm_span_members: expected the list of span.hosts of instance %s" % name)
    members = {}
    for host in hosts:
        # Not hostvars.get(): for a host outside the inventory it gives an undefined, not the default.
        values = {}
        if host in hostvars:
            values = hostvars[host]
        items = [i for i in values.get("vllm_instances") or [] if isinstance(i, dict) and i.get("name") == name]
        placed = [p for p in values.get("vllm_server_placement") or [] if p.get("name") == name]
        members[host] = {
            "item": items[0] if items else None,
            "gpu": (values.get("ansible_facts") or {}).get("gpu") or {},
            "gpu_indices": list(placed[0]["gpu_indices"]) if placed else [],
        }
    return members


def vllm_span_check(members, name):
    """The hosts of an instance that spans hosts, in node-rank order, once they agree; see vllm_span_check.yml."""
    if not isinstance(members, dict) or not all(isinstance(m, dict) for m in members.values()):
        raise AnsibleFilterError("vllm_span_check: expected {host: {item, gpu, gpu_indices}} for instance %s" % name)
    try:
        return span_check(name, members)
    except PlacementError as e:
        raise AnsibleFilterError(str(e)) from e


class FilterModule(object):
    """llmops.vllm placement filter."""

    def filters(self):
        return {
            "vllm_placement": vllm_placement,
            "vllm_span_check": vllm_span_check,
            "vllm_span_members": vllm_span_members,
        }
