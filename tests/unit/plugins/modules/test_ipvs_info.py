# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pytest
import yaml

from ansible_collections.llmops.vllm.plugins.modules import ipvs_info
from ansible_collections.llmops.vllm.tests.unit.plugins.module_utils.test_ipvs import (
    FWM_LIST,
    FWM_STATS,
    IPV6_LIST,
    IPV6_STATS,
    LAB_LIST,
    LAB_STATS,
    LIST_HEAD,
    NO_IPVS,
    STATS_HEAD,
)

LIST = ('-L', '-n', '--exact')
STATS = ('-L', '-n', '--stats', '--exact')


@pytest.fixture
def ipvsadm(tmp_path):
    """An executable file to pass as the ipvsadm option; run_command is patched, so it never runs."""
    path = tmp_path / 'sbin' / 'ipvsadm'
    path.parent.mkdir()
    path.write_text('#!/bin/sh\nexit 99\n')
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def answer(monkeypatch):
    """Patch AnsibleModule.run_command to answer the two listings; returns the argv of each call."""
    calls = []

    def install(listing, stats=None, rc=0, err=''):
        def run_command(self, argv, **kwargs):
            calls.append(list(argv))
            args = tuple(argv[1:])
            if rc:
                return rc, '', err
            return {LIST: (0, listing, ''), STATS: (0, stats, '')}[args]
        monkeypatch.setattr(ipvs_info.AnsibleModule, 'run_command', run_command)
        return calls
    return install


def _summary(services):
    return [(s['protocol'], s['address'], s['port'], s['fwmark'],
             [(rs['address'], rs['forward'], rs['weight'], rs['active_connections'], rs['stats']['outpkts'])
              for rs in s['real_servers']]) for s in services]


@pytest.mark.parametrize('listing, stats, expected', [
    (LIST_HEAD, STATS_HEAD, []),
    (LAB_LIST, LAB_STATS, [
        ('tcp', '10.89.60.100', 8000, None, [('10.89.60.11', 'dr', 1, 0, 0), ('10.89.60.12', 'dr', 1, 2, 0)]),
        ('tcp', '10.89.60.101', 8000, None, [('10.89.60.11', 'dr', 0, 1, 0)]),
    ]),
    (FWM_LIST, FWM_STATS, [
        (None, None, None, 1, [('10.89.60.11', 'dr', 1, 0, 0)]),
        (None, None, None, 2, [('2001:db8::11', 'tunnel', 1, 0, 0)]),
    ]),
    (IPV6_LIST, IPV6_STATS, [
        ('tcp', '2001:db8::1', 8000, None, [('2001:db8::11', 'dr', 1, 0, 0),
                                            ('2001:db8:0:0:ffff::12', 'nat', 2, 4, 12)]),
        ('udp', '2001:db8::1', 53, None, [('2001:db8::11', 'dr', 1, 0, 0)]),
    ]),
], ids=['empty', 'lab', 'fwmark', 'ipv6'])
@pytest.mark.parametrize('check_mode', [False, True])
def test_reports_the_table(run_module, ipvsadm, answer, listing, stats, expected, check_mode):
    calls = answer(listing, stats)
    result = run_module(ipvs_info, {'ipvsadm': ipvsadm, '_ansible_check_mode': check_mode})
    assert (result['rc'], result['changed'], result['available'], result['unavailable_reason']) == (0, False, True,
                                                                                                    None)
    assert (result['ipvs_version'], result['connection_table_size']) == ('1.2.1', 4096)
    assert _summary(result['services']) == expected
    assert calls == [[ipvsadm, *LIST], [ipvsadm, *STATS]]


def test_full_structure_of_a_service(run_module, ipvsadm, answer):
    answer(LAB_LIST, LAB_STATS)
    result = run_module(ipvs_info, {'ipvsadm': ipvsadm})
    assert set(result) >= {'available', 'unavailable_reason', 'ipvs_version', 'connection_table_size', 'services'}
    assert result['services'][1] == {
        'protocol': 'tcp', 'address': '10.89.60.101', 'port': 8000, 'fwmark': None, 'family': 'ipv4',
        'scheduler': 'wrr', 'persistent': 300, 'persistence_mask': None, 'persistence_engine': None, 'flags': [],
        'stats': {'conns': 4, 'inpkts': 20, 'outpkts': 0, 'inbytes': 1800, 'outbytes': 0},
        'real_servers': [{
            'address': '10.89.60.11', 'port': 8000, 'forward': 'dr', 'weight': 0, 'active_connections': 1,
            'inactive_connections': 0,
            'stats': {'conns': 4, 'inpkts': 20, 'outpkts': 0, 'inbytes': 1800, 'outbytes': 0},
        }],
    }


