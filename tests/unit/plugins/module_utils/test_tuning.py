# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._serving import ServingPlanError, serving_plan
from ansible_collections.llmops.vllm.plugins.module_utils._tuning import fingerprint, tuned_instance
from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import LAB_2CORE_CPU_ONLY
from ansible_collections.llmops.vllm.tests.unit.plugins.module_utils.test_serving import (
    CPU_INSTALL, LAB_INSTANCES, SETTINGS, probes)

ALPHA = LAB_INSTANCES[0]


def test_the_fingerprint_ignores_the_tuned_value_and_nothing_else():
    mark = fingerprint(ALPHA, CPU_INSTALL)
    assert fingerprint(dict(ALPHA, max_num_seqs=32), CPU_INSTALL) == mark
    assert fingerprint(dict(ALPHA, kv_cache_memory_bytes=1 << 20), CPU_INSTALL) != mark
    assert fingerprint(ALPHA, dict(CPU_INSTALL, version='0.33.0')) != mark


def test_a_trial_wins_then_a_valid_tuned_value_then_the_inventory():
    tuned = {'max_num_seqs': 24, 'fingerprint': fingerprint(ALPHA, CPU_INSTALL), 'tuned_at': '20261204T1200Z'}
    item, info, warning = tuned_instance(ALPHA, CPU_INSTALL, tuned, trial=16)
    assert (item['max_num_seqs'], info['source'], warning) == (16, 'trial', None)
    item, info, warning = tuned_instance(ALPHA, CPU_INSTALL, tuned)
    assert (item['max_num_seqs'], info['source'], info['tuned_at'], warning) == (24, 'tuned', '20261204T1200Z', None)
    item, info, warning = tuned_instance(ALPHA, CPU_INSTALL, None)
    assert (item['max_num_seqs'], info['source']) == (8, 'inventory')
    assert tuned_instance({'name': 'x'}, CPU_INSTALL)[1]['source'] == 'default'


def test_a_tuned_value_measured_on_other_settings_is_not_used_and_says_so():
    stale = {'max_num_seqs': 24, 'fingerprint': fingerprint(dict(ALPHA, dtype='bfloat16'), CPU_INSTALL),
             'tuned_at': '20261204T1200Z'}
    item, info, warning = tuned_instance(ALPHA, CPU_INSTALL, stale)
    assert (item['max_num_seqs'], info['source']) == (8, 'inventory')
    assert 'tuned max_num_seqs 24' in warning and "the inventory's 8 runs" in warning
    assert 'Fix: run playbooks/autotune.yml' in warning


def _plan(facts, tuning):
    gpu, numa = facts(LAB_2CORE_CPU_ONLY)
    return serving_plan(LAB_INSTANCES, gpu, numa, CPU_INSTALL, probes(LAB_INSTANCES), SETTINGS, host='node1',
                        tuning=tuning)


def test_the_serving_plan_runs_the_tuned_value_and_reports_its_source(facts):
    fact = {'instances': {'alpha': {'max_num_seqs': 24, 'fingerprint': fingerprint(ALPHA, CPU_INSTALL),
                                    'tuned_at': 't'}}}
    alpha, beta = _plan(facts, {'tuned': fact})['instances']
    assert '--max-num-seqs 24' in ' '.join(alpha['argv']) and alpha['max_num_seqs'] == 24
    assert alpha['tuning']['source'] == 'tuned' and beta['tuning']['source'] == 'default'
    alpha = _plan(facts, {'tuned': fact, 'trial': {'alpha': 40}})['instances'][0]
    assert '--max-num-seqs 40' in ' '.join(alpha['argv']) and alpha['tuning']['source'] == 'trial'
    stale = {'instances': {'alpha': dict(fact['instances']['alpha'], fingerprint='0' * 16)}}
    result = _plan(facts, {'tuned': stale})
    assert '--max-num-seqs 8' in ' '.join(result['instances'][0]['argv'])
    assert [w for w in result['warnings'] if w.startswith('instance alpha: its tuned max_num_seqs 24')]


def test_a_trial_for_an_instance_the_host_lacks_is_refused(facts):
    with pytest.raises(ServingPlanError, match='a tuning trial names instance gamma, which this host does not serve'):
        _plan(facts, {'trial': {'gamma': 8}})
