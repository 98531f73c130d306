# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""What one host of a Ray cluster runs (the ray_cluster role): `ray start --head` on the head, `ray start
--address HEAD:PORT` on the others, each in the foreground of the unit ray.service.

A host that holds ranks of a vLLM instance with span.backend ray (its serving plan's ranks) takes the cluster's
head, port, its own and the head's addresses and its GPUs from them: the serving plan decided them, this plan only
follows. Other hosts (a
cluster for other work, or the CPU lab) name the head and port in the role's settings. Every port Ray listens on
is fixed here, so that the firewall can open exactly them; the object store is capped; the dashboard is off
unless asked for, and then listens on loopback only (the edge's business).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.llmops.vllm.plugins.module_utils._safe_text import PATH_RULE, safe_path
from ansible_collections.llmops.vllm.plugins.module_utils._serving import systemd_quote
from ansible_collections.llmops.vllm.plugins.module_utils._serving_span import RAY_UNIT

# Ray's own minimum for the object store.
MIN_OBJECT_STORE_BYTES = 78643200
PORT_KEYS = ('node_manager', 'object_manager', 'runtime_env_agent', 'dashboard_agent_grpc', 'dashboard_agent_http',
             'metrics_export', 'min_worker', 'max_worker')


class RayPlanError(ValueError):
    """The cluster cannot run as asked; the message names the host, the problem and the fix."""


def _fail(host, what, fix):
    raise RayPlanError('host %s: ray_cluster: %s. Fix: %s' % (host, what, fix))


def _positive_int(host, key, value, minimum=0):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        _fail(host, '%s must be an integer >= %d, got %r' % (key, minimum, value), 'correct %s' % key)
    return value


def ray_plan(settings, ranks=None, host=None):
    """Return the host's Ray node: {role, head, head_address, address, port, ports, worker_ports, argv, exec_start,
    environment, cpus, unit, instances}.

    settings: head (the head's inventory host), port (GCS), addresses ({host: its address on the Ray interface}),
    venv, temp_dir, num_cpus (0: cpu_count), cpu_count, num_gpus, object_store_bytes, dashboard (bool),
    dashboard_port, ports ({PORT_KEYS: int}).
    ranks: the host's serving plan ranks; those with backend ray decide head, port, GPUs and CPUs.
    """
    settings = dict(settings or {})
    label = host or 'this host'
    # The unit holds both as they are (ExecStart, ReadWritePaths).
    for key, example in (('venv', '/opt/ray/venv'), ('temp_dir', '/var/lib/ray/tmp')):
        if settings.get(key) and not safe_path(settings[key]):
            _fail(label, 'ray_cluster_%s is %r, not %s' % (key, settings[key], PATH_RULE),
                  'set ray_cluster_%s to a path such as %s' % (key, example))
    ray_ranks = [r for r in ranks or [] if r.get('backend') == 'ray']
    heads = set((r['head'], r['port']) for r in ray_ranks)
    if len(heads) > 1:
        _fail(label, 'its vLLM instances on Ray name different heads or ports (%s)'
              % ', '.join('%s:%d' % h for h in sorted(heads)),
              'give every Ray instance of these hosts the same span.hosts head and span.port: one cluster')
    head, port = heads.pop() if heads else (settings.get('head'), settings.get('port'))
    if not head:
        _fail(label, 'no head is named', 'set ray_cluster_head to the inventory host that runs the Ray head')
    _positive_int(label, 'ray_cluster_port', port, 1024)
    addresses = dict(settings.get('addresses') or {})
    if ray_ranks:
        addresses.update({label: ray_ranks[0]['address'], head: ray_ranks[0]['master_addr']})
    for name in (head, label):
        if not addresses.get(name):
            _fail(label, 'the Ray address of %s is unknown (not in this run, or no IPv4 address on its interface)'
                  % name, 'run the play on the head and its workers together, and set ray_cluster_interface')
    ports = dict(settings.get('ports') or {})
    missing = [k for k in PORT_KEYS if k not in ports]
    if missing:
        _fail(label, 'ray_cluster_ports lacks %s' % ', '.join(missing), 'set every one of %s' % ', '.join(PORT_KEYS))
    for key in PORT_KEYS:
        _positive_int(label, 'ray_cluster_ports.%s' % key, ports[key], 1024)
    if ports['min_worker'] > ports['max_worker']:
        _fail(label, 'ray_cluster_ports.min_worker is above max_worker', 'swap them')
    store = _positive_int(label, 'ray_cluster_object_store_bytes', settings.get('object_store_bytes'),
                          MIN_OBJECT_STORE_BYTES)
    gpus = sorted(set(g for r in ray_ranks for g in r['gpus']))
    num_gpus = len(gpus) if ray_ranks else _positive_int(label, 'ray_cluster_num_gpus', settings.get('num_gpus') or 0)
    num_cpus = _positive_int(label, 'ray_cluster_num_cpus', settings.get('num_cpus') or 0) or \
        int(settings.get('cpu_count') or 1)
    role = 'head' if label == head else 'worker'
    ray = '%s/bin/ray' % settings.get('venv')
    argv = [ray, 'start', '--block', '--disable-usage-stats', '--node-ip-address', addresses[label],
            '--num-cpus', str(num_cpus), '--num-gpus', str(num_gpus), '--object-store-memory', str(store),
            '--temp-dir', str(settings.get('temp_dir') or '/var/lib/ray/tmp')]
    if role == 'head':
        argv += ['--head', '--port', str(port)]
        if settings.get('dashboard'):
            argv += ['--include-dashboard=true', '--dashboard-host', '127.0.0.1',
                     '--dashboard-port', str(settings.get('dashboard_port') or 8265)]
        else:
            argv += ['--include-dashboard=false']
    else:
        argv += ['--address', '%s:%d' % (addresses[head], port)]
    argv += ['--node-manager-port', str(ports['node_manager']), '--object-manager-port', str(ports['object_manager']),
             '--runtime-env-agent-port', str(ports['runtime_env_agent']),
             '--dashboard-agent-grpc-port', str(ports['dashboard_agent_grpc']),
             '--dashboard-agent-listen-port', str(ports['dashboard_agent_http']),
             '--metrics-export-port', str(ports['metrics_export']),
             '--min-worker-port', str(ports['min_worker']), '--max-worker-port', str(ports['max_worker'])]
    environment = {'RAY_USAGE_STATS_ENABLED': '0'}
    if ray_ranks:
        environment['CUDA_VISIBLE_DEVICES'] = ','.join(r['cuda_visible_devices'] for r in ray_ranks
                                                       if r['cuda_visible_devices'])
    listening = [ports[k] for k in PORT_KEYS if k not in ('min_worker', 'max_worker')]
    return {
        'role': role,
        'head': head,
        'head_address': addresses[head],
        'address': addresses[label],
        'port': port,
        # The TCP ports the other hosts of the cluster reach on this one.
        'ports': ([port] if role == 'head' else []) + listening,
        'worker_ports': '%d-%d' % (ports['min_worker'], ports['max_worker']),
        'argv': argv,
        'exec_start': ' '.join(systemd_quote(a) for a in argv),
        'environment': environment,
        'cpus': ','.join(r['cpus'] for r in ray_ranks) or None,
        'unit': RAY_UNIT,
        'instances': sorted(set(r['instance'] for r in ray_ranks)),
    }
