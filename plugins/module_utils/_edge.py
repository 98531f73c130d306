# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""What the TLS edge of a vLLM node serves: listeners, routes to the local instances, API keys, rate limits.

edge_plan() is the one decision of the edge role. It reads the host's serving plan (each instance's name,
address, port and served model name, decided there), groups the instances by served model name (one upstream per
model, one per instance for path routes), hashes the API keys (the rendered config never holds a key), turns
rate limits into nginx zones and checks the fault injection (edge_fault_injection, off by default). The role
renders the result into nginx.conf. fault_injection() alone checks a game day's fault (playbooks/edge_fault.yml).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import hashlib
import ipaddress
import json
import re

from collections.abc import Mapping

from ansible_collections.llmops.vllm.plugins.module_utils._cpulist import format_cpulist, parse_cpulist
from ansible_collections.llmops.vllm.plugins.module_utils._safe_text import (
    PATH_RULE, SERVED_MODEL_NAME, SERVED_MODEL_NAME_RULE, safe_path)

# Served model names go into nginx and Lua strings: no quotes, spaces, braces or '$'.
_CLIENT = re.compile(r'^[A-Za-z0-9][A-Za-z0-9._@-]{0,62}\Z')
_RATE = re.compile(r'^[1-9][0-9]{0,6}r/[sm]\Z')
MIN_API_KEY_LENGTH = 32
# vLLM's inference endpoints besides /v1/*: the only ones the edge exposes (no /server_info, /sleep, ...).
API_PATHS = ('/tokenize', '/detokenize', '/version', '/pooling', '/classify', '/score', '/rerank')
# The edge's own counters (Prometheus text), read by the LVS directors' circuit breaker and by Prometheus.
STATS_PATH = '/edge/metrics'
# Fault injection: what a client request that is picked is answered with, unless edge_fault_injection says.
FAULT_KEYS = ('share', 'status', 'paths')
DEFAULT_FAULT_STATUS = 503
# nginx's own codes for "closed without an answer" (444) and "the client went away" (499).
NGINX_NO_ANSWER = (444, 499)
# The model API paths (the requests the edge routes to vLLM): what fault injection picks from by default.
# For /instances/<name>/<path>, <path> is matched.
MODEL_API_PATHS = ('/v1/',) + API_PATHS
_FAULT_PATH = re.compile(r'^/[A-Za-z0-9._/-]{0,127}\Z')


# A size nginx.conf holds unquoted (paths: _safe_text).
_SIZE = re.compile(r'^[0-9]{1,12}[kKmMgG]?\Z')


class EdgePlanError(ValueError):
    """The edge cannot be configured as asked; the message names the host, the problem and the fix."""


def _fail(host, what, fix, instance=None):
    where = 'host %s, instance %s' % (host or 'this host', instance) if instance else 'host %s' % (host or 'this host')
    raise EdgePlanError('%s: edge: %s. Fix: %s' % (where, what, fix))


def _address(host, what, value):
    try:
        return str(ipaddress.ip_address(str(value).strip()))
    except ValueError:
        _fail(host, '%s %r is not an IP address' % (what, value), 'use an address such as 10.0.0.10')


def _rate(host, where, item):
    if not isinstance(item, Mapping):
        _fail(host, '%s must be a dict like {rate: 10r/s, burst: 20}, got %r' % (where, item), 'correct %s' % where)
    rate = str(item.get('rate') or '')
    if not _RATE.match(rate):
        _fail(host, '%s: rate %r is not a request rate' % (where, rate), 'write it as N r/s or r/m, e.g. 10r/s')
    burst = item.get('burst', 0)
    if isinstance(burst, bool) or not isinstance(burst, int) or burst < 0:
        _fail(host, '%s: burst must be an integer >= 0, got %r' % (where, burst), 'correct burst')
    return rate, burst


