# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The llmops.vllm.vllm_build_env filter: signature, documentation, errors, and a run through Ansible templating."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.filter import build
from ansible_collections.llmops.vllm.plugins.module_utils._build import build_plan
from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import KUNPENG920_8xA100, LAB_2CORE_CPU_ONLY

FILTERS = build.FilterModule().filters()
DOCS = Path(inspect.getsourcefile(build)).parent / 'vllm_build_env.yml'
REPO = Path(inspect.getsourcefile(build)).resolve().parents[2]


def test_filter_names():
    assert sorted(FILTERS) == ['vllm_build_env']


def test_documentation_matches_signature():
    text = DOCS.read_text()
    assert text.startswith('# Copyright (c) 2026, llmops.vllm maintainers\n')
    assert '\n---\nDOCUMENTATION:\n' in text
    docs = yaml.safe_load(text)
    assert set(docs) == {'DOCUMENTATION', 'EXAMPLES', 'RETURN'}
    documentation = docs['DOCUMENTATION']
    assert documentation['name'] == 'vllm_build_env'
    assert documentation['author'] == 'llmops.vllm maintainers (@llmops)'
    assert documentation['positional'] == '_input, gpu'
    parameters = list(inspect.signature(FILTERS['vllm_build_env']).parameters)
    assert ['_input'] + parameters[1:] == list(documentation['options'])
    assert 'llmops.vllm.vllm_build_env' in docs['EXAMPLES']
    yaml.safe_load(docs['EXAMPLES'])


def test_documented_return_keys(facts):
    returned = yaml.safe_load(DOCS.read_text())['RETURN']['_value']['contains']
    plan = FILTERS['vllm_build_env'](*reversed(facts(KUNPENG920_8xA100)), vllm_version='0.11.0', target_device='cpu')
    assert set(returned) == set(plan)


def test_filter_is_build_plan(facts):
    gpu, numa = facts(KUNPENG920_8xA100)
    options = dict(vllm_version='0.11.0', target_device='cuda', cuda_version='12.8', memory_mib=65536)
    assert FILTERS['vllm_build_env'](numa, gpu, **options) == build_plan(numa, gpu, **options)


@pytest.mark.parametrize('options, message', [
    ({'vllm_version': '0.11.0', 'target_device': 'tpu'}, r"^vllm_build_env: target_device 'tpu' is not one of"),
    ({'vllm_version': '0.11.0', 'target_device': 'cuda', 'cuda_version': '12.8'},
     r'^vllm_build_env: target_device cuda needs the CUDA architectures .* pass cuda_arch_list'),
    ({'target_device': 'cpu'}, r'^vllm_build_env: vllm_version is required'),
])
def test_errors_become_filter_errors(facts, options, message):
    gpu, numa = facts(LAB_2CORE_CPU_ONLY)
    with pytest.raises(AnsibleFilterError, match=message):
        FILTERS['vllm_build_env'](numa, gpu, memory_mib=4096, **options)


PLAYBOOK = """\
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Plan as the role would, from facts
      ansible.builtin.set_fact:
        plan: >-
          {{ numa | llmops.vllm.vllm_build_env(gpu, vllm_version='0.11.0', target_device='cpu',
             memory_mib=memtotal_mb) }}
    - name: Write it
      ansible.builtin.copy:
        content: "{{ plan | to_json }}"
        dest: "{{ out }}"
        mode: "0644"
    - name: A bad target fails with the filter's message
      ansible.builtin.debug:
        msg: "{{ numa | llmops.vllm.vllm_build_env(gpu, vllm_version='0.11.0', target_device='gpu') }}"
      ignore_errors: true
      register: bad
    - name: Check the failure
      ansible.builtin.assert:
        that: bad is failed and "target_device 'gpu' is not one of cuda, cpu" in bad.msg
"""


def test_filter_through_ansible_templating(facts, tmp_path):
    """Facts pass through Ansible 2.19 templating (tagged strings, lazy containers) into the filter unchanged."""
    gpu, numa = facts(KUNPENG920_8xA100)
    (tmp_path / 'vars.json').write_text(json.dumps({'numa': numa, 'gpu': gpu, 'memtotal_mb': 16384,
                                                    'out': str(tmp_path / 'plan.json')}))
    (tmp_path / 'play.yml').write_text(PLAYBOOK)
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / 'ansible.cfg'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_LOCALHOST_WARNING='0', ANSIBLE_INVENTORY_UNPARSED_WARNING='0')
    command = [str(Path(sys.executable).parent / 'ansible-playbook'), str(tmp_path / 'play.yml'),
               '-e', '@%s' % (tmp_path / 'vars.json'), '-e', 'ansible_python_interpreter=%s' % sys.executable]
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    plan = json.loads((tmp_path / 'plan.json').read_text())
    assert plan == build_plan(numa, gpu, vllm_version='0.11.0', target_device='cpu', memory_mib=16384)
    assert plan['env']['MAX_JOBS'] == '8'
