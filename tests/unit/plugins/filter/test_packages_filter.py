# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Which packages a role still has to install, against the baseline's fact of what the host has."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.filter import packages

HOST = {'nftables': '1.0.6-2+deb12u2', 'keepalived': '1:2.2.7-1+b2', 'ipvsadm': '1:1.31-1+b1'}


def test_the_filter_is_registered():
    assert packages.FilterModule().filters() == {'missing_packages': packages.missing_packages}


def test_nothing_is_missing_when_the_host_has_every_package():
    assert packages.missing_packages(['keepalived', 'ipvsadm'], HOST) == []


def test_the_missing_ones_in_the_order_given():
    assert packages.missing_packages(['redis-server', 'keepalived', 'age'], HOST) == ['redis-server', 'age']


def test_one_string_is_one_package():
    assert packages.missing_packages('nftables', HOST) == []
    assert packages.missing_packages('nginx', HOST) == ['nginx']


def test_a_pinned_version_is_satisfied_by_that_version_only():
    assert packages.missing_packages(['nftables=1.0.6-2+deb12u2'], HOST) == []
    assert packages.missing_packages(['nftables=1.0.9-1'], HOST) == ['nftables=1.0.9-1']


def test_without_the_fact_every_package_is_missing():
    assert packages.missing_packages(['nftables', 'keepalived'], {}) == ['nftables', 'keepalived']


@pytest.mark.parametrize('installed', [None, ['nftables'], 'nftables'])
def test_installed_must_be_a_mapping(installed):
    with pytest.raises(AnsibleFilterError, match='mapping of name to version.*Fix'):
        packages.missing_packages(['nftables'], installed)


@pytest.mark.parametrize('spec', ['', '  ', None, 3])
def test_a_spec_must_be_a_name(spec):
    with pytest.raises(AnsibleFilterError, match='not a package name.*Fix'):
        packages.missing_packages([spec], HOST)
