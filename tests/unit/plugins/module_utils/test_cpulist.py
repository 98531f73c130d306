# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.llmops.vllm.plugins.module_utils._cpulist import (
    cpus_from_mask_words,
    format_cpulist,
    parse_cpulist,
)


@pytest.mark.parametrize('text, cpus', [
    ('', []),
    ('\n', []),
    ('0', [0]),
    ('0-3', [0, 1, 2, 3]),
    ('0-1,64-65\n', [0, 1, 64, 65]),
    ('5,3,3-4', [3, 4, 5]),
    (' 0 - 1 , 4 ', [0, 1, 4]),
])
def test_parse_cpulist(text, cpus):
    assert parse_cpulist(text) == cpus


@pytest.mark.parametrize('text', ['a', '3-1', '1-', '0-x'])
def test_parse_cpulist_rejects_garbage(text):
    with pytest.raises(ValueError):
        parse_cpulist(text)


@pytest.mark.parametrize('cpus, text', [
    ([], ''),
    ([7], '7'),
    ([0, 1, 2, 5], '0-2,5'),
    ([95, 64, 0, 31] + list(range(1, 31)) + list(range(65, 95)), '0-31,64-95'),
    ([1, 1, 2], '1-2'),
])
def test_format_cpulist(cpus, text):
    assert format_cpulist(cpus) == text


@pytest.mark.parametrize('words, cpus', [
    ([], []),
    ([0, 0], []),
    ([0xFFFFFFFF, 0], list(range(32))),
    ([0xFFFFFFFF00000000, 0xFFFFFFFF00000000], list(range(32, 64)) + list(range(96, 128))),
    ([1 << 63], [63]),
])
def test_cpus_from_mask_words(words, cpus):
    assert cpus_from_mask_words(words) == cpus


@given(st.sets(st.integers(min_value=0, max_value=4095), max_size=300))
def test_format_then_parse_round_trips(cpus):
    assert parse_cpulist(format_cpulist(cpus)) == sorted(cpus)
