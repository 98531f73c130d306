# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._models import collect_models, model_info, read_config

QWEN = {'architectures': ['Qwen2ForCausalLM'], 'max_position_embeddings': 32768, 'torch_dtype': 'bfloat16'}


def _model(tmp_path, name, config=None):
    """A model directory; config is a dict (written as JSON), bytes (written as is), or None (no config.json)."""
    path = tmp_path / name
    path.mkdir()
    if config is not None:
        (path / 'config.json').write_bytes(config if isinstance(config, bytes) else json.dumps(config).encode())
    return str(path)


CLEAR = {'exists': False, 'config': None, 'config_error': None, 'sealed': None, 'sealed_error': None}


def test_model_with_config(tmp_path):
    assert model_info(_model(tmp_path, 'qwen', QWEN)) == dict(CLEAR, exists=True, config=QWEN)


def test_directory_without_config_is_no_error(tmp_path):
    assert model_info(_model(tmp_path, 'bare')) == dict(CLEAR, exists=True)


def test_missing_directory(tmp_path):
    assert model_info(str(tmp_path / 'nope')) == CLEAR


def test_a_file_is_not_a_model_directory(tmp_path):
    (tmp_path / 'model.gguf').write_bytes(b'GGUF')
    assert model_info(str(tmp_path / 'model.gguf'))['exists'] is False


@pytest.mark.parametrize('content, error', [
    (b'', 'is not JSON'),
    (b'{"architectures": [', 'is not JSON'),
    (b'\xff\xfe{}', 'is not JSON'),
    (b'["not", "an", "object"]', 'is not a JSON object but a list'),
    (b'null', 'is not a JSON object but a NoneType'),
], ids=['empty', 'truncated', 'not-utf8', 'list', 'null'])
def test_bad_config_is_reported(tmp_path, content, error):
    path = _model(tmp_path, 'broken', content)
    config, message = read_config(path)
    assert config is None
    assert message.startswith(os.path.join(path, 'config.json')) and error in message


@pytest.mark.skipif(os.geteuid() == 0, reason='root reads files whatever their mode')
def test_unreadable_config_is_reported(tmp_path):
    path = _model(tmp_path, 'locked', QWEN)
    os.chmod(os.path.join(path, 'config.json'), 0)
    assert read_config(path) == (None, 'cannot read %s/config.json: Permission denied' % path)


def test_config_json_that_is_a_directory_is_ignored(tmp_path):
    path = _model(tmp_path, 'odd')
    os.mkdir(os.path.join(path, 'config.json'))
    assert read_config(path) == (None, None)


def test_collect_models_keeps_every_name(tmp_path):
    paths = {'chat': _model(tmp_path, 'qwen', QWEN), 'gone': str(tmp_path / 'gone')}
    models = collect_models(paths)
    assert sorted(models) == ['chat', 'gone']
    assert (models['chat']['exists'], models['gone']['exists']) == (True, False)
    assert collect_models({}) == {}


def test_a_sealed_model_returns_its_manifest(tmp_path):
    path = _model(tmp_path, 'sealed', QWEN)
    manifest = {'format': 1, 'recipient': 'age1vynd5kuntcn467wquxnyvyuvjy0yyrhpms35hqzryv2cktlenyds7w3mfx',
                'clear': ['config.json'], 'files': {'config.json': {'sha256': 'a' * 64, 'size': 2}}}
    with open(os.path.join(path, 'llmops-sealed.json'), 'w') as f:
        json.dump(manifest, f)
    assert model_info(path) == dict(CLEAR, exists=True, config=QWEN, sealed=manifest)
    with open(os.path.join(path, 'llmops-sealed.json'), 'w') as f:
        f.write('{"format": 1}')
    found = model_info(path)
    assert found['sealed'] is None and found['sealed_error'] == (
        '%s/llmops-sealed.json is not a sealed-model manifest of format 1' % path)