@pytest.mark.parametrize('args, expected', [
    ({'virtual_address': '10.89.60.100'}, [('tcp', '10.89.60.100', 8000)]),
    ({'virtual_address': '10.89.60.101', 'port': 8000, 'protocol': 'tcp'}, [('tcp', '10.89.60.101', 8000)]),
    ({'port': 8000}, [('tcp', '10.89.60.100', 8000), ('tcp', '10.89.60.101', 8000)]),
    ({'protocol': 'udp'}, []),
    ({'virtual_address': '10.89.60.100', 'port': 8443}, []),
    ({'fwmark': 1}, []),
])
def test_filters(run_module, ipvsadm, answer, args, expected):
    answer(LAB_LIST, LAB_STATS)
    result = run_module(ipvs_info, dict(args, ipvsadm=ipvsadm))
    assert result['rc'] == 0
    assert [(s['protocol'], s['address'], s['port']) for s in result['services']] == expected


def test_ipv6_filter_in_another_notation(run_module, ipvsadm, answer):
    answer(IPV6_LIST, IPV6_STATS)
    result = run_module(ipvs_info, {'ipvsadm': ipvsadm, 'virtual_address': '2001:DB8:0::1', 'port': 53})
    assert [(s['protocol'], s['address']) for s in result['services']] == [('udp', '2001:db8::1')]


def test_fwmark_filter(run_module, ipvsadm, answer):
    answer(FWM_LIST, FWM_STATS)
    result = run_module(ipvs_info, {'ipvsadm': ipvsadm, 'fwmark': 2})
    assert [(s['fwmark'], s['family']) for s in result['services']] == [(2, 'ipv6')]


def test_virtual_address_must_be_an_ip(run_module, ipvsadm, answer):
    calls = answer(LAB_LIST, LAB_STATS)
    result = run_module(ipvs_info, {'ipvsadm': ipvsadm, 'virtual_address': 'vip.example.com'})
    assert (result['rc'], result['failed']) == (1, True)
    assert result['msg'].startswith('virtual_address vip.example.com is not an IP address. Fix:')
    assert calls == []


def test_drained_node_wait_condition(run_module, ipvsadm, answer):
    """What the rolling upgrade waits for: the active connections of one real server on the VIP."""
    answer(LAB_LIST, LAB_STATS)
    services = run_module(ipvs_info, {'ipvsadm': ipvsadm, 'virtual_address': '10.89.60.100'})['services']
    active = {rs['address']: rs['active_connections'] for s in services for rs in s['real_servers']}
    assert active == {'10.89.60.11': 0, '10.89.60.12': 2}
    assert sum(s['stats']['outpkts'] for s in services) == 0


@pytest.mark.parametrize('fail', [True, False])
def test_kernel_without_ipvs(run_module, ipvsadm, answer, fail):
    answer(None, rc=2, err=NO_IPVS)
    result = run_module(ipvs_info, {'ipvsadm': ipvsadm, 'fail_when_unavailable': fail})
    assert result['unavailable_reason'] == 'ipvs_unavailable'
    assert result['msg'].startswith('the kernel has no IPVS: %s -L -n --exact failed with rc 2: ' % ipvsadm)
    assert 'Fix: load the ip_vs kernel module' in result['msg']
    if fail:
        assert (result['rc'], result['failed']) == (1, True)
    else:
        assert (result['rc'], result['changed'], result['available'], result['services']) == (0, False, False, [])
        assert 'failed' not in result
        assert (result['ipvs_version'], result['connection_table_size']) == (None, None)


@pytest.mark.parametrize('fail', [True, False])
def test_missing_ipvsadm_path(run_module, tmp_path, answer, fail):
    calls = answer(LAB_LIST, LAB_STATS)
    missing = str(tmp_path / 'nope' / 'ipvsadm')
    result = run_module(ipvs_info, {'ipvsadm': missing, 'fail_when_unavailable': fail})
    assert result['unavailable_reason'] == 'ipvsadm_missing'
    assert result['msg'] == ('ipvsadm %s is not an executable file. Fix: install the ipvsadm package, or give its path'
                             % missing)
    assert result['rc'] == (1 if fail else 0) and result.get('available', False) is False
    assert calls == []


