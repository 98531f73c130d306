# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The host firewall of a vLLM node or an LVS director: who may reach what, from the inventory and the summaries
the vLLM roles (llmops_node) and the lvs_director role (llmops_director) publish.

One nftables table, `inet llmops`, with an input chain that drops and counts what no rule accepts. The plan
returns the rules as nft statements; the firewall role only writes them into the table and applies it.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import ipaddress

from ansible_collections.llmops.vllm.plugins.module_utils._node import serves_on_gpu

TABLE = 'llmops'
DROP_COUNTER = 'dropped'
PROTOCOLS = ('tcp', 'udp')
# VRRP is IP protocol 112 (by number: a minimal host has no /etc/protocols).
VRRP = 112
# The kernel's IPVS connection-sync daemon (keepalived's lvs_sync_daemon): UDP to this port.
IPVS_SYNC_PORT = 8848


def _network(value):
    """An address or network as nft writes it (a host without its /32 or /128)."""
    network = ipaddress.ip_network(str(value).strip(), strict=False)
    if network.prefixlen == network.max_prefixlen:
        return network.version, str(network.network_address)
    return network.version, network.with_prefixlen


def _split(values, what, host, errors):
    """{4: [...], 6: [...]} of a list of addresses or networks; a bad one is an error naming `what`."""
    families = {4: [], 6: []}
    for value in values or []:
        try:
            version, text = _network(value)
        except ValueError:
            errors.append('host %s: firewall: %s names %r, which is not an IP address or network. Fix: write it as '
                          'an address (10.0.0.5) or a network (10.0.0.0/24).' % (host, what, value))
            continue
        if text not in families[version]:
            families[version].append(text)
    return families


def _peer_addresses(peers, group, host, errors, floating=()):
    """Every address of the hosts of one group, from their facts; a host without facts is an error. Addresses that
    float (the VIPs: a director's facts list one while it is the VRRP master) are nobody's own."""
    addresses = []
    for name, facts in sorted((peers or {}).get(group, {}).items()):
        if 'all_ipv4_addresses' not in (facts or {}):
            errors.append('host %s: firewall: the %s host %s has no facts, so its addresses are unknown. Fix: make '
                          'it reachable from the controller (the preflight reads its network facts).'
                          % (host, group, name))
            continue
        for address in list(facts['all_ipv4_addresses']) + list(facts.get('all_ipv6_addresses') or []):
            try:
                parsed = ipaddress.ip_address(str(address).split('%', maxsplit=1)[0])
            except ValueError:
                parsed = None  # _split names it
            if parsed is None or not (parsed.is_loopback or parsed.is_link_local or str(parsed) in floating):
                addresses.append(address)
    return addresses


def _set(items):
    return items[0] if len(items) == 1 else '{ %s }' % ', '.join(items)


def _statements(rule):
    """The nft statements of one rule: one per address family its sources and destinations allow."""
    ports = _set([str(p) for p in rule['ports']])
    lines = []
    for version, keyword in ((4, 'ip'), (6, 'ip6')):
        if rule['protocol'] == 'vrrp':  # no ports: the IP protocol itself
            if rule['sources'][version]:
                header = 'protocol' if version == 4 else 'nexthdr'
                lines.append('%s saddr %s %s %s %d counter accept comment "%s"' % (
                    keyword, _set(rule['sources'][version]), keyword, header, VRRP, rule['name']))
            continue
        sources, destinations = rule['sources'], rule['destinations']
        if sources is not None and not sources[version]:
            continue
        if destinations is not None and not destinations[version]:
            continue
        if sources is None and destinations is None and version == 6:
            continue  # one statement for both families
        match = []
        if sources is not None:
            match.append('%s saddr %s' % (keyword, _set(sources[version])))
        if destinations is not None:
            match.append('%s daddr %s' % (keyword, _set(destinations[version])))
        match.append('%s dport %s' % (rule['protocol'], ports))
        lines.append('%s counter accept comment "%s"' % (' '.join(match), rule['name']))
    return lines


def _notrack(director, host, errors):
    """Statements of the prerouting chain (priority raw) that exempt the virtual service from conntrack.

    With direct routing a director sees only the clients' half of each connection (the nodes answer the clients
    themselves), so conntrack would judge the rest of a handshake it never saw the answer to as invalid; the
    input chain drops invalid packets. Untracked, the service's packets meet only the lvs_service rule.
    """
    vips = _split(director.get('vips') or [], 'the director summary (vips)', host, errors)
    return ['%s daddr %s tcp dport %d notrack' % (keyword, _set(vips[version]), int(director['port']))
            for version, keyword in ((4, 'ip'), (6, 'ip6')) if vips[version]]


def _director_rules(director, clients, directors, host, errors):
    """A director's own traffic: the virtual service on the VIPs, and VRRP and IPVS connection sync from the other
    directors (keepalived's unicast peers, or its multicast group: the sources are the directors either way)."""
    vips = _split(director.get('vips') or [], 'the director summary (vips)', host, errors)
    rules = [{'name': 'lvs_service', 'protocol': 'tcp', 'ports': [int(director['port'])], 'sources': clients,
              'destinations': vips}]
    if director.get('vrrp'):
        rules.append({'name': 'vrrp', 'protocol': 'vrrp', 'ports': [], 'sources': directors, 'destinations': None})
    if director.get('vrrp') and director.get('sync_daemon'):
        rules.append({'name': 'ipvs_sync', 'protocol': 'udp', 'ports': [IPVS_SYNC_PORT], 'sources': directors,
                      'destinations': None})
    return rules


