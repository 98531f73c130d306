# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""The fleet benchmark: where the load goes (benchmark_targets), what it costs (benchmark_tco, over _tco.py), the
report (benchmark_report) and the comparison of two result files (benchmark_compare).

Targets come from the nodes' summaries (llmops_node, docs/node-summary.md), never decided again: each served model
through the service VIP when the nodes publish one (the load balancer spreads it), otherwise through each node's
edge. A result is one run of llmops.vllm.vllm_benchmark at one concurrency against one target.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.llmops.vllm.plugins.module_utils._tco import tco_report

VERSION = 1


class BenchmarkError(ValueError):
    """The benchmark cannot be planned or compared as asked; the message says what and the fix."""


def benchmark_targets(nodes, path='/v1/completions', through='auto'):
    """One target per served model (VIP) or per model and node (edges): {model, url, via, nodes}.

    nodes: {inventory name: node summary}; through: auto (the VIP when there is one), vip or edges.
    """
    if through not in ('auto', 'vip', 'edges'):
        raise BenchmarkError('benchmark: through is %r. Fix: give auto, vip or edges' % (through,))
    if not nodes:
        raise BenchmarkError('benchmark: no node published a summary (llmops_node). Fix: run the benchmark on the '
                             'vLLM nodes, whose preflight publishes it (playbooks/benchmark.yml imports it)')
    models = {}
    for host in sorted(nodes):
        for model in nodes[host].get('models') or []:
            models.setdefault(model, []).append(host)
    targets = []
    for model in sorted(models):
        hosts = models[model]
        precision = '/'.join(sorted(set(str(i.get('precision') or '?') for h in hosts
                                        for i in nodes[h].get('instances') or [] if i.get('model') == model))) or '?'
        vips = sorted(set(e for h in hosts for e in nodes[h].get('vip_endpoints') or []))
        use_vip = through == 'vip' or (through == 'auto' and vips)
        if use_vip:
            if not vips:
                raise BenchmarkError('benchmark: model %s is served by %s, which publish no service VIP. Fix: set '
                                     'vllm_service_vips, or benchmark through the edges (through: edges)'
                                     % (model, ', '.join(hosts)))
            targets.append({'model': model, 'precision': precision, 'url': 'https://%s%s' % (vips[0], path),
                            'via': 'vip', 'nodes': hosts})
        else:
            for host in hosts:
                targets.append({'model': model, 'precision': precision,
                                'url': 'https://%s%s' % (nodes[host]['endpoints'][0], path), 'via': 'edge',
                                'nodes': [host]})
    return targets


def _fmt(value, digits=1):
    return '-' if value is None else ('%.*f' % (digits, value))


def _row(result):
    return '| %s | %s | %d | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s |' % (
        result['model'], result['via'] if result['via'] == 'vip' else ', '.join(result['nodes']),
        result['concurrency'], result['requests'], result['errors'], _fmt(result['throughput_rps'], 2),
        _fmt(result['tokens_per_s']), _fmt(result['ttft_ms']['p50']), _fmt(result['ttft_ms']['p99']),
        _fmt(result['itl_ms']['p99']), _fmt(result['e2e_ms']['p50']), _fmt(result['e2e_ms']['p99']),
        '-' if result['over_slo_share'] is None else '%.1f %%' % (100 * result['over_slo_share']))


def _holds(results):
    """Per target: the highest concurrency whose P99 met the SLO, and the lowest where it did not."""
    lines = []
    keyed = {}
    for result in results:
        keyed.setdefault((result['model'], result['url']), []).append(result)
    for (model, url), runs in sorted(keyed.items()):
        runs = sorted(runs, key=lambda r: r['concurrency'])
        if runs[0].get('slo_met') is None:
            continue
        met = [r['concurrency'] for r in runs if r['slo_met'] and not r['errors']]
        missed = [r['concurrency'] for r in runs if not r['slo_met'] or r['errors']]
        slo = runs[0]['slo_p99_ms']
        if not missed:
            lines.append('- %s at %s: P99 within %s ms up to %d concurrent clients (the most tried).'
                         % (model, url, _fmt(slo, 0), max(met)))
        elif not met:
            lines.append('- %s at %s: P99 over %s ms (or errors) already at %d concurrent clients.'
                         % (model, url, _fmt(slo, 0), min(missed)))
        else:
            lines.append('- %s at %s: P99 within %s ms up to %d concurrent clients; over it (or errors) from %d.'
                         % (model, url, _fmt(slo, 0), max(met), min(missed)))
    return lines


