# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""dcgm-exporter exports exactly the DCGM fields of its collectors file, so that file is the source of the GPU
metric names: every DCGM_ name that the monitoring role's rules, dashboards and promtool cases use must be in the
dcgm_exporter role's default fields, and the fields its preflight keeps must be exactly those names (a rule
written against a field nobody exports would never fire, as with vLLM's renamed metrics)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[4]
ROLE = REPO / 'roles' / 'dcgm_exporter'
MONITORING = REPO / 'roles' / 'monitoring'
_DCGM = re.compile(r'\bDCGM_FI_[A-Z0-9_]+\b')


def _yaml(path):
    return yaml.safe_load(path.read_text())


def used_by_monitoring():
    sources = list((MONITORING / 'templates').glob('*.j2')) + [MONITORING / 'files' / 'dashboards.yml',
                                                               REPO / 'tests/unit/roles/monitoring/alert_pack.test.yml']
    return set().union(*(_DCGM.findall(path.read_text()) for path in sources))


def test_every_gpu_metric_the_monitoring_reads_is_exported_by_default():
    used = used_by_monitoring()
    assert {'DCGM_FI_DEV_GPU_UTIL', 'DCGM_FI_DEV_FB_USED', 'DCGM_FI_DEV_XID_ERRORS'} <= used
    exported = {counter['field'] for counter in _yaml(ROLE / 'defaults' / 'main.yml')['dcgm_exporter_counters']}
    assert not used - exported, 'read by the monitoring role, not exported: %s' % sorted(used - exported)


def test_the_preflight_keeps_exactly_the_fields_the_monitoring_reads():
    assert set(_yaml(ROLE / 'vars' / 'main.yml')['_dcgm_exporter_required_fields']) == used_by_monitoring()


def test_the_issue_named_fields_and_well_formed_counters():
    counters = _yaml(ROLE / 'defaults' / 'main.yml')['dcgm_exporter_counters']
    fields = [counter['field'] for counter in counters]
    assert len(fields) == len(set(fields))
    assert {'DCGM_FI_DEV_GPU_UTIL', 'DCGM_FI_DEV_FB_USED', 'DCGM_FI_DEV_XID_ERRORS',
            'DCGM_FI_DEV_PCIE_REPLAY_COUNTER'} <= set(fields)
    for counter in counters:
        assert _DCGM.fullmatch(counter['field']) and counter['type'] in ('gauge', 'counter') and counter['help']
