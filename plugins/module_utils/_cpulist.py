# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""Linux cpulist strings ("0-31,64-95") and CPU bitmasks."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type


def parse_cpulist(text):
    """Return the sorted CPU numbers of a cpulist such as "0-3,8,10-11"; "" gives []."""
    cpus = set()
    for part in text.strip().split(','):
        part = part.strip()
        if not part:
            continue
        first, sep, last = part.partition('-')
        if sep:
            start, end = int(first), int(last)
            if end < start:
                raise ValueError('invalid CPU range %r' % part)
            cpus.update(range(start, end + 1))
        else:
            cpus.add(int(first))
    return sorted(cpus)


def format_cpulist(cpus):
    """Return the canonical compressed cpulist of CPU numbers, e.g. [0, 1, 2, 5] -> "0-2,5"."""
    ranges = []
    for cpu in sorted(set(cpus)):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ','.join(str(a) if a == b else '%d-%d' % (a, b) for a, b in ranges)


def cpus_from_mask_words(words, word_bits=64):
    """Return the CPU numbers set in a bitmask given as words, lowest CPUs in the first word."""
    cpus = []
    for word_index, word in enumerate(words):
        word = int(word)
        bit = 0
        while word:
            if word & 1:
                cpus.append(word_index * word_bits + bit)
            word >>= 1
            bit += 1
    return cpus
