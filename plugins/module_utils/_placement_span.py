# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""Instances that span hosts: one model served by tensor_parallel_size x pipeline_parallel_size ranks spread
evenly over several hosts, with vLLM's own multi-node launcher (--nnodes, --node-rank, --master-addr,
--master-port; --headless on every host but the head) or a Ray cluster (--distributed-executor-backend ray).

An instance that spans hosts carries span: {hosts: [head, other, ...], port, backend}. Every host in span.hosts
lists the same instance (a group's group_vars), and each one's placement places only its share of the ranks:
vLLM numbers the ranks with tensor parallelism innermost (rank = stage x tensor_parallel_size + position), and
host number r (its node rank, its place in span.hosts) holds ranks r x L to (r + 1) x L - 1, L = ranks / hosts.
So the share is whole tensor-parallel groups (pipeline stages) when L is a multiple of tensor_parallel_size, or
part of one group when tensor_parallel_size is a multiple of L (every all-reduce then crosses the network, which
gets a warning); any other split is refused, as vLLM would refuse it.

parse_span(inst, value, host_name) checks the span of one host's item; local_shape(inst, span) is the host's
share; span_check(name, members) checks, across the hosts, what no single host can: that each lists the instance
the same way, and that the ranks run on one GPU model and one driver.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
from collections.abc import Mapping

from ansible_collections.llmops.vllm.plugins.module_utils._placement_text import PlacementError, comma_list, type_name

BACKENDS = ("launcher", "ray")
DEFAULT_PORT = 29500
KEYS = ("hosts", "port", "backend")


def parse_span(inst, value, host_name):
    """The validated span of an instance item ({hosts, port, backend, node_rank, nnodes, head}), or None."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        inst.fail(
            "span must be a dict with hosts (and port, backend), got %s." % type_name(value),
            "write span: {hosts: [head, other], port: %d, backend: launcher}." % DEFAULT_PORT,
        )
    unknown = sorted(set(value) - set(KEYS))
    if unknown:
        inst.fail("span has unknown keys %s." % ", ".join(unknown), "keep only %s." % ", ".join(KEYS))
    hosts = value.get("hosts")
    if (
        not isinstance(hosts, (list, tuple))
        or len(hosts) < 2
        or not all(isinstance(h, str) and h.strip() for h in hosts)
    ):
        inst.fail(
            "span.hosts must list two or more inventory hosts, the head first, got %r." % (hosts,),
            "list the hosts the instance spans, or drop span to serve it on one host.",
        )
    hosts = [h.strip() for h in hosts]
    twice = sorted(set(h for h in hosts if hosts.count(h) > 1))
    if twice:
        inst.fail("span.hosts lists %s twice." % ", ".join(twice), "list each host once.")
    if host_name not in hosts:
        inst.fail(
            "spans hosts %s, which do not include this host." % ", ".join(hosts),
            "list the instance only on the hosts of its span.hosts (the group_vars of a group that holds them).",
        )
    port = value.get("port", DEFAULT_PORT)
    if isinstance(port, str) and port.strip().isdigit():
        port = int(port)
    if isinstance(port, bool) or not isinstance(port, int) or not 1024 <= port <= 65534:
        inst.fail(
            "span.port must be a port from 1024 to 65534 (the rank guard takes the next one), got %r." % (port,),
            "set span.port, e.g. 29500.",
        )
    backend = value.get("backend", "launcher")
    if backend not in BACKENDS:
        inst.fail(
            "span.backend must be launcher or ray, got %r." % (backend,),
            "set span.backend: launcher (vLLM's own multi-node launcher) or ray (a Ray cluster).",
        )
    return {
        "hosts": hosts,
        "head": hosts[0],
        "nnodes": len(hosts),
        "node_rank": hosts.index(host_name),
        "port": port,
        "backend": backend,
    }


def local_shape(inst, span):
    """(ranks here, tensor_parallel_size here, pipeline_parallel_size here, warnings) of this host's share."""
    nnodes = span["nnodes"]
    if inst.ranks % nnodes:
        inst.fail(
            "spreads %s over %d hosts, which do not split evenly."
            % ("%d ranks (tensor_parallel_size %d x pipeline_parallel_size %d)" % (inst.ranks, inst.tp, inst.pp),
               nnodes),
            "make tensor_parallel_size x pipeline_parallel_size a multiple of the number of hosts in span.hosts.",
        )
    here = inst.ranks // nnodes
    if here % inst.tp == 0:
        return here, inst.tp, here // inst.tp, []
    if inst.tp % here == 0:
        warning = (
            "its tensor-parallel groups of %d span %d hosts (%d ranks on each): every all-reduce (several per layer, "
            "on every step) crosses the network; prefer tensor_parallel_size %d per host and pipeline_parallel_size "
            "across the hosts." % (inst.tp, inst.tp // here, here, here)
        )
        return here, here, 1, [warning]
    inst.fail(
        "puts %d ranks on each of its %d hosts, which cut its tensor-parallel groups of %d unevenly."
        % (here, nnodes, inst.tp),
        "choose tensor_parallel_size and pipeline_parallel_size so that each host holds whole tensor-parallel "
        "groups (or an even part of one).",
    )
    return None


def _canonical(item):
    return json.dumps(item, sort_keys=True, default=str)


def span_check(name, members):
    """Refuse, with one PlacementError, what only the hosts together show about the instance `name`.

    members: {host: {'item': its instance item, or None when the host does not list it, 'gpu': its gpu fact,
    'gpu_indices': the GPUs its placement gave the instance}} for every host in the instance's span.hosts.
    Returns the instance's hosts in node-rank order.
    """
    hosts = sorted(members)
    listed = {h: m["item"] for h, m in members.items() if m.get("item") is not None}
    missing = [h for h in hosts if h not in listed]
    label = "instance %s" % name
    if not listed:
        raise PlacementError("%s: no host lists it. Fix: list it on the hosts of its span.hosts." % label)
    if missing:
        raise PlacementError(
            "%s: spans %s, but %s not list it in vllm_instances. Fix: define the instance once, in the group_vars of "
            "a group that holds all its hosts." % (label, comma_list(hosts), comma_list(missing)
                                                   + (" does" if len(missing) == 1 else " do"))
        )
    forms = {}
    for host in hosts:
        forms.setdefault(_canonical(listed[host]), []).append(host)
    if len(forms) > 1:
        items = [listed[hs[0]] for hs in forms.values()]
        keys = sorted(k for k in set().union(*items) if len(set(_canonical(i.get(k)) for i in items)) > 1)
        raise PlacementError(
            "%s: its hosts list it differently (%s differ: %s). Fix: define the instance once, in the group_vars of "
            "a group that holds all its hosts." % (label, ", ".join(keys),
                                                   "; ".join(comma_list(hs) for hs in forms.values()))
        )
    item = listed[hosts[0]]
    span_hosts = list(item["span"]["hosts"])
    if sorted(span_hosts) != hosts:
        raise PlacementError(
            "%s: span.hosts lists %s, but the check got %s. Fix: check every host of span.hosts."
            % (label, comma_list(span_hosts), comma_list(hosts))
        )
    if (item.get("device") or "cuda") == "cuda":
        for what, read in (
            ("GPU models", lambda m: sorted(set(
                d.get("name") for d in m["gpu"].get("devices") or [] if d.get("index") in m["gpu_indices"]))),
            ("NVIDIA driver versions", lambda m: [m["gpu"].get("driver_version")]),
        ):
            seen = {}
            for host in span_hosts:
                seen.setdefault(", ".join(str(v) for v in read(members[host])), []).append(host)
            if len(seen) > 1:
                raise PlacementError(
                    "%s: its ranks would run on mixed %s (%s): vLLM needs one GPU model and one driver for all the "
                    "ranks of an instance. Fix: span hosts of one kind, on one driver version."
                    % (label, what, "; ".join("%s on %s" % (v, comma_list(hs)) for v, hs in seen.items()))
                )
    return span_hosts
