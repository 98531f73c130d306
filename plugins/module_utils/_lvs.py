# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""What an LVS director announces and balances: VRRP for the VIPs, one IPVS DR service per VIP:port, its real servers.

lvs_plan() is the one decision of the lvs_director role. The real servers and what they serve come from the nodes'
summaries (llmops_node, docs/node-summary.md), never decided again here; the directors' own addresses and
networks come from their facts. The role renders the result into keepalived.conf.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import ipaddress
import re

SCHEDULERS = ('rr', 'wrr', 'lc', 'wlc', 'lblc', 'lblcr', 'dh', 'sh', 'sed', 'nq', 'fo', 'ovf', 'mh')
_INTERFACE = re.compile(r'^[A-Za-z0-9_.:-]{1,15}\Z')
BREAKER_DEFAULTS = {
    'enabled': True,
    'window': 30,
    'min_requests': 20,
    'threshold': 0.05,
    'cooldown': 30,
    'max_cooldown': 300,
    'half_open_weight': 25,
    'floor': 1,
    'interval': 1,
    'timeout': 2,
}
MAX_WEIGHT = 253
# Where the breaker (llmops-breaker.service) keeps its files; the role passes them as settings['breaker_paths'].
BREAKER_PATHS = ('state_dir', 'track_dir', 'log', 'textfile', 'ca', 'cert', 'key')


class LvsPlanError(ValueError):
    """The director cannot be configured as asked; the message names the host, the problem and the fix."""


def _fail(host, what, fix, node=None):
    where = 'host %s, real server %s' % (host or 'this host', node) if node else 'host %s' % (host or 'this host')
    raise LvsPlanError('%s: lvs_director: %s. Fix: %s' % (where, what, fix))


def _int(host, name, value, low, high):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) \
            or not low <= int(value) <= high:
        _fail(host, '%s is %r, not a whole number from %d to %d' % (name, value, low, high),
              'set %s within that range' % name)
    return int(value)


def _seconds(host, name, value, low=0.1, high=3600):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        _fail(host, '%s is %r, not a number of seconds from %s to %s' % (name, value, low, high),
              'set %s within that range' % name)
    return value


def _address(host, what, value):
    try:
        return ipaddress.ip_address(str(value).strip())
    except ValueError:
        return _fail(host, '%s %r is not an IP address' % (what, value), 'use an address such as 10.0.0.100')


def _breaker(host, given, weight):
    given = dict(given or {})
    unknown = sorted(set(given) - set(BREAKER_DEFAULTS))
    if unknown:
        _fail(host, 'lvs_director_breaker has unknown keys %s' % ', '.join(unknown),
              'use only %s' % ', '.join(sorted(BREAKER_DEFAULTS)))
    breaker = dict(BREAKER_DEFAULTS, **given)
    breaker['enabled'] = bool(breaker['enabled'])
    for name in ('window', 'cooldown', 'max_cooldown', 'interval', 'timeout'):
        breaker[name] = _seconds(host, 'lvs_director_breaker.%s' % name, breaker[name], 0.1, 86400)
    breaker['min_requests'] = _int(host, 'lvs_director_breaker.min_requests', breaker['min_requests'], 1, 10 ** 9)
    breaker['floor'] = _int(host, 'lvs_director_breaker.floor', breaker['floor'], 0, 10 ** 4)
    breaker['half_open_weight'] = _int(host, 'lvs_director_breaker.half_open_weight', breaker['half_open_weight'],
                                       1, weight)
    threshold = breaker['threshold']
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < threshold <= 1:
        _fail(host, 'lvs_director_breaker.threshold is %r, not a share of errors above 0 and at most 1' % (threshold,),
              'write it as a fraction, e.g. 0.05 for 5 %')
    # A peer's state older than three rounds is stale.
    breaker['stale'] = breaker['interval'] * 3 + breaker['timeout']
    if breaker['max_cooldown'] < breaker['cooldown']:
        _fail(host, 'lvs_director_breaker.max_cooldown (%s) is below cooldown (%s)'
              % (breaker['max_cooldown'], breaker['cooldown']), 'make max_cooldown at least cooldown')
    return breaker


def _directors(host, directors, interface):
    """Each director as {name, address, network, interface}; this host's entry first in the returned pair."""
    result = []
    for item in directors:
        name = item.get('name')
        if not item.get('address') or not item.get('network'):
            _fail(host, 'director %s has no IPv4 address on %s in its facts' % (name, interface or 'its default route'),
                  'gather facts on every host of the directors group (site.yml does), or set lvs_director_interface')
        result.append({
            'name': name,
            'address': str(_address(host, 'director %s address' % name, item['address'])),
            'network': ipaddress.ip_network(str(item['network']), strict=False),
            'interface': item.get('interface') or interface,
        })
    mine = [d for d in result if d['name'] == host]
    if not mine:
        _fail(host, 'this host is not among the directors %s' % ', '.join(d['name'] for d in result),
              'run the role on the hosts of the directors group only')
    return mine[0], result


