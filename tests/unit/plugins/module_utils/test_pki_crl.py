# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import datetime

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._pki import PkiPlanError, crl_plan

SETTINGS = {'crl_validity_days': 7, 'crl_renew_before_days': 2, 'directory': '/srv/fleet/pki/',
            'clients': [{'name': 'billing-app'}, {'name': 'search'}]}


NOW = datetime.datetime(2026, 12, 4, 12, 0, 0)


def plan(revoked=(), one_more=None, next_update=None, **settings):
    return crl_plan(dict(SETTINGS, **settings), list(revoked), one_more, host='gpu-node01', next_update=next_update,
                    now=NOW)


def refused(*fragments, **kwargs):
    with pytest.raises(PkiPlanError) as error:
        plan(**kwargs)
    message = str(error.value)
    assert message.startswith('host gpu-node01: pki: ') and '. Fix: ' in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_an_empty_crl_is_planned_on_the_controller():
    assert plan() == {'path': '/srv/fleet/pki/ca.crl', 'next_update': '+7d', 'renew': True,
                      'revoked_certificates': [], 'warnings': []}


@pytest.mark.parametrize('next_update, renew, stale', [('20261211120000Z', False, False),
                                                       ('20261206120001Z', False, False),
                                                       ('20261206115959Z', True, False),
                                                       ('20261204115959Z', True, True)])
def test_the_crl_is_signed_again_within_its_window_and_a_stale_one_is_warned_of(next_update, renew, stale):
    crl = plan(next_update=next_update)
    assert crl['renew'] is renew
    assert bool(crl['warnings']) is stale
    if stale:
        assert 'every edge refuses every client certificate' in crl['warnings'][0]


def test_a_next_update_that_is_not_a_time_is_refused():
    refused('has a next update', next_update='soon')


# Text is hex, as openssl and the audit log's client_serial print it: an all-digit serial too.
@pytest.mark.parametrize('serial, number', [(66223, 66223), ('01:02:AF', 66223), ('4f:1a', 0x4F1A),
                                            ('4A1ABA84BB07E16E6DC805EFDF25B5FDA5123730',
                                             0x4A1ABA84BB07E16E6DC805EFDF25B5FDA5123730),
                                            ('66223', 0x66223), (' 0102af ', 66223)])
def test_a_serial_is_an_integer_whatever_its_spelling(serial, number):
    (entry,) = plan([{'serial': serial, 'reason': 'key_compromise'}])['revoked_certificates']
    assert entry == {'serial_number': number, 'reason': 'key_compromise'}


def test_a_path_and_a_former_client_are_revoked_by_their_certificate_file():
    entries = plan([{'path': '/srv/leaked.crt'}, {'name': 'old-app'}])['revoked_certificates']
    assert entries == [{'path': '/srv/leaked.crt', 'reason': 'unspecified'},
                       {'path': '/srv/fleet/pki/clients/old-app.crt', 'reason': 'unspecified'}]


def test_an_issued_client_is_refused_in_the_inventory_but_revoked_by_the_playbook():
    refused('billing-app is also in pki_application_clients', 'playbooks/revoke.yml -e revoke_name=billing-app',
            revoked=[{'name': 'billing-app'}])
    entries = plan(one_more={'name': 'billing-app', 'serial': '', 'path': '', 'reason': 'superseded'})
    assert entries['revoked_certificates'] == [{'path': '/srv/fleet/pki/clients/billing-app.crt',
                                                'reason': 'superseded'}]


@pytest.mark.parametrize('entry, fragment', [
    ({}, 'names no certificate'),
    ({'serial': 5, 'name': 'x'}, 'names the certificate twice'),
    ({'serial': '0x4F'}, 'is neither a positive integer nor hex'),
    ({'serial': 0}, 'is neither a positive integer nor hex'),
    ({'serial': '00:00'}, 'is neither a positive integer nor hex'),
    ({'serial': '4F:1A09'}, 'is neither a positive integer nor hex'),
    ({'serial': 5.0}, 'is neither a positive integer nor hex'),
    ({'path': 'leaked.crt'}, 'the path is not absolute'),
    ({'name': 'Billing App'}, 'is not a client name'),
    ({'serial': 5, 'reason': 'certificate_hold'}, 'a revocation here cannot be lifted'),
    ({'serial': 5, 'when': 'now'}, 'unknown keys when'),
    ('4F:1A', 'is not a mapping'),
])
def test_a_bad_entry_is_refused_with_the_fix(entry, fragment):
    refused(fragment, revoked=[entry])


def test_a_renewal_window_not_below_the_validity_is_refused():
    refused('pki_crl_renew_before_days (7) is not below pki_crl_validity_days (7)', crl_renew_before_days=7)


def test_the_crl_goes_next_to_the_ca_where_client_certificates_are_checked():
    from ansible_collections.llmops.vllm.plugins.module_utils._pki import pki_plan
    settings = {'validity_days': 365, 'renew_before_days': 30, 'directory': '/etc/llmops-vllm/pki'}
    server = pki_plan(dict(settings, server=True), {'names': ['gpu-node01']}, host='gpu-node01')['files']
    assert server['crl'] == '/etc/llmops-vllm/pki/ca.crl' and server['ca'] == '/etc/llmops-vllm/pki/ca.crt'
    director = pki_plan(dict(settings, clients=[{'name': 'lb-health-checker', 'ou': 'lb-health-checker'}]),
                        {}, host='lb1')['files']
    assert director['crl'] is None
