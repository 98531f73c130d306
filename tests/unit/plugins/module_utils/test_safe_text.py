# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._safe_text import HUB_ID, SERVED_MODEL_NAME, safe_path


@pytest.mark.parametrize('path', ['/', '/etc/llmops-vllm/pki', '/var/lib/vllm/models/Qwen2.5-7B@v1',
                                  '/a/b.c/d_e+f=g,h:i'])
def test_paths_a_config_file_can_hold_unquoted(path):
    assert safe_path(path)


@pytest.mark.parametrize('path', ['', 'relative/path', '/a b', '/a\n', '/a\nExecStartPre=+/bin/id', '/a;b', '/a{b}',
                                  '/a$b', '/a%n', '/a"b', "/a'b", '/a#b', '/var/../etc', '/var/..', None, 5])
def test_anything_else_is_not(path):
    assert not safe_path(path)


def test_names_end_where_the_value_ends():
    assert SERVED_MODEL_NAME.match('meta-llama/Llama-3.1-8B') and not SERVED_MODEL_NAME.match('tiny\n')
    assert HUB_ID.match('Qwen/Qwen2.5-7B-Instruct') and not HUB_ID.match('Qwen/Qwen2.5\n') and not HUB_ID.match('a/b/c')
