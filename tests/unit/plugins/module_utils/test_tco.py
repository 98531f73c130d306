# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The TCO arithmetic against a worked example (done by hand, docs/capacity.md), and the units of its inputs."""

from __future__ import annotations

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._tco import TcoError, node_cost, tco_report

# An 8-GPU A800 node: 1,200,000 CNY written off in 5 years; 6,500 W under load in a PUE 1.3 hall at 0.8 CNY/kWh;
# 3,000 CNY a month of rack; 10,000 CNY a year of licences. Two of them, and four Kunpeng CPU nodes.
A800 = {'hardware_price': 1200000, 'depreciation_years': 5, 'power_watts': 6500, 'pue': 1.3,
        'energy_price_per_kwh': 0.8, 'rack_cost_per_month': 3000, 'licence_cost_per_year': 10000, 'nodes': 2}
KUNPENG = {'hardware_price': 150000, 'depreciation_years': 5, 'power_watts': 600, 'energy_price_per_kwh': 0.8,
           'rack_cost_per_month': 1500, 'licence_cost_per_year': 0, 'nodes': 4}
RESULTS = [
    {'node_kind': 'a800x8', 'model': 'llama-70b', 'precision': 'fp16', 'throughput_rps': 40.0, 'tokens_per_s': 5000.0},
    {'node_kind': 'a800x8', 'model': 'llama-70b', 'precision': 'fp8', 'throughput_rps': 64.0, 'tokens_per_s': 8000.0,
     'fleet': False},
    {'node_kind': 'kunpeng', 'model': 'qwen-1.5b', 'precision': 'fp32', 'throughput_rps': 2.0, 'tokens_per_s': 120.0},
]


def test_one_node_a_year_by_part():
    cost = node_cost('a800x8', A800)
    assert cost['hardware'] == pytest.approx(240000)  # 1,200,000 / 5 years
    assert cost['energy'] == pytest.approx(59217.6)  # 6.5 kW * 8,760 h * 1.3 * 0.8 CNY/kWh
    assert cost['rack'] == pytest.approx(36000)  # 3,000 a month * 12
    assert cost['licence'] == pytest.approx(10000)
    assert cost['total'] == pytest.approx(345217.6)
    assert node_cost('kunpeng', KUNPENG)['energy'] == pytest.approx(4204.8)  # PUE 1 when left out


def test_qps_per_10k_and_cost_per_million_tokens():
    report = tco_report({'a800x8': A800, 'kunpeng': KUNPENG}, RESULTS, currency='CNY')
    fp16, fp8, cpu = report['results']
    assert fp16['qps_per_10k'] == pytest.approx(40 / 34.52176)  # 1.1587 requests/s per 10,000 CNY a year
    assert fp16['qps_per_10k_hardware'] == pytest.approx(40 / 120)
    # 5,000 tokens/s * 31,536,000 s = 157,680 million tokens a year for 345,217.6 CNY.
    assert fp16['cost_per_million_tokens'] == pytest.approx(345217.6 / 157680)
    assert fp8['qps_per_10k'] == pytest.approx(64 / 34.52176)
    kunpeng_total = 30000 + 4204.8 + 18000
    assert cpu['cost_per_million_tokens'] == pytest.approx(kunpeng_total / (120 * 31.536))
    fleet = report['fleet']
    assert fleet['cost_per_year'] == pytest.approx(2 * 345217.6 + 4 * kunpeng_total)
    assert fleet['tokens_per_year'] == pytest.approx((2 * 5000 + 4 * 120) * 31536000)  # fp8 is not what it runs
    assert fleet['cost_per_million_tokens'] == pytest.approx(fleet['cost_per_year'] / (10480 * 31.536))
    assert report['currency'] == 'CNY' and report['per'] == 10000


def test_utilisation_scales_the_tokens_not_the_cost():
    full = tco_report({'a800x8': A800}, RESULTS[:1])
    half = tco_report({'a800x8': A800}, RESULTS[:1], utilisation=0.5)
    full, half = full['results'][0], half['results'][0]
    assert half['cost_per_million_tokens'] == pytest.approx(2 * full['cost_per_million_tokens'])
    assert half['qps_per_10k'] == full['qps_per_10k']


@pytest.mark.parametrize('change, message', [
    ({'power_watts': 6.5}, 'power_watts is 6.5: that is watts'),
    ({'depreciation_years': 60}, 'depreciation_years is 60: that is years'),
    ({'depreciation_years': 0}, 'depreciation_years is 0, not a number above 0'),
    ({'pue': 0.8}, 'pue is 0.8, below 1'),
    ({'energy_price_per_kwh': -1}, 'energy_price_per_kwh is -1'),
    ({'power_kw': 6.5}, 'unknown cost input power_kw'),
    ({'rack_cost_per_month': '3000'}, "rack_cost_per_month is '3000', not a number"),
])
def test_inputs_in_the_wrong_unit_are_refused_naming_the_kind(change, message):
    with pytest.raises(TcoError, match='node kind a800x8: ' + message.replace('.', r'\.')):
        node_cost('a800x8', dict(A800, **change))


def test_a_missing_cost_and_an_unknown_kind_are_refused():
    costs = dict(A800)
    del costs['licence_cost_per_year']
    with pytest.raises(TcoError, match='missing licence_cost_per_year. Fix: set 0'):
        node_cost('a800x8', costs)
    with pytest.raises(TcoError, match="names node kind 'h100'"):
        tco_report({'a800x8': A800}, [dict(RESULTS[0], node_kind='h100')])
    both = tco_report({'a800x8': A800}, [RESULTS[0], dict(RESULTS[1], fleet=True)])
    assert both['fleet'] is None and 'node kind a800x8 has more than one result the fleet runs' in both['notes'][0]
    with pytest.raises(TcoError, match='write 60 % as 0.6'):
        tco_report({'a800x8': A800}, RESULTS[:1], utilisation=60)
