# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The benchmark's arithmetic and its reading of vLLM's stream; the load itself runs against the lab's real vLLM
in tests/fleet/test_capacity.py (the benchmark playbook)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._loadgen import (
    MetricsSampler, Target, _stream_sample, metric_value, percentile, prompt_of, request_body, run_load, sse_events,
    summarize)

# vLLM 0.32's streamed completion with stream_options.include_usage: one chunk per token, then the usage chunk.
STREAM = [
    b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"tiny","choices":[{"index":0,"text":" the",'
    b'"logprobs":null,"finish_reason":null}],"usage":null}\n', b'\n',
    b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"tiny","choices":[{"index":0,"text":" fleet",'
    b'"logprobs":null,"finish_reason":"length"}],"usage":null}\n', b'\n',
    b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"tiny","choices":[],'
    b'"usage":{"prompt_tokens":9,"total_tokens":11,"completion_tokens":2}}\n', b'\n',
    b'data: [DONE]\n', b'\n',
]


def test_percentiles_interpolate_like_numpy():
    assert percentile([], 50) is None
    assert percentile([3.0], 99) == 3.0
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile(list(range(1, 101)), 99) == pytest.approx(99.01)


def test_the_stream_gives_token_times_and_usage():
    times = iter([1.10, 1.25, 1.30])
    token_times, usage, error = _stream_sample(STREAM, 1.0, lambda: next(times))
    assert token_times == [1.10, 1.25] and usage['completion_tokens'] == 2 and error is None
    assert [e.get('usage') for e in sse_events([b': keep-alive\n'] + STREAM)][-1]['completion_tokens'] == 2


def test_an_error_event_ends_the_sample():
    lines = [b'data: {"error": {"message": "engine dead", "code": 500}}\n', b'data: [DONE]\n']
    _times, _usage, error = _stream_sample(lines, 0.0, lambda: 0.5)
    assert 'engine dead' in error


def test_the_request_asks_for_exact_lengths_and_usage():
    body = json.loads(request_body('tiny', prompt_of(5), 16, True))
    assert body['prompt'] == 'the fleet serves one model' and body['max_tokens'] == 16 and body['ignore_eos']
    assert body['stream_options'] == {'include_usage': True}
    assert 'stream_options' not in json.loads(request_body('tiny', 'x', 16, False))


def sample(start, ttft, gaps, ok=True, tokens=None, status=200, error=None):
    end = start + ttft + sum(gaps)
    return {'ok': ok, 'status': status, 'start': start, 'end': end, 'ttft': ttft, 'itl': list(gaps),
            'tokens': len(gaps) + 1 if tokens is None else tokens, 'error': error}


def test_summary_of_a_load():
    samples = [sample(0.0, 0.05, [0.01] * 3), sample(0.1, 0.07, [0.02] * 3), sample(0.2, 0.30, [0.01] * 3),
               sample(0.3, 0.0, [], ok=False, tokens=0, status=503, error='HTTP 503: draining')]
    result = summarize(samples, 2.0, slo_p99_s=0.2)
    assert result['requests'] == 4 and result['succeeded'] == 3 and result['errors'] == 1
    assert result['error_kinds'] == {'HTTP 503: draining': 1}
    assert result['throughput_rps'] == 1.5 and result['tokens_per_s'] == 6.0 and result['completion_tokens'] == 12
    assert result['ttft_ms']['p50'] == 70.0
    assert result['e2e_ms']['p50'] == pytest.approx(130.0)
    assert result['e2e_ms']['p99'] == pytest.approx(326.0)  # 130 + 0.98 * (330 - 130)
    assert result['itl_ms']['p50'] == 10.0
    assert result['over_slo_share'] == pytest.approx(1 / 3, abs=1e-4) and result['slo_met'] is False
    assert summarize(samples, 2.0)['over_slo_share'] is None


def test_an_empty_load_has_no_latencies():
    result = summarize([], 1.0, 0.2)
    assert result['requests'] == 0 and result['throughput_rps'] == 0 and result['e2e_ms'] == {'p50': None, 'p99': None}
    assert result['slo_met'] is None


METRICS = """# HELP vllm:kv_cache_usage_perc KV-cache usage.
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} %s
vllm:num_requests_running{engine="0",model_name="tiny"} %s
vllm:num_requests_waiting{engine="0",model_name="tiny"} 0.0
vllm:num_preemptions_total{engine="0",model_name="tiny"} %s
vllm:num_preemptions_created{engine="0",model_name="tiny"} 99.0
"""


def test_a_metric_is_summed_over_its_label_sets_and_not_confused_with_longer_names():
    text = METRICS % (0.25, 3, 7) + 'vllm:num_preemptions_total{engine="1",model_name="tiny"} 2.0\n'
    assert metric_value(text, 'vllm:num_preemptions_total') == 9.0
    assert metric_value(text, 'vllm:kv_cache_usage_perc') == 0.25
    assert metric_value(text, 'vllm:gpu_cache_usage_perc') is None


def test_distinct_prompts_start_with_the_request_number():
    assert prompt_of(4) == 'the fleet serves one'
    assert prompt_of(4, 12) == '12 fleet serves one' and prompt_of(1, 3) == '3'


class FakeVllm(BaseHTTPRequestHandler):
    """/metrics whose KV-cache use and preemptions step up with each read (a restart resets preemptions once);
    /v1/completions answers non-streamed and keeps every prompt."""

    reads, prompts = [], []
    SERIES = [(0.1, 0, 0), (0.6, 4, 3), (0.9, 8, 5), (0.3, 2, 1), (0.2, 1, 2)]

    def log_message(self, *args):
        pass

    def do_GET(self):
        kv, running, preempted = self.SERIES[min(len(self.reads), len(self.SERIES) - 1)]
        self.reads.append(self.path)
        self._answer(METRICS % (kv, running, preempted), 'text/plain')

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers['Content-Length'])))
        self.prompts.append(body['prompt'])
        self._answer(json.dumps({'choices': [{'text': 'x'}], 'usage': {'completion_tokens': body['max_tokens']}}),
                     'application/json')

    def _answer(self, text, kind):
        data = text.encode()
        self.send_response(200)
        self.send_header('Content-Type', kind)
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def fake_vllm():
    FakeVllm.reads, FakeVllm.prompts = [], []
    server = ThreadingHTTPServer(('127.0.0.1', 0), FakeVllm)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_the_sampler_keeps_the_peaks_and_the_counters_steps_up_while_a_load_runs(fake_vllm):
    metrics = Target('http', '127.0.0.1', fake_vllm, '/metrics')
    completions = Target('http', '127.0.0.1', fake_vllm, '/v1/completions')
    with MetricsSampler(metrics, interval_s=0.01) as sampler:
        samples, _wall = run_load(completions, lambda n: request_body('tiny', prompt_of(4, n), 2, False), False,
                                  concurrency=2, requests=6)
        while len(FakeVllm.reads) < 5:
            sampler._stop.wait(0.01)
    summary = sampler.summary()
    assert (summary['kv_cache_peak'], summary['running_peak'], summary['waiting_peak']) == (0.9, 8.0, 0.0)
    # 0 -> 3 -> 5, a reset to 1, then 2: 5 + 1 preemptions, never a negative step.
    assert summary['preemptions'] == 6.0 and summary['errors'] == 0 and summary['samples'] >= 5
    assert len(samples) == 6 and all(s['ok'] for s in samples)
    assert sorted(p.split()[0] for p in FakeVllm.prompts) == ['1', '2', '3', '4', '5', '6']