def _api_keys(host, keys):
    names, digests, result = set(), set(), []
    for index, item in enumerate(keys or []):
        if not isinstance(item, Mapping) or not item.get('name'):
            _fail(host, 'edge_api_keys entry %d has no name' % (index + 1),
                  'give every key a name, e.g. {name: chat-frontend, key: "{{ vault_chat_frontend_key }}"}')
        name = str(item['name'])
        if not _CLIENT.match(name):
            _fail(host, 'edge_api_keys entry %r: the name must be letters, digits, dots, dashes, underscores or @'
                  % name, 'rename it')
        if name in names:
            _fail(host, 'two API keys are named %s' % name, 'give every key its own name')
        key = item.get('key')
        # Never print the key itself, not even in an error.
        if not isinstance(key, str) or len(key) < MIN_API_KEY_LENGTH or key != key.strip() or ' ' in key:
            _fail(host, 'the API key %s is missing, shorter than %d characters or has spaces'
                  % (name, MIN_API_KEY_LENGTH),
                  'store a random key of at least %d characters in the vault, e.g. from `openssl rand -hex 32`'
                  % MIN_API_KEY_LENGTH)
        digest = hashlib.sha256(key.encode('utf-8')).hexdigest()
        if digest in digests:
            _fail(host, 'the API key %s is the same as another key' % name, 'give every client its own key')
        names.add(name)
        digests.add(digest)
        result.append({'name': name, 'sha256': digest})
    return result


def fault_injection(fault, host=None):
    """edge_fault_injection as the Lua module reads it (the fault file), or None when it is off (empty)."""
    if fault is None or (isinstance(fault, Mapping) and not fault):
        return None
    if not isinstance(fault, Mapping):
        _fail(host, 'edge_fault_injection must be a dict like {share: 0.1, status: 503}, got %r' % (fault,),
              'correct edge_fault_injection, or set it to {} to turn fault injection off')
    unknown = sorted(str(k) for k in fault if k not in FAULT_KEYS)
    if unknown:
        _fail(host, 'edge_fault_injection has unknown keys %s' % ', '.join(unknown),
              'use only share, status and paths, e.g. {share: 0.1, status: 503}')
    share = fault.get('share')
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
        _fail(host, 'edge_fault_injection share must be a number above 0 and at most 1 (the fraction of client '
              'requests answered with the fault), got %r' % (share,),
              'set share, e.g. 0.1 for one request in ten, or set edge_fault_injection to {} to turn it off')
    status = fault.get('status', DEFAULT_FAULT_STATUS)
    if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
        _fail(host, 'edge_fault_injection status must be an HTTP error status from 400 to 599, got %r' % (status,),
              'set status, e.g. 503, or leave it out for 503')
    if status in NGINX_NO_ANSWER:
        _fail(host, 'edge_fault_injection status %d is nginx\'s code for a connection without an answer, not a '
              'status a client can get' % status, 'set status to an HTTP error such as 500, 502, 503 or 429')
    paths = fault.get('paths')
    if paths is None:
        paths = list(MODEL_API_PATHS)
    else:
        if isinstance(paths, str) or not isinstance(paths, (list, tuple)) or not paths:
            _fail(host, 'edge_fault_injection paths must be a non-empty list of path prefixes, got %r' % (paths,),
                  'list model API paths such as [/v1/chat/completions], or leave paths out for the whole model API')
        for path in paths:
            if not isinstance(path, str) or not _FAULT_PATH.match(path):
                _fail(host, 'edge_fault_injection paths entry %r is not a path' % (path,),
                      'write a path prefix such as /v1/completions (letters, digits and . _ - /)')
            # /v1/models is the edge's own answer; /health and the counters are never faulted.
            model_api = path.startswith('/v1/') or any(p.startswith(path) for p in MODEL_API_PATHS)
            if path == '/v1/models' or not model_api:
                _fail(host, 'edge_fault_injection paths entry %s is not a model API path (only requests routed to '
                      'vLLM are faulted: %s; never /v1/models, /health or %s)'
                      % (path, ', '.join(p + '...' if p.endswith('/') else p for p in MODEL_API_PATHS), STATS_PATH),
                      'remove it, or name a model API path such as /v1/chat/completions')
        paths = list(paths)
    return {'share': float(share), 'status': status, 'paths': paths}


def _path(host, variable, value, example):
    if not safe_path(value):
        _fail(host, '%s is %r, not %s (nginx.conf holds it unquoted)' % (variable, value, PATH_RULE),
              'set %s to a path such as %s' % (variable, example))
    return value


