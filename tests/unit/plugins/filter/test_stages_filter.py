# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The apply_stages filter, on the playbooks' own stage table."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.filter.stages import apply_stages

REPO = Path(__file__).resolve().parents[4]
STAGES = yaml.safe_load((REPO / 'playbooks' / 'vars' / 'stages.yml').read_text())['llmops_stages']


def applied(only=None):
    return [(stage['role'], stage['tasks_from']) for stage in apply_stages(STAGES, only)]


def test_every_stage_but_the_check_only_ones_applies_its_main_tasks():
    assert applied() == [(s['role'], 'main') for s in STAGES if not s.get('check_only')]
    assert 'discovery' not in dict(applied())


def test_only_the_listed_stages_apply_in_the_table_s_order():
    assert applied(['edge', 'vllm_server']) == [('vllm_server', 'main'), ('edge', 'main')]
    assert applied([]) == []


def test_a_pki_run_brings_every_certificate_consumer_s_pickup_along():
    # Those that present a client certificate first: their handlers run before those of the servers, which
    # enforce the new CRL.
    assert applied(['pki']) == [('pki', 'main'), ('filebeat', 'certificates'), ('lvs_director', 'certificates'),
                                ('monitoring', 'certificates'), ('log_sink', 'certificates'),
                                ('edge', 'certificates')]
    assert applied(['baseline', 'pki']) == [('baseline', 'main'), ('pki', 'main')] + applied(['pki'])[1:]
    # A consumer that is applied in full picks up its certificates there.
    assert ('edge', 'main') in applied(['pki', 'edge']) and ('edge', 'certificates') not in applied(['pki', 'edge'])
    # Without the pki stage nothing is renewed: no pickup.
    assert applied(['vllm_install', 'vllm_server', 'edge']) == [
        ('vllm_install', 'main'), ('vllm_server', 'main'), ('edge', 'main')]


@pytest.mark.parametrize('only, fragment', [
    ('pki', "it must be a list of these stages' roles"),
    (['pki', 'edges'], 'llmops_only_stages names edges, not a stage'),
])
def test_a_bad_llmops_only_stages_is_refused_with_the_stages(only, fragment):
    with pytest.raises(AnsibleFilterError) as error:
        apply_stages(STAGES, only)
    assert fragment in str(error.value) and 'pki, log_sink' in str(error.value)
