# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""awx/vars/controller.yml, the job templates and workflows awx/controller.yml creates: every survey is valid by
AWX's survey schema, names a variable the collection reads, and every template a playbook that exists."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[3]
CONTROLLER = yaml.safe_load((REPO / 'awx' / 'vars' / 'controller.yml').read_text())
TEMPLATES = CONTROLLER['awx_job_templates']
# AWX's survey question types and the fields each question must have (awx/main/models/mixins.py).
TYPES = {'text', 'textarea', 'password', 'integer', 'float', 'multiplechoice', 'multiselect'}
REQUIRED = {'question_name', 'variable', 'type', 'required'}
KNOWN = REQUIRED | {'question_description', 'default', 'choices', 'min', 'max', 'new_question'}
QUESTIONS = [(t['name'], q) for t in TEMPLATES for q in t['survey']]


def _sources():
    return '\n'.join(p.read_text() for d in ('playbooks', 'roles') for p in (REPO / d).rglob('*.yml'))


def test_every_template_runs_a_playbook_that_exists():
    names = [t['name'] for t in TEMPLATES]
    assert len(names) == len(set(names))
    for template in TEMPLATES:
        assert (REPO / template['playbook']).is_file(), template
        assert template['description'] and isinstance(template['survey'], list)


def test_the_day_2_operations_each_have_a_template():
    playbooks = {t['playbook'] for t in TEMPLATES}
    assert {'playbooks/site.yml', 'playbooks/preflight.yml', 'playbooks/facts.yml', 'playbooks/rolling_upgrade.yml',
            'playbooks/diagnose.yml', 'playbooks/benchmark.yml', 'playbooks/autotune.yml',
            'playbooks/revoke.yml'} <= playbooks


@pytest.mark.parametrize('template, question', QUESTIONS, ids=['%s: %s' % (t, q['variable']) for t, q in QUESTIONS])
def test_each_question_is_valid_by_awxs_survey_schema(template, question):
    assert REQUIRED.issubset(question) and KNOWN.issuperset(question), (template, question)
    assert question['type'] in TYPES and isinstance(question['required'], bool)
    assert re.match(r'^[a-zA-Z_][a-zA-Z0-9_]*$', question['variable'])
    default = question.get('default')
    if question['type'] in ('multiplechoice', 'multiselect'):
        choices = question['choices']
        assert isinstance(choices, list) and choices and all(isinstance(c, str) for c in choices)
        assert len(choices) == len(set(choices))
        given = [] if default in (None, '') else (default.split('\n') if question['type'] == 'multiselect'
                                                  else [default])
        assert all(d in choices for d in given), (default, choices)
        assert question['required'] is False or given, 'a required choice needs a default'
    if question['type'] in ('integer', 'float'):
        low, high = question['min'], question['max']
        assert low <= high and (default is None or low <= default <= high)
        assert question['type'] == 'float' or all(isinstance(v, int) for v in (low, high) if v is not None)
    if question['type'] in ('text', 'textarea', 'password'):
        assert 0 <= question.get('min', 0) <= question.get('max', 1024)
        assert default is None or question.get('min', 0) <= len(default) <= question.get('max', 1024)


def test_each_survey_names_its_variables_once_and_the_collection_reads_them():
    sources = _sources()
    for template in TEMPLATES:
        variables = [q['variable'] for q in template['survey']]
        assert len(variables) == len(set(variables)), template['name']
        for variable in variables + list(template.get('extra_vars') or {}):
            assert re.search(r'\b%s\b' % variable, sources), (template['name'], variable)


def test_the_stages_to_choose_are_site_ymls():
    stages = yaml.safe_load((REPO / 'playbooks' / 'vars' / 'stages.yml').read_text())['llmops_stages']
    applied = [s['role'] for s in stages if not s.get('check_only')]
    (question,) = [q for t in TEMPLATES for q in t['survey'] if q['variable'] == 'llmops_only_stages']
    assert question['choices'] == applied


def test_each_workflow_chains_templates_that_exist():
    names = {t['name'] for t in TEMPLATES}
    for workflow in CONTROLLER['awx_workflows']:
        assert workflow['steps'] and set(workflow['steps']) <= names, workflow
    (smoke,) = [t for t in TEMPLATES if t['name'] == 'llmops: smoke test']
    assert smoke['extra_vars']['benchmark_fail_on_errors'] is True


def test_the_job_templates_playbook_passes_syntax_check():
    """With the awx.awx collection of the ansible package, as the project's ansible.cfg finds it."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / 'ansible.cfg'))
    result = subprocess.run([str(pathlib.Path(sys.executable).parent / 'ansible-playbook'), '--syntax-check',
                             'awx/controller.yml'], cwd=REPO, env=env, capture_output=True, text=True, check=False,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout + result.stderr
