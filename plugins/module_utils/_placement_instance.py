# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""Validation of one item of the instance list that placement gets.

Instance(host, item, position, names) checks what placement reads of an item: name (unique), device (cuda or
cpu, default cuda), tensor_parallel_size and pipeline_parallel_size (positive integers, default 1; ranks is
their product), cpus_per_instance (positive integer), allow_degraded_pcie (a boolean or its YAML spelling),
gpus (GPU indexes or UUIDs), cpus (a cpulist or CPU numbers, exclusive with cpus_per_instance) and span (an
instance over several hosts, _placement_span: tp, pp and ranks are then this host's share, and the instance's own
are global_tp and global_pp). Other keys are ignored. The item is checked again here, after the roles' argument
specs, because the filter can be called on any list. host gives its label to messages, and its name to span.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from collections.abc import Mapping

from ansible_collections.llmops.vllm.plugins.module_utils._cpulist import parse_cpulist
from ansible_collections.llmops.vllm.plugins.module_utils._placement_span import local_shape, parse_span
from ansible_collections.llmops.vllm.plugins.module_utils._placement_text import PlacementError, plural, type_name

DEVICES = ("cuda", "cpu")
_TRUE_STRINGS = ("true", "yes", "on", "1")
_FALSE_STRINGS = ("false", "no", "off", "0", "")


def parse_cpus(value):
    """Sorted CPU numbers of a cpulist string, a CPU number or a list of them; ValueError otherwise."""
    if isinstance(value, str):
        return parse_cpulist(value)
    if isinstance(value, bool):
        raise ValueError("expected a cpulist or a list of CPU numbers, got %s" % value)
    if isinstance(value, int):
        cpus = [value]
    elif isinstance(value, (list, tuple)):
        cpus = []
        for item in value:
            if isinstance(item, str):
                cpus.extend(parse_cpulist(item))
            elif isinstance(item, int) and not isinstance(item, bool):
                cpus.append(item)
            else:
                raise ValueError("expected CPU numbers, got %r (%s)" % (item, type_name(item)))
    else:
        raise ValueError('expected a cpulist such as "0-7,16" or a list of CPU numbers, got %s' % type_name(value))
    if any(cpu < 0 for cpu in cpus):
        raise ValueError("CPU numbers cannot be negative")
    return sorted(set(cpus))


class Instance(object):
    """One validated item of the instance list; fail() raises the PlacementError of this instance."""

    def __init__(self, host, item, position, names):
        self.host = host
        self.position = position
        name = item.get("name") if isinstance(item, Mapping) else None
        self.label = str(name) if isinstance(name, str) and name.strip() else "#%d" % (position + 1)
        if not isinstance(item, Mapping):
            self.fail(
                "is %s, not a dict." % type_name(item),
                "make every item of the instance list a dict with at least name and device.",
            )
        if not isinstance(name, (str, type(None))):
            self.fail(
                "name must be a string, got %r (%s)." % (name, type_name(name)),
                'quote the name in the inventory, e.g. name: "%s".' % (name,),
            )
        if not (name and name.strip()):
            self.fail(
                "has no name (item %d of the list; got %r)." % (position + 1, name),
                "give every instance a unique name.",
            )
        self.name = str(name)
        if self.name in names:
            self.fail(
                "the name is already used by item %d of the list." % (names[self.name] + 1),
                "give every instance a unique name.",
            )
        device = item.get("device")
        device = "cuda" if device is None else device
        if not isinstance(device, str) or device.strip().lower() not in DEVICES:
            self.fail("device must be cuda or cpu, got %r." % (device,), "set device: cuda or device: cpu.")
        self.device = device.strip().lower()
        self.tp = self._positive_int(item, "tensor_parallel_size", 1)
        self.pp = self._positive_int(item, "pipeline_parallel_size", 1)
        self.ranks = self.tp * self.pp
        self.global_tp, self.global_pp = self.tp, self.pp
        self.span = parse_span(self, item.get("span"), getattr(host, "name", None))
        self.span_warnings = []
        if self.span:
            self.ranks, self.tp, self.pp, self.span_warnings = local_shape(self, self.span)
        self.cpus_per_instance = self._positive_int(item, "cpus_per_instance", None)
        self.allow_degraded = self._bool(item, "allow_degraded_pcie")
        self.gpus = self._gpu_refs(item.get("gpus"))
        # A share of a GPU's memory: such instances may name the same GPUs in gpus (_serving_rules checks the sum).
        self.shares_gpus = item.get("gpu_memory_utilization") is not None
        self.cpus = None
        if item.get("cpus") is not None:
            try:
                self.cpus = parse_cpus(item.get("cpus"))
            except ValueError as e:
                self.fail(
                    "cpus %r is not a CPU list (%s)." % (item.get("cpus"), e), 'write cpus as "0-7,16" or [0, 1].'
                )
            if not self.cpus:
                self.fail("cpus is empty.", "list the CPUs it may use, or drop cpus to let placement choose.")
            if self.cpus_per_instance is not None:
                self.fail(
                    "sets both cpus and cpus_per_instance.",
                    "keep one of them: cpus picks the CPUs, cpus_per_instance the count.",
                )
        if self.device == "cpu" and self.gpus is not None:
            self.fail("has device cpu but lists gpus %s." % (item.get("gpus"),), "drop gpus, or set device: cuda.")

    def fail(self, problem, fix):
        raise PlacementError(
            "%s, instance %s: %s Fix: %s" % (self.host.label, self.label, problem, fix),
            instance=self.label,
            position=self.position,
        )

    def asks(self):
        """ "8 GPUs (tensor_parallel_size 4 x pipeline_parallel_size 2)", or ranks for a cpu instance."""
        what = "GPU" if self.device == "cuda" else "rank"
        shape = "tensor_parallel_size %d x pipeline_parallel_size %d" % (self.global_tp, self.global_pp)
        if self.span:
            shape += " over %d hosts, %d here" % (self.span["nnodes"], self.ranks)
        return "%s (%s)" % (plural(self.ranks, what), shape)

    def _positive_int(self, item, key, default):
        value = item.get(key)
        if value is None:
            return default
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            self.fail("%s must be a positive integer, got %r." % (key, value), "set %s to 1 or more." % key)
        return int(value)

    def _bool(self, item, key):
        value = item.get(key)
        if value is None or isinstance(value, bool):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in _TRUE_STRINGS + _FALSE_STRINGS:
            return value.strip().lower() in _TRUE_STRINGS
        self.fail("%s must be true or false, got %r." % (key, value), "set %s: true or false." % key)
        return False

    def _gpu_refs(self, value):
        if value is None:
            return None
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        elif isinstance(value, int) and not isinstance(value, bool):
            value = [value]
        if not isinstance(value, (list, tuple)) or not value:
            self.fail(
                "gpus must be a non-empty list of GPU indexes or UUIDs, got %r." % (value,),
                "write gpus as [0, 1] or [GPU-..., GPU-...], or drop it to let placement choose.",
            )
        refs = []
        for ref in value:
            if isinstance(ref, str) and ref.strip().isdigit():
                ref = int(ref)
            if isinstance(ref, bool) or not isinstance(ref, (int, str)):
                self.fail(
                    "gpus lists %r, which is neither a GPU index nor a UUID." % (ref,),
                    "write gpus as [0, 1] or [GPU-..., GPU-...].",
                )
            refs.append(ref.strip() if isinstance(ref, str) else int(ref))
        return refs
