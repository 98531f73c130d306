# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""What Prometheus scrapes: monitoring_plan() is the one decision of the monitoring role.

The vLLM instances and the edges come from the nodes' summaries (llmops_node, docs/node-summary.md), never decided
again here: each instance's metrics URL through its node's edge (mTLS), each edge's counters. Node exporter runs on
every host given; dcgm-exporter on the nodes that serve an instance on GPUs. With a blackbox exporter, every TLS
endpoint of the fleet is probed for the certificate it serves: each edge's own addresses and VIPs (from the
summaries) and the other TLS servers given (the log sinks). The role renders the result into file_sd target files
and Prometheus' scrape jobs.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

from ansible.module_utils.six.moves.urllib.parse import urlsplit

from ansible_collections.llmops.vllm.plugins.module_utils._node import serves_on_gpu

# The scrape jobs, in the order Prometheus' configuration lists them; the alert pack and the dashboards use these names.
JOBS = ('vllm', 'llmops_edge', 'node', 'dcgm', 'tls')
_DURATION = re.compile(r'^([0-9]+(ms|s|m|h))+$')
_TLS_FILES = ('certificate', 'key', 'ca')


class MonitoringPlanError(ValueError):
    """The monitoring cannot be planned as asked; the message names the host, the problem and the fix."""


def _fail(host, what, fix, node=None):
    where = 'host %s, node %s' % (host or 'this host', node) if node else 'host %s' % (host or 'this host')
    raise MonitoringPlanError('%s: monitoring: %s. Fix: %s' % (where, what, fix))


def _split(host, node, name, url):
    parts = urlsplit(url or '')
    if parts.scheme != 'https' or not parts.netloc or not parts.path:
        _fail(host, '%s %r is not an https URL with a path' % (name, url),
              'update the edge role on the node so that its summary (llmops_node) is current', node)
    return parts.netloc, parts.path


def _seconds(duration):
    """A Prometheus duration (checked by _DURATION) in seconds."""
    units = {'ms': 0.001, 's': 1, 'm': 60, 'h': 3600}
    return sum(int(number) * units[unit] for number, unit in re.findall(r'([0-9]+)(ms|s|m|h)', duration))


def _port(host, name, value):
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        _fail(host, '%s is %r, not a port number' % (name, value), 'set %s to a port from 1 to 65535' % name)
    return value


def _endpoint(address, port):
    return '[%s]:%d' % (address, port) if ':' in address else '%s:%d' % (address, port)


def _group(target, path, labels):
    """One file_sd entry: a target, its metrics path (a per-target __metrics_path__) and its labels."""
    return {'targets': [target], 'labels': dict(labels, __metrics_path__=path)} if path else \
        {'targets': [target], 'labels': dict(labels)}


# The blackbox exporter's modules (roles/monitoring/templates/blackbox.yml.j2): an edge's /health (200, or 503 while
# draining) and Redis' PING, each after the TLS handshake with Prometheus' client certificate; the handshake alone.
PROBE_MODULES = ('llmops_tls_edge', 'llmops_tls_redis', 'llmops_tls')
_ENDPOINT = re.compile(r'^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):[0-9]{1,5}$')
_WORD = re.compile(r'^[a-z][a-z0-9_]*$')


def _tls_targets(host, nodes, others):
    """The TLS endpoints to probe: each node's own endpoints, the VIPs' once each, then the other servers."""
    targets, seen = [], set()

    def add(endpoint, module, labels):
        if endpoint not in seen:
            seen.add(endpoint)
            targets.append(_group(endpoint, None, dict(labels, instance=endpoint, __param_module=module)))
    for summary in nodes:
        for endpoint in summary.get('endpoints') or [_endpoint(summary['address'], summary['port'])]:
            add(endpoint, 'llmops_tls_edge', {'node': summary.get('host'), 'server': 'edge'})
    for summary in nodes:
        for endpoint in summary.get('vip_endpoints') or []:
            add(endpoint, 'llmops_tls_edge', {'server': 'vip'})
    for item in others:
        other = item if isinstance(item, dict) else {}
        module = other.get('module', 'llmops_tls')
        if not (isinstance(other.get('name'), str) and other['name']
                and _ENDPOINT.match(str(other.get('endpoint') or ''))
                and _WORD.match(str(other.get('server') or '')) and module in PROBE_MODULES):
            _fail(host, 'a TLS endpoint to probe is %r, not {name, endpoint: host:port, server: a lower-case word, '
                  'module: one of %s}' % (item, ', '.join(PROBE_MODULES)),
                  'correct that item of monitoring_tls_probe_endpoints (a log sink without an address: gather its '
                  'facts in this run)')
        add(other['endpoint'], module, {'node': other['name'], 'server': other['server']})
    return targets


