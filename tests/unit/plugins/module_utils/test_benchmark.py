# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Where the benchmark's load goes, its report and the comparison of two runs."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._benchmark import (
    BenchmarkError, benchmark_compare, benchmark_report, benchmark_targets, benchmark_tco)

NODE1 = {'host': 'node1', 'endpoints': ['10.0.0.11:8000'], 'vip_endpoints': ['10.0.0.100:8000'],
         'models': ['llama-70b', 'qwen-7b'],
         'instances': [{'model': 'llama-70b', 'precision': 'fp8'}, {'model': 'qwen-7b', 'precision': 'bfloat16'}]}
NODE2 = {'host': 'node2', 'endpoints': ['10.0.0.12:8000'], 'vip_endpoints': ['10.0.0.100:8000'],
         'models': ['llama-70b'], 'instances': [{'model': 'llama-70b', 'precision': 'fp8'}]}


def test_through_the_vip_one_target_per_model():
    targets = benchmark_targets({'node1': NODE1, 'node2': NODE2})
    assert targets == [
        {'model': 'llama-70b', 'precision': 'fp8', 'url': 'https://10.0.0.100:8000/v1/completions', 'via': 'vip',
         'nodes': ['node1', 'node2']},
        {'model': 'qwen-7b', 'precision': 'bfloat16', 'url': 'https://10.0.0.100:8000/v1/completions', 'via': 'vip',
         'nodes': ['node1']}]


def test_without_a_vip_each_node_edge():
    nodes = {'node1': dict(NODE1, vip_endpoints=[]), 'node2': dict(NODE2, vip_endpoints=[])}
    assert [(t['model'], t['url'], t['via']) for t in benchmark_targets(nodes)] == [
        ('llama-70b', 'https://10.0.0.11:8000/v1/completions', 'edge'),
        ('llama-70b', 'https://10.0.0.12:8000/v1/completions', 'edge'),
        ('qwen-7b', 'https://10.0.0.11:8000/v1/completions', 'edge')]
    assert len(benchmark_targets({'node1': NODE1, 'node2': NODE2}, through='edges')) == 3
    with pytest.raises(BenchmarkError, match='model llama-70b is served by node1, node2, which publish no service VIP'):
        benchmark_targets(nodes, through='vip')
    with pytest.raises(BenchmarkError, match='no node published a summary'):
        benchmark_targets({})


def result(concurrency, rps, p99, errors=0, slo=200.0):
    return {'model': 'llama-70b', 'url': 'https://10.0.0.100:8000/v1/completions', 'via': 'vip',
            'nodes': ['node1', 'node2'], 'concurrency': concurrency, 'requests': 100, 'errors': errors,
            'throughput_rps': rps, 'tokens_per_s': rps * 32, 'ttft_ms': {'p50': 20.0, 'p99': 40.0},
            'itl_ms': {'p50': 5.0, 'p99': 9.0}, 'e2e_ms': {'p50': p99 / 2, 'p99': p99}, 'slo_p99_ms': slo,
            'over_slo_share': 0.0 if p99 <= slo else 0.2, 'slo_met': p99 <= slo}


def test_the_report_says_where_p99_crosses_the_slo():
    results = [result(100, 60.0, 450.0), result(1, 5.0, 120.0), result(10, 40.0, 180.0)]
    report = benchmark_report(results, {'prompt_tokens': 64, 'max_tokens': 32, 'stream': True, 'duration_s': 30})
    lines = report.splitlines()
    assert lines[2] == 'Request shape: about 64 prompt tokens, 32 output tokens, streaming, 30 s per level.'
    rows = [line for line in lines if line.startswith('| llama-70b')]
    assert [row.split(' | ')[2] for row in rows] == ['1', '10', '100']  # sorted by concurrency
    assert rows[2] == ('| llama-70b | vip | 100 | 100 | 0 | 60.00 | 1920.0 | 20.0 | 40.0 | 9.0 | 225.0 | 450.0 '
                       '| 20.0 % |')
    assert ('- llama-70b at https://10.0.0.100:8000/v1/completions: P99 within 200 ms up to 10 concurrent clients; '
            'over it (or errors) from 100.') in lines


