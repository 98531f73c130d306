# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._ipvs import (
    LIST_ARGS,
    STATS_ARGS,
    IpvsError,
    failure,
    filter_services,
    merge,
    parse_address,
    parse_counter,
    parse_listing,
    parse_stats,
    read_ipvs,
)

VERSION = 'IP Virtual Server version 1.2.1 (size=4096)\n'
LIST_HEAD = VERSION + (
    'Prot LocalAddress:Port Scheduler Flags\n'
    '  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n')
STATS_HEAD = VERSION + (
    'Prot LocalAddress:Port               Conns   InPkts  OutPkts  InBytes OutBytes\n'
    '  -> RemoteAddress:Port\n')

# ipvsadm 1.31 on Debian bookworm, the lab's two VIPs under direct routing.
LAB_LIST = LIST_HEAD + (
    'TCP  10.89.60.100:8000 wlc\n'
    '  -> 10.89.60.11:8000             Route   1      0          3\n'
    '  -> 10.89.60.12:8000             Route   1      2          5\n'
    'TCP  10.89.60.101:8000 wrr persistent 300\n'
    '  -> 10.89.60.11:8000             Route   0      1          0\n')
LAB_STATS = STATS_HEAD + (
    'TCP  10.89.60.100:8000                  30      154        0    12345        0\n'
    '  -> 10.89.60.11:8000                   15       77        0     6000        0\n'
    '  -> 10.89.60.12:8000                   15       77        0     6345        0\n'
    'TCP  10.89.60.101:8000                   4       20        0     1800        0\n'
    '  -> 10.89.60.11:8000                    4       20        0     1800        0\n')

FWM_LIST = LIST_HEAD + (
    'FWM  1 wlc\n'
    '  -> 10.89.60.11:0                Route   1      0          0\n'
    'FWM  2 IPv6 rr\n'
    '  -> [2001:db8::11]:0             Tunnel  1      0          0\n')
FWM_STATS = STATS_HEAD + (
    'FWM  1                                   7       40        0     3000        0\n'
    '  -> 10.89.60.11:0                       7       40        0     3000        0\n'
    'FWM  2 IPv6                              1        6        0      400        0\n'
    '  -> [2001:db8::11]:0                    1        6        0      400        0\n')

IPV6_LIST = LIST_HEAD + (
    'TCP  [2001:db8::1]:8000 wlc\n'
    '  -> [2001:db8::11]:8000          Route   1      0          0\n'
    '  -> [2001:db8:0:0:ffff::12]:8000 Masq    2      4          1\n'
    'UDP  [2001:db8::1]:53 sh (sh-fallback,sh-port)\n'
    '  -> [2001:db8::11]:53            Route   1      0          9\n')
# --exact widens each counter so that a long address is never glued to it.
IPV6_STATS = STATS_HEAD + (
    'TCP  [2001:db8::1]:8000                  3       18       12     1500     9000\n'
    '  -> [2001:db8::11]:8000                 1        6        0      500        0\n'
    '  -> [2001:db8:0:0:ffff::12]:8000        2       12       12     1000     9000\n'
    'UDP  [2001:db8::1]:53               123456789012 987654321098 0 98765432109876 0\n'
    '  -> [2001:db8::11]:53              123456789012 987654321098 0 98765432109876 0\n')

PERSISTENT_LIST = LIST_HEAD + (
    'TCP  10.89.60.100:443 wlc persistent 3600 mask 255.255.255.0\n'
    '  -> 10.89.60.11:443              Route   1      0          0\n'
    'UDP  10.89.60.100:5060 rr persistent 60 pe sip ops\n'
    '  -> 10.89.60.12:5060             Masq    1      0          0\n'
    'TCP  [2001:db8::1]:443 wlc persistent 300 mask 64\n'
    'TCP  10.89.60.102:8000 wlc (flag-1,flag-3) ops\n'
    'SCTP 10.89.60.103:9000 sh   sh-fallback   persistent   30\n'
    '  -> 10.89.60.13:9000             Local   1      0          0\n')


def _serve(outputs):
    """A run_command answering each argv from outputs[args tuple] = (rc, out, err); records the calls."""
    calls = []

    def run_command(argv):
        calls.append(argv)
        return outputs[tuple(argv[1:])]
    run_command.calls = calls
    return run_command