def _capacity(runs):
    """The level a target holds: the most requests/s among the levels within the SLO without errors; without one
    (or without an SLO), the most requests/s of all."""
    held = [r for r in runs if r.get('slo_met') and not r['errors']]
    return max(held or runs, key=lambda r: r['throughput_rps']), bool(held)


def benchmark_tco(results, costs, node_kinds, currency='CNY', utilisation=1.0):
    """The cost of what each target holds: per node, its share of the target's requests/s and tokens/s at the
    level it holds (the SLO's), priced by its node kind (llmops_tco_node_kinds, _tco.py).

    node_kinds: {inventory name: node kind}. A target whose nodes are of different kinds has no per-kind figure
    (benchmark through the edges for one); nodes without a kind are named.
    """
    targets, notes = {}, []
    for result in results:
        targets.setdefault((result['model'], result['url']), []).append(result)
    rows = []
    for (model, url), runs in sorted(targets.items()):
        best, within = _capacity(runs)
        kinds = sorted(set(node_kinds.get(h) or '' for h in best['nodes']))
        if '' in kinds:
            notes.append('%s at %s: no node kind for %s (set llmops_tco_node_kind)'
                         % (model, url, ', '.join(h for h in best['nodes'] if not node_kinds.get(h))))
            continue
        if len(kinds) > 1:
            notes.append('%s at %s: its nodes are of kinds %s; benchmark through the edges (benchmark_through: '
                         'edges) for a cost per kind' % (model, url, ', '.join(kinds)))
            continue
        share = float(len(best['nodes']))
        rows.append({'node_kind': kinds[0], 'model': model, 'precision': best.get('precision'), 'url': url,
                     'concurrency': best['concurrency'], 'within_slo': within,
                     'throughput_rps': best['throughput_rps'] / share, 'tokens_per_s': best['tokens_per_s'] / share})
    # Through the edges, one row per node: the kind's figure is their mean.
    merged = {}
    for row in rows:
        merged.setdefault((row['node_kind'], row['model'], row['precision']), []).append(row)
    priced = []
    for (kind, model, precision), group in sorted(merged.items()):
        priced.append({'node_kind': kind, 'model': model, 'precision': precision,
                       'throughput_rps': sum(r['throughput_rps'] for r in group) / len(group),
                       'tokens_per_s': sum(r['tokens_per_s'] for r in group) / len(group),
                       'within_slo': all(r['within_slo'] for r in group),
                       'concurrency': sorted(set(r['concurrency'] for r in group))})
    used = sorted(set(r['node_kind'] for r in priced))
    report = tco_report(dict((k, costs[k]) for k in used if k in costs), [
        {'node_kind': r['node_kind'], 'model': r['model'], 'precision': r['precision'],
         'throughput_rps': r['throughput_rps'], 'tokens_per_s': r['tokens_per_s']} for r in priced],
        currency, utilisation)
    for row, extra in zip(report['results'], priced):
        row.update(within_slo=extra['within_slo'], concurrency=extra['concurrency'])
    report['notes'] = notes + report['notes']
    return report


def _cost_section(tco):
    money = tco['currency']
    lines = ['', '## Cost', '',
             'Per node, at the level each target holds within the SLO (or its most requests/s when none does); '
             'a year of %s, utilisation %s (docs/capacity.md).' % (money, tco['utilisation']), '',
             '| node kind | model | precision | req/s per node | tokens/s per node | %s a year per node | '
             'QPS per 10,000 %s a year | QPS per 10,000 %s of hardware | %s per million tokens |'
             % (money, money, money, money),
             '| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |']
    for row in tco['results']:
        cost = tco['node_kinds'][row['node_kind']]['total']
        lines.append('| %s | %s | %s | %s%s | %s | %s | %s | %s | %s |' % (
            row['node_kind'], row['model'], row['precision'], _fmt(row['throughput_rps'], 2),
            '' if row['within_slo'] else ' (SLO not met)', _fmt(row['tokens_per_s']), _fmt(cost, 0),
            _fmt(row['qps_per_10k'], 3), _fmt(row['qps_per_10k_hardware'], 3),
            _fmt(row['cost_per_million_tokens'], 3)))
    lines += ['', '| node kind | hardware | energy | rack | licence | total |',
              '| --- | ---: | ---: | ---: | ---: | ---: |']
    for kind, parts in sorted(tco['node_kinds'].items()):
        lines.append('| %s | %s | %s | %s | %s | %s |' % (kind, _fmt(parts['hardware'], 0), _fmt(parts['energy'], 0),
                                                          _fmt(parts['rack'], 0), _fmt(parts['licence'], 0),
                                                          _fmt(parts['total'], 0)))
    if tco.get('fleet'):
        lines += ['', 'The fleet: %s %s a year, %s %s per million output tokens.'
                  % (_fmt(tco['fleet']['cost_per_year'], 0), money,
                     _fmt(tco['fleet']['cost_per_million_tokens'], 3), money)]
    lines += ['', *('- %s' % note for note in tco['notes'])] if tco['notes'] else []
    return lines


