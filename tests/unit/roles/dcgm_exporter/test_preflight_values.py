# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The dcgm_exporter preflight's check of the two values its unit's command line holds as they are, run as the role
runs it (the task taken from tasks/preflight.yml, under ansible-playbook)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[4]
PREFLIGHT = REPO / 'roles' / 'dcgm_exporter' / 'tasks' / 'preflight.yml'
NAME = 'Check the listen address and the host engine'


def run(tmp_path, address, hostengine):
    block = [t for t in yaml.safe_load(PREFLIGHT.read_text()) if 'block' in t][0]['block']
    [task] = [t for t in block if t['name'] == NAME]
    play = [{'hosts': 'localhost', 'gather_facts': False, 'tasks': [task]}]
    (tmp_path / 'play.yml').write_text(yaml.safe_dump(play))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / 'ansible.cfg'), ANSIBLE_NOCOLOR='1')
    variables = {'dcgm_exporter_listen_address': address, 'dcgm_exporter_hostengine': hostengine,
                 'ansible_python_interpreter': sys.executable}
    result = subprocess.run([str(Path(sys.executable).parent / 'ansible-playbook'), '-i', 'localhost,', '-c', 'local',
                             str(tmp_path / 'play.yml'), '-e', json.dumps(variables)],
                            capture_output=True, text=True, check=False, env=env, stdin=subprocess.DEVNULL)
    return result.returncode, ' '.join(result.stdout.split())


@pytest.mark.parametrize('address, hostengine', [
    ('', 'localhost:5555'), ('10.0.0.11', ''), ('fd00::11', '[fd00::1]:5555'), ('::', 'dcgm.example.net:5555'),
])
def test_addresses_and_host_ports_pass(tmp_path, address, hostengine):
    assert run(tmp_path, address, hostengine)[0] == 0


@pytest.mark.parametrize('address, hostengine', [
    ('0.0.0.0 --collectors /etc/shadow', 'localhost:5555'),
    ('10.0.0.11\nExecStartPre=+/bin/id', 'localhost:5555'),
    ('', 'localhost:5555 --address 0.0.0.0:1'),
    ('', 'localhost'),
])
def test_a_value_that_adds_an_argument_or_a_line_is_refused(tmp_path, address, hostengine):
    code, output = run(tmp_path, address, hostengine)
    assert code != 0
    assert 'dcgm_exporter: dcgm_exporter_listen_address' in output and 'Fix: correct them' in output, output
