# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.llmops.vllm.plugins.module_utils._warnings import merge_warnings

CROSS = 'instance big: the tensor-parallel group of GPUs 0-7 spans sockets 0 and 1 without NVLink'


def test_lines_start_with_the_host_and_the_source():
    lines, new = merge_warnings(None, [CROSS], 'gpu-node01', 'vllm_server')
    assert lines == new == ['host gpu-node01: vllm_server: ' + CROSS]
    assert merge_warnings([], ['x'], 'n1')[0] == ['host n1: x']


def test_a_preflight_that_runs_twice_shows_and_lists_each_warning_once():
    first = merge_warnings([], [CROSS, 'GPU UUIDs are unknown'], 'n1', 'vllm_server')[0]
    again, new = merge_warnings(first, [CROSS, 'GPU UUIDs are unknown'], 'n1', 'vllm_server')
    assert again == first and new == []


def test_new_warnings_are_appended_in_order_and_blank_ones_dropped():
    known = ['host n1: discovery: GPU 3 runs its PCIe link at Gen3 x8']
    lines, new = merge_warnings(known, ['', '  ', 'b', 'a', 'b'], 'n1', 'vllm_install')
    assert new == ['host n1: vllm_install: b', 'host n1: vllm_install: a']
    assert lines == known + new