@pytest.mark.parametrize('text, expected', [
    ('10.89.60.100:8000', ('10.89.60.100', 8000, 'ipv4')),
    ('[2001:db8::1]:8000', ('2001:db8::1', 8000, 'ipv6')),
    ('[::ffff:10.0.0.1]:0', ('::ffff:10.0.0.1', 0, 'ipv6')),
    ('lb.example.com:80', ('lb.example.com', 80, 'ipv4')),
])
def test_parse_address(text, expected):
    assert parse_address(text) == expected


@pytest.mark.parametrize('text', ['10.89.60.100', '[2001:db8::1]', '2001:db8::1', '10.0.0.1:http', ':80'])
def test_parse_address_rejects(text):
    with pytest.raises(ValueError):
        parse_address(text)


@pytest.mark.parametrize('text, value', [
    ('0', 0), ('12345', 12345), ('123456789012', 123456789012),
    ('100000K', 100000000), ('999999K', 999999000), ('1234M', 1234000000), ('99999G', 99999000000000),
    ('12T', 12000000000000),
])
def test_parse_counter(text, value):
    assert parse_counter(text) == value


@pytest.mark.parametrize('text', ['', 'K', '1.5K', '-1', '12k', '3P'])
def test_parse_counter_rejects(text):
    with pytest.raises(ValueError):
        parse_counter(text)


def test_lab_table():
    listing, stats = parse_listing(LAB_LIST), parse_stats(LAB_STATS)
    assert (listing['ipvs_version'], listing['connection_table_size']) == ('1.2.1', 4096)
    services = merge(listing, stats)
    assert services[0] == {
        'protocol': 'tcp', 'address': '10.89.60.100', 'port': 8000, 'fwmark': None, 'family': 'ipv4',
        'scheduler': 'wlc', 'persistent': None, 'persistence_mask': None, 'persistence_engine': None, 'flags': [],
        'stats': {'conns': 30, 'inpkts': 154, 'outpkts': 0, 'inbytes': 12345, 'outbytes': 0},
        'real_servers': [
            {'address': '10.89.60.11', 'port': 8000, 'forward': 'dr', 'weight': 1, 'active_connections': 0,
             'inactive_connections': 3,
             'stats': {'conns': 15, 'inpkts': 77, 'outpkts': 0, 'inbytes': 6000, 'outbytes': 0}},
            {'address': '10.89.60.12', 'port': 8000, 'forward': 'dr', 'weight': 1, 'active_connections': 2,
             'inactive_connections': 5,
             'stats': {'conns': 15, 'inpkts': 77, 'outpkts': 0, 'inbytes': 6345, 'outbytes': 0}},
        ],
    }
    assert list(services[0]) == ['protocol', 'address', 'port', 'fwmark', 'family', 'scheduler', 'persistent',
                                 'persistence_mask', 'persistence_engine', 'flags', 'stats', 'real_servers']
    assert (services[1]['scheduler'], services[1]['persistent']) == ('wrr', 300)
    assert [(rs['weight'], rs['active_connections'], rs['stats']['conns']) for rs in services[1]['real_servers']] \
        == [(0, 1, 4)]


@pytest.mark.parametrize('text', [
    '',
    VERSION,
    LIST_HEAD,
    STATS_HEAD,
    'IP Virtual Server version 1.2.1 (size=4096)\r\nProt LocalAddress:Port Scheduler Flags\r\n'
    '  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\r\n\r\n',
], ids=['no-output', 'version-only', 'listing-heading', 'stats-heading', 'crlf'])
def test_empty_table(text):
    assert parse_listing(text)['services'] == [] and parse_stats(text)['services'] == []
    assert merge(parse_listing(text), parse_stats(text)) == []


