# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The Ray node of a host: from the serving plan's ranks of vLLM instances on Ray, or from the role's settings."""

from __future__ import annotations

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._ray import RayPlanError, ray_plan

PORTS = {'node_manager': 6380, 'object_manager': 6381, 'runtime_env_agent': 6382, 'dashboard_agent_grpc': 6383,
         'dashboard_agent_http': 6384, 'metrics_export': 6385, 'min_worker': 10002, 'max_worker': 10999}
SETTINGS = {'head': '', 'port': 6379, 'addresses': {'gpu-node01': '10.0.0.11', 'gpu-node02': '10.0.0.12'},
            'venv': '/opt/vllm/current/venv', 'temp_dir': '/var/lib/ray/tmp', 'num_cpus': 0, 'cpu_count': 96,
            'num_gpus': 0, 'object_store_bytes': 1 << 30, 'dashboard': False, 'dashboard_port': 8265, 'ports': PORTS}


def rank(address='10.0.0.11', **more):
    """A serving plan's rank on Ray: its addresses on the ranks' network (the plan's, not the Ray role's)."""
    return dict({'instance': 'big', 'backend': 'ray', 'head': 'gpu-node01', 'port': 6379, 'gpus': [0, 1, 2, 3],
                 'cuda_visible_devices': 'GPU-a,GPU-b,GPU-c,GPU-d', 'cpus': '0-23', 'address': address,
                 'master_addr': '10.0.0.11'}, **more)


def flag(argv, name):
    return argv[argv.index(name) + 1]


def test_a_host_with_ray_ranks_follows_its_serving_plan():
    # The Ray role's own view of the addresses (another interface) gives way to the serving plan's.
    settings = dict(SETTINGS, addresses={'gpu-node01': '192.168.0.11', 'gpu-node02': '192.168.0.12'})
    head = ray_plan(settings, [rank()], 'gpu-node01')
    worker = ray_plan(settings, [rank('10.0.0.12')], 'gpu-node02')
    assert (head['role'], worker['role']) == ('head', 'worker')
    assert head['argv'][:3] == ['/opt/vllm/current/venv/bin/ray', 'start', '--block']
    assert flag(head['argv'], '--port') == '6379' and '--include-dashboard=false' in head['argv']
    assert flag(worker['argv'], '--address') == '10.0.0.11:6379' and '--head' not in worker['argv']
    for node, address in ((head, '10.0.0.11'), (worker, '10.0.0.12')):
        assert flag(node['argv'], '--num-gpus') == '4' and flag(node['argv'], '--node-ip-address') == address
        assert node['environment']['CUDA_VISIBLE_DEVICES'] == 'GPU-a,GPU-b,GPU-c,GPU-d' and node['cpus'] == '0-23'
        assert flag(node['argv'], '--object-store-memory') == str(1 << 30)
        assert flag(node['argv'], '--min-worker-port') == '10002' and node['worker_ports'] == '10002-10999'
    assert head['ports'] == [6379, 6380, 6381, 6382, 6383, 6384, 6385] and 6379 not in worker['ports']
    assert head['instances'] == ['big'] and head['unit'] == 'ray.service'
    assert head['exec_start'] == ' '.join(head['argv'])  # nothing in it needs systemd's quotes


def test_a_cluster_for_other_work_names_its_head():
    node = ray_plan(dict(SETTINGS, head='gpu-node01', num_cpus=2, dashboard=True), [], 'gpu-node01')
    assert flag(node['argv'], '--num-cpus') == '2' and flag(node['argv'], '--num-gpus') == '0'
    assert flag(node['argv'], '--dashboard-host') == '127.0.0.1' and node['cpus'] is None
    assert 'CUDA_VISIBLE_DEVICES' not in node['environment']
    assert flag(ray_plan(dict(SETTINGS, head='gpu-node01'), [], 'gpu-node02')['argv'], '--num-cpus') == '96'


@pytest.mark.parametrize('settings, ranks, fragment', [
    ({}, [], 'no head is named'),
    ({'head': 'gpu-node01'}, [rank(), rank(instance='other', port=6390)], 'name different heads or ports'),
    ({'head': 'gpu-node03'}, [], 'the Ray address of gpu-node03 is unknown'),
    ({'head': 'gpu-node01', 'object_store_bytes': 1 << 20}, [], 'ray_cluster_object_store_bytes must be'),
    ({'head': 'gpu-node01', 'ports': dict(PORTS, min_worker=20000)}, [], 'min_worker is above max_worker'),
    ({'head': 'gpu-node01', 'ports': {'node_manager': 6380}}, [], 'ray_cluster_ports lacks object_manager'),
    ({'head': 'gpu-node01', 'temp_dir': '/var/lib/ray/tmp\nExecStartPre=+/bin/id'}, [],
     "ray_cluster_temp_dir is '/var/lib/ray/tmp\\nExecStartPre=+/bin/id', not an absolute path"),
    ({'head': 'gpu-node01', 'venv': '/opt/ray venv'}, [], "ray_cluster_venv is '/opt/ray venv', not"),
])
def test_refusals_name_the_host_and_the_fix(settings, ranks, fragment):
    with pytest.raises(RayPlanError) as error:
        ray_plan(dict(SETTINGS, **settings), ranks, 'gpu-node02')
    message = str(error.value)
    assert message.startswith('host gpu-node02: ray_cluster: ') and fragment in message and 'Fix: ' in message