def test_ipvsadm_not_installed(run_module, answer, monkeypatch):
    calls = answer(LAB_LIST, LAB_STATS)
    monkeypatch.setattr(ipvs_info.AnsibleModule, 'get_bin_path', lambda self, name, *a, **kw: None)
    result = run_module(ipvs_info, {})
    assert (result['rc'], result['failed'], result['unavailable_reason']) == (1, True, 'ipvsadm_missing')
    assert result['msg'].startswith('ipvsadm is not on PATH nor in the sbin dirs. Fix: install the ipvsadm package')
    assert calls == []


def test_ipvsadm_found_on_path(run_module, ipvsadm, answer, monkeypatch):
    calls = answer(LAB_LIST, LAB_STATS)
    seen = []

    def get_bin_path(self, name, *args, **kwargs):
        seen.append(name)
        return ipvsadm
    monkeypatch.setattr(ipvs_info.AnsibleModule, 'get_bin_path', get_bin_path)
    result = run_module(ipvs_info, {})
    assert result['rc'] == 0 and len(result['services']) == 2
    assert seen == ['ipvsadm'] and calls[0][0] == ipvsadm


@pytest.mark.parametrize('fail', [True, False])
def test_not_root_always_fails(run_module, ipvsadm, answer, fail):
    answer(None, rc=2, err="Can't initialize ipvs: Permission denied (you must be root)\n")
    result = run_module(ipvs_info, {'ipvsadm': ipvsadm, 'fail_when_unavailable': fail})
    assert (result['rc'], result['failed'], result['unavailable_reason']) == (1, True, None)
    assert 'Fix: run it as root (become: true)' in result['msg']


def test_unparsable_output_fails(run_module, ipvsadm, answer):
    answer(LIST_HEAD + 'TCP  10.89.60.100:8000 wlc\n  -> 10.89.60.11:8000 Route one 0 0\n', STATS_HEAD)
    result = run_module(ipvs_info, {'ipvsadm': ipvsadm, 'fail_when_unavailable': False})
    assert (result['rc'], result['failed']) == (1, True)
    assert result['msg'].startswith('cannot parse line 5 of the ipvsadm output')


def test_runs_a_real_executable(run_module, tmp_path):
    """Without patching: a shell script that prints as ipvsadm does goes through AnsibleModule.run_command."""
    listing, stats = tmp_path / 'list.txt', tmp_path / 'stats.txt'
    listing.write_text(LAB_LIST)
    stats.write_text(LAB_STATS)
    script = tmp_path / 'ipvsadm'
    script.write_text('#!/bin/sh\n'
                      'case "$*" in\n'
                      '  "-L -n --exact") cat %s ;;\n'
                      '  "-L -n --stats --exact") cat %s ;;\n'
                      '  *) echo "unexpected: $*" >&2; exit 2 ;;\n'
                      'esac\n' % (listing, stats))
    script.chmod(0o755)
    result = run_module(ipvs_info, {'ipvsadm': str(script), 'port': 8000, 'protocol': 'tcp'})
    assert result['rc'] == 0
    assert [s['stats']['conns'] for s in result['services']] == [30, 4]


def _options(doc):
    return {name: (o['type'], o.get('default'), o.get('choices')) for name, o in doc['options'].items()}


def test_docs_match_argument_spec():
    docs = yaml.safe_load(ipvs_info.DOCUMENTATION)
    yaml.safe_load(ipvs_info.EXAMPLES)
    returned = yaml.safe_load(ipvs_info.RETURN)
    assert docs['module'] == 'ipvs_info'
    assert 'llmops.vllm.attributes.info_module' in docs['extends_documentation_fragment']
    assert _options(docs) == {name: (spec['type'], spec.get('default'), spec.get('choices'))
                              for name, spec in ipvs_info.ARGUMENT_SPEC.items()}
    assert set(returned) == {'available', 'unavailable_reason', 'msg', 'ipvs_version', 'connection_table_size',
                             'services'}


def test_return_docs_cover_every_field(run_module, ipvsadm, answer):
    """Every key of a service, a real server and their stats is documented, and nothing else."""
    answer(LAB_LIST, LAB_STATS)
    service = run_module(ipvs_info, {'ipvsadm': ipvsadm})['services'][0]
    documented = yaml.safe_load(ipvs_info.RETURN)['services']['contains']
    assert list(documented) == list(service)
    assert list(documented['stats']['contains']) == list(service['stats'])
    servers = documented['real_servers']['contains']
    assert list(servers) == list(service['real_servers'][0])
    assert list(servers['stats']['contains']) == list(service['real_servers'][0]['stats'])
    for doc in list(documented.values()) + list(servers.values()):
        assert {'description', 'type', 'returned'} <= set(doc)
        assert 'sample' in doc or doc['type'] in ('dict', 'list')
