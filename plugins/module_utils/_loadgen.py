# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""The benchmark's load: concurrent clients sending completions to an OpenAI-compatible endpoint, and its figures.

run_load() is a closed loop: `concurrency` threads, each with its own keep-alive connection (TLS 1.3 with a
client certificate for https), send one completion after another until the duration is over (requests already
sent finish and count) or `requests` are done. With streaming, each sample has the time to the first token and
the gaps between tokens (server-sent events; vLLM's usage chunk gives the token count). summarize() turns the
samples into the report's figures; it is pure, as are percentile() and the SSE parsing.

Only the standard library, so that the module runs on any controller or load host.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import math
import ssl
import threading
import time

try:
    import http.client as http_client
except ImportError:  # pragma: no cover
    import httplib as http_client  # noqa: F401


def percentile(values, q):
    """The q-th percentile (0-100) with linear interpolation between ranks (numpy's default); None when empty."""
    values = sorted(values)
    if not values:
        return None
    rank = (len(values) - 1) * q / 100.0
    low, high = int(math.floor(rank)), int(math.ceil(rank))
    return values[low] + (values[high] - values[low]) * (rank - low)


def sse_events(lines):
    """The JSON payloads of server-sent `data:` lines, up to [DONE]; other lines (comments, blanks) skipped."""
    for raw in lines:
        line = raw.decode('utf-8', 'replace').strip() if isinstance(raw, bytes) else raw.strip()
        if not line.startswith('data:'):
            continue
        data = line[5:].strip()
        if data == '[DONE]':
            return
        yield json.loads(data)


def _stream_sample(lines, start, clock):
    """Read a streamed completion: token arrival times and vLLM's final usage."""
    token_times, usage, error = [], None, None
    for event in sse_events(lines):
        now = clock()
        if event.get('error') or event.get('object') == 'error':
            error = str(event.get('error') or event.get('message'))[:200]
            break
        for choice in event.get('choices') or []:
            if choice.get('text'):
                token_times.append(now)
        if event.get('usage'):
            usage = event['usage']
    return token_times, usage, error


def request_body(model, prompt, max_tokens, stream, ignore_eos=True):
    body = {'model': model, 'prompt': prompt, 'max_tokens': max_tokens, 'temperature': 0, 'stream': stream,
            'ignore_eos': ignore_eos}
    if stream:
        body['stream_options'] = {'include_usage': True}
    return json.dumps(body)


def prompt_of(tokens, number=None):
    """A prompt of about `tokens` tokens (one short word is about one token for Llama-style tokenizers).

    With a request number, the prompt starts with it: no two requests share a prefix, so vLLM's prefix cache cannot
    serve one from another's KV cache blocks.
    """
    words = ('the', 'fleet', 'serves', 'one', 'model', 'on', 'each', 'node')
    prompt = [words[i % len(words)] for i in range(max(1, int(tokens)))]
    if number is not None:
        prompt[0] = str(number)
    return ' '.join(prompt)


class Target(object):
    """Where the load goes: scheme, host, port, path, TLS files, API key."""

    def __init__(self, scheme, host, port, path='/v1/completions', ca_file=None, cert_file=None, key_file=None,
                 api_key=None, timeout=120.0):
        self.scheme, self.host, self.port, self.path = scheme, host, int(port), path
        self.api_key, self.timeout = api_key, timeout
        self.context = None
        if scheme == 'https':
            self.context = ssl.create_default_context(cafile=ca_file)
            self.context.minimum_version = ssl.TLSVersion.TLSv1_3
            # The edge's certificate names the node's addresses; the lab and tests reach it by address.
            if cert_file:
                self.context.load_cert_chain(cert_file, key_file)

    def connect(self):
        if self.context is not None:
            return http_client.HTTPSConnection(self.host, self.port, context=self.context, timeout=self.timeout)
        return http_client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def headers(self):
        headers = {'Content-Type': 'application/json'}
        if self.api_key:
            headers['Authorization'] = 'Bearer ' + self.api_key
        return headers


def one_request(conn, target, body, stream, clock=time.monotonic):
    """Send one completion on conn; the sample: ok, status, start, end, ttft, itl (list), tokens, error."""
    start = clock()
    sample = {'ok': False, 'status': 0, 'start': start, 'end': start, 'ttft': None, 'itl': [], 'tokens': 0,
              'error': None}
    conn.request('POST', target.path, body, target.headers())
    response = conn.getresponse()
    sample['status'] = response.status
    if response.status != 200:
        sample['error'] = 'HTTP %d: %s' % (response.status, response.read()[:200].decode('utf-8', 'replace'))
        sample['end'] = clock()
        return sample
    if stream:
        token_times, usage, error = _stream_sample(iter(response.readline, b''), start, clock)
        response.read()
        sample['end'] = clock()
        if token_times:
            sample['ttft'] = token_times[0] - start
            sample['itl'] = [b - a for a, b in zip(token_times, token_times[1:])]
        sample['tokens'] = (usage or {}).get('completion_tokens', len(token_times))
        sample['error'] = error
        sample['ok'] = error is None and bool(token_times)
    else:
        data = json.loads(response.read())
        sample['end'] = clock()
        sample['ttft'] = sample['end'] - start
        sample['tokens'] = (data.get('usage') or {}).get('completion_tokens', 0)
        sample['error'] = str(data['error'])[:200] if data.get('error') else None
        sample['ok'] = sample['error'] is None
    return sample


def run_load(target, body, stream, concurrency, duration_s=None, requests=None, clock=time.monotonic):
    """Closed loop; returns (samples, wall seconds). Stops at the duration or after `requests` were sent.

    body: the request's JSON, or a function of the request's number (1, 2, ...) that returns it.
    """
    lock = threading.Lock()
    state = {'sent': 0}
    samples = []
    started = clock()
    deadline = started + duration_s if duration_s else None

    def take():
        with lock:
            if requests is not None and state['sent'] >= requests:
                return None
            if deadline is not None and clock() >= deadline:
                return None
            state['sent'] += 1
            return state['sent']

    def worker():
        conn = None
        while True:
            number = take()
            if number is None:
                break
            if conn is None:
                conn = target.connect()
            try:
                sample = one_request(conn, target, body(number) if callable(body) else body, stream, clock)
            except Exception as e:  # a refused or dropped connection is an error sample, not the end of the run
                now = clock()
                sample = {'ok': False, 'status': 0, 'start': now, 'end': now, 'ttft': None, 'itl': [], 'tokens': 0,
                          'error': '%s: %s' % (type(e).__name__, e)}
                conn.close()
                conn = None
            with lock:
                samples.append(sample)
        if conn is not None:
            conn.close()

    threads = [threading.Thread(target=worker) for _index in range(concurrency)]
    for thread in threads:
        thread.daemon = True
        thread.start()
    for thread in threads:
        thread.join()
    return samples, clock() - started


def _ms(value):
    return None if value is None else round(value * 1000.0, 2)


def summarize(samples, wall_s, slo_p99_s=None):
    """The figures of one load: requests, errors, throughput, TTFT/ITL/e2e p50 and p99 (ms), share over the SLO."""
    good = [s for s in samples if s['ok']]
    e2e = [s['end'] - s['start'] for s in good]
    ttft = [s['ttft'] for s in good if s['ttft'] is not None]
    itl = [gap for s in good for gap in s['itl']]
    tokens = sum(s['tokens'] for s in good)
    errors = {}
    for sample in samples:
        if not sample['ok']:
            key = sample['error'] or 'HTTP %d' % sample['status']
            errors[key] = errors.get(key, 0) + 1
    over = sum(1 for value in e2e if slo_p99_s is not None and value > slo_p99_s)
    return {
        'requests': len(samples),
        'succeeded': len(good),
        'errors': len(samples) - len(good),
        'error_kinds': dict(sorted(errors.items(), key=lambda item: -item[1])[:5]),
        'wall_s': round(wall_s, 3),
        'throughput_rps': round(len(good) / wall_s, 3) if wall_s > 0 else 0.0,
        'tokens_per_s': round(tokens / wall_s, 2) if wall_s > 0 else 0.0,
        'completion_tokens': tokens,
        'ttft_ms': {'p50': _ms(percentile(ttft, 50)), 'p99': _ms(percentile(ttft, 99))},
        'itl_ms': {'p50': _ms(percentile(itl, 50)), 'p99': _ms(percentile(itl, 99))},
        'e2e_ms': {'p50': _ms(percentile(e2e, 50)), 'p99': _ms(percentile(e2e, 99))},
        'slo_p99_ms': _ms(slo_p99_s),
        'over_slo_share': round(over / float(len(good)), 4) if good and slo_p99_s is not None else None,
        'slo_met': (percentile(e2e, 99) <= slo_p99_s) if e2e and slo_p99_s is not None else None,
    }


# What the sampler keeps of an instance's /metrics: the peak of gauges, the increase of counters.
SAMPLED_PEAKS = {'kv_cache_peak': 'vllm:kv_cache_usage_perc', 'running_peak': 'vllm:num_requests_running',
                 'waiting_peak': 'vllm:num_requests_waiting'}
SAMPLED_COUNTERS = {'preemptions': 'vllm:num_preemptions_total'}


def metric_value(text, name):
    """The sum over label sets of one metric in a Prometheus text exposition, or None when it is absent."""
    total, found = 0.0, False
    for line in (text or '').splitlines():
        if not line.startswith(name) or line[len(name):len(name) + 1] not in ('{', ' '):
            continue
        try:
            total += float(line.rsplit(None, 1)[-1])
        except ValueError:
            continue
        found = True
    return total if found else None


class MetricsSampler(object):
    """Reads an instance's /metrics (through the edge with the load's TLS files) every interval while a load runs.

    summary(): kv_cache_peak, running_peak, waiting_peak (highest seen), preemptions (increase), samples, errors.
    """

    def __init__(self, target, interval_s=0.5):
        self.target, self.interval_s = target, interval_s
        self.texts, self.errors = [], 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self._thread.daemon = True

    def read(self):
        conn = self.target.connect()
        try:
            conn.request('GET', self.target.path, headers=self.target.headers())
            response = conn.getresponse()
            text = response.read().decode('utf-8', 'replace')
            if response.status != 200:
                raise IOError('HTTP %d' % response.status)
            return text
        finally:
            conn.close()

    def _sample(self):
        try:
            self.texts.append(self.read())
        except Exception:  # a missed sample is counted, never fatal to the load
            self.errors += 1

    def _run(self):
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval_s)

    def __enter__(self):
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()
        return False

    def summary(self):
        result = {'samples': len(self.texts), 'errors': self.errors}
        for key, name in SAMPLED_PEAKS.items():
            values = [v for v in (metric_value(t, name) for t in self.texts) if v is not None]
            result[key] = max(values) if values else None
        for key, name in SAMPLED_COUNTERS.items():
            values = [v for v in (metric_value(t, name) for t in self.texts) if v is not None]
            # A restart resets a counter: only the steps up count.
            result[key] = sum(max(0.0, b - a) for a, b in zip(values, values[1:])) if len(values) > 1 else None
        return result