def test_errors_count_against_holding():
    report = benchmark_report([result(1, 5.0, 120.0, errors=1)])
    assert 'P99 over 200 ms (or errors) already at 1 concurrent clients.' in report


def test_compare_two_runs():
    before = {'version': 1, 'started': '20261201T000000Z', 'results': [result(1, 5.0, 120.0), result(10, 40.0, 180.0)]}
    after = copy.deepcopy(before)
    after['started'] = '20261202T000000Z'
    after['results'][1]['throughput_rps'] = 44.0
    after['results'][1]['e2e_ms']['p99'] = 162.0
    after['results'].append(result(100, 50.0, 300.0))
    compared = benchmark_compare(before, after)
    row = compared['rows'][1]
    assert row['concurrency'] == 10 and row['throughput_rps'] == [40.0, 44.0, pytest.approx(1.1)]
    assert row['e2e_p99_ms'] == [180.0, 162.0, pytest.approx(0.9)]
    assert compared['unmatched'] == ['after only: llama-70b at https://10.0.0.100:8000/v1/completions, 100 clients']
    assert '| llama-70b | https://10.0.0.100:8000/v1/completions | 10 | 40.00 | 44.00 | 1.10 | 180.0 | 162.0 | 0.90 ' \
           '| 0 | 0 |' in compared['markdown']
    with pytest.raises(BenchmarkError, match='the before file is not a benchmark result'):
        benchmark_compare({'results': []}, after)


A800 = {'hardware_price': 1200000, 'depreciation_years': 5, 'power_watts': 6500, 'pue': 1.3,
        'energy_price_per_kwh': 0.8, 'rack_cost_per_month': 3000, 'licence_cost_per_year': 10000, 'nodes': 2}


def test_the_cost_of_what_each_target_holds():
    # Through the VIP, two A800 nodes: the level within the SLO with the most requests/s is 10 clients (40 req/s),
    # 20 req/s and 640 tokens/s per node.
    results = [dict(result(1, 5.0, 120.0), precision='fp8'), dict(result(10, 40.0, 180.0), precision='fp8'),
               dict(result(100, 60.0, 450.0), precision='fp8')]
    tco = benchmark_tco(results, {'a800x8': A800, 'unused': A800}, {'node1': 'a800x8', 'node2': 'a800x8'})
    (row,) = tco['results']
    assert row['node_kind'] == 'a800x8' and row['precision'] == 'fp8' and row['within_slo']
    assert row['throughput_rps'] == 20.0 and row['tokens_per_s'] == 640.0 and row['concurrency'] == [10]
    assert row['qps_per_10k'] == pytest.approx(20 / 34.52176)
    assert list(tco['node_kinds']) == ['a800x8']
    assert tco['fleet']['cost_per_year'] == pytest.approx(2 * 345217.6)
    report = benchmark_report(results, tco=tco)
    assert '| a800x8 | llama-70b | fp8 | 20.00 | 640.0 | 345218 | 0.579 | 0.167 |' in report
    assert '| a800x8 | 240000 | 59218 | 36000 | 10000 | 345218 |' in report
    assert 'The fleet: 690435 CNY a year' in report


def test_no_level_within_the_slo_and_nodes_without_a_kind_are_said():
    results = [result(1, 5.0, 320.0), result(10, 40.0, 480.0)]
    tco = benchmark_tco(results, {'a800x8': A800}, {'node1': 'a800x8', 'node2': 'a800x8'})
    assert tco['results'][0]['throughput_rps'] == 20.0 and not tco['results'][0]['within_slo']
    assert '20.00 (SLO not met)' in benchmark_report(results, tco=tco)
    tco = benchmark_tco(results, {'a800x8': A800}, {'node1': 'a800x8'})
    assert tco['results'] == [] and tco['notes'] == [
        'llama-70b at https://10.0.0.100:8000/v1/completions: no node kind for node2 (set llmops_tco_node_kind)']
    tco = benchmark_tco(results, {'a800x8': A800, 'h100x8': A800}, {'node1': 'a800x8', 'node2': 'h100x8'})
    assert 'its nodes are of kinds a800x8, h100x8; benchmark through the edges' in tco['notes'][0]
