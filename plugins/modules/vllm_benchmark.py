#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
module: vllm_benchmark
short_description: Drive a completion load at a vLLM endpoint and measure throughput and latencies
version_added: 0.1.0
description:
  - A closed loop of O(concurrency) clients, each with its own keep-alive connection, sends completions of a fixed
    shape (about O(prompt_tokens) prompt tokens, exactly O(max_tokens) output tokens) to O(url) for O(duration_s)
    seconds, or until O(requests) were sent. Requests already sent when the time is up finish and count.
  - With O(stream), the time to the first token (TTFT) and the gaps between tokens (ITL) are measured from the
    server-sent events; without, TTFT is the whole answer.
  - HTTPS is TLS 1.3 only, with a client certificate for the edge's mTLS, and an optional API key.
  - Runs where it is executed; run it on the controller or a load host with C(delegate_to). Changes nothing on any
    host; in check mode it sends no load and returns no figures.
author:
  - llmops.vllm maintainers (@llmops)
extends_documentation_fragment:
  - llmops.vllm.attributes
attributes:
  check_mode:
    support: partial
    details: In check mode no load is sent (C(skipped) is true).
  diff_mode:
    support: N/A
    details: This action does not modify state.
options:
  url:
    description: The endpoint, C(https://<node or VIP>:<port>/v1/completions) (the edge), or C(http://...) for an
      instance's loopback.
    type: str
    required: true
  model:
    description: The served model name the requests ask for.
    type: str
    required: true
  concurrency:
    description: Clients sending at the same time.
    type: int
    default: 1
  duration_s:
    description: Seconds the load lasts.
    type: float
    default: 30
  requests:
    description: At most this many requests; the load stops at whichever of the two comes first.
    type: int
  prompt_tokens:
    description: About this many prompt tokens (one short word each).
    type: int
    default: 64
  max_tokens:
    description: Output tokens of each completion (vLLM's C(ignore_eos) makes it exact).
    type: int
    default: 32
  stream:
    description: Stream the answers, to measure TTFT and ITL.
    type: bool
    default: true
  slo_p99_s:
    description: The end-to-end P99 target in seconds; the result says the share of requests over it.
    type: float
  ca_file:
    description: The fleet CA that signed the edge's certificate.
    type: path
  cert_file:
    description: The client certificate the edge's mTLS asks for.
    type: path
  key_file:
    description: Its key.
    type: path
  api_key:
    description: A bearer API key, when the edge asks for one.
    type: str
  timeout_s:
    description: Seconds one request may take before it counts as an error.
    type: float
    default: 120
  distinct_prompts:
    description:
      - Start each request's prompt with its number, so that no two share a prefix and vLLM's prefix cache cannot
        serve one from another's KV cache; every request takes its own KV cache blocks, as distinct users' prompts do.
      - Off, every request sends the same prompt (the fleet benchmark's figures in docs/capacity.md).
    type: bool
    default: false
  metrics_url:
    description:
      - An instance's C(/metrics), through its edge (C(metrics_url) of the node summary) with the same TLS files, or
        its loopback. While the load runs it is read every O(metrics_interval_s), and RV(metrics) says the peak of the
        KV cache's use, of running and of waiting requests, and how many preemptions the load caused.
    type: str
  metrics_interval_s:
    description: Seconds between two reads of O(metrics_url).
    type: float
    default: 0.5
notes:
  - One thread per client; a thousand clients need a controller with a thousand file descriptors to spare.
seealso:
  - name: vllm bench serve
    description: vLLM's own load generator, which has no client certificate option for an mTLS edge.
    link: https://docs.vllm.ai/en/latest/cli/bench/serve.html
'''

EXAMPLES = r'''
- name: Sixty seconds of 10 streaming clients through the VIP
  llmops.vllm.vllm_benchmark:
    url: https://10.0.0.100:8000/v1/completions
    model: llama-3.1-70b-instruct
    concurrency: 10
    duration_s: 60
    slo_p99_s: 0.2
    ca_file: "{{ pki_dir }}/ca.crt"
    cert_file: "{{ pki_dir }}/clients/benchmark.crt"
    key_file: "{{ pki_dir }}/clients/benchmark.key"
  delegate_to: localhost
  register: __benchmark
'''

RETURN = r'''
skipped:
  description: True in check mode, when no load was sent.
  returned: always
  type: bool
requests:
  description: Requests sent.
  returned: success
  type: int
  sample: 412
succeeded:
  description: Requests answered 200 with their tokens.
  returned: success
  type: int
  sample: 410
errors:
  description: Requests that failed (HTTP status, error event, connection).
  returned: success
  type: int
  sample: 2
error_kinds:
  description: The five most frequent errors and how many of each.
  returned: success
  type: dict
  sample: {"HTTP 503: ...": 2}
wall_s:
  description: Seconds from the first request to the last answer.
  returned: success
  type: float
throughput_rps:
  description: Successful requests per second.
  returned: success
  type: float
  sample: 13.7
tokens_per_s:
  description: Output tokens per second.
  returned: success
  type: float
completion_tokens:
  description: Output tokens of the successful requests.
  returned: success
  type: int
ttft_ms:
  description: Time to the first token, C(p50) and C(p99), in milliseconds.
  returned: success
  type: dict
itl_ms:
  description: Gaps between tokens, C(p50) and C(p99), in milliseconds (streaming only).
  returned: success
  type: dict
e2e_ms:
  description: End-to-end latency, C(p50) and C(p99), in milliseconds.
  returned: success
  type: dict
slo_p99_ms:
  description: The P99 target in milliseconds, or null.
  returned: success
  type: float
over_slo_share:
  description: Share of the successful requests slower than the target, or null without one.
  returned: success
  type: float
slo_met:
  description: Whether the end-to-end P99 is within the target, or null without one.
  returned: success
  type: bool
metrics:
  description: With O(metrics_url), what the instance said under the load; C(null) without it.
  returned: success
  type: dict
  contains:
    kv_cache_peak:
      description: The highest C(vllm:kv_cache_usage_perc) read (0-1).
      type: float
    running_peak:
      description: The most requests running at once (C(vllm:num_requests_running)).
      type: float
    waiting_peak:
      description: The most requests waiting (C(vllm:num_requests_waiting)).
      type: float
    preemptions:
      description: The increase of C(vllm:num_preemptions_total) during the load.
      type: float
    samples:
      description: Reads that succeeded.
      type: int
    errors:
      description: Reads that failed.
      type: int
'''

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.six.moves.urllib.parse import urlsplit  # noqa: E402

from ansible_collections.llmops.vllm.plugins.module_utils._loadgen import (  # noqa: E402
    MetricsSampler, Target, prompt_of, request_body, run_load, summarize)

ARGUMENT_SPEC = dict(
    url=dict(type='str', required=True),
    model=dict(type='str', required=True),
    concurrency=dict(type='int', default=1),
    duration_s=dict(type='float', default=30),
    requests=dict(type='int'),
    prompt_tokens=dict(type='int', default=64, no_log=False),
    max_tokens=dict(type='int', default=32, no_log=False),
    stream=dict(type='bool', default=True),
    slo_p99_s=dict(type='float'),
    ca_file=dict(type='path'),
    cert_file=dict(type='path'),
    key_file=dict(type='path'),
    api_key=dict(type='str', no_log=True),
    timeout_s=dict(type='float', default=120),
    distinct_prompts=dict(type='bool', default=False),
    metrics_url=dict(type='str'),
    metrics_interval_s=dict(type='float', default=0.5),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True,
                           required_together=[('cert_file', 'key_file')])
    p = module.params
    for name in ('concurrency', 'prompt_tokens', 'max_tokens'):
        if p[name] < 1:
            module.fail_json(msg='%s is %d. Fix: give 1 or more' % (name, p[name]))
    if p['duration_s'] <= 0 and not p['requests']:
        module.fail_json(msg='duration_s is %s and requests is not set, so the load would never end. Fix: give a '
                             'duration above 0 or a number of requests' % p['duration_s'])
    _parts(module, p['url'], 'url')
    if p['metrics_url']:
        _parts(module, p['metrics_url'], 'metrics_url')
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg='check mode: no load sent')
    target = _target(module, p['url'])
    sampler = None
    if p['metrics_url']:
        sampler = MetricsSampler(_target(module, p['metrics_url'], 'metrics_url'), p['metrics_interval_s'])
    body = request_body(p['model'], prompt_of(p['prompt_tokens']), p['max_tokens'], p['stream'])
    if p['distinct_prompts']:
        def body(number):
            return request_body(p['model'], prompt_of(p['prompt_tokens'], number), p['max_tokens'], p['stream'])
    if sampler is None:
        samples, wall = run_load(target, body, p['stream'], p['concurrency'], p['duration_s'] or None, p['requests'])
    else:
        with sampler:
            samples, wall = run_load(target, body, p['stream'], p['concurrency'], p['duration_s'] or None,
                                     p['requests'])
    result = summarize(samples, wall, p['slo_p99_s'])
    result['metrics'] = sampler.summary() if sampler is not None else None
    module.exit_json(changed=False, skipped=False, **result)


def _parts(module, url, option):
    parts = urlsplit(url)
    if parts.scheme not in ('http', 'https') or not parts.hostname or not parts.path:
        module.fail_json(msg='%s %s is not an http(s) URL with a path. Fix: give the endpoint, e.g. '
                             'https://10.0.0.5:8000/v1/completions' % (option, url))
    return parts


def _target(module, url, option='url'):
    p = module.params
    parts = _parts(module, url, option)
    try:
        return Target(parts.scheme, parts.hostname, parts.port or (443 if parts.scheme == 'https' else 80),
                      parts.path, p['ca_file'], p['cert_file'], p['key_file'], p['api_key'], p['timeout_s'])
    except (IOError, OSError) as e:
        files = (p['ca_file'], p['cert_file'], p['key_file'], e)
        module.fail_json(msg='the TLS files (ca %s, certificate %s, key %s) cannot be read: %s. Fix: give the fleet '
                             'CA and a client certificate of the pki role' % files)


if __name__ == '__main__':
    main()
