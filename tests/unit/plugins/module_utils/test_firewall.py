# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.llmops.vllm.plugins.module_utils._firewall import firewall_plan

NODE = {'host': 'gpu-node01', 'port': 443, 'addresses': ['10.20.0.11'], 'vips': ['10.20.0.100'],
        'instances': [{'name': 'qwen', 'device': 'cpu'}]}
SETTINGS = {'admin_sources': ['10.20.9.0/24'], 'admin_port': 22, 'admin_address': '10.20.0.11',
            'controller_address': '', 'client_sources': [], 'node_exporter_port': 9100, 'dcgm_exporter_port': 9400,
            'extra_rules': [], 'rollback_seconds': 30}
PEERS = {'monitoring': {'prom01': {'all_ipv4_addresses': ['10.20.0.5', '127.0.0.1'],
                                   'all_ipv6_addresses': ['fe80::1', 'fd00::5']}},
         'lvs_directors': {'lvs01': {'all_ipv4_addresses': ['10.20.0.2'], 'all_ipv6_addresses': []},
                           'lvs02': {'all_ipv4_addresses': ['10.20.0.3']}}}


def plan(node=None, peers=None, **settings):
    return firewall_plan(dict(NODE, **(node or {})), dict(SETTINGS, **settings), PEERS if peers is None else peers)


def statements(result):
    return {rule['name']: rule['statements'] for rule in result['rules']}


def test_the_fleet_reaches_what_it_needs_and_nothing_else():
    result = plan()
    assert result['errors'] == []
    assert (result['table'], result['counter'], result['rollback_seconds']) == ('llmops', 'dropped', 30)
    assert statements(result) == {
        'ssh': ['ip saddr 10.20.9.0/24 tcp dport 22 counter accept comment "ssh"'],
        # Anyone reaches the edge, on the node's address and its VIP only.
        'edge': ['ip daddr { 10.20.0.11, 10.20.0.100 } tcp dport 443 counter accept comment "edge"'],
        # The monitoring host by every address but loopback and link-local.
        'node_exporter': ['ip saddr 10.20.0.5 tcp dport 9100 counter accept comment "node_exporter"',
                          'ip6 saddr fd00::5 tcp dport 9100 counter accept comment "node_exporter"'],
    }
    assert result['admin'] == {'address': '10.20.0.11', 'port': 22, 'sources': ['10.20.9.0/24']}


def test_the_controller_seen_over_ssh_reaches_ssh():
    result = plan(admin_sources=[], controller_address='192.168.7.4')
    assert statements(result)['ssh'] == ['ip saddr 192.168.7.4 tcp dport 22 counter accept comment "ssh"']


def test_clients_named_keep_the_directors_and_the_monitoring_hosts():
    result = plan(client_sources=['172.16.0.0/16', '2001:db8::/64'])
    assert statements(result)['edge'] == [
        'ip saddr { 172.16.0.0/16, 10.20.0.2, 10.20.0.3, 10.20.0.5 } ip daddr { 10.20.0.11, 10.20.0.100 } '
        'tcp dport 443 counter accept comment "edge"']
    # No IPv6 address of the node: no IPv6 statement, though IPv6 clients are named.
    assert len(statements(result)['edge']) == 1


def test_an_ipv6_node_gets_ipv6_statements():
    result = plan(node={'addresses': ['fd00::11'], 'vips': []}, client_sources=['2001:db8::/64'])
    assert statements(result)['edge'] == [
        'ip6 saddr { 2001:db8::/64, fd00::5 } ip6 daddr fd00::11 tcp dport 443 counter accept comment "edge"']


def test_without_monitoring_hosts_nobody_reaches_node_exporter():
    result = plan(peers={'monitoring': {}, 'lvs_directors': {}})
    assert result['errors'] == [] and statements(result)['node_exporter'] == []


def test_dcgm_exporter_only_on_a_node_that_serves_on_gpus():
    assert 'dcgm_exporter' not in statements(plan())
    on_gpu = plan(node={'instances': [{'name': 'qwen', 'device': 'cuda'}]})
    assert statements(on_gpu)['dcgm_exporter'] == [
        'ip saddr 10.20.0.5 tcp dport 9400 counter accept comment "dcgm_exporter"',
        'ip6 saddr fd00::5 tcp dport 9400 counter accept comment "dcgm_exporter"']
    assert 'dcgm_exporter' not in statements(plan(node={'instances': [{'device': 'cuda'}]}, dcgm_exporter_port=0))


def test_extra_rules_from_the_site():
    result = plan(extra_rules=[{'name': 'backup', 'protocol': 'tcp', 'ports': [8400, 8401], 'sources': ['10.30.0.7']},
                               {'name': 'syslog-relay', 'protocol': 'udp', 'ports': [514]}])
    assert result['errors'] == []
    assert statements(result)['backup'] == [
        'ip saddr 10.30.0.7 tcp dport { 8400, 8401 } counter accept comment "backup"']
    assert statements(result)['syslog-relay'] == ['udp dport 514 counter accept comment "syslog-relay"']


