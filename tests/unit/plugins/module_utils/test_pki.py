# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import datetime

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._pki import PkiPlanError, ca_plan, pki_plan

BASE = {'validity_days': 365, 'renew_before_days': 30, 'key_algorithm': 'ecdsa-p256', 'organization': 'llmops.vllm',
        'directory': '/etc/llmops-vllm/pki'}
# A Kunpeng node of inventories/example: two interfaces, plus podman's bridge and loopback.
NODE = {'names': ['gpu-node01', 'gpu-node01', 'gpu-node01.cluster.example'],
        'addresses': ['10.20.1.11', '10.20.1.11', '192.168.100.11', '127.0.0.1']}


def plan(identity=None, **settings):
    return pki_plan(dict(BASE, **settings), NODE if identity is None else identity, host='gpu-node01')


def refused(*fragments, **settings):
    with pytest.raises(PkiPlanError) as error:
        plan(**settings)
    message = str(error.value)
    assert message.startswith('host gpu-node01: pki: ') and '. Fix: ' in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_a_vllm_node_gets_a_server_certificate_for_its_names_addresses_and_the_vips():
    result = plan(server=True, service_vips=['10.20.0.100'], service_names=['llm.example.com'],
                  extra_sans=['DNS:gpu-node01.mgmt', 'IP:10.30.0.11'])
    [server] = result['certificates']
    assert server == {
        'name': 'server', 'kind': 'server', 'common_name': 'gpu-node01', 'organizational_unit': 'vllm-edge',
        'organization': 'llmops.vllm',
        'subject_alt_name': ['DNS:gpu-node01', 'DNS:gpu-node01.cluster.example', 'DNS:llm.example.com',
                             'DNS:gpu-node01.mgmt', 'IP:10.20.1.11', 'IP:192.168.100.11', 'IP:10.20.0.100',
                             'IP:10.30.0.11'],
        'extended_key_usage': ['serverAuth', 'clientAuth'],
        'key_path': '/etc/llmops-vllm/pki/server.key', 'certificate_path': '/etc/llmops-vllm/pki/server.crt',
        'owner': 'root', 'group': 'root'}
    assert result['not_after'] == '+365d' and result['renew_within'] == '+30d' and result['key_max_age_s'] == 0
    assert result['key'] == {'type': 'ECC', 'curve': 'secp256r1'}


def test_keys_older_than_the_maximum_age_are_replaced_after_that_many_seconds():
    assert plan(server=True, key_max_age_days=330)['key_max_age_s'] == 330 * 86400
    assert plan(server=True, key_max_age_days=0)['key_max_age_s'] == 0


def test_a_director_gets_the_health_checkers_client_certificate():
    result = plan(clients=[{'name': 'lb-health-checker', 'ou': 'lb-health-checker'}])
    [client] = result['certificates']
    assert (client['common_name'], client['organizational_unit'], client['kind']) == (
        'gpu-node01', 'lb-health-checker', 'client')
    assert client['extended_key_usage'] == ['clientAuth'] and client['subject_alt_name'] == []
    assert client['key_path'] == '/etc/llmops-vllm/pki/lb-health-checker.key'


def test_prometheus_key_belongs_to_prometheus():
    [client] = plan(clients=[{'name': 'prometheus', 'ou': 'prometheus', 'owner': 'prometheus'}])['certificates']
    assert (client['owner'], client['group']) == ('prometheus', 'root')


def test_applications_are_named_by_their_cn_on_the_controller():
    result = pki_plan(dict(BASE, directory='/srv/inventory/pki/clients', application=True,
                           clients=[{'name': 'chat-frontend'}, {'name': 'batch', 'ou': 'data team'}]),
                      host='localhost')
    assert [(c['common_name'], c['organizational_unit']) for c in result['certificates']] == [
        ('chat-frontend', 'applications'), ('batch', 'data team')]
    assert result['certificates'][0]['certificate_path'] == '/srv/inventory/pki/clients/chat-frontend.crt'
    assert result['certificates'][0]['owner'] is None


