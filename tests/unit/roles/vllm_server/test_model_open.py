# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""roles/vllm_server/files/vllm-model-open with the real age: a model sealed by model_seal opens, checks its
checksums and execs the command; a wrong key, a changed file or a missing credential exit 78 with the fix."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from ansible_collections.llmops.vllm.plugins.modules import model_seal

pytestmark = pytest.mark.skipif(not shutil.which('age'), reason='age is not installed')

OPENER = pathlib.Path(__file__).parents[4] / 'roles' / 'vllm_server' / 'files' / 'vllm-model-open'


def keygen():
    identity = subprocess.run(['age-keygen'], capture_output=True, text=True, check=True).stdout
    public = subprocess.run(['age-keygen', '-y'], input=identity, capture_output=True, text=True, check=True)
    return identity, public.stdout.strip()


@pytest.fixture
def sealed(tmp_path, run_module):
    src = tmp_path / 'model'
    src.mkdir()
    (src / 'config.json').write_text('{"max_position_embeddings": 2048}')
    (src / 'model.safetensors').write_bytes(b'\x10\x00\x00\x00\x00\x00\x00\x00{"__metadata__":{}}' + b'\x00' * 4096)
    identity, recipient = keygen()
    result = run_module(model_seal, {'src': str(src), 'dest': str(tmp_path / 'sealed'), 'recipient': recipient})
    assert result['rc'] == 0 and result['changed'], result
    again = run_module(model_seal, {'src': str(src), 'dest': str(tmp_path / 'sealed'), 'recipient': recipient})
    assert not again['changed']
    return tmp_path, identity


def open_model(tmp_path, identity, command=('/bin/true',)):
    creds = tmp_path / 'creds'
    creds.mkdir(exist_ok=True)
    if identity is not None:
        (creds / 'model-key').write_text(identity)
    env = dict(os.environ, CREDENTIALS_DIRECTORY=str(creds))
    return subprocess.run([sys.executable, str(OPENER), '--instance', 'beta', '--key', 'lab', '--sealed',
                           str(tmp_path / 'sealed'), '--into', str(tmp_path / 'plain' / 'model'), '--', *command],
                          capture_output=True, text=True, env=env, check=False)


def test_the_sealed_files_are_ciphertext(sealed):
    tmp_path, _identity = sealed
    names = sorted(p.name for p in (tmp_path / 'sealed').iterdir())
    assert names == ['config.json', 'llmops-sealed.json', 'model.safetensors.age']
    assert (tmp_path / 'sealed' / 'model.safetensors.age').read_bytes().startswith(b'age-encryption.org/v1\n')
    assert b'__metadata__' not in (tmp_path / 'sealed' / 'model.safetensors.age').read_bytes()


def test_the_model_opens_with_its_checksums_verified_and_the_command_runs(sealed):
    tmp_path, identity = sealed
    run = open_model(tmp_path, identity, ['/bin/cat', str(tmp_path / 'plain' / 'model' / 'model.safetensors')])
    assert run.returncode == 0, run.stderr
    assert 'opened 2 files' in run.stdout and 'checksums verified' in run.stdout
    assert (tmp_path / 'plain' / 'model' / 'model.safetensors').read_bytes() == (
        tmp_path / 'model' / 'model.safetensors').read_bytes()
    assert oct((tmp_path / 'plain' / 'model').stat().st_mode & 0o777) == '0o700'


def test_a_wrong_key_exits_78_naming_the_instance_and_the_fix(sealed):
    tmp_path, _identity = sealed
    run = open_model(tmp_path, keygen()[0])
    manifest = json.loads((tmp_path / 'sealed' / 'llmops-sealed.json').read_text())
    assert run.returncode == 78
    assert run.stderr.startswith('vLLM instance beta: the model key lab does not open %s, which is sealed for %s'
                                 % (tmp_path / 'sealed', manifest['recipient']))
    assert 'Fix: deliver the key it was sealed for (vllm_server_model_keys.lab' in run.stderr


def test_a_file_changed_after_sealing_is_refused(sealed):
    tmp_path, identity = sealed
    (tmp_path / 'sealed' / 'config.json').write_text('{"max_position_embeddings": 4096}')
    run = open_model(tmp_path, identity)
    assert run.returncode == 78 and 'config.json decrypts to a SHA-256 other than the manifest records' in run.stderr


def test_no_credential_is_refused(sealed):
    tmp_path, _identity = sealed
    run = open_model(tmp_path, None)
    assert run.returncode == 78 and 'no credential model-key reached the unit. Fix: run site.yml' in run.stderr