def _files(host, settings, tls):
    """The files nginx.conf names, checked: the TLS files, the drain file, the audit log."""
    for key in ('certificate', 'key', 'ca', 'crl'):
        if tls[key] is not None:
            variable = 'edge_tls_%s' % key if settings.get('tls_%s' % key) else 'the pki role\'s %s file' % key
            _path(host, variable, tls[key], '/etc/llmops-vllm/pki/server.crt')
    files = {}
    for key, example in (('drain_file', '/var/lib/llmops-vllm/edge/draining'),
                         ('audit_log', '/var/log/llmops-vllm/edge-audit.log')):
        if settings.get(key) is not None:
            files[key] = _path(host, 'edge_%s' % key, settings[key], example)
    size = settings.get('client_max_body_size')
    if size is not None and not _SIZE.match(str(size)):
        _fail(host, 'edge_client_max_body_size is %r, not a size nginx reads' % (size,),
              'write it as a number with an optional k, m or g, e.g. 16m')
    files['client_max_body_size'] = None if size is None else str(size)
    return files


def _tls(host, settings):
    """The node's certificate, key, CA and CRL: the edge_tls_* settings, else the files the pki role issues."""
    issued = settings.get('pki_files') or {}
    server = issued.get('server') or {}
    tls = {
        'certificate': settings.get('tls_certificate') or server.get('certificate'),
        'key': settings.get('tls_key') or server.get('key'),
        'ca': settings.get('tls_ca') or issued.get('ca'),
        # The CA's revocation list nginx enforces (ssl_crl); None with a CA of edge_tls_ca and no edge_tls_crl.
        'crl': settings.get('tls_crl') or (None if settings.get('tls_ca') else issued.get('crl')),
        # The names the pki role put in the certificate; unknown (None) for a certificate of edge_tls_certificate.
        'subject_alt_names': None if settings.get('tls_certificate') else server.get('subject_alt_names'),
    }
    missing = ['edge_tls_%s' % k for k in ('certificate', 'key', 'ca') if not tls[k]]
    if missing:
        _fail(host, '%s %s empty and the pki role issues no server certificate to this host'
              % (', '.join(missing), 'is' if len(missing) == 1 else 'are'),
              'run the llmops.vllm.pki role on this host first (site.yml does; the host must be in pki_server_groups), '
              'or point edge_tls_certificate, edge_tls_key and edge_tls_ca at the node\'s files')
    return tls