@pytest.mark.parametrize('algorithm, key', [
    ('ecdsa-p384', {'type': 'ECC', 'curve': 'secp384r1'}),
    ('rsa-3072', {'type': 'RSA', 'size': 3072}),
])
def test_key_algorithms(algorithm, key):
    assert plan(server=True, key_algorithm=algorithm)['key'] == key


def test_a_host_without_certificates_gets_none():
    assert plan()['certificates'] == []


@pytest.mark.parametrize('settings, fragments', [
    ({'renew_before_days': 365}, ['pki_renew_before_days (365) is not below pki_certificate_validity_days (365)',
                                  'every run would renew']),
    ({'validity_days': 0}, ['pki_certificate_validity_days must be an integer >= 1, got 0']),
    ({'renew_before_days': True}, ['pki_renew_before_days must be an integer']),
    ({'key_max_age_days': -1}, ['pki_key_max_age_days must be an integer >= 0, got -1']),
    ({'key_max_age_days': '330'}, ['pki_key_max_age_days must be an integer >= 0']),
    ({'key_algorithm': 'dsa-1024'}, ["pki_key_algorithm 'dsa-1024' is not one of", 'ecdsa-p256']),
    ({'directory': 'pki'}, ["the certificate directory 'pki' is not an absolute path", 'pki_host_dir']),
    ({'directory': '/etc/pki\n}\nreal_server 10.0.0.9 8000 {'},
     ["pki_host_dir '/etc/pki\\n}", 'not an absolute path of', "configuration files hold its paths as they are"]),
    ({'directory': '/etc/llmops pki'}, ["pki_host_dir '/etc/llmops pki' is not"]),
    ({'server': True, 'extra_sans': ['llm.example.com']}, ["'llm.example.com' is neither DNS:<name> nor IP:"]),
    ({'server': True, 'extra_sans': ['IP:10.0.0.300']}, ["'10.0.0.300' is not an IP address"]),
    ({'server': True, 'extra_sans': ['DNS:bad_name!']}, ["'DNS:bad_name!' is not a DNS name"]),
    ({'server': True, 'service_vips': ['vip']}, ["address 'vip' is not an IP address"]),
    ({'clients': [{'name': 'Prometheus Server', 'ou': 'prometheus'}]},
     ["'Prometheus Server': the name must be lower-case", 'e.g. prometheus-server']),
    ({'clients': [{'name': 'prometheus'}]}, ['pki_host_clients entry prometheus has no ou']),
    ({'clients': [{'ou': 'prometheus'}]}, ['has no name']),
    ({'clients': [{'name': 'server', 'ou': 'x'}]}, ["clashes with the server certificate's files"]),
    ({'clients': [{'name': 'a', 'ou': 'x'}, {'name': 'a', 'ou': 'y'}]}, ['two certificates are named a']),
    ({'clients': [{'name': 'a', 'ou': 'x"y'}]}, ["ou 'x\"y' has characters"]),
])
def test_refusals_name_the_host_the_problem_and_the_fix(settings, fragments):
    refused(*fragments, **settings)


def test_a_server_certificate_needs_a_name_or_an_address():
    with pytest.raises(PkiPlanError, match='would have no name and no address'):
        plan(identity={'names': [''], 'addresses': ['127.0.0.1']}, server=True)


# The fleet CAs and a rollover's stages (ca_plan).
CA = {'certificate': True, 'key': True}
TODAY = datetime.date(2026, 12, 7)
SETTINGS = {'create': True, 'passphrase': True}


def cas(stage='', settings=None, **found):
    return ca_plan(dict(SETTINGS, **(settings or {})), found, stage, host='ctl', today=TODAY)


def ca_refused(fragment, stage='', settings=None, **found):
    with pytest.raises(PkiPlanError) as error:
        cas(stage, settings, **found)
    message = str(error.value)
    assert message.startswith('host ctl: pki: ') and '. Fix: ' in message and fragment in message, message
    return message


def test_a_new_fleet_creates_its_ca_and_trusts_it_alone():
    plan = cas()
    assert plan['create'] == ['current'] and plan['trusted'] == ['current'] and plan['moves'] == []
    assert cas(current=CA)['create'] == [] and cas(current=CA)['trusted'] == ['current']


