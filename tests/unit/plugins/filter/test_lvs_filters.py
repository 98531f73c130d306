# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Wiring of the ipvs_table filter (the parser is tested in module_utils/test_ipvs.py)."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.filter import lvs
from ansible_collections.llmops.vllm.tests.unit.plugins.module_utils.test_ipvs import LAB_LIST, LIST_HEAD


def test_the_filters_are_registered():
    assert lvs.FilterModule().filters() == {'lvs_plan': lvs.lvs_plan, 'ipvs_table': lvs.ipvs_table}


def test_ipvs_table_reads_weights_and_connections_of_raw_output():
    # raw through a pty ends its lines with CR LF.
    table = lvs.ipvs_table(LAB_LIST.replace('\n', '\r\n'))
    first, second = table['services']
    assert (first['address'], first['port'], first['scheduler']) == ('10.89.60.100', 8000, 'wlc')
    assert [(rs['address'], rs['weight'], rs['active_connections']) for rs in first['real_servers']] == [
        ('10.89.60.11', 1, 0), ('10.89.60.12', 1, 2)]
    assert second['real_servers'][0]['weight'] == 0
    assert 'stats' not in first


def test_ipvs_table_refuses_what_is_not_ipvsadm_output():
    with pytest.raises(AnsibleFilterError, match='cannot parse line'):
        lvs.ipvs_table(LIST_HEAD + '  -> 10.89.60.11:8000 Route 1 0\n')
