# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The firewall role's ruleset as the role renders it, checked by the real nft (nft --check, as the role's
validate does), and its boot unit by systemd-analyze."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import jinja2
import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._firewall import firewall_plan

ROLE = pathlib.Path(__file__).resolve().parents[4] / 'roles' / 'firewall'
NODE = {'host': 'gpu-node01', 'port': 443, 'addresses': ['10.20.0.11', 'fd00::11'], 'vips': ['10.20.0.100'],
        'instances': [{'name': 'qwen', 'device': 'cuda'}]}
SETTINGS = {'admin_sources': ['10.20.9.0/24', 'fd00:9::/64'], 'admin_port': 22, 'admin_address': '10.20.0.11',
            'client_sources': [], 'node_exporter_port': 9100, 'dcgm_exporter_port': 9400,
            'extra_rules': [{'name': 'backup', 'protocol': 'tcp', 'ports': [8400], 'sources': ['10.30.0.7']}],
            'rollback_seconds': 30}
PEERS = {'monitoring': {'prom01': {'all_ipv4_addresses': ['10.20.0.5'], 'all_ipv6_addresses': ['fd00::5']}}}


def render(name, plan):
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(ROLE / 'templates')), keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True)
    env.filters['comment'] = lambda text: '#\n# %s\n#' % text
    return env.get_template(name).render(ansible_managed='Ansible managed', _firewall_plan=plan,
                                         _firewall_ruleset='/etc/llmops/firewall.nft')


def test_every_rule_is_in_the_table_before_the_counted_drop():
    plan = firewall_plan(NODE, SETTINGS, PEERS)
    assert plan['errors'] == []
    ruleset = render('firewall.nft.j2', plan)
    lines = [line.strip() for line in ruleset.splitlines()]
    statements = [s for rule in plan['rules'] for s in rule['statements']]
    assert len(statements) == 9  # IPv4 and IPv6 each for ssh, edge, node exporter, dcgm-exporter; backup IPv4
    for statement in statements:
        assert statement in lines
    assert lines.index('counter name "dropped" drop') > max(lines.index(s) for s in statements)
    assert 'type filter hook input priority filter; policy drop;' in lines


@pytest.mark.skipif(not shutil.which('nft') or os.geteuid() != 0, reason='needs nft (nftables) and root')
def test_nft_accepts_the_ruleset(tmp_path):
    ruleset = tmp_path / 'firewall.nft'
    ruleset.write_text(render('firewall.nft.j2', firewall_plan(NODE, SETTINGS, PEERS)))
    # --check parses and checks against the kernel, in a transaction it never commits.
    result = subprocess.run(['nft', '--check', '--file', str(ruleset)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


@pytest.mark.skipif(not shutil.which('nft') or os.geteuid() != 0, reason='needs nft (nftables) and root')
def test_nft_accepts_a_directors_ruleset(tmp_path):
    director = {'vips': ['10.20.0.100', 'fd00::100'], 'port': 443, 'vrrp': True, 'sync_daemon': True}
    ruleset = tmp_path / 'firewall.nft'
    peers = dict(PEERS, lvs_directors={
        'lvs01': {'all_ipv4_addresses': ['10.20.0.2']},
        'lvs02': {'all_ipv4_addresses': ['10.20.0.3'], 'all_ipv6_addresses': ['fd00::3']}})
    ruleset.write_text(render('firewall.nft.j2', firewall_plan({}, SETTINGS, peers, 'lvs01', director)))
    result = subprocess.run(['nft', '--check', '--file', str(ruleset)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr + ruleset.read_text()
    assert 'ip saddr { 10.20.0.2, 10.20.0.3 } ip protocol 112 counter accept comment "vrrp"' in ruleset.read_text()
    assert 'ip6 saddr fd00::3 ip6 nexthdr 112 counter accept comment "vrrp"' in ruleset.read_text()
    assert ('type filter hook prerouting priority raw;\n\t\tip daddr 10.20.0.100 tcp dport 443 notrack'
            in ruleset.read_text())


@pytest.mark.skipif(not shutil.which('nft') or os.geteuid() != 0, reason='needs nft (nftables) and root')
def test_nft_refuses_a_broken_ruleset(tmp_path):
    ruleset = tmp_path / 'firewall.nft'
    text = render('firewall.nft.j2', firewall_plan(NODE, SETTINGS, PEERS))
    ruleset.write_text(text.replace('tcp dport 22', 'tcp dport x'))
    assert subprocess.run(['nft', '--check', '--file', str(ruleset)], capture_output=True, check=False).returncode != 0
