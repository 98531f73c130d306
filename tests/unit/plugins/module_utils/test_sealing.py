# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._sealing import (
    SealingError, age_recipient, bech32_decode, bech32_encode, parse_manifest, seal_plan, tmpfs_bytes,
    valid_recipient)

# A key of age-keygen 1.1.1 and the recipient age-keygen -y printed for it.
IDENTITY = 'AGE-SECRET-KEY-1EJE0YLAPFECDUR6LGYQRDHJRYMXYDM6Z7QDJLC48F3QZ0AVVA4HSA6C5M9'
RECIPIENT = 'age1vynd5kuntcn467wquxnyvyuvjy0yyrhpms35hqzryv2cktlenyds7w3mfx'


def test_the_recipient_of_an_identity_is_age_keygens():
    assert age_recipient(IDENTITY) == RECIPIENT
    # age-keygen's file, comments and all, reads the same.
    assert age_recipient('# created: 2026-12-04\n# public key: %s\n%s\n' % (RECIPIENT, IDENTITY)) == RECIPIENT


@pytest.mark.skipif(not shutil.which('age-keygen'), reason='age-keygen is not installed')
def test_fresh_keys_match_age_keygen():
    for _round in range(3):
        identity = subprocess.run(['age-keygen'], capture_output=True, text=True, check=True).stdout
        public = subprocess.run(['age-keygen', '-y'], input=identity, capture_output=True, text=True,
                                check=True).stdout.strip()
        assert age_recipient(identity) == public


@pytest.mark.parametrize('identity', ['', 'AGE-SECRET-KEY-1' + 'Q' * 58, RECIPIENT, IDENTITY[:-1] + 'X',
                                      IDENTITY + '\n' + IDENTITY])
def test_a_bad_identity_is_refused_without_showing_it(identity):
    with pytest.raises(SealingError) as error:
        age_recipient(identity, 'model key fleet')
    message = str(error.value)
    assert message.startswith('model key fleet is not an age identity') and 'Fix: ' in message
    for line in identity.splitlines():
        assert line[16:] not in message


def test_bech32_round_trip():
    hrp, raw = bech32_decode(RECIPIENT)
    assert hrp == 'age' and len(raw) == 32 and bech32_encode('age', raw) == RECIPIENT
    assert valid_recipient(RECIPIENT) and not valid_recipient(RECIPIENT[:-1] + 'q') and not valid_recipient('age1')


@pytest.fixture
def model(tmp_path):
    src = tmp_path / 'model'
    (src / 'sub').mkdir(parents=True)
    (src / 'config.json').write_text('{"max_position_embeddings": 2048}')
    (src / 'model.safetensors').write_bytes(b'\x08\x00' * 100)
    (src / 'sub' / 'tokenizer.json').write_text('{}')
    (src / '.cache').mkdir()
    (src / '.cache' / 'lock').write_text('')
    return src


def test_a_first_seal_encrypts_all_but_the_clear_files(model):
    plan = seal_plan(str(model), RECIPIENT)
    assert plan['encrypt'] == ['model.safetensors', 'sub/tokenizer.json'] and plan['copy'] == ['config.json']
    manifest = plan['manifest']
    assert manifest['recipient'] == RECIPIENT and manifest['clear'] == ['config.json'] and manifest['format'] == 1
    assert sorted(manifest['files']) == ['config.json', 'model.safetensors', 'sub/tokenizer.json']
    assert manifest['files']['model.safetensors']['size'] == 200
    assert plan['remove'] == []


def test_sealing_again_changes_only_what_changed(model):
    before = seal_plan(str(model), RECIPIENT)['manifest']
    again = seal_plan(str(model), RECIPIENT, before)
    assert (again['encrypt'], again['copy'], again['remove']) == ([], [], [])
    (model / 'model.safetensors').write_bytes(b'\x09' * 10)
    (model / 'sub' / 'tokenizer.json').unlink()
    changed = seal_plan(str(model), RECIPIENT, before)
    assert changed['encrypt'] == ['model.safetensors'] and changed['remove'] == ['sub/tokenizer.json.age']


def test_another_recipient_is_a_rotation_that_encrypts_everything(model):
    before = seal_plan(str(model), RECIPIENT)['manifest']
    other = bech32_encode('age', b'\x01' * 32)
    rotated = seal_plan(str(model), other, before)
    assert rotated['encrypt'] == ['model.safetensors', 'sub/tokenizer.json'] and rotated['copy'] == []
    # Everything sealed: config.json's clear copy goes, its sealed one comes.
    sealed_all = seal_plan(str(model), RECIPIENT, before, clear=[])
    assert 'config.json' in sealed_all['encrypt'] and sealed_all['remove'] == ['config.json']


def test_a_manifest_is_checked(model):
    manifest = seal_plan(str(model), RECIPIENT)['manifest']
    assert parse_manifest(json.dumps(manifest), 'm.json') == manifest
    for broken in ('{', json.dumps(dict(manifest, format=2)), json.dumps(dict(manifest, recipient='age1x')),
                   json.dumps(dict(manifest, files={'../etc/passwd': {'sha256': 'a' * 64, 'size': 1}}))):
        with pytest.raises(SealingError) as error:
            parse_manifest(broken, '/m/llmops-sealed.json')
        assert '/m/llmops-sealed.json' in str(error.value) and 'playbooks/model_seal.yml' in str(error.value)


def test_the_tmpfs_holds_the_plaintext_and_a_margin():
    assert tmpfs_bytes(0) == 64 << 20
    assert tmpfs_bytes(100 << 30) > 101 << 30
