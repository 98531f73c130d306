# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import hashlib
import json
import re

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._edge import (
    API_PATHS, EdgePlanError, edge_plan, fault_injection)

KEY = 'k' * 40
SETTINGS = {'port': 8000, 'default_address': '10.20.1.11', 'listen_addresses': [], 'vips': [], 'api_keys': [],
            'rate_limit': {}, 'client_rate_limits': [], 'cpus': '',
            'pki_files': {'ca': '/etc/llmops-vllm/pki/ca.crt',
                          'server': {'certificate': '/etc/llmops-vllm/pki/server.crt',
                                     'key': '/etc/llmops-vllm/pki/server.key'}}}
LAB = [{'name': 'tiny', 'port': 8101, 'served_model_name': 'tiny-llama', 'model': '/var/lib/vllm/models/tiny'}]
# Two models on one node; llama is served by two instances (one per socket).
NODE = [
    {'name': 'llama-a', 'port': 8101, 'served_model_name': 'meta-llama/Llama-3.1-8B-Instruct'},
    {'name': 'llama-b', 'port': 8102, 'served_model_name': 'meta-llama/Llama-3.1-8B-Instruct'},
    {'name': 'embed', 'port': 8103},
]


def serving(instances):
    """The serving plan's view of the instances: what vllm_serving_plan decides for each."""
    decided = {'address': '127.0.0.1', 'metrics_path': '/metrics'}
    return {'instances': [dict(decided, served_model_name=i['name'], **i) if 'served_model_name' not in i
                          else dict(decided, **i) for i in instances]}


def plan(instances=None, **settings):
    return edge_plan(serving(LAB if instances is None else instances), dict(SETTINGS, **settings), host='gpu-node01')


def refused(instances, *fragments, **settings):
    with pytest.raises(EdgePlanError) as error:
        plan(instances, **settings)
    message = str(error.value)
    assert message.startswith('host gpu-node01') and ': edge: ' in message and '. Fix: ' in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_the_lab_node_listens_on_its_address_and_routes_its_only_model():
    result = plan()
    assert result['listen'] == ['10.20.1.11'] and result['port'] == 8000 and result['nonlocal_bind'] is False
    assert result['models'] == [{'name': 'tiny-llama', 'upstream': 'model_0', 'instances': ['tiny']}]
    assert result['instances'] == [{'name': 'tiny', 'port': 8101, 'model': 'tiny-llama', 'upstream': 'instance_tiny',
                                    'address': '127.0.0.1:8101'}]
    assert result['default_model'] == 'tiny-llama'
    assert result['rate_limit'] is None and result['client_rate_limits'] == [] and result['api_keys'] == []
    assert result['cpu_affinity'] == '' and result['worker_processes'] == 'auto'
    # The counters are at a fixed path; fault injection is off unless asked for.
    assert result['stats_path'] == '/edge/metrics'
    assert result['fault_injection'] is None and 'fault' not in json.loads(result['lua_config'])


@pytest.mark.parametrize('fault', [None, {}])
def test_fault_injection_is_off_when_empty(fault):
    assert plan(fault_injection=fault)['fault_injection'] is None
    assert fault_injection(fault, 'node1') is None


def test_fault_injection_defaults_to_503_on_the_whole_model_api():
    result = plan(fault_injection={'share': 1})
    expected = {'share': 1.0, 'status': 503, 'paths': ['/v1/'] + list(API_PATHS)}
    assert result['fault_injection'] == expected == fault_injection({'share': 1}, 'node1')
    # The fault is in its own file, not in the routing table.
    assert 'fault' not in json.loads(result['lua_config'])
    # The counters path and /health are not model API paths.
    assert not [p for p in expected['paths'] if '/edge/metrics'.startswith(p) or '/health'.startswith(p)]


def test_fault_injection_takes_a_share_a_status_and_paths():
    fault = {'share': 0.25, 'status': 429, 'paths': ['/v1/chat/completions', '/tokenize']}
    result = plan(fault_injection=fault)
    assert result['fault_injection'] == fault == fault_injection(fault)
    assert isinstance(result['fault_injection']['share'], float)
    assert plan(fault_injection={'share': 0.001, 'status': 599})['fault_injection']['status'] == 599
    # Prefixes of model API paths are model API paths.
    assert plan(fault_injection={'share': 0.5, 'paths': ['/', '/v1', '/tok']})['fault_injection']['paths'] == [
        '/', '/v1', '/tok']


def test_instances_of_one_model_share_an_upstream_and_keep_their_own():
    result = plan(NODE)
    assert result['models'] == [
        {'name': 'meta-llama/Llama-3.1-8B-Instruct', 'upstream': 'model_0', 'instances': ['llama-a', 'llama-b']},
        {'name': 'embed', 'upstream': 'model_1', 'instances': ['embed']},
    ]
    assert [i['upstream'] for i in result['instances']] == ['instance_llama-a', 'instance_llama-b', 'instance_embed']
    # Several models: a request must name one.
    assert result['default_model'] is None
    lua = json.loads(result['lua_config'])
    assert lua['models'] == {'meta-llama/Llama-3.1-8B-Instruct': 'model_0', 'embed': 'model_1'}
    assert lua['model_names'] == ['meta-llama/Llama-3.1-8B-Instruct', 'embed'] and lua['default_model'] is None
    assert lua['instances']['llama-b'] == {'upstream': 'instance_llama-b', 'model': 'meta-llama/Llama-3.1-8B-Instruct'}


