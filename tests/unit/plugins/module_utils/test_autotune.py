# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The tuning policy on recorded trial sequences: each case replays what an instance answered for each candidate
and checks every step the policy took, and what it chose."""

from __future__ import annotations

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._autotune import (
    AutotuneError, next_step, report_markdown, trial_of, verdict)

SETTINGS = {'start': 8, 'step': 8, 'max_value': 64, 'memory_limit': 0.7, 'slo_p99_s': 0.2, 'min_gain': 0.02,
            'patience': 2, 'max_trials': 12}


def ok(value, rps, p99=0.1, memory=0.4, duration=60):
    return {'value': value, 'status': 'ok', 'throughput_rps': rps, 'p99_s': p99, 'memory_ratio': memory,
            'preemptions': 0, 'duration_s': duration}


def failed(value, status, duration=20):
    return {'value': value, 'status': status, 'duration_s': duration}


def replay(answers, settings=None, elapsed_per_trial=0):
    """Run the policy against recorded answers {value: [trial, ...]} (a list: one per try of that value)."""
    settings = dict(SETTINGS, **(settings or {}))
    trials, steps, seen = [], [], {}
    while True:
        step = next_step(trials, settings, elapsed_s=elapsed_per_trial * len(trials))
        steps.append(step)
        if step['action'] == 'stop':
            return [t['value'] for t in trials], step
        value = step['value']
        answer = answers[value]
        attempt = seen.get(value, 0)
        seen[value] = attempt + 1
        trials.append(answer[min(attempt, len(answer) - 1)] if isinstance(answer, list) else answer)
        assert len(trials) <= 50


def test_linear_growth_until_memory_reaches_the_limit():
    answers = {8: ok(8, 4.0, memory=0.3), 16: ok(16, 7.5, memory=0.45), 24: ok(24, 10.0, memory=0.6),
               32: ok(32, 12.0, memory=0.72)}
    values, stop = replay(answers)
    assert values == [8, 16, 24, 32]
    # 32 has the most throughput, but leaves under 30 % headroom: not chosen.
    assert stop['reason'] == 'memory_limit' and stop['value'] == 24 and not stop['restored']


def test_an_oom_in_the_middle_stops_at_the_last_good_value():
    answers = {8: ok(8, 4.0), 16: ok(16, 7.5), 24: failed(24, 'oom')}
    values, stop = replay(answers)
    assert values == [8, 16, 24]
    assert stop['reason'] == 'ceiling' and stop['value'] == 16


def test_an_oom_at_the_start_backs_off_exponentially_then_grows_under_the_ceiling():
    answers = {32: failed(32, 'oom'), 16: ok(16, 7.0), 24: ok(24, 9.0)}
    values, stop = replay(answers, {'start': 32})
    assert values == [32, 16, 24]  # the seed's 32 -> 16, then linear up to the OOM's ceiling
    assert stop['reason'] == 'ceiling' and stop['value'] == 24


def test_back_off_halves_until_the_engine_fits():
    answers = {64: failed(64, 'oom'), 32: failed(32, 'oom'), 16: failed(16, 'oom'), 8: ok(8, 3.0)}
    values, stop = replay(answers, {'start': 64})
    assert values == [64, 32, 16, 8]
    assert stop['value'] == 8 and stop['reason'] == 'ceiling'  # 8 + 8 = 16 is the ceiling


def test_an_slo_breach_is_a_ceiling_and_never_chosen():
    answers = {8: ok(8, 4.0, p99=0.08), 16: ok(16, 7.5, p99=0.15), 24: ok(24, 11.0, p99=0.31)}
    values, stop = replay(answers)
    assert values == [8, 16, 24]
    assert stop['value'] == 16 and stop['reason'] == 'ceiling'
    assert verdict(answers[24], dict(SETTINGS, slo_p99_s=0.2, memory_limit=0.7)) == 'slo'


def test_a_plateau_stops_the_growth():
    answers = {8: ok(8, 4.0), 16: ok(16, 6.0), 24: ok(24, 6.05), 32: ok(32, 6.08), 40: ok(40, 9.0)}
    values, stop = replay(answers)
    assert values == [8, 16, 24, 32]  # two steps in a row under 2 % better than the best
    assert stop['reason'] == 'plateau' and stop['value'] == 32


def test_the_trial_limit_and_the_time_budget_end_the_search():
    answers = dict((v, ok(v, float(v))) for v in range(8, 65, 8))
    values, stop = replay(answers, {'max_trials': 3})
    assert values == [8, 16, 24] and stop['reason'] == 'max_trials' and stop['value'] == 24
    # 60 s trials, 200 s budget: after three (180 s) a fourth would end at 240 s.
    values, stop = replay(answers, {'time_budget_s': 200}, elapsed_per_trial=60)
    assert values == [8, 16, 24] and stop['reason'] == 'time_budget' and stop['value'] == 24


def test_a_flaky_trial_is_repeated_once():
    answers = {8: ok(8, 4.0), 16: [failed(16, 'error'), ok(16, 7.0)], 24: ok(24, 7.05), 32: ok(32, 7.1)}
    values, stop = replay(answers)
    assert values == [8, 16, 16, 24, 32]
    assert stop['reason'] == 'plateau' and stop['value'] == 32


def test_a_trial_that_fails_twice_is_a_ceiling():
    answers = {8: ok(8, 4.0), 16: [failed(16, 'error'), failed(16, 'error')]}
    values, stop = replay(answers)
    assert values == [8, 16, 16] and stop['reason'] == 'ceiling' and stop['value'] == 8


def test_a_trial_that_kills_the_engine_backs_off_like_an_oom():
    answers = {8: ok(8, 4.0), 16: ok(16, 7.0), 24: failed(24, 'engine_died')}
    values, stop = replay(answers)
    assert values == [8, 16, 24] and stop['value'] == 16 and stop['reason'] == 'ceiling'


def test_nothing_accepted_restores_the_start_value():
    answers = {8: ok(8, 4.0, p99=0.5), 4: ok(4, 2.0, p99=0.4), 2: ok(2, 1.0, p99=0.3), 1: ok(1, 0.5, p99=0.25)}
    values, stop = replay(answers)
    assert values == [8, 4, 2, 1]
    assert stop['reason'] == 'no_safe_value' and stop['restored'] and stop['value'] == 8 and stop['best'] is None


def test_the_maximum_ends_the_growth():
    answers = dict((v, ok(v, float(v))) for v in (8, 16, 20))
    values, stop = replay(answers, {'max_value': 20})
    assert values == [8, 16, 20] and stop['reason'] == 'max_value' and stop['value'] == 20


def test_the_smaller_value_wins_a_tie():
    answers = {8: ok(8, 4.0), 16: ok(16, 4.0), 24: ok(24, 4.0)}
    _values, stop = replay(answers)
    assert stop['reason'] == 'plateau' and stop['value'] == 8


@pytest.mark.parametrize('settings, message', [
    ({'start': 0}, 'start is 0, not an integer of at least 1'),
    ({'memory_limit': 70}, 'write 70 % as 0.7'),
    ({'start': 128}, 'the start value 128 is outside min_value 1 .. max_value 64'),
    ({'step': 2.5}, 'step is 2.5, not an integer'),
])
def test_bad_settings_are_named_with_their_fix(settings, message):
    with pytest.raises(AutotuneError, match=message.replace('.', r'\.').replace('%', '%')):
        next_step([], dict(SETTINGS, **settings))


def test_a_trial_without_a_known_status_is_refused():
    with pytest.raises(AutotuneError, match="trial 1 has status 'crashed'"):
        next_step([{'value': 8, 'status': 'crashed'}], SETTINGS)


LOAD = {'succeeded': 120, 'errors': 0, 'throughput_rps': 24.0, 'tokens_per_s': 768.0,
        'e2e_ms': {'p50': 400.0, 'p99': 900.0}, 'error_kinds': {}}


@pytest.mark.parametrize('load, observed, status', [
    (LOAD, {'ready': True, 'kv_cache_peak': 0.5}, 'ok'),
    (None, {'ready': False}, 'engine_died'),
    (None, {'ready': False, 'oom': True}, 'oom'),
    (LOAD, {'ready': True, 'engine_died': True}, 'engine_died'),
    (dict(LOAD, errors=3), {'ready': True}, 'error'),
    (dict(LOAD, succeeded=0), {'ready': True}, 'error'),
])
def test_a_trial_is_classified_from_what_it_measured(load, observed, status):
    trial = trial_of(16, load, observed, duration_s=42)
    assert (trial['value'], trial['status'], trial['duration_s']) == (16, status, 42)
    if status == 'ok':
        assert (trial['throughput_rps'], trial['p99_s'], trial['p50_s'], trial['memory_ratio']) == (24.0, 0.9, 0.4, 0.5)
    else:
        assert trial['throughput_rps'] is None


def test_the_report_names_the_choice_the_limits_and_every_trial():
    trials = [dict(trial_of(8, LOAD, {'ready': True, 'kv_cache_peak': 0.3, 'preemptions': 0}), verdict=''),
              dict(trial_of(16, LOAD, {'ready': True, 'kv_cache_peak': 0.8, 'preemptions': 12,
                                       'rss_peak_bytes': 2 << 30}), verdict='memory')]
    report = report_markdown({'node': 'node1', 'instance': 'tiny', 'model': 'tiny-llama', 'start': 8, 'chosen': 8,
                              'restored': False, 'reason': 'memory_limit', 'trials': trials,
                              'settings': {'start': 8, 'slo_p99_s': 2.0}, 'written': 'node1:/etc/x.fact'})
    assert report.startswith('# Batch-size tuning: tiny on node1')
    assert '**Kept: 8** (stopped: the KV cache reached the memory limit)' in report
    assert 'KV cache under 70 %, end-to-end P99 2 s; step 8, at most 12 trials' in report
    assert '| 2 | 16 | ok | 24.0 | 768 | 0.400 | 0.900 | 80 % | 12 | 2048 | memory |' in report
    failed = report_markdown({'node': 'node1', 'instance': 'tiny', 'start': 16, 'previous': 8, 'trials': [],
                              'failed': 'boom'})
    assert '**The tuning failed**: boom. The instance runs as before the tuning (max_num_seqs 8).' in failed
