# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The preflight checks of values that a unit, a flags file or redis.conf holds as they are: each task taken from
its role's tasks/preflight.yml and run under ansible-playbook, with values that pass and values that would add an
argument, a flag or a line of their own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
NEWLINE = '\nExecStartPre=+/bin/id'


def task(role, name):
    """The named task of the role's preflight, inside a block or not."""
    tasks = yaml.safe_load((REPO / 'roles' / role / 'tasks' / 'preflight.yml').read_text())
    tasks = tasks + [t for block in tasks if 'block' in block for t in block['block']]
    [found] = [t for t in tasks if t.get('name') == name]
    return found


def run_all(directory, cases):
    """Every case's result, from one ansible-playbook run: each case is the task with the case's variables."""
    tasks = [dict(task(role, name), vars=variables, ignore_errors=True, register='case_%d' % index)
             for index, ((role, name, _message), variables) in enumerate(cases)]
    results = '{{ {%s} | to_json }}' % ', '.join("'%d': case_%d" % (i, i) for i in range(len(cases)))
    tasks.append({'name': 'Keep the results', 'ansible.builtin.copy': {
        'content': results, 'dest': str(directory / 'results.json'), 'mode': '0644'}})
    (directory / 'play.yml').write_text(yaml.safe_dump([{'hosts': 'localhost', 'gather_facts': False,
                                                         'tasks': tasks}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / 'ansible.cfg'), ANSIBLE_NOCOLOR='1')
    result = subprocess.run([str(Path(sys.executable).parent / 'ansible-playbook'), '-i', 'localhost,', '-c', 'local',
                             str(directory / 'play.yml'), '-e', 'ansible_python_interpreter=%s' % sys.executable],
                            capture_output=True, text=True, check=False, env=env, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    found = json.loads((directory / 'results.json').read_text())
    return [found[str(index)] for index in range(len(cases))]


DCGM = ('dcgm_exporter', 'Check the listen address', 'dcgm_exporter: dcgm_exporter_listen_address')
ENGINE = ('dcgm_exporter', 'Check the host engine', 'dcgm_exporter: dcgm_exporter_hostengine')
SINK = ('log_sink', 'Check the memory limit', 'log_sink: log_sink_maxmemory')
NODE_EXPORTER = ('node_exporter', 'Check the systemd unit pattern, the listen address and the textfile directory',
                 'node_exporter: node_exporter_systemd_units')
DIRECTOR = ('lvs_director', "Check node exporter's textfile directory", 'lvs_director: llmops_textfile_dir')
UNITS = '(vllm-.+|nginx)\\.service'
TEXTFILE = '/var/lib/prometheus/node-exporter'


def dcgm(address):
    return {'dcgm_exporter_listen_address': address}


def engine(hostengine):
    return {'dcgm_exporter_hostengine': hostengine}


def node_exporter(units=UNITS, address='', textfile=TEXTFILE):
    return {'node_exporter_systemd_units': units, 'node_exporter_listen_address': address,
            'llmops_textfile_dir': textfile}


PASSING = [
    (DCGM, dcgm('')), (DCGM, dcgm('10.0.0.11')), (DCGM, dcgm('fd00::11')),
    (ENGINE, engine('')), (ENGINE, engine('localhost:5555')), (ENGINE, engine('[fd00::1]:5555')),
    (SINK, {'log_sink_maxmemory': '512mb'}), (SINK, {'log_sink_maxmemory': '1073741824'}),
    (NODE_EXPORTER, node_exporter()), (NODE_EXPORTER, node_exporter(address='10.0.0.11')),
    (NODE_EXPORTER, node_exporter(address='[fd00::11]')), (DIRECTOR, {'llmops_textfile_dir': TEXTFILE}),
]
REFUSED = [
    (DCGM, dcgm('0.0.0.0 --collectors /etc/shadow')),
    (DCGM, dcgm('10.0.0.11' + NEWLINE)),
    (DCGM, dcgm('10.0.0.11\n')),
    (ENGINE, engine('localhost:5555 --address 0.0.0.0:1')),
    (ENGINE, engine('localhost:5555' + NEWLINE)),
    (ENGINE, engine('localhost')),
    (SINK, {'log_sink_maxmemory': '512mb\nrename-command CONFIG ""'}),
    (SINK, {'log_sink_maxmemory': '512mb noeviction'}),
    (SINK, {'log_sink_maxmemory': '512mb\n'}),
    (NODE_EXPORTER, node_exporter(units="nginx.service' --web.config.file='/tmp/x")),
    (NODE_EXPORTER, node_exporter(units='nginx.service\nOTHER=1')),
    (NODE_EXPORTER, node_exporter(units='')),
    (NODE_EXPORTER, node_exporter(units='nginx\\')),
    (NODE_EXPORTER, node_exporter(address='0.0.0.0 --no-collector.textfile')),
    (NODE_EXPORTER, node_exporter(textfile='/var/lib/x --collector.textfile.directory=/')),
    (NODE_EXPORTER, node_exporter(textfile='/var/lib/../../etc')),
    (DIRECTOR, {'llmops_textfile_dir': '/var/lib/x' + NEWLINE}),
    (DIRECTOR, {'llmops_textfile_dir': 'relative'}),
]


@pytest.fixture(scope='module')
def results(tmp_path_factory):
    return run_all(tmp_path_factory.mktemp('preflight'), PASSING + REFUSED)


@pytest.mark.parametrize('index', range(len(PASSING)))
def test_values_a_config_file_can_hold_pass(results, index):
    assert not results[index].get('failed'), (PASSING[index], results[index])


@pytest.mark.parametrize('index', range(len(REFUSED)))
def test_a_value_that_adds_an_argument_or_a_line_is_refused(results, index):
    (_role, _name, message), _variables = REFUSED[index]
    result = results[len(PASSING) + index]
    assert result.get('failed'), REFUSED[index]
    text = ' '.join(result['msg'].split())
    assert text.startswith('host localhost: %s' % message) and 'Fix: ' in text, text
