# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import copy

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._monitoring import JOBS, MonitoringPlanError, monitoring_plan

CLIENT = {'certificate': '/etc/llmops-vllm/pki/prometheus.crt', 'key': '/etc/llmops-vllm/pki/prometheus.key',
          'ca': '/etc/llmops-vllm/pki/ca.crt'}
SETTINGS = {'client': CLIENT, 'node_exporter_port': 9100, 'dcgm_exporter_port': 9400,
            'file_sd_dir': '/etc/prometheus/file_sd', 'scrape_interval': '15s', 'scrape_timeout': '10s'}


def node(name, address, devices=('cpu',)):
    base = 'https://%s:8000' % address
    return {'host': name, 'address': address, 'port': 8000, 'stats_url': base + '/edge/metrics',
            'instances': [{'name': 'llm%d' % i, 'model': 'model-%d' % i, 'device': device,
                           'metrics_url': '%s/instances/llm%d/metrics' % (base, i)}
                          for i, device in enumerate(devices)]}


def plan(nodes=None, exporters=None, host='mon01', **settings):
    nodes = [node('n1', '10.0.0.11'), node('n2', '10.0.0.12', ('cuda', 'cuda'))] if nodes is None else nodes
    exporters = [{'name': 'n1', 'address': '10.0.0.11'}, {'name': 'mon01', 'address': 'fd00::31'}] \
        if exporters is None else exporters
    return monitoring_plan(nodes, exporters, dict(copy.deepcopy(SETTINGS), **settings), host)


def test_every_instance_is_a_vllm_target_at_its_metrics_url_through_the_edge():
    targets = plan()['targets']['vllm']
    assert [t['targets'] for t in targets] == [['10.0.0.11:8000'], ['10.0.0.12:8000'], ['10.0.0.12:8000']]
    assert targets[2]['labels'] == {'instance': 'n2/llm1', 'node': 'n2', 'vllm_instance': 'llm1', 'model': 'model-1',
                                    'device': 'cuda', '__metrics_path__': '/instances/llm1/metrics'}


def test_edges_node_exporters_and_gpu_nodes_dcgm():
    result = plan()
    assert [t['labels'] for t in result['targets']['llmops_edge']] == [
        {'instance': 'n1', 'node': 'n1', '__metrics_path__': '/edge/metrics'},
        {'instance': 'n2', 'node': 'n2', '__metrics_path__': '/edge/metrics'}]
    assert [t['targets'] for t in result['targets']['node']] == [['10.0.0.11:9100'], ['[fd00::31]:9100']]
    assert [t['targets'] for t in result['targets']['dcgm']] == [['10.0.0.12:9400']]
    assert result['target_count'] == {'vllm': 3, 'llmops_edge': 2, 'node': 2, 'dcgm': 1, 'tls': 0}
    assert plan(dcgm_exporter_port=0)['targets']['dcgm'] == []


def test_the_edge_jobs_present_the_client_certificate_over_tls13_and_read_file_sd():
    jobs = dict((job['job_name'], job) for job in plan()['jobs'])
    assert list(jobs) == [job for job in JOBS if job != 'tls']  # no blackbox exporter: no probes
    for name in ('vllm', 'llmops_edge'):
        assert jobs[name]['scheme'] == 'https'
        assert jobs[name]['tls_config'] == {'ca_file': CLIENT['ca'], 'cert_file': CLIENT['certificate'],
                                            'key_file': CLIENT['key'], 'min_version': 'TLS13'}
    assert 'tls_config' not in jobs['node']
    assert jobs['node']['honor_labels'] is True
    assert jobs['node']['file_sd_configs'] == [{'files': ['/etc/prometheus/file_sd/llmops-node.json']}]


SINK = {'name': 'mon01', 'endpoint': '10.0.0.31:6379', 'server': 'log_sink', 'module': 'llmops_tls_redis'}


def probed(**overrides):
    settings = dict(blackbox='127.0.0.1:9115', tls_probe_interval='1m', tls_probe_endpoints=[SINK])
    nodes = [dict(node('n1', '10.0.0.11'), endpoints=['10.0.0.11:8000', '[fd00::11]:8000'],
                  vip_endpoints=['10.0.0.100:8000']),
             dict(node('n2', '10.0.0.12'), endpoints=['10.0.0.12:8000'], vip_endpoints=['10.0.0.100:8000'])]
    return plan(nodes=nodes, **dict(settings, **overrides))