def _node_targets(host, summary, dcgm_port):
    node = summary.get('host')
    vllm, seen = [], set()
    for instance in summary.get('instances') or []:
        target, path = _split(host, node, 'instance %s metrics_url' % instance.get('name'), instance.get('metrics_url'))
        label = '%s/%s' % (node, instance['name'])
        if label in seen:
            _fail(host, 'instance %s is listed twice in the node summary' % instance['name'],
                  'give each instance of the node its own name', node)
        seen.add(label)
        vllm.append(_group(target, path, {
            'instance': label, 'node': node, 'vllm_instance': instance['name'], 'model': instance['model'],
            'device': instance['device']}))
    target, path = _split(host, node, 'stats_url', summary.get('stats_url'))
    edge = [_group(target, path, {'instance': node, 'node': node})]
    dcgm = [_group(_endpoint(summary['address'], dcgm_port), None, {'instance': node, 'node': node})] \
        if serves_on_gpu(summary) and dcgm_port else []
    return vllm, edge, dcgm


def monitoring_plan(nodes, exporters, settings, host=None):
    """The scrape jobs and their file_sd targets of one Prometheus host.

    nodes: the vLLM nodes' summaries (llmops_node); exporters: every host to scrape node exporter on, as
    {name, address}; settings: the role's monitoring_* settings without the prefix (client, node_exporter_port,
    dcgm_exporter_port (0: none), file_sd_dir, scrape_interval, scrape_timeout), blackbox (the blackbox exporter's
    host:port, empty: no TLS probes), tls_probe_interval and tls_probe_endpoints ({name, endpoint, server, module} each,
    TLS servers other than the edges, module one of PROBE_MODULES, default the handshake alone).
    """
    client = settings.get('client') or {}
    missing = [name for name in _TLS_FILES if not client.get(name)]
    if missing:
        _fail(host, 'the Prometheus client certificate lacks %s' % ', '.join(missing),
              'list the client in pki_host_clients on this host and run the pki role before this one (site.yml does)')
    blackbox = settings.get('blackbox') or ''
    durations = ('scrape_timeout', 'scrape_interval') + (('tls_probe_interval',) if blackbox else ())
    for name in durations:
        if not _DURATION.match(str(settings.get(name) or '')):
            _fail(host, 'monitoring_%s is %r, not a Prometheus duration' % (name, settings.get(name)),
                  'write it as Prometheus does, e.g. 15s or 1m')
    for name in durations[1:]:
        if _seconds(settings[name]) < _seconds(settings['scrape_timeout']):
            _fail(host, 'monitoring_%s %s is shorter than monitoring_scrape_timeout %s, which Prometheus refuses'
                  % (name, settings[name], settings['scrape_timeout']),
                  'make monitoring_%s at least monitoring_scrape_timeout' % name)
    node_port = _port(host, 'llmops_node_exporter_port', settings.get('node_exporter_port'))
    dcgm_port = settings.get('dcgm_exporter_port') or 0
    if dcgm_port:
        _port(host, 'llmops_dcgm_exporter_port', dcgm_port)

    targets = dict((job, []) for job in JOBS)
    for summary in nodes:
        vllm, edge, dcgm = _node_targets(host, summary, dcgm_port)
        targets['vllm'] += vllm
        targets['llmops_edge'] += edge
        targets['dcgm'] += dcgm
    for exporter in exporters:
        if not exporter.get('address'):
            _fail(host, 'host %s has no address to scrape node exporter on' % exporter.get('name'),
                  'gather that host\'s facts in this run (do not --limit it out), or set its ansible_host')
        targets['node'].append(_group(_endpoint(exporter['address'], node_port), None,
                                      {'instance': exporter['name'], 'node': exporter['name']}))
    if blackbox:
        targets['tls'] = _tls_targets(host, nodes, settings.get('tls_probe_endpoints') or [])

    tls = {'ca_file': client['ca'], 'cert_file': client['certificate'], 'key_file': client['key'],
           'min_version': 'TLS13'}
    file_sd = settings.get('file_sd_dir') or '/etc/prometheus/file_sd'
    jobs = []
    for job in JOBS:
        scrape = {'job_name': job, 'scrape_interval': settings['scrape_interval'],
                  'scrape_timeout': settings['scrape_timeout'],
                  'file_sd_configs': [{'files': ['%s/llmops-%s.json' % (file_sd, job)]}]}
        if job in ('vllm', 'llmops_edge'):
            scrape.update(scheme='https', tls_config=tls)
        if job == 'node':
            # Textfile series keep their own labels: the breaker's node is the real server, not the director.
            scrape['honor_labels'] = True
        if job == 'tls':
            if not blackbox:
                continue
            # Each target is probed through the blackbox exporter: /probe?target=<endpoint>&module=<its module>.
            relabel = [{'source_labels': ['__address__'], 'target_label': '__param_target'},
                       {'target_label': '__address__', 'replacement': blackbox}]
            scrape.update(scrape_interval=settings['tls_probe_interval'], metrics_path='/probe',
                          relabel_configs=relabel)
        jobs.append(scrape)
    warnings = []
    if not nodes:
        warnings.append('host %s: monitoring: no vLLM node has published a summary, so no vLLM instance is '
                        'scraped' % (host or 'this host'))
    return {'jobs': jobs, 'targets': targets, 'warnings': warnings,
            'target_count': dict((job, len(targets[job])) for job in JOBS)}
