# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import json

import pytest
import yaml

from ansible_collections.llmops.vllm.plugins.module_utils._diagnose import SIGNATURES
from ansible_collections.llmops.vllm.plugins.modules import vllm_diagnose
from ansible_collections.llmops.vllm.tests.unit.plugins.module_utils.test_diagnose import CUDA_700, OOM, record


@pytest.fixture
def journal(monkeypatch):
    """Patch AnsibleModule.run_command to answer as journalctl; returns the argv of each call."""
    calls = []

    def install(records, rc=0, err=''):
        def run_command(self, argv, **kwargs):
            calls.append(list(argv))
            return rc, '\n'.join(json.dumps(r) for r in records), err
        monkeypatch.setattr(vllm_diagnose.AnsibleModule, 'run_command', run_command)
        return calls
    return install


@pytest.mark.parametrize('check_mode', [False, True])
def test_reports_the_runbook_lines_of_the_units(run_module, journal, check_mode):
    calls = journal([record(OOM), record('INFO 12-03 ready'), record(CUDA_700, unit='vllm-big.service')])
    result = run_module(vllm_diagnose, {'units': ['vllm-tiny.service', 'vllm-big.service'], 'since': '-1h',
                                        'journalctl': '/bin/journalctl', '_ansible_check_mode': check_mode})
    assert (result['rc'], result['changed'], result['lines_scanned']) == (0, False, 3)
    assert [(f['unit'], f['signature']) for f in result['findings']] == [
        ('vllm-tiny.service', 'oom'), ('vllm-big.service', 'cuda_illegal_memory_access')]
    assert calls == [['/bin/journalctl', '-o', 'json', '--no-pager', '--since', '-1h', '-u', 'vllm-tiny.service',
                      '-u', 'vllm-big.service']]


def test_a_unit_without_a_type_is_a_service(run_module, journal):
    calls = journal([record(OOM)])
    result = run_module(vllm_diagnose, {'units': ['vllm-tiny'], 'journalctl': '/bin/journalctl'})
    assert [f['unit'] for f in result['findings']] == ['vllm-tiny.service']
    assert calls[0][-2:] == ['-u', 'vllm-tiny.service']


def test_a_quiet_journal_has_no_findings(run_module, journal):
    journal([])
    result = run_module(vllm_diagnose, {'units': ['vllm-tiny.service'], 'journalctl': '/bin/journalctl'})
    assert (result['rc'], result['findings'], result['lines_scanned']) == (0, [], 0)


def test_a_failing_journalctl_says_what_to_fix(run_module, journal):
    journal([], rc=1, err='Failed to parse timestamp: yesterdayish')
    result = run_module(vllm_diagnose, {'units': ['vllm-tiny.service'], 'since': 'yesterdayish',
                                        'journalctl': '/bin/journalctl'})
    assert result['rc'] == 1
    assert 'Failed to parse timestamp' in result['msg'] and 'Fix: check the since option' in result['msg']


def test_no_units_is_refused(run_module, journal):
    calls = journal([])
    result = run_module(vllm_diagnose, {'units': [], 'journalctl': '/bin/journalctl'})
    assert result['rc'] == 1 and 'units is empty' in result['msg'] and calls == []


def test_docs_match_argument_spec():
    docs = yaml.safe_load(vllm_diagnose.DOCUMENTATION)
    yaml.safe_load(vllm_diagnose.EXAMPLES)
    returned = yaml.safe_load(vllm_diagnose.RETURN)
    assert set(docs['options']) == set(vllm_diagnose.ARGUMENT_SPEC)
    for name, spec in vllm_diagnose.ARGUMENT_SPEC.items():
        assert docs['options'][name]['type'] == spec['type']
        assert docs['options'][name].get('default') == spec.get('default')
    assert set(returned['findings']['contains']['signature']['choices']) == {
        sid for sid, _p, _m, _f in SIGNATURES}