def test_the_vips_are_listened_on_after_the_node_address():
    result = plan(vips=['10.20.0.100'], listen_addresses=['10.20.1.11', '10.30.1.11'])
    assert result['listen'] == ['10.20.1.11', '10.30.1.11', '10.20.0.100']
    assert result['endpoints'] == ['10.20.1.11:8000', '10.30.1.11:8000', '10.20.0.100:8000']
    assert plan(listen_addresses=['fd00::11'])['endpoints'] == ['[fd00::11]:8000']
    assert result['vips'] == ['10.20.0.100'] and result['nonlocal_bind'] is True


def test_api_keys_become_digests_and_the_key_is_nowhere_in_the_plan():
    result = plan(api_keys=[{'name': 'chat-frontend', 'key': KEY}, {'name': 'batch', 'key': 'b' * 64}])
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    assert result['api_keys'][0] == {'name': 'chat-frontend', 'sha256': digest}
    assert json.loads(result['lua_config'])['api_keys'][digest] == 'chat-frontend'
    assert KEY not in json.dumps(result)


def test_rate_limits_are_zones_keyed_on_the_client_subject():
    result = plan(rate_limit={'rate': '20r/s', 'burst': 40},
                  client_rate_limits=[{'client': 'batch-jobs', 'rate': '2r/m', 'burst': 1}])
    assert result['rate_limit'] == {'zone': 'clients', 'rate': '20r/s', 'burst': 40}
    [limit] = result['client_rate_limits']
    assert (limit['zone'], limit['client'], limit['rate'], limit['burst']) == ('client_0', 'batch-jobs', '2r/m', 1)
    pattern = re.compile(limit['subject_regex'])
    assert pattern.search('CN=batch-jobs,OU=applications,O=llmops.vllm')
    assert not pattern.search('CN=batch-jobs-2,OU=applications,O=llmops.vllm')
    assert not pattern.search('CN=xbatch-jobs,OU=applications,O=llmops.vllm')


def test_nginx_is_pinned_to_the_reserved_cpus_with_a_worker_each():
    result = plan(cpus='0-1,64-65')
    assert result['cpu_affinity'] == '0-1,64-65' and result['worker_processes'] == 4


