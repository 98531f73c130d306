# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pytest

from ansible_collections.llmops.vllm.plugins.modules import autotune_plot, vllm_autotune

LOAD = {'succeeded': 100, 'errors': 0, 'throughput_rps': 20.0, 'e2e_ms': {'p50': 300.0, 'p99': 800.0}}
SETTINGS = {'start': 8, 'step': 8, 'slo_p99_s': 2.0, 'max_trials': 4}


def observe(value, rps, kv, **observed):
    return {'value': value, 'load': dict(LOAD, throughput_rps=rps), 'duration_s': 40,
            'observed': dict({'ready': True, 'kv_cache_peak': kv}, **observed)}


def test_the_trials_run_from_the_start_value_to_the_memory_limit(run_module):
    first = run_module(vllm_autotune, {'settings': SETTINGS})
    assert (first['rc'], first['done'], first['next']['value'], first['trials']) == (0, False, 8, [])
    trials = []
    for value, rps, kv in ((8, 20.0, 0.3), (16, 31.0, 0.55), (24, 33.0, 0.82)):
        step = run_module(vllm_autotune, {'settings': SETTINGS, 'trials': trials,
                                          'observation': observe(value, rps, kv)})
        trials = step['trials']
    assert (step['done'], step['chosen'], step['restored'], step['next']['reason']) == (True, 16, False, 'memory_limit')
    assert [t['verdict'] for t in trials] == ['', '', 'memory'] and step['changed'] is False


def test_an_engine_that_never_came_up_backs_off(run_module):
    step = run_module(vllm_autotune, {'settings': dict(SETTINGS, start=32),
                                      'observation': {'value': 32, 'observed': {'ready': False}}})
    assert step['trials'][0]['status'] == 'engine_died' and step['next'] == {
        'action': 'try', 'value': 16, 'reason': 'back_off'}


def test_bad_settings_fail_with_their_fix(run_module):
    result = run_module(vllm_autotune, {'settings': {'start': 8, 'memory_limit': 70}})
    assert result['rc'] == 1 and 'Fix: write 70 % as 0.7' in result['msg']


def test_the_plot_is_a_png_written_once_and_not_in_check_mode(run_module, tmp_path):
    pytest.importorskip('matplotlib')
    trials = [{'value': 8, 'status': 'ok', 'throughput_rps': 20.0, 'p99_s': 0.8, 'memory_ratio': 0.3},
              {'value': 16, 'status': 'ok', 'throughput_rps': 31.0, 'p99_s': 1.1, 'memory_ratio': 0.55},
              {'value': 24, 'status': 'oom'}]
    path = tmp_path / 'plot.png'
    args = {'path': str(path), 'trials': trials, 'chosen': 16, 'slo_p99_s': 2.0}
    checked = run_module(autotune_plot, dict(args, _ansible_check_mode=True))
    assert checked['changed'] is True and not path.exists()
    written = run_module(autotune_plot, args)
    assert written['changed'] is True and path.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    again = run_module(autotune_plot, args)
    assert again['changed'] is False