def benchmark_report(results, shape=None, title='Fleet benchmark', tco=None):
    """The Markdown report of a run's results (a list of vllm_benchmark results with model, url, via, nodes,
    concurrency)."""
    shape = dict(shape or {})
    lines = ['# %s' % title, '']
    if shape:
        lines += ['Request shape: about %s prompt tokens, %s output tokens, %s, %s s per level.'
                  % (shape.get('prompt_tokens'), shape.get('max_tokens'),
                     'streaming' if shape.get('stream', True) else 'not streaming', shape.get('duration_s')), '']
    lines += ['| model | through | clients | requests | errors | req/s | tokens/s | TTFT p50 ms | TTFT p99 ms | '
              'ITL p99 ms | e2e p50 ms | e2e p99 ms | over SLO |',
              '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |']
    lines += [_row(r) for r in sorted(results, key=lambda r: (r['model'], r['url'], r['concurrency']))]
    holds = _holds(results)
    if holds:
        lines += ['', '## What this fleet holds', ''] + holds
    if tco:
        lines += _cost_section(tco)
    return '\n'.join(lines) + '\n'


def _ratio(after, before):
    return None if not before or after is None else after / before


def benchmark_compare(before, after):
    """Per (model, url, concurrency) in both files: throughput and P99 before, after and their ratio."""
    for name, doc in (('before', before), ('after', after)):
        if not isinstance(doc, dict) or doc.get('version') != VERSION or not isinstance(doc.get('results'), list):
            raise BenchmarkError('benchmark_compare: the %s file is not a benchmark result of version %d. Fix: give '
                                 'two results.json files that playbooks/benchmark.yml wrote' % (name, VERSION))
    index = dict(((r['model'], r['url'], r['concurrency']), r) for r in before['results'])
    rows, only = [], []
    for result in after['results']:
        key = (result['model'], result['url'], result['concurrency'])
        old = index.pop(key, None)
        if old is None:
            only.append('after only: %s at %s, %d clients' % key)
            continue
        rows.append({
            'model': key[0], 'url': key[1], 'concurrency': key[2],
            'throughput_rps': [old['throughput_rps'], result['throughput_rps'],
                               _ratio(result['throughput_rps'], old['throughput_rps'])],
            'e2e_p99_ms': [old['e2e_ms']['p99'], result['e2e_ms']['p99'],
                           _ratio(result['e2e_ms']['p99'], old['e2e_ms']['p99'])],
            'errors': [old['errors'], result['errors']],
        })
    only += ['before only: %s at %s, %d clients' % key for key in sorted(index)]
    lines = ['# Benchmark comparison', '',
             'Before: %s. After: %s.' % (before.get('started', '?'), after.get('started', '?')), '',
             '| model | target | clients | req/s before | req/s after | ratio | e2e p99 ms before | after | ratio | '
             'errors before | after |',
             '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |']
    for row in sorted(rows, key=lambda r: (r['model'], r['url'], r['concurrency'])):
        t, p = row['throughput_rps'], row['e2e_p99_ms']
        lines.append('| %s | %s | %d | %s | %s | %s | %s | %s | %s | %d | %d |' % (
            row['model'], row['url'], row['concurrency'], _fmt(t[0], 2), _fmt(t[1], 2), _fmt(t[2], 2),
            _fmt(p[0]), _fmt(p[1]), _fmt(p[2], 2), row['errors'][0], row['errors'][1]))
    if only:
        lines += [''] + ['- %s' % line for line in only]
    return {'rows': rows, 'unmatched': only, 'markdown': '\n'.join(lines) + '\n'}
