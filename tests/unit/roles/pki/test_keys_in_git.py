# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The pki preflight's warning of private keys that git would commit, run by ansible-playbook on real git work
trees."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[4]
TASKS = REPO / 'roles' / 'pki' / 'tasks' / 'keys_in_git.yml'
DEFAULTS, VARS = REPO / 'roles' / 'pki' / 'defaults' / 'main.yml', REPO / 'roles' / 'pki' / 'vars' / 'main.yml'
KEY = '-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n-----END PRIVATE KEY-----\n'

pytestmark = pytest.mark.skipif(not shutil.which('git'), reason='needs git')


def warnings(tmp_path, pki_dir, unencrypted=False):
    """The keys named by the warning, with the role's defaults and vars; unencrypted: a new CA key in clear."""
    play = tmp_path / 'play.yml'
    play.write_text(textwrap.dedent('''\
        - hosts: localhost
          gather_facts: false
          vars_files: [%s, %s]
          tasks:
            - ansible.builtin.import_tasks: %s
        ''' % (DEFAULTS, VARS, TASKS)))
    settings = json.dumps({'pki_dir': str(pki_dir), 'pki_ca_privatekey_unencrypted': unencrypted})
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / 'ansible.cfg'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_COLLECTIONS_PATH=str(REPO / 'collections'))
    result = subprocess.run([str(Path(sys.executable).parent / 'ansible-playbook'), '-i', 'localhost,', str(play),
                             '-e', 'ansible_python_interpreter=%s' % sys.executable, '-e', settings,
                             '--connection', 'local'],
                            capture_output=True, text=True, check=False, env=env, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout + result.stderr
    text = ' '.join((result.stdout + result.stderr).split())
    return [part.split(' is in clear')[0] for part in text.split('the private key ')[1:]]


def git_tree(root, ignore=''):
    subprocess.run(['git', 'init', '-q', str(root)], check=True)
    (root / '.gitignore').write_text(ignore)
    pki = root / 'inventory' / 'pki'
    (pki / 'clients').mkdir(parents=True)
    return pki


def test_keys_in_clear_that_git_would_take_are_named(tmp_path):
    pki = git_tree(tmp_path / 'repo')
    (pki / 'ca.key').write_text(KEY)
    assert warnings(tmp_path, pki) == ['%s/ca.key' % pki, '%s/clients/<client>.key' % pki]


def test_a_new_pki_dir_is_judged_by_the_work_tree_it_will_be_in(tmp_path):
    pki = git_tree(tmp_path / 'repo', 'clients/\n')
    assert warnings(tmp_path, pki / 'not-yet', unencrypted=True) == ['%s/not-yet/ca.key' % pki]
    # A new CA key gets the passphrase (the preflight refuses one in clear unless accepted).
    assert warnings(tmp_path, pki / 'not-yet') == []


def test_a_rollovers_next_and_previous_ca_keys_in_clear_are_named(tmp_path):
    pki = git_tree(tmp_path / 'repo', 'inventory/pki/clients/*.key\n')
    (pki / 'ca.key').write_text('-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIH\n-----END ENCRYPTED PRIVATE KEY-----\n')
    (pki / 'ca-next.key').write_text(KEY)
    (pki / 'ca-previous.key').write_text(KEY)
    assert warnings(tmp_path, pki) == ['%s/ca-next.key' % pki, '%s/ca-previous.key' % pki]


def test_ignored_or_encrypted_keys_and_trees_outside_git_are_not(tmp_path):
    pki = git_tree(tmp_path / 'repo', 'inventory/pki/clients/*.key\n')
    (pki / 'ca.key').write_text('$ANSIBLE_VAULT;1.1;AES256\n6162\n')
    assert warnings(tmp_path, pki) == []
    (pki / 'ca.key').write_text('-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIH\n-----END ENCRYPTED PRIVATE KEY-----\n')
    assert warnings(tmp_path, pki) == []
    (tmp_path / 'repo' / '.gitignore').write_text('*.key\n')
    (pki / 'ca.key').write_text(KEY)
    assert warnings(tmp_path, pki) == []
    outside = tmp_path / 'plain' / 'pki'
    outside.mkdir(parents=True)
    (outside / 'ca.key').write_text(KEY)
    assert warnings(tmp_path, outside) == []
