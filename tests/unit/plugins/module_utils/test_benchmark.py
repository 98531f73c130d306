# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Where the benchmark's load goes, its report and the comparison of two runs."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._benchmark import (
    BenchmarkError, benchmark_compare, benchmark_report, benchmark_targets)

NODE1 = {'host': 'node1', 'endpoints': ['10.0.0.11:8000'], 'vip_endpoints': ['10.0.0.100:8000'],
         'models': ['llama-70b', 'qwen-7b']}
NODE2 = {'host': 'node2', 'endpoints': ['10.0.0.12:8000'], 'vip_endpoints': ['10.0.0.100:8000'],
         'models': ['llama-70b']}


def test_through_the_vip_one_target_per_model():
    targets = benchmark_targets({'node1': NODE1, 'node2': NODE2})
    assert targets == [
        {'model': 'llama-70b', 'url': 'https://10.0.0.100:8000/v1/completions', 'via': 'vip',
         'nodes': ['node1', 'node2']},
        {'model': 'qwen-7b', 'url': 'https://10.0.0.100:8000/v1/completions', 'via': 'vip', 'nodes': ['node1']}]


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