def _vips(host, vips, directors):
    result = []
    for vip in vips:
        address = _address(host, 'VIP', vip)
        for director in directors:
            if address not in director['network']:
                _fail(host, 'VIP %s is outside director %s\'s network %s on %s, so VRRP cannot announce it there'
                      % (address, director['name'], director['network'], director['interface']),
                      'pick a VIP in %s, or set lvs_director_interface to the interface on the VIP\'s network'
                      % director['network'])
        if str(address) not in result:
            result.append(str(address))
    return result


def _real_servers(host, nodes, vips, port, settings):
    real_servers = []
    seen = {}
    for node in nodes:
        name = node.get('host')
        if node.get('port') != port:
            _fail(host, 'its edge listens on port %s, the virtual service on %s' % (node.get('port'), port),
                  'set lvs_director_port to the edges\' edge_port (or the other way round)', name)
        missing = [vip for vip in vips if vip not in (node.get('vips') or [])]
        if missing:
            _fail(host, 'its edge does not listen on the VIP %s (vllm_service_vips on the node: %s)'
                  % (', '.join(missing), ', '.join(node.get('vips') or []) or 'none'),
                  'give the nodes the same vllm_service_vips as the directors\' lvs_director_vips', name)
        sans = (node.get('tls') or {}).get('subject_alt_names')
        if sans is not None:
            absent = [vip for vip in vips if 'IP:%s' % vip not in sans]
            if absent:
                _fail(host, 'its server certificate does not name the VIP %s, so clients reaching it through the VIP '
                      'would refuse it' % ', '.join(absent),
                      'add the VIP to vllm_service_vips before the pki role issues the node\'s certificate', name)
        address = node['address']
        if address in vips:
            _fail(host, 'its address %s is also a VIP' % address,
                  'give the VIP an address no host uses', name)
        if address in seen:
            _fail(host, 'its address %s is also %s\'s' % (address, seen[address]), 'give every node its own address',
                  name)
        seen[address] = name
        real_servers.append({
            'host': name,
            'address': address,
            'port': port,
            'weight': settings['weight'],
            'health_url': node['health_url'],
            'health_path': '/' + node['health_url'].split('/', 3)[3],
            'stats_url': node.get('stats_url'),
            # keepalived's track_file name of the node's breaker weight (also its file name in track_dir).
            'breaker_track': 'breaker_%s' % name,
        })
    return real_servers


