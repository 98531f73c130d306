# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The log_sink preflight's check of the memory limit redis.conf holds as it is, run as the role runs it (the task
taken from tasks/preflight.yml, under ansible-playbook)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[4]
PREFLIGHT = REPO / 'roles' / 'log_sink' / 'tasks' / 'preflight.yml'


def run(tmp_path, maxmemory):
    [task] = [t for t in yaml.safe_load(PREFLIGHT.read_text()) if t['name'] == 'Check the memory limit']
    (tmp_path / 'play.yml').write_text(yaml.safe_dump([{'hosts': 'localhost', 'gather_facts': False,
                                                        'tasks': [task]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / 'ansible.cfg'), ANSIBLE_NOCOLOR='1')
    variables = {'log_sink_maxmemory': maxmemory, 'ansible_python_interpreter': sys.executable}
    result = subprocess.run([str(Path(sys.executable).parent / 'ansible-playbook'), '-i', 'localhost,', '-c', 'local',
                             str(tmp_path / 'play.yml'), '-e', json.dumps(variables)],
                            capture_output=True, text=True, check=False, env=env, stdin=subprocess.DEVNULL)
    return result.returncode, ' '.join(result.stdout.split())


@pytest.mark.parametrize('maxmemory, passes', [
    ('512mb', True), ('2gb', True), ('1073741824', True), ('100M', True),
    ('512mb\nrename-command CONFIG ""', False), ('512mb noeviction', False), ('lots', False),
])
def test_only_a_size_passes(tmp_path, maxmemory, passes):
    code, output = run(tmp_path, maxmemory)
    assert (code == 0) == passes, output
    if not passes:
        assert 'log_sink: log_sink_maxmemory' in output and 'Fix: write it as a number' in output, output
