# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Wiring of the pki_plan and edge_plan filters (the decisions are tested in module_utils)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.filter import edge, pki

PKI = {'validity_days': 365, 'renew_before_days': 30, 'directory': '/etc/llmops-vllm/pki', 'server': True}


def test_pki_plan_filter():
    [name] = pki.FilterModule().filters()
    result = pki.FilterModule().filters()[name](PKI, {'names': ['n1'], 'addresses': ['10.0.0.1']}, host='n1')
    assert name == 'pki_plan' and result['certificates'][0]['subject_alt_name'] == ['DNS:n1', 'IP:10.0.0.1']
    with pytest.raises(AnsibleFilterError, match='host n1: pki: pki_renew_before_days'):
        pki.pki_plan(dict(PKI, renew_before_days=400), host='n1')


def test_edge_plan_filter():
    [name] = edge.FilterModule().filters()
    serving = {'instances': [{'name': 'tiny', 'port': 8101, 'served_model_name': 'tiny', 'address': '127.0.0.1',
                              'metrics_path': '/metrics'}]}
    settings = {'port': 8000, 'default_address': '10.0.0.1', 'tls_certificate': '/s.crt', 'tls_key': '/s.key',
                'tls_ca': '/ca.crt'}
    result = edge.FilterModule().filters()[name](serving, settings, 'n1')
    assert name == 'edge_plan' and result['listen'] == ['10.0.0.1']
    with pytest.raises(AnsibleFilterError, match='host n1: edge: the host has no vLLM instance'):
        edge.edge_plan({'instances': []}, {'port': 8000}, host='n1')


@pytest.mark.parametrize('module, doc', [(pki, 'pki_plan.yml'), (edge, 'edge_plan.yml')])
def test_documentation_names_the_filter(module, doc):
    path = Path(inspect.getsourcefile(module)).parent / doc
    documentation = yaml.safe_load(path.read_text())['DOCUMENTATION']
    assert documentation['name'] == doc[:-4] and documentation['options']['_input']['required'] is True