def test_refusals_name_the_host_the_setting_and_the_fix():
    cases = [
        (plan(admin_sources=['10.20.9.0/33']),
         ["firewall_admin_sources names '10.20.9.0/33'", 'nothing may reach ssh']),
        (plan(admin_sources=[]), ['nothing may reach ssh (port 22)', 'set firewall_admin_sources']),
        (plan(client_sources=['clients.example']), ["firewall_client_sources names 'clients.example'"]),
        (plan(peers={'monitoring': {'prom01': {}}}), ['the monitoring host prom01 has no facts']),
        (plan(extra_rules=[{'name': 'ssh', 'ports': [2222]}]), ["a rule named 'ssh'", 'taken']),
        (plan(extra_rules=[{'name': 'x', 'protocol': 'sctp', 'ports': [9]}]), ["protocol 'sctp'"]),
        (plan(extra_rules=[{'name': 'x', 'ports': [0]}]), ['ports from 1 to 65535']),
        (plan(extra_rules=[{'name': 'x', 'ports': [9], 'sources': ['nowhere']}]),
         ["firewall_extra_rules x names 'nowhere'"]),
    ]
    for result, fragments in cases:
        assert result['errors'], fragments
        for error in result['errors']:
            assert error.startswith('host gpu-node01: firewall: ') and 'Fix: ' in error, error
        text = ' '.join(result['errors'])
        for fragment in fragments:
            assert fragment in text, text


DIRECTOR = {'vips': ['10.20.0.100', 'fd00::100'], 'port': 443, 'vrrp': True, 'sync_daemon': True}


def test_a_director_opens_its_service_vrrp_and_the_connection_sync_to_the_directors():
    result = firewall_plan({}, SETTINGS, PEERS, host='lvs01', director=DIRECTOR)
    assert result['errors'] == []
    assert statements(result) == {
        'ssh': ['ip saddr 10.20.9.0/24 tcp dport 22 counter accept comment "ssh"'],
        'lvs_service': ['ip daddr 10.20.0.100 tcp dport 443 counter accept comment "lvs_service"',
                        'ip6 daddr fd00::100 tcp dport 443 counter accept comment "lvs_service"'],
        'vrrp': ['ip saddr { 10.20.0.2, 10.20.0.3 } ip protocol 112 counter accept comment "vrrp"'],
        'ipvs_sync': ['ip saddr { 10.20.0.2, 10.20.0.3 } udp dport 8848 counter accept comment "ipvs_sync"'],
        'node_exporter': ['ip saddr 10.20.0.5 tcp dport 9100 counter accept comment "node_exporter"',
                          'ip6 saddr fd00::5 tcp dport 9100 counter accept comment "node_exporter"'],
    }
    # Direct routing: the director never sees the nodes' answers, so conntrack would call the rest of a handshake
    # invalid. The service is not tracked.
    assert result['notrack'] == ['ip daddr 10.20.0.100 tcp dport 443 notrack',
                                 'ip6 daddr fd00::100 tcp dport 443 notrack']
    assert plan()['notrack'] == []


def test_the_vip_a_master_director_holds_is_not_a_peer_address():
    # The VRRP master's facts list the VIP among its addresses; the backup's do not. The ruleset must not depend on
    # which director held it when the facts were gathered (a second run changed it, found by the lab's idempotence).
    holding = dict(PEERS, lvs_directors={'lvs01': {'all_ipv4_addresses': ['10.20.0.2', '10.20.0.100']},
                                         'lvs02': {'all_ipv4_addresses': ['10.20.0.3']}})
    assert (statements(firewall_plan({}, SETTINGS, holding, host='lvs01', director=DIRECTOR))
            == statements(firewall_plan({}, SETTINGS, PEERS, host='lvs01', director=DIRECTOR)))
    assert statements(plan(peers=holding)) == statements(plan())


def test_a_single_director_without_vrrp_opens_only_its_service():
    result = firewall_plan({}, dict(SETTINGS, client_sources=['172.16.0.0/16']), PEERS, host='lvs01',
                           director=dict(DIRECTOR, vrrp=False, vips=['10.20.0.100']))
    assert sorted(statements(result)) == ['lvs_service', 'node_exporter', 'ssh']
    # Named clients, plus the monitoring hosts (probes through the VIP) and the directors.
    assert statements(result)['lvs_service'] == [
        'ip saddr { 172.16.0.0/16, 10.20.0.2, 10.20.0.3, 10.20.0.5 } ip daddr 10.20.0.100 tcp dport 443 counter '
        'accept comment "lvs_service"']


def test_a_host_that_is_node_and_director_gets_both():
    result = firewall_plan(NODE, SETTINGS, PEERS, director=DIRECTOR)
    assert [r['name'] for r in result['rules']] == ['ssh', 'edge', 'lvs_service', 'vrrp', 'ipvs_sync', 'node_exporter']


def test_the_ranks_of_a_spanning_instance_reach_each_other_and_only_them():
    rank = {'instance': 'big', 'peers': ['10.20.0.12'], 'ports': [29500, 29501], 'ephemeral_ports': '32768-60999'}
    result = plan(node={'ranks': [rank]})
    assert result['errors'] == []
    assert statements(result)['span-big'] == [
        'ip saddr 10.20.0.12 tcp dport { 29500, 29501, 32768-60999 } counter accept comment "span-big"']
