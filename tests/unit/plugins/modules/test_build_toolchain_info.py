# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import json
import pathlib

import pytest
import yaml

from ansible_collections.llmops.vllm.plugins.modules import build_toolchain_info


def _executable(path, text='#!/bin/sh\nexit 0\n'):
    path.write_text(text)
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def host(tmp_path, monkeypatch):
    """PATH holding gcc, g++ and git (no cmake), and a fake Python whose include directory holds Python.h."""
    bin_dir, include = tmp_path / 'bin', tmp_path / 'include' / 'python3.11'
    bin_dir.mkdir()
    include.mkdir(parents=True)
    (include / 'Python.h').write_text('/* headers */\n')
    for tool in ('gcc', 'g++', 'git'):
        _executable(bin_dir / tool)
    answer = json.dumps({'include': str(include), 'version': '3.11'})
    python = _executable(bin_dir / 'python3', "#!/bin/sh\necho '%s'\n" % answer)
    monkeypatch.setenv('PATH', str(bin_dir))
    return {'python': python, 'include': include}


@pytest.mark.parametrize('check_mode', [False, True])
def test_reports_the_toolchain(run_module, host, check_mode):
    result = run_module(build_toolchain_info, {'python': host['python'], '_ansible_check_mode': check_mode})
    assert (result['rc'], result['changed']) == (0, False)
    assert result['toolchain'] == {'gcc': True, 'g++': True, 'cmake': False, 'git': True, 'python3-dev': True}
    assert (result['python_version'], result['python_include']) == ('3.11', str(host['include']))


def test_missing_headers_and_bare_python_name(run_module, host):
    (host['include'] / 'Python.h').unlink()
    result = run_module(build_toolchain_info, {'python': 'python3', 'tools': ['gcc', 'cmake']})
    assert result['toolchain'] == {'gcc': True, 'cmake': False, 'python3-dev': False}


def test_python_that_fails_fails_the_module(run_module, host):
    _executable(pathlib.Path(host['python']), '#!/bin/sh\necho "python3: broken" >&2\nexit 3\n')
    result = run_module(build_toolchain_info, {'python': host['python']})
    assert (result['rc'], result['failed']) == (1, True)
    assert result['msg'] == '%s -c <probe> failed with rc 3: python3: broken' % host['python']


def test_missing_python_fails_the_module(run_module, host, tmp_path):
    python = str(tmp_path / 'venv' / 'bin' / 'python')
    result = run_module(build_toolchain_info, {'python': python})
    assert (result['rc'], result['failed']) == (1, True)
    assert result['msg'].startswith('python %s is not an executable file. Fix:' % python)


def test_run_command_patched_on_the_module(run_module, host, monkeypatch):
    """The probe goes through AnsibleModule.run_command, so a test or a become wrapper sees the argv."""
    seen = []

    def run_command(self, argv, **kwargs):
        seen.append(argv[:2])
        return 0, json.dumps({'include': '/nonexistent', 'version': '3.12'}), ''
    monkeypatch.setattr(build_toolchain_info.AnsibleModule, 'run_command', run_command)
    result = run_module(build_toolchain_info, {'python': host['python'], 'tools': []})
    assert (result['toolchain'], result['python_version']) == ({'python3-dev': False}, '3.12')
    assert seen == [[host['python'], '-c']]


def test_runs_the_real_python(run_module):
    result = run_module(build_toolchain_info, {'python': 'python3', 'tools': ['sh']})
    assert result['rc'] == 0 and result['toolchain']['sh'] is True
    assert result['python_version'].startswith('3.')


def test_docs_match_argument_spec():
    docs = yaml.safe_load(build_toolchain_info.DOCUMENTATION)
    yaml.safe_load(build_toolchain_info.EXAMPLES)
    returned = yaml.safe_load(build_toolchain_info.RETURN)
    assert docs['module'] == 'build_toolchain_info'
    assert {name: (o['type'], o['default']) for name, o in docs['options'].items()} == {
        name: (spec['type'], spec['default']) for name, spec in build_toolchain_info.ARGUMENT_SPEC.items()}
    assert docs['options']['tools']['elements'] == build_toolchain_info.ARGUMENT_SPEC['tools']['elements']
    assert set(returned) == {'toolchain', 'python_version', 'python_include'}