def test_every_tls_endpoint_is_probed_once_through_the_blackbox_exporter():
    result = probed()
    edge = {'server': 'edge', '__param_module': 'llmops_tls_edge'}
    assert [(t['targets'], t['labels']) for t in result['targets']['tls']] == [
        (['10.0.0.11:8000'], dict(edge, instance='10.0.0.11:8000', node='n1')),
        (['[fd00::11]:8000'], dict(edge, instance='[fd00::11]:8000', node='n1')),
        (['10.0.0.12:8000'], dict(edge, instance='10.0.0.12:8000', node='n2')),
        (['10.0.0.100:8000'], dict(edge, instance='10.0.0.100:8000', server='vip')),  # one VIP, probed once
        (['10.0.0.31:6379'], {'instance': '10.0.0.31:6379', 'node': 'mon01', 'server': 'log_sink',
                              '__param_module': 'llmops_tls_redis'})]
    jobs = dict((job['job_name'], job) for job in result['jobs'])
    assert list(jobs) == list(JOBS)
    assert jobs['tls']['metrics_path'] == '/probe' and 'params' not in jobs['tls']
    assert jobs['tls']['scrape_interval'] == '1m' and 'tls_config' not in jobs['tls']
    assert jobs['tls']['relabel_configs'] == [
        {'source_labels': ['__address__'], 'target_label': '__param_target'},
        {'target_label': '__address__', 'replacement': '127.0.0.1:9115'}]


def test_a_node_summary_without_endpoints_is_probed_at_its_address_and_port():
    result = plan(blackbox='127.0.0.1:9115', tls_probe_interval='30s')
    assert [t['targets'] for t in result['targets']['tls']] == [['10.0.0.11:8000'], ['10.0.0.12:8000']]


@pytest.mark.parametrize('overrides, message', [
    ({'tls_probe_interval': 'hourly'}, "monitoring_tls_probe_interval is 'hourly', not a Prometheus duration"),
    ({'tls_probe_interval': '5s'}, 'monitoring_tls_probe_interval 5s is shorter than monitoring_scrape_timeout 10s, '
                                   'which Prometheus refuses. Fix: make monitoring_tls_probe_interval at least'),
    ({'scrape_interval': '5s'}, 'monitoring_scrape_interval 5s is shorter than monitoring_scrape_timeout 10s'),
    ({'tls_probe_endpoints': [{'name': 'sink', 'endpoint': '10.0.0.31:6379'}]},
     "host mon01: monitoring: a TLS endpoint to probe is {'name': 'sink', 'endpoint': '10.0.0.31:6379'}, not "
     "{name, endpoint: host:port, server: a lower-case word, module: one of llmops_tls_edge, llmops_tls_redis, "
     "llmops_tls}. Fix: correct that item of monitoring_tls_probe_endpoints"),
    ({'tls_probe_endpoints': [dict(SINK, endpoint='10.0.0.31:6379\nscrape_configs: []')]}, 'not {name, endpoint'),
    ({'tls_probe_endpoints': [dict(SINK, server='Log Sink')]}, 'not {name, endpoint'),
    ({'tls_probe_endpoints': [dict(SINK, module='http_2xx')]}, 'not {name, endpoint'),
    ({'tls_probe_endpoints': ['10.0.0.31:6379']}, "a TLS endpoint to probe is '10.0.0.31:6379', not"),
])
def test_probe_settings_are_refused_with_the_fix(overrides, message):
    with pytest.raises(MonitoringPlanError) as caught:
        probed(**overrides)
    assert message in str(caught.value)


def test_no_node_is_a_warning_not_a_refusal():
    assert plan(nodes=[])['warnings'] == [
        'host mon01: monitoring: no vLLM node has published a summary, so no vLLM instance is scraped']


@pytest.mark.parametrize('kwargs, message', [
    ({'client': {'certificate': 'c', 'ca': 'a'}}, 'host mon01: monitoring: the Prometheus client certificate lacks '
                                                  'key. Fix: list the client in pki_host_clients'),
    ({'scrape_interval': '15'}, "monitoring_scrape_interval is '15', not a Prometheus duration"),
    ({'node_exporter_port': 0}, 'llmops_node_exporter_port is 0, not a port number'),
    ({'exporters': [{'name': 'lb1', 'address': ''}]}, 'host lb1 has no address to scrape node exporter on. Fix: '
                                                      'gather that host'),
    ({'nodes': [dict(node('n1', '10.0.0.11'), stats_url='http://10.0.0.11:8000/edge/metrics')]},
     "host mon01, node n1: monitoring: stats_url 'http://10.0.0.11:8000/edge/metrics' is not an https URL"),
])
def test_refusals_name_the_host_the_problem_and_the_fix(kwargs, message):
    with pytest.raises(MonitoringPlanError) as caught:
        plan(**kwargs)
    assert message in str(caught.value)
