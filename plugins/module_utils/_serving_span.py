# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""What one host runs of an instance that spans hosts (its placement's span, _placement_span.py).

- launcher (vLLM's own multi-node launcher): every host runs `vllm serve` with --nnodes, --node-rank,
  --master-addr and --master-port; the others than the head add --headless (no API server). Each rank's command
  runs under the rank guard (files/vllm-span-rank of the vllm_server role): the guards of one instance hold a TCP
  connection from each host to the head's guard, start vLLM only once every rank is there, and stop it when
  the connection drops, so that a rank that stops or restarts restarts the instance as a whole (vLLM itself
  leaves the head up, hanging on the lost rank).
- ray: the ray_cluster role runs Ray on every host; only the head runs vLLM, with
  --distributed-executor-backend ray, and Ray places the ranks on the hosts.

Every rank talks on one interface of its host (rank_interface): VLLM_HOST_IP is its address, gloo and NCCL use
it. The ranks' ports (the rendezvous port, the guard's and the ephemeral range of gloo, NCCL and vLLM's
message queues) go into the node summary for the firewall.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

# The guard listens on the rendezvous port + 1 on the head.
GUARD_OFFSET = 1
GUARD_PATH = '/usr/local/libexec/llmops/vllm-span-rank'
GUARD = ('/usr/bin/python3', '-I', GUARD_PATH)
# gloo, NCCL and vLLM's message queues listen on ports the kernel picks: Linux's default ip_local_port_range.
EPHEMERAL_PORTS = '32768-60999'
# The unit of the ray_cluster role, which a Ray head's vLLM needs running.
RAY_UNIT = 'ray.service'
# What an instance of one host adds: nothing.
NO_SPAN = {'rank': None, 'argv': [], 'env': {}, 'serves': True, 'runs_vllm': True, 'guard': [], 'after': []}


def _names(hosts):
    return ', '.join(hosts)


def span_part(fail, host, name, placement, settings):
    """The span part of one instance's plan on `host` (NO_SPAN for an instance of one host).

    fail(what, fix) raises the plan's error. settings: rank_interface (this host's interface for the ranks),
    span_addresses ({host: its rank address}, for every host of the span).
    Returns {'rank': what the node summary and the ray_cluster role read, 'argv': flags to add, 'env': variables to
    add, 'serves': whether this host runs the API server, 'runs_vllm': whether it runs vLLM at all, 'guard': the
    guard's command before vLLM's, or [], 'after': units vLLM starts after}.
    """
    span = placement.get('span')
    if not span:
        return dict(NO_SPAN)
    addresses = dict(settings.get('span_addresses') or {})
    missing = [h for h in span['hosts'] if not addresses.get(h)]
    if missing:
        fail('it spans %s, and the rank address of %s is unknown (the host is not in this run, or interface %s has '
             'no IPv4 address there)' % (_names(span['hosts']), _names(missing), settings.get('rank_interface') or '?'),
             'run the play on every host of span.hosts (a --limit must not cut a span), and set '
             'vllm_server_rank_interface to the interface the ranks reach each other on')
    interface = settings.get('rank_interface')
    if not interface:
        fail('it spans hosts, and this host has no interface for the ranks (no default IPv4 route)',
             'set vllm_server_rank_interface')
    backend, head = span['backend'], span['node_rank'] == 0
    if backend == 'ray' and placement['device'] != 'cuda':
        fail('span.backend ray on a cpu instance: vLLM\'s CPU build refuses the Ray backend ("current platform cpu '
             'does not support ray")', 'use span.backend: launcher (vLLM\'s own multi-node launcher) on CPUs')
    mine, master = addresses[host], addresses[span['head']]
    guard_port = span['port'] + GUARD_OFFSET
    env = {'VLLM_HOST_IP': mine, 'GLOO_SOCKET_IFNAME': interface}
    if placement['device'] == 'cuda':
        env['NCCL_SOCKET_IFNAME'] = interface
    rank = {
        'instance': name,
        'backend': backend,
        'role': 'head' if head else 'worker',
        'node_rank': span['node_rank'],
        'nnodes': span['nnodes'],
        'head': span['head'],
        'hosts': list(span['hosts']),
        'interface': interface,
        'address': mine,
        'master_addr': master,
        'peers': [addresses[h] for h in span['hosts'] if h != host],
        'port': span['port'],
        'guard_port': guard_port if backend == 'launcher' else None,
        'guard_path': GUARD_PATH if backend == 'launcher' else None,
        'ports': [span['port'], guard_port] if backend == 'launcher' else [span['port']],
        'ephemeral_ports': EPHEMERAL_PORTS,
        'ranks': span['ranks'],
        'tensor_parallel_size': span['tensor_parallel_size'],
        'pipeline_parallel_size': span['pipeline_parallel_size'],
        'gpus': list(placement['gpu_indices']),
        'cuda_visible_devices': placement['cuda_visible_devices'],
        'cpus': placement['cpulist'],
        'unit': None if backend == 'ray' and not head else 'vllm-%s.service' % name,
    }
    if backend == 'ray':
        env['RAY_ADDRESS'] = '%s:%d' % (master, span['port'])
        return {'rank': rank, 'argv': ['--distributed-executor-backend', 'ray'], 'env': env, 'serves': head,
                'runs_vllm': head, 'guard': [], 'after': [RAY_UNIT]}
    argv = ['--distributed-executor-backend', 'mp', '--nnodes', str(span['nnodes']),
            '--node-rank', str(span['node_rank']), '--master-addr', master, '--master-port', str(span['port'])]
    if not head:
        argv.append('--headless')
    guard = list(GUARD) + ['--instance', name, '--nnodes', str(span['nnodes']), '--node-rank',
                           str(span['node_rank']), '--head', '%s:%d' % (master, guard_port), '--']
    return {'rank': rank, 'argv': argv, 'env': env, 'serves': head, 'runs_vllm': True, 'guard': guard,
            'after': []}