@pytest.mark.parametrize('listing, stats, expected', [
    (LAB_LIST, LAB_STATS, [
        ('tcp', '10.89.60.100', 8000, None, 'ipv4', 'wlc', None, [
            ('10.89.60.11', 8000, 'dr', 1, 0, 3, 15), ('10.89.60.12', 8000, 'dr', 1, 2, 5, 15)]),
        ('tcp', '10.89.60.101', 8000, None, 'ipv4', 'wrr', 300, [('10.89.60.11', 8000, 'dr', 0, 1, 0, 4)]),
    ]),
    (FWM_LIST, FWM_STATS, [
        (None, None, None, 1, 'ipv4', 'wlc', None, [('10.89.60.11', 0, 'dr', 1, 0, 0, 7)]),
        (None, None, None, 2, 'ipv6', 'rr', None, [('2001:db8::11', 0, 'tunnel', 1, 0, 0, 1)]),
    ]),
    (IPV6_LIST, IPV6_STATS, [
        ('tcp', '2001:db8::1', 8000, None, 'ipv6', 'wlc', None, [
            ('2001:db8::11', 8000, 'dr', 1, 0, 0, 1), ('2001:db8:0:0:ffff::12', 8000, 'nat', 2, 4, 1, 2)]),
        ('udp', '2001:db8::1', 53, None, 'ipv6', 'sh', None, [('2001:db8::11', 53, 'dr', 1, 0, 9, 123456789012)]),
    ]),
], ids=['lab', 'fwmark', 'ipv6'])
def test_tables(listing, stats, expected):
    services = merge(parse_listing(listing), parse_stats(stats))
    assert [(s['protocol'], s['address'], s['port'], s['fwmark'], s['family'], s['scheduler'], s['persistent'],
             [(rs['address'], rs['port'], rs['forward'], rs['weight'], rs['active_connections'],
               rs['inactive_connections'], rs['stats']['conns']) for rs in s['real_servers']])
            for s in services] == expected


def test_large_exact_counters():
    udp = merge(parse_listing(IPV6_LIST), parse_stats(IPV6_STATS))[1]
    assert udp['stats'] == {'conns': 123456789012, 'inpkts': 987654321098, 'outpkts': 0,
                            'inbytes': 98765432109876, 'outbytes': 0}
    assert udp['flags'] == ['sh-fallback', 'sh-port']


@pytest.mark.parametrize('index, expected', [
    (0, ('tcp', 'wlc', 3600, '255.255.255.0', None, [])),
    (1, ('udp', 'rr', 60, None, 'sip', ['ops'])),
    (2, ('tcp', 'wlc', 300, '64', None, [])),
    (3, ('tcp', 'wlc', None, None, None, ['flag-1', 'flag-3', 'ops'])),
    (4, ('sctp', 'sh', 30, None, None, ['sh-fallback'])),
])
def test_persistence_and_flags(index, expected):
    service = parse_listing(PERSISTENT_LIST)['services'][index]
    assert (service['protocol'], service['scheduler'], service['persistent'], service['persistence_mask'],
            service['persistence_engine'], service['flags']) == expected


def test_forwarding_methods():
    services = parse_listing(PERSISTENT_LIST)['services']
    assert [rs['forward'] for s in services for rs in s['real_servers']] == ['dr', 'nat', 'local']
    assert services[2]['real_servers'] == []


@pytest.mark.parametrize('flags_text, flags', [
    ('(flag-1)', ['flag-1']),
    ('( flag-1, flag-2 )', ['flag-1', 'flag-2']),
    ('(mh-fallback,mh-port) persistent 10', ['mh-fallback', 'mh-port']),
    ('flag-2 ops', ['flag-2', 'ops']),
])
def test_scheduler_flag_spellings(flags_text, flags):
    service = parse_listing('TCP  10.0.0.1:80 mh %s\n' % flags_text)['services'][0]
    assert service['flags'] == flags


def test_extra_whitespace_and_tabs():
    listing = parse_listing('\n  TCP\t10.0.0.1:80   wlc   persistent\t300  \n\t->   10.0.0.2:80  Route  5 7  9  \n\n')
    stats = parse_stats('TCP\t10.0.0.1:80 \t 1 2 3 4 5   \n   ->\t10.0.0.2:80 1   2 3 4 5\n')
    (service,) = merge(listing, stats)
    assert (service['persistent'], service['stats']['outbytes']) == (300, 5)
    assert service['real_servers'][0]['weight'] == 5 and service['real_servers'][0]['stats']['conns'] == 1


