# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import json

import pytest
import yaml

from ansible_collections.llmops.vllm.plugins.module_utils._serving import ServingPlanError, serving_plan
from ansible_collections.llmops.vllm.plugins.modules import model_info
from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import LAB_2CORE_CPU_ONLY

QWEN = {'architectures': ['Qwen2ForCausalLM'], 'max_position_embeddings': 32768}


@pytest.fixture
def models(tmp_path):
    (tmp_path / 'qwen').mkdir()
    (tmp_path / 'qwen' / 'config.json').write_text(json.dumps(QWEN))
    (tmp_path / 'broken').mkdir()
    (tmp_path / 'broken' / 'config.json').write_text('{')
    return {'chat': str(tmp_path / 'qwen'), 'bad': str(tmp_path / 'broken'), 'gone': str(tmp_path / 'gone')}


@pytest.mark.parametrize('check_mode', [False, True])
def test_reports_every_model(run_module, models, check_mode):
    result = run_module(model_info, {'paths': models, '_ansible_check_mode': check_mode})
    assert (result['rc'], result['changed']) == (0, False)
    found = result['models']
    assert found['chat'] == {'exists': True, 'config': QWEN, 'config_error': None, 'sealed': None,
                             'sealed_error': None}
    assert (found['bad']['exists'], found['bad']['config']) == (True, None)
    assert 'is not JSON' in found['bad']['config_error']
    assert found['gone'] == {'exists': False, 'config': None, 'config_error': None, 'sealed': None,
                             'sealed_error': None}


def test_no_paths(run_module):
    result = run_module(model_info, {})
    assert (result['rc'], result['models']) == (0, {})


@pytest.mark.parametrize('path', ['models/qwen', 'Qwen/Qwen2.5-7B-Instruct', 7])
def test_relative_path_fails_clearly(run_module, models, path):
    result = run_module(model_info, {'paths': dict(models, hub=path)})
    assert (result['rc'], result['failed']) == (1, True)
    assert result['msg'].startswith('paths: the path of hub is not an absolute path')


def test_serving_plan_reads_the_result(run_module, models, facts):
    """The role feeds `models` to the serving plan as probes.models: the context length check sees the config."""
    gpu, numa = facts(LAB_2CORE_CPU_ONLY)
    found = run_module(model_info, {'paths': {'chat': models['chat']}})['models']
    instance = {'name': 'chat', 'model': models['chat'], 'port': 8001, 'device': 'cpu', 'max_model_len': 65536}
    install = {'venv': '/opt/vllm', 'serve_flags': None, 'device': 'cpu'}
    with pytest.raises(ServingPlanError, match='above the model.s context of 32768 tokens'):
        serving_plan([instance], gpu, numa, install, {'models': found}, host='lab')


def test_docs_match_argument_spec():
    docs = yaml.safe_load(model_info.DOCUMENTATION)
    yaml.safe_load(model_info.EXAMPLES)
    returned = yaml.safe_load(model_info.RETURN)
    assert docs['module'] == 'model_info'
    assert {name: (o['type'], o['default']) for name, o in docs['options'].items()} == {
        name: (spec['type'], spec['default']) for name, spec in model_info.ARGUMENT_SPEC.items()}
    assert set(returned['models']['contains']['NAME']['contains']) == {'exists', 'config', 'config_error', 'sealed',
                                                                       'sealed_error'}