def lvs_plan(nodes, directors, settings, host=None):
    """Return the director's keepalived plan, or raise LvsPlanError.

    nodes: the real servers' node summaries (llmops_node), in inventory order.
    directors: every director of the group as {name, address, network (CIDR), interface}, from their facts.
    settings: the role's lvs_director_* values without the prefix (vips, port, scheduler, ...).
    """
    settings = dict(settings)
    interface = settings.get('interface') or ''
    if interface and not _INTERFACE.match(interface):
        _fail(host, 'lvs_director_interface %r is not an interface name' % interface, 'use a name such as eth0')
    me, everyone = _directors(host, directors, interface)
    if not settings.get('vips'):
        _fail(host, 'no VIP to announce (lvs_director_vips is empty)', 'set vllm_service_vips for the fleet')
    vips = _vips(host, settings['vips'], everyone)
    if not nodes:
        _fail(host, 'no real server: the group %s is empty' % settings.get('real_servers_group'),
              'put the vLLM nodes in that group or set lvs_director_real_servers_group')
    port = _int(host, 'lvs_director_port', settings.get('port'), 1, 65535)
    scheduler = settings.get('scheduler') or 'wlc'
    if scheduler not in SCHEDULERS:
        _fail(host, 'lvs_director_scheduler %r is not an IPVS scheduler' % scheduler,
              'use one of %s' % ', '.join(SCHEDULERS))
    weight = _int(host, 'lvs_director_weight', settings.get('weight', 100), 1, MAX_WEIGHT)
    settings['weight'] = weight
    persistence = _int(host, 'lvs_director_persistence_timeout', settings.get('persistence_timeout') or 0,
                       0, 86400 * 31)
    checks = {
        'delay_loop': _seconds(host, 'lvs_director_delay_loop', settings.get('delay_loop', 1)),
        'health_delay_loop': _seconds(host, 'lvs_director_health_delay_loop', settings.get('health_delay_loop', 1)),
        'connect_timeout': _seconds(host, 'lvs_director_connect_timeout', settings.get('connect_timeout', 1)),
        'retry': _int(host, 'lvs_director_retry', settings.get('retry', 1), 0, 10),
        'delay_before_retry': _seconds(host, 'lvs_director_delay_before_retry', settings.get('delay_before_retry', 1)),
    }
    breaker = _breaker(host, settings.get('breaker'), weight)
    vrrp_on = bool(settings.get('vrrp', True))
    if vrrp_on and len(everyone) < 2:
        _fail(host, 'VRRP is on but the directors group has only %s' % me['name'],
              'add a second director, or set lvs_director_vrrp: false for a single director')
    router_id = _int(host, 'lvs_director_virtual_router_id', settings.get('virtual_router_id', 51), 1, 255)
    position = [d['name'] for d in everyone].index(me['name'])
    priority = settings.get('priority') or max(1, 150 - 10 * position)
    priority = _int(host, 'lvs_director_priority', priority, 1, 254)
    real_servers = _real_servers(host, nodes, vips, port, settings)
    if breaker['enabled'] and [rs['host'] for rs in real_servers if not rs['stats_url']]:
        _fail(host, 'the breaker needs the edge\'s response counters, and node %s publishes none (stats_url)'
              % [rs['host'] for rs in real_servers if not rs['stats_url']][0],
              'update the edge role on the nodes, or set lvs_director_breaker: {enabled: false}')
    auth = str(settings.get('auth_pass') or '')
    if len(auth) > 8:
        _fail(host, 'lvs_director_vrrp_auth_pass is %d characters; VRRPv2 PASS authentication uses at most 8'
              % len(auth), 'use a secret of 8 characters or fewer')
    # keepalived.conf holds it as it is: a space, # or ! cuts it short, a newline or a brace ends its block.
    if auth and not re.match(r'^[A-Za-z0-9._+=@/-]{1,8}\Z', auth):
        _fail(host, 'lvs_director_vrrp_auth_pass has characters keepalived.conf cannot hold (it is not shown here)',
              'use letters, digits and . _ + = @ / - only')
    warnings = []
    if vrrp_on and not auth:
        warnings.append('host %s: lvs_director: VRRP runs without authentication; any host on the segment can claim '
                        'the VIPs. Fix: set lvs_director_vrrp_auth_pass (from the vault)' % host)
    return {
        'warnings': warnings,
        'router_id': me['name'],
        'vrrp': {
            'enabled': vrrp_on,
            'instance': 'llmops_vips',
            'interface': me['interface'],
            'virtual_router_id': router_id,
            'priority': priority,
            'preempt': bool(settings.get('preempt', False)),
            'advert_int': _seconds(host, 'lvs_director_advert_int', settings.get('advert_int', 1), 0.01, 255),
            'unicast': bool(settings.get('unicast', True)),
            'unicast_src': me['address'],
            'unicast_peers': [d['address'] for d in everyone if d['name'] != me['name']],
            'authentication': bool(auth),
            'vips': ['%s/%d' % (vip, 32 if ipaddress.ip_address(vip).version == 4 else 128) for vip in vips],
        },
        'sync_daemon': {
            'enabled': bool(settings.get('sync_daemon', True)),
            'interface': me['interface'],
            'id': router_id,
        },
        'virtual_servers': [{
            'address': vip,
            'port': port,
            'protocol': 'TCP',
            'scheduler': scheduler,
            'method': 'DR',
            'persistence_timeout': persistence,
            'real_servers': real_servers,
        } for vip in vips],
        'checks': checks,
        'breaker': breaker,
        'breaker_config': _breaker_config(breaker, real_servers, settings),
        'weight': weight,
    }


def _breaker_config(breaker, real_servers, settings):
    """The breaker service's configuration (module_utils/_breaker.py check_config): one service, every node.

    The breaker is per node, not per VIP: a node's edge counts every answer it gives, whichever VIP it came
    through, so each node has one track file that all its virtual servers' FILE_CHECKs read.
    """
    if not breaker['enabled']:
        return None
    paths = settings.get('breaker_paths') or {}
    return {
        'interval': breaker['interval'],
        'timeout': breaker['timeout'],
        'tls': {'ca': paths.get('ca'), 'cert': paths.get('cert'), 'key': paths.get('key')},
        'state_dir': paths.get('state_dir'),
        'log': paths.get('log'),
        'textfile': paths.get('textfile'),
        'settings': dict((name, breaker[name]) for name in (
            'window', 'min_requests', 'threshold', 'cooldown', 'max_cooldown', 'half_open_weight', 'floor', 'stale')),
        'services': [{
            'name': settings.get('real_servers_group') or 'real_servers',
            'nodes': [{
                'name': rs['host'],
                'url': rs['stats_url'],
                'weight': rs['weight'],
                'track_file': '%s/%s' % (paths.get('track_dir'), rs['breaker_track']),
            } for rs in real_servers],
        }],
    }
