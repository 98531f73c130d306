# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pytest

from ansible_collections.llmops.vllm.plugins.modules import topology_check
from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import (
    KUNPENG920_8xA100,
    KUNPENG920_8xA100_GPU5_GEN3_X8,
    LAB_2CORE_CPU_ONLY,
)


@pytest.fixture
def warnings(monkeypatch):
    """Messages the module passes to AnsibleModule.warn.

    Read at the call, because once controller code is imported (the filter tests do) ansible-core
    2.19 shows module warnings at once instead of returning them in the result.
    """
    seen = []
    original = topology_check.AnsibleModule.warn

    def warn(module, message):
        seen.append(message)
        original(module, message)

    monkeypatch.setattr(topology_check.AnsibleModule, 'warn', warn)
    return seen


def check(run_module, facts, topo, **options):
    gpu, numa = facts(topo)
    return run_module(topology_check, dict(gpu=gpu, numa=numa, **options))


@pytest.mark.parametrize('topo', [KUNPENG920_8xA100, LAB_2CORE_CPU_ONLY], ids=lambda t: t['name'])
def test_healthy_host_has_no_findings(run_module, facts, warnings, topo):
    result = check(run_module, facts, topo, min_cuda_driver='12.4')
    assert (result['rc'], result['changed'], result['findings']) == (0, False, [])
    assert warnings == []


def test_degraded_link_warns_with_fix(run_module, facts, warnings):
    result = check(run_module, facts, KUNPENG920_8xA100_GPU5_GEN3_X8)
    assert result['rc'] == 0
    assert [f['code'] for f in result['findings']] == ['pcie_degraded']
    assert result['findings'][0]['gpus'] == [5]
    (warning,) = warnings
    assert warning.startswith('pcie_degraded: GPU 5') and 'Fix: ' in warning


def test_fail_on_turns_a_finding_into_a_failure(run_module, facts):
    result = check(run_module, facts, KUNPENG920_8xA100_GPU5_GEN3_X8, fail_on=['pcie_degraded'])
    assert (result['rc'], result['failed']) == (1, True)
    assert result['msg'].startswith('topology check failed: pcie_degraded: GPU 5')
    assert result['findings'][0]['severity'] == 'failure'


def test_old_driver_fails_naming_both_versions(run_module, facts):
    result = check(run_module, facts, KUNPENG920_8xA100, min_cuda_driver='13.0', fail_on=['cuda_driver_too_old'])
    assert result['rc'] == 1
    assert 'cuda_driver_too_old' in result['msg'] and '13.0' in result['msg']


def test_ignore_drops_a_code(run_module, facts):
    result = check(run_module, facts, KUNPENG920_8xA100_GPU5_GEN3_X8, ignore=['pcie_degraded'])
    assert (result['rc'], result['findings']) == (0, [])


def test_unknown_code_is_refused(run_module, facts):
    result = check(run_module, facts, KUNPENG920_8xA100, fail_on=['no_such_code'])
    assert result['rc'] == 1 and 'no_such_code' in result['msg']
