# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The monitoring role's rules, rendered as the role renders them (the template module), under promtool
(check rules, test rules).

promtool compares each firing alert's annotations too: they are filled in here from the rendered rule, with the
expected labels and the case's `value` put where Prometheus' templates put them, so a broken annotation fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[4]
ROLE = REPO / 'roles' / 'monitoring'
HERE = Path(__file__).resolve().parent
RULE_FILES = yaml.safe_load((ROLE / 'vars' / 'main.yml').read_text())['_monitoring_rule_files']
PROMTOOL = shutil.which('promtool') or str(Path(sys.executable).parent / 'promtool')
# The alerts of the pack, each with a firing and a non-firing case in alert_pack.test.yml.
ALERTS = ('VllmInstanceDown', 'LlmopsEdgeDown', 'VllmQueueGrowingBatchFlat', 'VllmKvCacheNearlyFull',
          'LlmopsEdge5xxShareHigh', 'VllmInstance5xxShareHigh', 'VllmP99LatencyAboveSlo',
          'VllmGpuIdleWhileRequestsWait', 'VllmPreemptionsClimbing', 'GpuPcieLinkDegraded', 'GpuXidError',
          'LlmopsBreakerEjectedNode', 'LlmopsCertificateRenewalDue', 'LlmopsCrlRenewalDue', 'LlmopsTlsEndpointDown',
          'LlmopsServedCertificateEndsSoon', 'LlmopsServedCertificateNotOnDisk')
_LABEL = re.compile(r'\{\{ \$labels\.(\w+) \}\}')
_VALUE = re.compile(r'\{\{ \$value[^}]*\}\}')

pytestmark = pytest.mark.skipif(not Path(PROMTOOL).exists(), reason='promtool is missing (make bootstrap installs it)')


def render(directory, **overrides):
    """The rule files as the role writes them: Ansible's template module, the role's defaults, the overrides."""
    play = [{'name': 'Render the rules', 'hosts': 'localhost', 'connection': 'local', 'gather_facts': False,
             'vars_files': [str(ROLE / 'defaults' / 'main.yml')],
             'tasks': [{'name': 'Render', 'loop': RULE_FILES, 'ansible.builtin.template': {
                 'src': str(ROLE / 'templates') + '/{{ item }}.j2', 'dest': str(directory) + '/{{ item }}',
                 'mode': '0644'}}]}]
    (directory / 'render.yml').write_text(yaml.safe_dump(play))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / 'ansible.cfg'), ANSIBLE_LOCALHOST_WARNING='0')
    result = subprocess.run([str(Path(sys.executable).parent / 'ansible-playbook'), '-i', 'localhost,',
                             str(directory / 'render.yml'), '-e', json.dumps(overrides),
                             '-e', 'ansible_python_interpreter=' + sys.executable],
                            cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    return directory


def promtool(*args):
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, check=False)


def alert_rules(directory):
    rules = yaml.safe_load((directory / 'llmops-vllm-alerts.yml').read_text())['groups'][0]['rules']
    return [rule for rule in rules if 'alert' in rule]


def annotations(rule, labels, value):
    def fill(text):
        return _VALUE.sub(value, _LABEL.sub(lambda m: labels.get(m.group(1), ''), text))
    return dict((key, fill(text)) for key, text in rule['annotations'].items())


def with_annotations(cases, rules):
    """The test file with each expected alert's exp_annotations from its rule (the SLO rule by its slo_seconds)."""
    for test in cases['tests']:
        for check in test['alert_rule_test']:
            for alert in check['exp_alerts']:
                rule = [r for r in rules if r['alert'] == check['alertname']
                        and r['labels'].get('slo_seconds', alert['exp_labels'].get('slo_seconds'))
                        == alert['exp_labels'].get('slo_seconds')]
                assert len(rule) == 1, (check['alertname'], alert)
                alert['exp_annotations'] = annotations(rule[0], alert['exp_labels'], str(alert.pop('value', '')))
    return cases


@pytest.fixture(scope='module')
def rendered(tmp_path_factory):
    return render(tmp_path_factory.mktemp('rules'), monitoring_slo_p99_seconds_by_model={'big-model': 1.5})


def test_the_rules_pass_promtool_check(rendered):
    result = promtool('check', 'rules', *(str(rendered / name) for name in RULE_FILES))
    assert result.returncode == 0, result.stdout + result.stderr
    # The recording rules (15), and the alerts with one more P99 rule for big-model's own SLO (18).
    assert 'SUCCESS: 15 rules found' in result.stdout and 'SUCCESS: 18 rules found' in result.stdout, result.stdout


def test_the_alert_pack_fires_and_stays_quiet_as_its_cases_say(rendered):
    cases = with_annotations(yaml.safe_load((HERE / 'alert_pack.test.yml').read_text()), alert_rules(rendered))
    (rendered / 'with_annotations.test.yml').write_text(yaml.safe_dump(cases, sort_keys=False))
    result = promtool('test', 'rules', str(rendered / 'with_annotations.test.yml'))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_firing_and_a_non_firing_case(rendered):
    cases = yaml.safe_load((HERE / 'alert_pack.test.yml').read_text())
    firing, quiet = set(), set()
    for test in cases['tests']:
        for check in test['alert_rule_test']:
            (firing if check['exp_alerts'] else quiet).add(check['alertname'])
            # A firing check whose inputs also hold a series that must not fire counts as both.
            expected = len(check['exp_alerts'])
            if expected and len([s for s in test['input_series'] if 'series' in s]) > expected:
                quiet.add(check['alertname'])
    names = set(rule['alert'] for rule in alert_rules(rendered))
    assert names == set(ALERTS)
    assert firing == names and quiet == names


def test_every_alert_has_a_summary_a_runbook_and_a_severity(rendered):
    for rule in alert_rules(rendered):
        assert rule['labels']['severity'] in ('warning', 'critical'), rule['alert']
        assert set(rule['annotations']) == {'summary', 'runbook'}, rule['alert']


def test_without_per_model_slos_one_rule_holds_every_model_to_the_default(tmp_path):
    rules = [r for r in alert_rules(render(tmp_path)) if r['alert'] == 'VllmP99LatencyAboveSlo']
    assert [r['expr'] for r in rules] == ['llmops:e2e_request_latency_seconds:p99_5m{model_name!~``} > 0.2']


def test_thresholds_come_from_the_settings(tmp_path):
    rules = dict((r['alert'], r) for r in alert_rules(render(
        tmp_path, monitoring_kv_cache_alert_ratio=0.8, monitoring_5xx_alert_ratio=0.01, monitoring_alert_for='10m')))
    assert rules['VllmKvCacheNearlyFull']['expr'] == 'vllm:kv_cache_usage_perc > 0.8'
    assert rules['LlmopsEdge5xxShareHigh']['expr'] == 'llmops:edge_5xx:ratio_rate5m >= 0.01'
    assert rules['VllmKvCacheNearlyFull']['for'] == '10m'