@pytest.mark.parametrize('instances, settings, fragments', [
    ([], {}, ['has no vLLM instance to route to', 'define vllm_instances']),
    ([dict(LAB[0], port=8000)], {}, ['instance tiny: edge: port 8000 is the edge\'s service port']),
    ([dict(LAB[0], served_model_name='tiny "llama"')], {}, ['instance tiny', 'cannot route safely']),
    ([dict(LAB[0], served_model_name='x]==]y')], {}, ['cannot route safely']),
    (LAB, {'port': 0}, ['edge_port must be a TCP port, got 0']),
    (LAB, {'default_address': '', 'listen_addresses': []}, ['no address to listen on']),
    (LAB, {'listen_addresses': ['eth0']}, ["edge_listen_addresses entry 'eth0' is not an IP address"]),
    (LAB, {'vips': ['10.20.0.300']}, ["vllm_service_vips entry '10.20.0.300'"]),
    (LAB, {'api_keys': [{'key': KEY}]}, ['edge_api_keys entry 1 has no name']),
    (LAB, {'api_keys': [{'name': 'a', 'key': 'short'}]},
     ['the API key a is missing, shorter than 32 characters', 'openssl rand -hex 32']),
    (LAB, {'api_keys': [{'name': 'a', 'key': KEY}, {'name': 'a', 'key': 'x' * 40}]}, ['two API keys are named a']),
    (LAB, {'api_keys': [{'name': 'a', 'key': KEY}, {'name': 'b', 'key': KEY}]}, ['the API key b is the same']),
    (LAB, {'rate_limit': {'rate': '20/s'}}, ["edge_rate_limit: rate '20/s' is not a request rate"]),
    (LAB, {'rate_limit': {'rate': '20r/s', 'burst': -1}}, ['burst must be an integer >= 0']),
    (LAB, {'client_rate_limits': [{'client': 'CN=x', 'rate': '1r/s'}]}, ["client 'CN=x' is not a certificate common"]),
    (LAB, {'client_rate_limits': [{'client': 'a', 'rate': '1r/s'}, {'client': 'a', 'rate': '2r/s'}]},
     ['lists a twice']),
    (LAB, {'cpus': '3-1'}, ["the edge CPUs '3-1' are not a cpulist"]),
    (LAB, {'fault_injection': {'share': 0}}, ['edge_fault_injection share must be a number above 0 and at most 1',
                                              'got 0', 'set edge_fault_injection to {} to turn it off']),
    (LAB, {'fault_injection': {'share': 1.5}}, ['edge_fault_injection share must be', 'got 1.5']),
    (LAB, {'fault_injection': {'share': -0.1}}, ['edge_fault_injection share must be', 'got -0.1']),
    (LAB, {'fault_injection': {'share': '0.5'}}, ['edge_fault_injection share must be', "got '0.5'"]),
    (LAB, {'fault_injection': {'share': True}}, ['edge_fault_injection share must be', 'got True']),
    (LAB, {'fault_injection': {'status': 503}}, ['edge_fault_injection share must be', 'got None']),
    (LAB, {'fault_injection': {'share': 0.5, 'status': 200}},
     ['edge_fault_injection status must be an HTTP error status from 400 to 599, got 200', 'e.g. 503']),
    (LAB, {'fault_injection': {'share': 0.5, 'status': 600}}, ['status must be an HTTP error status', 'got 600']),
    (LAB, {'fault_injection': {'share': 0.5, 'status': 499}}, ["status 499 is nginx's code", 'such as 500']),
    (LAB, {'fault_injection': {'share': 0.5, 'status': '503'}}, ['status must be an HTTP error status', "'503'"]),
    (LAB, {'fault_injection': {'share': 0.5, 'rate': 0.1}},
     ['edge_fault_injection has unknown keys rate', 'use only share, status and paths']),
    (LAB, {'fault_injection': 0.5}, ['edge_fault_injection must be a dict', 'got 0.5']),
    (LAB, {'fault_injection': {'share': 0.5, 'paths': []}}, ['paths must be a non-empty list of path prefixes']),
    (LAB, {'fault_injection': {'share': 0.5, 'paths': '/v1/'}}, ['paths must be a non-empty list']),
    (LAB, {'fault_injection': {'share': 0.5, 'paths': ['v1/completions']}},
     ["paths entry 'v1/completions' is not a path"]),
    (LAB, {'fault_injection': {'share': 0.5, 'paths': ['/health']}},
     ['paths entry /health is not a model API path', 'never /v1/models, /health or /edge/metrics']),
    (LAB, {'fault_injection': {'share': 0.5, 'paths': ['/edge/metrics']}}, ['/edge/metrics is not a model API']),
    (LAB, {'fault_injection': {'share': 0.5, 'paths': ['/v1/models']}}, ['/v1/models is not a model API path']),
    (LAB, {'fault_injection': {'share': 0.5, 'paths': ['/instances/tiny/v1/']}}, ['is not a model API path']),
])
def test_refusals_name_the_host_the_problem_and_the_fix(instances, settings, fragments):
    refused(instances, *fragments, **settings)


# Values nginx.conf holds unquoted: each would end its directive and add its own (a location that exposes vLLM).
@pytest.mark.parametrize('settings, fragments', [
    ({'drain_file': '/x; } location /admin/ { proxy_pass http://127.0.0.1:8101; } location = /y { return 200'},
     ["edge_drain_file is '/x; } location /admin/", 'not an absolute path of letters, digits',
      'Fix: set edge_drain_file to a path such as /var/lib/llmops-vllm/edge/draining']),
    ({'drain_file': 'relative/draining'}, ["edge_drain_file is 'relative/draining'"]),
    ({'drain_file': '/var/lib/../../etc/passwd'}, ['edge_drain_file is']),
    ({'drain_file': '/a\nb'}, ['edge_drain_file is']),
    ({'audit_log': '/var/log/a.log main; access_log /tmp/x'}, ["edge_audit_log is '/var/log/a.log main;"]),
    ({'audit_log': '/var/log/$host.log'}, ['edge_audit_log is']),
    ({'client_max_body_size': '16m; include /etc/shadow'}, ["edge_client_max_body_size is '16m; include",
                                                            'e.g. 16m']),
    ({'tls_certificate': '/s.crt;', 'tls_key': '/s.key', 'tls_ca': '/ca.crt'}, ["edge_tls_certificate is '/s.crt;'"]),
    ({'tls_crl': '/ca crl'}, ["edge_tls_crl is '/ca crl'"]),
    ({'pki_files': dict(SETTINGS['pki_files'], crl='/etc/x{y}.crl')}, ["the pki role's crl file is '/etc/x{y}.crl'"]),
])
def test_values_that_would_change_nginx_conf_are_refused(settings, fragments):
    refused(LAB, *fragments, **settings)


def test_the_checked_paths_and_size_are_in_the_plan():
    result = plan(drain_file='/var/lib/llmops-vllm/edge/draining', audit_log='/var/log/llmops-vllm/edge-audit.log',
                  client_max_body_size='16m')
    assert (result['drain_file'], result['audit_log'], result['client_max_body_size']) == (
        '/var/lib/llmops-vllm/edge/draining', '/var/log/llmops-vllm/edge-audit.log', '16m')


def test_an_api_key_is_never_in_a_refusal():
    message = refused(LAB, api_keys=[{'name': 'a', 'key': 'has a space but is long enough 0123456789'}])
    assert 'space but' not in message