def test_suffixed_counters():
    """Without --exact ipvsadm rounds large counters down to K, M, G or T (powers of 1000)."""
    stats = parse_stats(STATS_HEAD + (
        'TCP  10.89.60.100:8000            123456K 987654K        0   12345M        0\n'
        '  -> 10.89.60.11:8000               99999999     1234G        0       56T        0\n'))
    (service,) = stats['services']
    assert service['stats'] == {'conns': 123456000, 'inpkts': 987654000, 'outpkts': 0, 'inbytes': 12345000000,
                                'outbytes': 0}
    assert service['real_servers'][0]['stats'] == {'conns': 99999999, 'inpkts': 1234000000000, 'outpkts': 0,
                                                   'inbytes': 56000000000000, 'outbytes': 0}


def test_table_changed_between_the_two_runs():
    """A service or real server only in the first listing has no counters; one only in the second is left out."""
    stats = parse_stats(STATS_HEAD + (
        'TCP  10.89.60.100:8000                  30      154        0    12345        0\n'
        '  -> 10.89.60.12:8000                   15       77        0     6345        0\n'
        '  -> 10.89.60.13:8000                    1        1        0        1        0\n'
        'TCP  10.89.60.199:8000                   1        1        0        1        0\n'))
    services = merge(parse_listing(LAB_LIST), stats)
    assert [s['address'] for s in services] == ['10.89.60.100', '10.89.60.101']
    assert [rs['stats'] and rs['stats']['conns'] for rs in services[0]['real_servers']] == [None, 15]
    assert services[1]['stats'] is None and services[1]['real_servers'][0]['stats'] is None


def test_fwmark_and_address_service_with_the_same_numbers_stay_apart():
    listing = parse_listing('FWM  1 wlc\nFWM  1 IPv6 wlc\nTCP  10.0.0.1:1 wlc\n')
    stats = parse_stats('FWM  1 1 0 0 0 0\nFWM  1 IPv6 2 0 0 0 0\nTCP  10.0.0.1:1 3 0 0 0 0\n')
    assert [s['stats']['conns'] for s in merge(listing, stats)] == [1, 2, 3]


@pytest.mark.parametrize('text, parser, why', [
    ('  -> 10.0.0.2:80 Route 1 0 0\n', parse_listing, 'real server before any virtual service'),
    ('TCP  10.0.0.1:80 wlc\n  -> 10.0.0.2:80 Route 1 0\n', parse_listing, 'expected ADDRESS:PORT'),
    ('TCP  10.0.0.1:80 wlc\n  -> 10.0.0.2:80 Route x 0 0\n', parse_listing, 'invalid literal'),
    ('ICMP 10.0.0.1:80 wlc\n', parse_listing, 'unknown protocol ICMP'),
    ('TCP  10.0.0.1 wlc\n', parse_listing, 'not ADDRESS:PORT'),
    ('TCP  10.0.0.1:80\n', parse_listing, 'no scheduler'),
    ('TCP  10.0.0.1:80 wlc persistent\n', parse_listing, 'persistent without a value'),
    ('TCP  10.0.0.1:80 wlc persistent long\n', parse_listing, 'no number of seconds'),
    ('FWM  x wlc\n', parse_listing, 'FWM without a firewall mark'),
    ('TCP  10.0.0.1:80 1 2\n', parse_stats, 'expected 5 counters'),
    ('TCP  10.0.0.1:80 1 2 3\n', parse_stats, "not a counter: 'TCP'"),
    ('TCP  10.0.0.1:80 1 2 3 4 5X\n', parse_stats, 'not a counter'),
    ('TCP  10.0.0.1:80 extra 1 2 3 4 5\n', parse_stats, 'unexpected extra'),
    ('  -> 10.0.0.2:80 1 2 3 4 5\n', parse_stats, 'real server before any virtual service'),
    ('Memory allocation problem\n', parse_listing, 'unknown protocol Memory'),
])
def test_unparsable_output_is_an_error(text, parser, why):
    with pytest.raises(IpvsError) as info:
        parser(text)
    assert info.value.reason == 'parse_error' and not info.value.unavailable
    assert why in str(info.value) and str(info.value).startswith('cannot parse line ')