def edge_plan(serving_plan, settings=None, host=None):
    """Return the edge of one host, or raise EdgePlanError.

    serving_plan: the host's serving plan (llmops.vllm.vllm_serving_plan); its instances' name, address, port and
    served_model_name are used as they are. settings: port, listen_addresses, default_address
    (the host's default IPv4, used when listen_addresses is empty), vips, api_keys [{name, key}], rate_limit
    {rate, burst} or empty, client_rate_limits [{client, rate, burst}], cpus (a cpulist for nginx, may be empty),
    tls_certificate, tls_key, tls_ca, tls_crl (empty: from pki_files), pki_files (the pki plan's files of the host),
    fault_injection ({share, status, paths} or empty for off), drain_file, audit_log, client_max_body_size (each
    checked for nginx.conf when given).
    """
    settings = dict(settings or {})
    port = settings.get('port')
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        _fail(host, 'edge_port must be a TCP port, got %r' % (port,), 'set edge_port, e.g. 8000')
    instances = (serving_plan or {}).get('instances') if isinstance(serving_plan, Mapping) else None
    if not instances:
        _fail(host, 'the host has no vLLM instance to route to',
              'define vllm_instances for this host, or remove it from vllm_nodes')
    routes, models, model_order, metrics_paths = [], {}, [], {}
    for item in instances:
        name = item['name']
        instance_port = item['port']
        if instance_port == port:
            _fail(host, 'port %d is the edge\'s service port (edge_port)' % port,
                  'give the instance a port in vllm_server_port_range, or change edge_port', instance=name)
        model = item['served_model_name']
        if not SERVED_MODEL_NAME.match(model):
            _fail(host, 'served_model_name %r has characters the edge cannot route safely' % model,
                  'use %s' % SERVED_MODEL_NAME_RULE, instance=name)
        if model not in models:
            models[model] = {'name': model, 'upstream': 'model_%d' % len(model_order), 'instances': []}
            model_order.append(model)
        models[model]['instances'].append(name)
        routes.append({'name': name, 'port': instance_port, 'model': model, 'upstream': 'instance_%s' % name,
                       'address': '%s:%d' % (item['address'], instance_port)})
        metrics_paths[name] = '/instances/%s%s' % (name, item['metrics_path'])
    vips = [_address(host, 'vllm_service_vips entry', v) for v in settings.get('vips') or []]
    addresses = [_address(host, 'edge_listen_addresses entry', a) for a in settings.get('listen_addresses') or []]
    if not addresses:
        if not settings.get('default_address'):
            _fail(host, 'no address to listen on: edge_listen_addresses is empty and the host has no default IPv4',
                  'set edge_listen_addresses to the node\'s service address')
        addresses = [_address(host, 'default address', settings['default_address'])]
    listen = []
    for address in addresses + vips:
        if address not in listen:
            listen.append(address)
    api_keys = _api_keys(host, settings.get('api_keys'))
    default_limit = None
    if settings.get('rate_limit'):
        rate, burst = _rate(host, 'edge_rate_limit', settings['rate_limit'])
        default_limit = {'zone': 'clients', 'rate': rate, 'burst': burst}
    client_limits, clients = [], set()
    for index, item in enumerate(settings.get('client_rate_limits') or []):
        client = str((item or {}).get('client') or '')
        if not _CLIENT.match(client):
            _fail(host, 'edge_client_rate_limits entry %d: client %r is not a certificate common name'
                  % (index + 1, client), 'set client to the CN of the client certificate, e.g. chat-frontend')
        if client in clients:
            _fail(host, 'edge_client_rate_limits lists %s twice' % client, 'keep one entry per client')
        clients.add(client)
        rate, burst = _rate(host, 'edge_client_rate_limits entry %s' % client, item)
        client_limits.append({'zone': 'client_%d' % index, 'client': client, 'rate': rate, 'burst': burst,
                              # matches the CN in nginx's RFC 2253 $ssl_client_s_dn, e.g. CN=a,OU=b,O=c
                              'subject_regex': '(^|,)CN=%s(,|$)' % re.escape(client)})
    try:
        cpus = parse_cpulist(str(settings.get('cpus') or ''))
    except ValueError as e:
        _fail(host, 'the edge CPUs %r are not a cpulist (%s)' % (settings.get('cpus'), e),
              'set vllm_reserved_cpus (or edge_cpus) to a cpulist such as 0-1')
    default_model = model_order[0] if len(model_order) == 1 else None
    tls = _tls(host, settings)
    files = _files(host, settings, tls)
    fault = fault_injection(settings.get('fault_injection'), host)
    endpoints = ['%s:%d' % ('[%s]' % a if ':' in a else a, port) for a in listen]
    lua = {
        'api_paths': list(API_PATHS),
        'models': dict((m, models[m]['upstream']) for m in model_order),
        'model_names': model_order,
        'default_model': default_model,
        'instances': dict((r['name'], {'upstream': r['upstream'], 'model': r['model']}) for r in routes),
        'api_keys': dict((k['sha256'], k['name']) for k in api_keys),
    }
    return {
        'port': port,
        'listen': listen,
        'endpoints': endpoints,
        'api_paths': list(API_PATHS),
        'vips': vips,
        'nonlocal_bind': bool(vips),
        'instances': routes,
        # vLLM's metrics of each instance through the edge (the path route /instances/<name>/...).
        'metrics_paths': metrics_paths,
        # The edge's own counters (llmops_edge_responses_total{class=...}, ...), for the breaker and Prometheus.
        'stats_path': STATS_PATH,
        'models': [models[m] for m in model_order],
        'default_model': default_model,
        'api_keys': api_keys,
        'rate_limit': default_limit,
        'client_rate_limits': client_limits,
        'fault_injection': fault,
        'tls': tls,
        # Checked for nginx.conf: the drain file /health looks for, the audit log, the request body limit.
        'drain_file': files.get('drain_file'),
        'audit_log': files.get('audit_log'),
        'client_max_body_size': files['client_max_body_size'],
        'cpu_affinity': format_cpulist(cpus),
        'worker_processes': len(cpus) if cpus else 'auto',
        'lua_config': json.dumps(lua, sort_keys=True),
    }
