# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The node summary of the example inventory's gpu-node01 on the recorded Kunpeng 920 topology, built through
the same chain as the roles: placement → serving plan → (pki plan) → edge plan → node summary."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ansible_collections.llmops.vllm.plugins.module_utils._edge import edge_plan
from ansible_collections.llmops.vllm.plugins.module_utils._node import node_summary, serves_on_gpu
from ansible_collections.llmops.vllm.plugins.module_utils._pki import pki_plan
from ansible_collections.llmops.vllm.plugins.module_utils._placement import vllm_placement
from ansible_collections.llmops.vllm.plugins.module_utils._serving import serving_plan
from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import KUNPENG920_8xA100

REPO = Path(__file__).resolve().parents[4]
EXAMPLE = REPO / 'inventories' / 'example'
# The checkpoint the example serves: a W8A16 GPTQ model with an 8k context.
W8A16 = {'max_position_embeddings': 131072, 'quantization_config': {'quant_method': 'gptq', 'bits': 8}}
# Before the first install, as site.yml's preflight plans it: every flag assumed.
INSTALL = {'venv': '/opt/vllm/current/venv', 'device': 'cuda', 'package': 'vllm', 'version': '0.32.0',
           'serve_flags': None}


def _yaml(*parts):
    return yaml.safe_load((REPO.joinpath(*parts)).read_text()) or {}


@pytest.fixture
def node(facts):
    """gpu-node01's plans and summary, from the example inventory and the roles' defaults."""
    inventory = {}
    for path in ('all/service.yml', 'vllm_nodes/serving.yml', 'vllm_nodes/edge.yml'):
        inventory.update(_yaml('inventories', 'example', 'group_vars', *path.split('/')))
    address = _yaml('inventories', 'example', 'hosts.yml')['all']['children']['vllm_nodes']['hosts']['gpu-node01'][
        'ansible_host']
    edge_defaults = _yaml('roles', 'edge', 'defaults', 'main.yml')
    pki_defaults = _yaml('roles', 'pki', 'defaults', 'main.yml')
    gpu, numa = facts(KUNPENG920_8xA100)
    instances = inventory['vllm_instances']
    placements = vllm_placement(instances, gpu, numa, inventory['vllm_reserved_cpus'], host='gpu-node01')
    probes = {'models': dict((i['name'], {'exists': True, 'config': W8A16}) for i in instances)}
    serving = serving_plan(instances, gpu, numa, INSTALL, probes, {'port_range': [8001, 8999]}, host='gpu-node01',
                           placements=placements)
    pki = pki_plan({'directory': pki_defaults['pki_host_dir'], 'server': True,
                    'validity_days': pki_defaults['pki_certificate_validity_days'],
                    'renew_before_days': pki_defaults['pki_renew_before_days'],
                    'service_vips': inventory['vllm_service_vips'], 'service_names': inventory['vllm_service_names']},
                   {'names': ['gpu-node01'], 'addresses': [address]}, host='gpu-node01')
    edge = edge_plan(serving, {'port': edge_defaults['edge_port'], 'default_address': address,
                               'vips': inventory['vllm_service_vips'], 'rate_limit': inventory['edge_rate_limit'],
                               'client_rate_limits': inventory['edge_client_rate_limits'],
                               'cpus': inventory['vllm_reserved_cpus'], 'pki_files': pki['files']},
                     host='gpu-node01')
    settings = {'audit_log': edge_defaults['edge_audit_log'], 'drain_file': edge_defaults['edge_drain_file']}
    return {'placements': placements, 'serving': serving, 'pki': pki, 'edge': edge,
            'summary': node_summary(serving, edge, settings, host='gpu-node01')}


def test_the_summary_has_every_documented_field(node):
    summary = node['summary']
    documented = (REPO / 'docs' / 'node-summary.md').read_text()
    for field in summary:
        assert '`%s`' % field in documented, field
    for field in summary['instances'][0]:
        assert '`%s`' % field in documented, field
    assert summary['version'] == 1 and summary['host'] == 'gpu-node01'


def test_endpoints_and_vips_are_the_edges(node):
    edge, summary = node['edge'], node['summary']
    assert summary['address'] == '10.20.1.11' and summary['port'] == edge['port'] == 8000
    assert summary['endpoints'] == ['10.20.1.11:8000']
    assert summary['vips'] == edge['vips'] == ['10.20.0.100']
    assert summary['vip_endpoints'] == ['10.20.0.100:8000']
    assert summary['health_url'] == 'https://10.20.1.11:8000/health'
    assert summary['models'] == [m['name'] for m in edge['models']] == ['llama-3.1-70b-instruct']


def test_each_instance_is_the_serving_plans(node):
    placements, serving, edge, summary = node['placements'], node['serving'], node['edge'], node['summary']
    [instance] = summary['instances']
    [planned] = serving['instances']
    assert instance['name'] == planned['name'] == 'llama70b'
    assert instance['model'] == planned['served_model_name'] == 'llama-3.1-70b-instruct'
    assert instance['model_path'] == planned['model'] and instance['unit'] == 'vllm-llama70b.service'
    assert instance['loopback_url'] == planned['url'] == 'http://127.0.0.1:8101'
    assert instance['metrics_path'] == edge['metrics_paths']['llama70b'] == '/instances/llama70b/metrics'
    assert instance['metrics_url'] == 'https://10.20.1.11:8000/instances/llama70b/metrics'
    # TP 4 x PP 2 over all 8 A100s, with the CPUs of their slices (reserved CPUs left out).
    assert instance['gpus'] == placements[0]['gpu_indices'] and sorted(instance['gpus']) == list(range(8))
    assert instance['gpu_uuids'] == placements[0]['gpu_uuids']
    assert instance['cpus'] == placements[0]['cpulist'] == planned['cpu_affinity']
    assert not {0, 1, 64, 65} & set(placements[0]['cpus'])
    assert instance['numa_nodes'] == placements[0]['numa_nodes']
    assert (instance['tensor_parallel_size'], instance['pipeline_parallel_size']) == (4, 2)
    assert instance['device'] == 'cuda'


def test_audit_log_and_tls_files_are_the_edges_and_the_pkis(node):
    pki, edge, summary = node['pki'], node['edge'], node['summary']
    assert summary['audit_log'] == '/var/log/llmops-vllm/edge-audit.log'
    assert summary['drain_file'] == '/var/lib/llmops-vllm/edge/draining'
    assert summary['tls'] == edge['tls'] == {'certificate': pki['files']['server']['certificate'],
                                             'key': pki['files']['server']['key'], 'ca': pki['files']['ca'],
                                             'crl': pki['files']['crl'],
                                             'subject_alt_names': pki['files']['server']['subject_alt_names']}
    # The VIP is in the certificate, so clients reaching the node through the LVS directors accept it.
    assert 'IP:10.20.0.100' in summary['tls']['subject_alt_names'] and summary['vips'] == ['10.20.0.100']
    assert summary['stats_url'] == 'https://%s/edge/metrics' % summary['endpoints'][0]
    assert summary['tls']['ca'] == '/etc/llmops-vllm/pki/ca.crt'


def test_serves_on_gpu_when_an_instance_runs_on_cuda(node):
    summary = node['summary']
    assert serves_on_gpu(summary) is True
    cpu_only = dict(summary, instances=[dict(i, device='cpu') for i in summary['instances']])
    assert serves_on_gpu(cpu_only) is False
    assert serves_on_gpu(dict(summary, instances=[])) is False
    assert serves_on_gpu(None) is False
