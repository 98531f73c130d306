# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The benchmark's arithmetic and its reading of vLLM's stream; the load itself runs against a real vLLM in
molecule/monitoring (the benchmark playbook)."""

from __future__ import annotations

import json

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._loadgen import (
    _stream_sample, percentile, prompt_of, request_body, sse_events, summarize)

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
