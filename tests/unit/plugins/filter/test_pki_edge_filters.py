# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Wiring of the pki_plan, edge_plan and edge_fault filters (the decisions are tested in module_utils), and the edge
role's nginx.conf rendered from an edge plan."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest
import yaml

from ansible.errors import AnsibleFilterError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.llmops.vllm.plugins.filter import edge, pki

try:
    from ansible.template import trust_as_template
except ImportError:  # ansible-core < 2.19 templates every string
    def trust_as_template(text):
        return text

ROLE = Path(inspect.getsourcefile(edge)).parents[2] / 'roles' / 'edge'

PKI = {'validity_days': 365, 'renew_before_days': 30, 'directory': '/etc/llmops-vllm/pki', 'server': True}


def test_pki_plan_filter():
    assert sorted(pki.FilterModule().filters()) == ['pki_ca_plan', 'pki_crl_plan', 'pki_plan']
    name = 'pki_plan'
    result = pki.FilterModule().filters()[name](PKI, {'names': ['n1'], 'addresses': ['10.0.0.1']}, host='n1')
    assert result['certificates'][0]['subject_alt_name'] == ['DNS:n1', 'IP:10.0.0.1']
    with pytest.raises(AnsibleFilterError, match='host n1: pki: pki_renew_before_days'):
        pki.pki_plan(dict(PKI, renew_before_days=400), host='n1')


def test_pki_crl_plan_filter():
    settings = {'crl_validity_days': 7, 'crl_renew_before_days': 2, 'directory': '/pki'}
    result = pki.FilterModule().filters()['pki_crl_plan'](settings, [{'serial': '0A'}], None, host='n1')
    assert result['revoked_certificates'] == [{'serial_number': 10, 'reason': 'unspecified'}]
    with pytest.raises(AnsibleFilterError, match='host n1: pki: pki_revoked entry serial=x'):
        pki.pki_crl_plan(settings, [{'serial': 'x'}], host='n1')


def test_pki_ca_plan_filter():
    result = pki.FilterModule().filters()['pki_ca_plan']({'create': True, 'passphrase': True}, {}, '', host='n1')
    assert result['create'] == ['current']
    with pytest.raises(AnsibleFilterError, match='host n1: pki: the CA rollover stage'):
        pki.pki_ca_plan({}, {}, 'rotate', host='n1')


def test_edge_plan_filter():
    name = 'edge_plan'
    serving = {'instances': [{'name': 'tiny', 'port': 8101, 'served_model_name': 'tiny', 'address': '127.0.0.1',
                              'metrics_path': '/metrics'}]}
    settings = {'port': 8000, 'default_address': '10.0.0.1', 'tls_certificate': '/s.crt', 'tls_key': '/s.key',
                'tls_ca': '/ca.crt'}
    result = edge.FilterModule().filters()[name](serving, settings, 'n1')
    assert result['listen'] == ['10.0.0.1'] and result['stats_path'] == '/edge/metrics'
    with pytest.raises(AnsibleFilterError, match='host n1: edge: the host has no vLLM instance'):
        edge.edge_plan({'instances': []}, {'port': 8000}, host='n1')
    with pytest.raises(AnsibleFilterError, match='host n1: edge: edge_fault_injection share must be'):
        edge.edge_plan(serving, dict(settings, fault_injection={'share': 0}), host='n1')


def test_edge_fault_filter():
    fault = edge.FilterModule().filters()['edge_fault']
    assert sorted(edge.FilterModule().filters()) == ['edge_fault', 'edge_plan']
    assert fault({}, host='n1') is None and fault(None) is None
    assert fault({'share': 0.5, 'paths': ['/v1/completions']}, host='n1') == {
        'share': 0.5, 'status': 503, 'paths': ['/v1/completions']}
    with pytest.raises(AnsibleFilterError, match='host n1: edge: edge_fault_injection paths entry /health is not a '
                                                 'model API path'):
        fault({'share': 0.5, 'paths': ['/health']}, host='n1')


@pytest.mark.parametrize('module, doc', [(pki, 'pki_plan.yml'), (edge, 'edge_plan.yml'), (edge, 'edge_fault.yml')])
def test_documentation_names_the_filter(module, doc):
    path = Path(inspect.getsourcefile(module)).parent / doc
    documentation = yaml.safe_load(path.read_text())['DOCUMENTATION']
    assert documentation['name'] == doc[:-4] and documentation['options']['_input']['required'] is True


def render_nginx_conf(**settings):
    """The edge role's nginx.conf for one instance, templated as the template module does (trim_blocks)."""
    serving = {'instances': [{'name': 'tiny', 'port': 8101, 'served_model_name': 'tiny-llama',
                              'address': '127.0.0.1', 'metrics_path': '/metrics'}]}
    settings = dict({'port': 8000, 'default_address': '10.0.0.1', 'tls_certificate': '/s.crt', 'tls_key': '/s.key',
                     'tls_ca': '/ca.crt'}, **settings)
    variables = yaml.safe_load((ROLE / 'defaults' / 'main.yml').read_text())
    for key in ('drain_file', 'audit_log', 'client_max_body_size'):
        settings.setdefault(key, variables['edge_%s' % key])
    variables.update(yaml.safe_load((ROLE / 'vars' / 'main.yml').read_text()))
    # A role variable built from another, as the role's vars would be templated.
    variables['_edge_fault_file'] = trust_as_template(variables['_edge_fault_file'])
    variables['_edge_tls_settings'] = trust_as_template(variables['_edge_tls_settings'])
    variables.update(_edge_plan=edge.edge_plan(serving, settings, 'n1'), inventory_hostname='n1',
                     ansible_managed='Ansible managed')
    templar = Templar(loader=DataLoader(), variables=variables)
    source = trust_as_template((ROLE / 'templates' / 'nginx.conf.j2').read_text())
    return templar.template(source, escape_backslashes=False,
                            overrides={'trim_blocks': True, 'lstrip_blocks': False, 'newline_sequence': '\n'})