def test_a_new_ca_key_in_clear_is_refused_unless_accepted():
    message = ca_refused('private key in clear', settings={'passphrase': False})
    assert 'pki_ca_privatekey_passphrase' in message and 'pki_ca_privatekey_unencrypted' in message
    assert cas(settings={'passphrase': False, 'unencrypted': True})['create'] == ['current']
    # An existing CA in clear is not re-created (the git warning covers it).
    assert cas(settings={'passphrase': False}, current=CA)['create'] == []
    ca_refused('new next CA', 'add', {'passphrase': False}, current=CA)


def test_a_missing_ca_that_may_not_be_created_and_a_half_ca_are_refused():
    ca_refused('not on the controller', settings={'create': False})
    assert 'restore the missing file' in ca_refused('has its certificate but not its key',
                                                    current={'certificate': True, 'key': False})
    ca_refused('next CA on the controller has its key but not its certificate', current=CA,
               next={'certificate': False, 'key': True})


def test_the_three_stages_move_the_cas_and_keep_both_trusted_between_them():
    add = cas('add', current=CA)
    assert add['create'] == ['next'] and add['trusted'] == ['current', 'next'] and add['moves'] == []
    # Any run between the stages trusts what is there.
    assert cas(current=CA, next=CA)['trusted'] == ['current', 'next']
    issue = cas('issue', current=CA, next=CA)
    assert issue['moves'] == [['current', 'previous'], ['next', 'current']]
    assert issue['held_by'] == {'current': 'next', 'previous': 'current', 'next': 'next'}
    assert issue['trusted'] == ['current', 'previous'] and issue['create'] == []
    assert issue['record_retire_after'] == '2027-01-06'
    assert cas('issue', {'retire_after': '2026-12-07'}, current=CA, next=CA)['record_retire_after'] == '2026-12-07'
    between = cas(current=CA, previous=CA, retire_after='2027-01-06')
    assert between['trusted'] == ['current', 'previous'] and not between['retire']
    retire = cas('retire', current=CA, previous=CA, retire_after='2026-12-07')
    assert retire['retire'] and retire['trusted'] == ['current'] and retire['moves'] == []


def test_each_stage_run_again_does_no_harm_and_a_stopped_issue_goes_on():
    assert cas('add', current=CA, next=CA)['create'] == []
    again = cas('issue', current=CA, previous=CA, retire_after='2027-01-06')
    assert again['moves'] == [] and again['record_retire_after'] is None and 'already done' in again['messages'][0]
    # Stopped after the current CA became the previous one: the next one moves on, the date recorded stays.
    resumed = cas('issue', next=CA, previous=CA, retire_after='2027-01-06')
    assert resumed['moves'] == [['next', 'current']] and resumed['create'] == []
    assert resumed['record_retire_after'] is None and resumed['trusted'] == ['current', 'previous']
    nothing = cas('retire', current=CA)
    assert not nothing['retire'] and 'nothing to retire' in nothing['messages'][0]


def test_stages_out_of_order_or_too_early_are_refused_with_the_next_step():
    assert 'ca_rollover_stage=add' in ca_refused('is not one of add, issue, retire', 'rotate', current=CA)
    assert 'run stage retire first' in ca_refused('has not ended', 'add', current=CA, previous=CA,
                                                  retire_after='2027-01-06')
    ca_refused('no CA to roll over', 'add')
    assert 'run stage add first' in ca_refused('no next CA', 'issue', current=CA)
    assert 'run stage issue first' in ca_refused('does not issue yet', 'retire', current=CA, next=CA)
    message = ca_refused('to stay trusted until 2027-01-06', 'retire', current=CA, previous=CA,
                         retire_after='2027-01-06')
    assert 'ca_rollover_retire_early=true' in message
    assert cas('retire', {'retire_early': True}, current=CA, previous=CA, retire_after='2027-01-06')['retire']
    ca_refused('is in the past', 'issue', {'retire_after': '2026-12-01'}, current=CA, next=CA)
    ca_refused('is not a date', 'issue', {'retire_after': '31/01/2027'}, current=CA, next=CA)
