# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""Wording of placement messages, and PlacementError, which carries them.

Every refusal is one sentence group: "<host>, instance <name>: <problem> Fix: <fix>". CPU and GPU sets are
written as cpulists ("0-3,8"), counts with their noun ("1 GPU", "8 CPUs"), and what other instances hold as
"0-3 are held by a; 5 is held by b".
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.vllm.plugins.module_utils._cpulist import format_cpulist


class PlacementError(ValueError):
    """The instances cannot be placed; the message names host, instance, request, what is free and a fix.

    instance is the instance's name (or "#N" when it has none) and position its 0-based place in the list;
    both are None for problems with the facts or the arguments.
    """

    def __init__(self, message, instance=None, position=None):
        super(PlacementError, self).__init__(message)
        self.instance = instance
        self.position = position


def type_name(value):
    """ "null", "int", "str", ... : the YAML-ish name of a value's type."""
    return "null" if value is None else type(value).__name__


def plural(count, word, plural_word=None):
    """ "1 GPU", "2 GPUs"."""
    return "%d %s" % (count, word if count == 1 else plural_word or word + "s")


def comma_list(values):
    """ "0, 1, 2" """
    return ", ".join(str(v) for v in values)


def id_ranges(values):
    """ "0-3,8" for CPU or GPU numbers, "none" for none."""
    return format_cpulist(values) if values else "none"


def holders(held, items, noun=""):
    """ "0-3 are held by a; 5 is held by b" for the items in held (a dict item -> holder); noun "CPU" prefixes."""
    by_holder = {}
    for item in sorted(items):
        by_holder.setdefault(held[item], []).append(item)
    return "; ".join(
        "%s%s %s held by %s"
        % (
            noun and noun + ("s " if len(ids) > 1 else " "),
            format_cpulist(ids),
            "is" if len(ids) == 1 else "are",
            holder,
        )
        for holder, ids in sorted(by_holder.items(), key=lambda entry: entry[1][0])
    )


def cpus_word(cpus):
    """ "CPU 3", "CPUs 3-5"."""
    return "CPU %s" % cpus[0] if len(cpus) == 1 else "CPUs %s" % format_cpulist(cpus)


def cpus_are(cpus):
    """ "CPU 3 is", "CPUs 3-5 are"."""
    return cpus_word(cpus) + (" is" if len(cpus) == 1 else " are")


def node_name(node):
    """ "NUMA node 2", or "an unknown NUMA node" for None."""
    return "an unknown NUMA node" if node is None else "NUMA node %d" % node