def firewall_plan(node, settings, peers, host=None, director=None):
    """The firewall of one vLLM node, one LVS director, or a host that is both.

    node: its summary (llmops_node): port, addresses, vips, instances; empty on a director only.
    director: the director's summary (llmops_director): vips, port, vrrp, sync_daemon; None on a node only.
    settings: client_sources (empty: anyone), admin_sources, admin_port, controller_address (the controller's
      address as the node sees it, or empty), node_exporter_port, dcgm_exporter_port (0: none), extra_rules
      ({name, protocol, ports, sources}), rollback_seconds, admin_address (where the controller checks that it
      can still connect).
    peers: {group: {host: its facts}} for monitoring and lvs_directors (all_ipv4_addresses, all_ipv6_addresses).
    Returns {table, counter, rules: [{name, protocol, ports, sources, destinations, statements}], notrack (the
    statements that exempt a director's virtual service from conntrack), admin, errors}.
    """
    node = node or {}
    host = host or node.get('host')
    errors = []
    vips = _split(list(node.get('vips') or []) + list((director or {}).get('vips') or []), 'the VIPs', host, [])
    floating = set(str(ipaddress.ip_network(vip).network_address) for vip in vips[4] + vips[6])
    monitoring = _split(_peer_addresses(peers, 'monitoring', host, errors, floating), 'a monitoring host', host,
                        errors)
    directors = _split(_peer_addresses(peers, 'lvs_directors', host, errors, floating), 'a director', host, errors)

    admin_given = list(settings.get('admin_sources') or [])
    if settings.get('controller_address'):
        admin_given.append(settings['controller_address'])
    admin = _split(admin_given, 'firewall_admin_sources', host, errors)
    if not admin[4] and not admin[6]:
        errors.append('host %s: firewall: nothing may reach ssh (port %s): firewall_admin_sources is empty and the '
                      'controller\'s address is unknown on this connection. Fix: set firewall_admin_sources to the '
                      'addresses of the controller and of the hosts that administer the node.'
                      % (host, settings.get('admin_port')))

    clients = None
    if settings.get('client_sources'):
        clients = _split(settings['client_sources'], 'firewall_client_sources', host, errors)
        for version in (4, 6):  # the directors check health; monitoring scrapes through the edge
            clients[version] += [a for a in directors[version] + monitoring[version] if a not in clients[version]]
    edge_destinations = _split(list(node.get('addresses') or []) + list(node.get('vips') or []),
                               'the node summary (addresses, vips)', host, errors) if node else None

    rules = [
        {'name': 'ssh', 'protocol': 'tcp', 'ports': [int(settings['admin_port'])], 'sources': admin,
         'destinations': None},
    ]
    if node:
        rules.append({'name': 'edge', 'protocol': 'tcp', 'ports': [int(node['port'])], 'sources': clients,
                      'destinations': edge_destinations})
    if director:
        rules += _director_rules(director, clients, directors, host, errors)
    rules.append({'name': 'node_exporter', 'protocol': 'tcp', 'ports': [int(settings['node_exporter_port'])],
                  'sources': monitoring, 'destinations': None})
    if serves_on_gpu(node) and int(settings.get('dcgm_exporter_port') or 0) > 0:
        rules.append({'name': 'dcgm_exporter', 'protocol': 'tcp', 'ports': [int(settings['dcgm_exporter_port'])],
                      'sources': monitoring, 'destinations': None})
    # The ranks of instances that span hosts reach each other on fixed ports and, for gloo, NCCL and vLLM's message
    # queues, on ports the kernel picks: both, from the other ranks only.
    for rank in node.get('ranks') or []:
        rules.append({'name': 'span-%s' % rank['instance'], 'protocol': 'tcp',
                      'ports': [int(p) for p in rank['ports']] + [rank['ephemeral_ports']],
                      'sources': _split(rank['peers'], 'the node summary (ranks)', host, errors), 'destinations': None})

    taken = {rule['name'] for rule in rules}
    for extra in settings.get('extra_rules') or []:
        name = str(extra.get('name') or '')
        protocol = extra.get('protocol', 'tcp')
        ports = extra.get('ports') or []
        if not name or name in taken or not name.replace('_', '').replace('-', '').isalnum():
            errors.append('host %s: firewall: firewall_extra_rules has a rule named %r: each needs its own name of '
                          'letters, digits, - and _ (these are taken: %s). Fix: rename it.'
                          % (host, name, ', '.join(sorted(taken))))
            continue
        if protocol not in PROTOCOLS or not ports or any(not 0 < int(p) < 65536 for p in ports):
            errors.append('host %s: firewall: firewall_extra_rules %s: protocol %r ports %r; it needs a protocol of '
                          '%s and ports from 1 to 65535. Fix: correct the rule.'
                          % (host, name, protocol, ports, ', '.join(PROTOCOLS)))
            continue
        taken.add(name)
        sources = None if extra.get('sources') is None else _split(
            extra['sources'], 'firewall_extra_rules %s' % name, host, errors)
        rules.append({'name': name, 'protocol': protocol, 'ports': sorted(int(p) for p in ports),
                      'sources': sources, 'destinations': None})

    for rule in rules:
        rule['statements'] = _statements(rule)
    return {
        'table': TABLE,
        'counter': DROP_COUNTER,
        'rules': rules,
        'notrack': _notrack(director, host, []) if director else [],
        'admin': {'address': settings.get('admin_address') or '', 'port': int(settings['admin_port']),
                  'sources': admin[4] + admin[6]},
        'rollback_seconds': int(settings['rollback_seconds']),
        'errors': errors,
    }
