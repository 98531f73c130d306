# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""The node summary (the fact llmops_node): what a vLLM node serves, for the roles of other hosts.

node_summary() only gathers what the serving and edge plans decided; it decides nothing. Its shape is
documented in docs/node-summary.md, and load balancers, monitoring and multi-node roles read
hostvars[node]['llmops_node'] and nothing else of the vLLM roles.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

VERSION = 1


def serves_on_gpu(summary):
    """Whether the node serves an instance on NVIDIA GPUs: the GPU exporters run, and are scraped, there."""
    return any(instance.get('device') == 'cuda' for instance in (summary or {}).get('instances') or [])


def _https(endpoint, path):
    return 'https://%s%s' % (endpoint, path)


def node_summary(serving_plan, edge_plan, settings=None, host=None):
    """Return the node summary of one vLLM node from its serving plan and edge plan.

    settings: audit_log (the edge's audit log path), drain_file (while it exists the node drains).
    """
    settings = dict(settings or {})
    vips = list(edge_plan['vips'])
    port = edge_plan['port']
    addresses = [a for a in edge_plan['listen'] if a not in vips]
    endpoints = [e for a, e in zip(edge_plan['listen'], edge_plan['endpoints']) if a not in vips]
    node = endpoints[0]
    instances = []
    for item in serving_plan['instances']:
        placement = item['placement']
        metrics_path = edge_plan['metrics_paths'][item['name']]
        instances.append({
            'name': item['name'],
            'model': item['served_model_name'],
            'model_path': item['model'],
            'device': item['device'],
            'precision': item.get('precision'),
            'precision_reason': item.get('precision_reason'),
            'max_num_seqs': item.get('max_num_seqs'),
            'tuning': item.get('tuning'),
            'unit': item['unit'],
            'loopback_url': item['url'],
            'metrics_path': metrics_path,
            'metrics_url': _https(node, metrics_path),
            'gpus': list(placement['gpu_indices']),
            'gpu_uuids': list(placement['gpu_uuids']),
            'cpus': placement['cpulist'],
            'numa_nodes': list(placement['numa_nodes']),
            'tensor_parallel_size': placement['tensor_parallel_size'],
            'pipeline_parallel_size': placement['pipeline_parallel_size'],
        })
    return {
        'version': VERSION,
        'host': host,
        'address': addresses[0],
        'addresses': addresses,
        'port': port,
        'endpoints': endpoints,
        'vips': vips,
        'vip_endpoints': [e for a, e in zip(edge_plan['listen'], edge_plan['endpoints']) if a in vips],
        'health_url': _https(node, '/health'),
        'stats_url': _https(node, edge_plan['stats_path']),
        'drain_file': settings.get('drain_file'),
        'models': [m['name'] for m in edge_plan['models']],
        'instances': instances,
        # This host's part of instances that span hosts: the firewall opens their ports between the peers.
        'ranks': [dict(rank) for rank in serving_plan.get('ranks') or []],
        'audit_log': settings.get('audit_log'),
        'tls': dict(edge_plan['tls']),
    }