def render_tls_settings(crl):
    """The edge role's TLS settings file (tasks/certificates.yml) for files with these stat results."""
    plan = {'tls': {'certificate': '/s.crt', 'key': '/s.key', 'ca': '/ca.crt', 'crl': crl}}
    files = [('/s.crt', 'aa' * 20), ('/s.key', 'bb' * 20), ('/ca.crt', 'cc' * 20)] + ([(crl, 'dd' * 20)] if crl else [])
    variables = yaml.safe_load((ROLE / 'vars' / 'main.yml').read_text())
    variables.update(_edge_plan=plan, ansible_managed='Ansible managed', __edge_certificates={
        'results': [{'item': path, 'stat': {'exists': True, 'checksum': checksum}} for path, checksum in files]})
    variables['_edge_crl_generation'] = trust_as_template(variables['_edge_crl_generation'])
    templar = Templar(loader=DataLoader(), variables=variables)
    source = trust_as_template((ROLE / 'templates' / 'llmops-edge-tls.conf.j2').read_text())
    return templar.template(source, escape_backslashes=False,
                            overrides={'trim_blocks': True, 'lstrip_blocks': False, 'newline_sequence': '\n'})


def test_nginx_conf_includes_the_tls_settings_of_the_files_it_serves():
    conf = render_nginx_conf(tls_crl='/ca.crl')
    assert re.search(r'^ {4}ssl_crl /ca.crl;\n {4}# .*\n {4}include /etc/nginx/llmops-vllm/tls.conf;$', conf, re.M)
    assert 'ssl_session_cache' not in conf
    # Each CRL its own session cache (a resumed session skips the CRL), and every file's checksum: a new file, a
    # changed settings file, a reload.
    with_crl = render_tls_settings('/ca.crl')
    assert re.findall(r'^ssl_session_cache shared:edge_tls_(\w+):10m;$', with_crl, re.M) == ['dd' * 6]
    assert [line.split()[1:] for line in with_crl.splitlines() if re.match(r'# [0-9a-f]{40} ', line)] == [
        ['aa' * 20, '/s.crt'], ['bb' * 20, '/s.key'], ['cc' * 20, '/ca.crt'], ['dd' * 20, '/ca.crl']]
    assert 'shared:edge_tls_none:10m;' in render_tls_settings(None)


def locations(conf):
    """{location argument: its body} of the server block."""
    return dict(re.findall(r'^ {8}location (.+?) \{\n(.*?)^ {8}\}$', conf, re.M | re.S))


def test_nginx_conf_counts_client_traffic_and_serves_the_counters():
    conf = render_nginx_conf()
    assert re.search(r'^ {4}lua_shared_dict llmops_edge_stats 1m;$', conf, re.M)
    found = locations(conf)
    counted = {'= /v1/models', '/v1/', '~ ^(/tokenize|/detokenize|/version|/pooling|/classify|/score|/rerank)$',
               '~ ^/instances/(?<edge_instance_name>[a-z0-9-]+)(?<edge_instance_path>/.*)$'}
    assert {name for name, body in found.items() if 'log_by_lua_block { edge.count() }' in body} == counted
    assert conf.count('log_by_lua_block') == len(counted)
    # The counters: an exact location, mTLS only (no API key, no rate limit), not counted themselves.
    assert found['= /edge/metrics'].split() == ['content_by_lua_block', '{', 'edge.metrics()', '}']
    assert '404' in found['= /metrics'] and '/edge/metrics' in found['= /metrics']
    # The breaker's reads of the counters are load balancer probes: audited like /health.
    assert '"/edge/metrics:SUCCESS" 0;' in conf and '"/health:SUCCESS" 0;' in conf
    assert '"fault":$edge_log_fault}\';' in conf and 'set $edge_fault "";' in conf


def test_nginx_conf_hands_the_lua_module_the_fault_file():
    conf = render_nginx_conf(fault_injection={'share': 1, 'status': 503})
    table, fault_file = re.search(r'edge\.configure\(\[==\[(.*)\]==\], "([^"]+)"\)', conf).groups()
    # The fault is only in its file (tasks/fault.yml), so that a game day changes nothing else.
    assert 'fault' not in json.loads(table) and '"share"' not in conf
    assert fault_file == '/etc/nginx/llmops-vllm/fault.json'


def test_nginx_conf_holds_the_checked_paths_and_size():
    conf = render_nginx_conf(drain_file='/run/llmops/draining', audit_log='/srv/log/audit.log',
                             client_max_body_size='1g')
    assert 'if (-f /run/llmops/draining) {' in conf
    assert 'access_log /srv/log/audit.log edge_audit if=$edge_log_this;' in conf
    assert 'client_max_body_size 1g;' in conf
