# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import json
import re
import subprocess
import sys
import sysconfig

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._toolchain import (
    PYTHON_PROBE,
    ToolchainInfoError,
    collect_toolchain,
    find_tools,
    probe_python,
    resolve_python,
)


def _executable(path, text='#!/bin/sh\n'):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return str(path)


def _answer(include, version='3.11'):
    """A run_command that answers the probe as a Python with this include directory would."""
    calls = []

    def run_command(argv):
        calls.append(argv)
        return 0, json.dumps({'include': str(include), 'version': version}) + '\n', ''
    run_command.calls = calls
    return run_command


@pytest.fixture
def bin_dir(tmp_path):
    """A PATH directory with gcc and cmake, a non-executable g++, and a python3."""
    bin_dir = tmp_path / 'bin'
    _executable(bin_dir / 'gcc')
    _executable(bin_dir / 'cmake')
    (bin_dir / 'g++').write_text('not executable')
    _executable(bin_dir / 'python3')
    return bin_dir


def test_find_tools_in_order(bin_dir):
    found = find_tools(['gcc', 'g++', 'cmake', 'git'], path=str(bin_dir))
    assert list(found.items()) == [('gcc', True), ('g++', False), ('cmake', True), ('git', False)]


def test_probe_runs_the_given_python_on_this_machine():
    """The probe itself, run by this test's interpreter: it must report that interpreter."""
    out = subprocess.run([sys.executable, '-c', PYTHON_PROBE], check=True, capture_output=True, text=True).stdout
    assert json.loads(out) == {'include': sysconfig.get_paths()['include'],
                               'version': '%d.%d' % sys.version_info[:2]}


@pytest.mark.parametrize('headers, expected', [(True, True), (False, False)], ids=['dev', 'no-dev'])
def test_collect_toolchain(tmp_path, bin_dir, headers, expected):
    include = tmp_path / 'include' / 'python3.11'
    include.mkdir(parents=True)
    if headers:
        (include / 'Python.h').write_text('/* headers */\n')
    run_command = _answer(include)
    result = collect_toolchain(run_command, ['gcc', 'g++', 'cmake', 'git'], str(bin_dir / 'python3'),
                               path=str(bin_dir))
    assert result == {
        'toolchain': {'gcc': True, 'g++': False, 'cmake': True, 'git': False, 'python3-dev': expected},
        'python_version': '3.11',
        'python_include': str(include),
    }
    assert run_command.calls == [[str(bin_dir / 'python3'), '-c', PYTHON_PROBE]]


def test_bare_python_name_is_looked_up_on_path(bin_dir):
    assert resolve_python('python3', path=str(bin_dir)) == str(bin_dir / 'python3')


@pytest.mark.parametrize('python, on_path', [
    ('/nonexistent/python3', False),
    ('python9', True),
    ('BIN/g++', False),
    ('BIN', False),
], ids=['missing', 'not-on-path', 'not-executable', 'directory'])
def test_unusable_python_fails_clearly(bin_dir, python, on_path):
    python = python.replace('BIN', str(bin_dir))
    message = 'python %s is not an executable file%s. Fix: ' % (python, ' on PATH' if on_path else '')
    with pytest.raises(ToolchainInfoError, match='^' + re.escape(message)):
        resolve_python(python, path=str(bin_dir))


@pytest.mark.parametrize('answer, message', [
    ((1, '', 'Traceback ...\nImportError: No module named sysconfig\n'), 'failed with rc 1: Traceback'),
    ((0, 'Python 3.11.2\n', ''), 'gave no include directory and version'),
    ((0, '{"include": "/usr/include/python3.11"}', ''), 'gave no include directory and version'),
], ids=['fails', 'not-json', 'no-version'])
def test_python_that_does_not_answer_fails_clearly(answer, message):
    with pytest.raises(ToolchainInfoError, match=message):
        probe_python(lambda argv: answer, '/usr/bin/python3')