@pytest.mark.parametrize('criteria, expected', [
    ({}, ['tcp 10.89.60.100:8000', 'tcp 10.89.60.101:8000', 'fwm 1', 'tcp 2001:db8::1:8000', 'udp 2001:db8::1:53']),
    ({'address': '10.89.60.100'}, ['tcp 10.89.60.100:8000']),
    ({'address': '2001:0db8:0000::0001'}, ['tcp 2001:db8::1:8000', 'udp 2001:db8::1:53']),
    ({'address': '2001:db8::1', 'port': 53}, ['udp 2001:db8::1:53']),
    ({'port': 8000}, ['tcp 10.89.60.100:8000', 'tcp 10.89.60.101:8000', 'tcp 2001:db8::1:8000']),
    ({'protocol': 'udp'}, ['udp 2001:db8::1:53']),
    ({'protocol': 'TCP', 'port': 53}, []),
    ({'fwmark': 1}, ['fwm 1']),
    ({'fwmark': 2}, []),
    ({'address': '10.89.60.200'}, []),
])
def test_filter_services(criteria, expected):
    services = (merge(parse_listing(LAB_LIST), parse_stats(LAB_STATS))
                + merge(parse_listing(FWM_LIST), parse_stats(FWM_STATS))[:1]
                + merge(parse_listing(IPV6_LIST), parse_stats(IPV6_STATS)))
    assert ['fwm %d' % s['fwmark'] if s['fwmark'] else '%s %s:%d' % (s['protocol'], s['address'], s['port'])
            for s in filter_services(services, **criteria)] == expected


def test_read_ipvs_runs_both_listings():
    run_command = _serve({LIST_ARGS: (0, LAB_LIST, ''), STATS_ARGS: (0, LAB_STATS, '')})
    table = read_ipvs(run_command, '/usr/sbin/ipvsadm')
    assert run_command.calls == [['/usr/sbin/ipvsadm', '-L', '-n', '--exact'],
                                 ['/usr/sbin/ipvsadm', '-L', '-n', '--stats', '--exact']]
    assert (table['ipvs_version'], table['connection_table_size']) == ('1.2.1', 4096)
    assert table['services'] == merge(parse_listing(LAB_LIST), parse_stats(LAB_STATS))


NO_IPVS = ("Can't initialize ipvs: Protocol not available\n"
           'Are you sure that IP Virtual Server is built in the kernel or as module?\n')


@pytest.mark.parametrize('rc, out, err, reason, text', [
    (2, '', NO_IPVS, 'ipvs_unavailable', "the kernel has no IPVS: /usr/sbin/ipvsadm -L -n --exact failed with rc 2: "
                                         "Can't initialize ipvs: Protocol not available Are you sure"),
    (2, NO_IPVS, '', 'ipvs_unavailable', 'Fix: load the ip_vs kernel module'),
    (2, '', "Can't initialize ipvs: No such file or directory\nAre you sure that IP Virtual Server is built in the "
            'kernel or as module?\n', 'ipvs_unavailable', 'No such file or directory'),
    (2, '', "Can't initialize ipvs: Permission denied (you must be root)\n", 'permission_denied',
     'Fix: run it as root (become: true), or with CAP_NET_ADMIN'),
    (1, '', 'Permission denied (you must be root)\n', 'permission_denied', 'Fix: run it as root'),
    (1, '', 'Memory allocation problem\n', 'command_failed',
     '/usr/sbin/ipvsadm -L -n --exact failed with rc 1: Memory allocation problem'),
    (139, '', '', 'command_failed', 'failed with rc 139: (no output)'),
])
def test_failures(rc, out, err, reason, text):
    run_command = _serve({LIST_ARGS: (rc, out, err)})
    with pytest.raises(IpvsError) as info:
        read_ipvs(run_command, '/usr/sbin/ipvsadm')
    assert info.value.reason == reason
    assert info.value.unavailable is (reason == 'ipvs_unavailable')
    assert text in str(info.value)
    assert len(run_command.calls) == 1


def test_failure_of_the_stats_listing():
    run_command = _serve({LIST_ARGS: (0, LAB_LIST, ''), STATS_ARGS: (1, '', 'Memory allocation problem\n')})
    with pytest.raises(IpvsError, match=r'--stats --exact failed with rc 1') as info:
        read_ipvs(run_command, 'ipvsadm')
    assert info.value.reason == 'command_failed'


def test_failure_message_names_the_command():
    error = failure(['/sbin/ipvsadm', '-L', '-n'], 2, None, None)
    assert str(error) == '/sbin/ipvsadm -L -n failed with rc 2: (no output)'
