#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
module: vllm_autotune
short_description: Decide the next step of an online batch-size tuning from the trials so far
version_added: 0.1.0
description:
  - The decision of C(playbooks/autotune.yml). Given the trials of one canary instance (each a candidate
    C(max_num_seqs) run under the benchmark load), it says which candidate to try next, or that the tuning is over and
    which value to keep.
  - "The policy is the seed's, made safe: linear steps of C(step) while the KV cache stays under
    C(memory_limit) (70 %); on an out-of-memory or a dead engine, a ceiling there, and an exponential back-off
    (32 -> 16) when nothing below was accepted; candidates whose end-to-end P99 breaks C(slo_p99_s) are
    rejected and are a ceiling too; a failed load is tried once more; the search stops when the throughput stops
    improving, after C(max_trials) trials, or when C(time_budget_s) is spent."
  - The value kept is the accepted trial with the highest throughput; with none accepted, the start value (the one the
    instance ran before), so the tuning never leaves the instance worse than it found it.
  - With O(observation), the trial just measured is classified first (ok, oom, engine_died, error) and appended.
  - Pure computation; it runs anywhere (the controller) and changes nothing.
author:
  - llmops.vllm maintainers (@llmops)
extends_documentation_fragment:
  - llmops.vllm.attributes
  - llmops.vllm.attributes.info_module
options:
  trials:
    description: The trials so far, as this module returned them in RV(trials).
    type: list
    elements: dict
    default: []
  settings:
    description:
      - C(start) (required, the value the instance runs now), C(step) (8), C(min_value) (1), C(max_value) (1024),
        C(memory_limit) (0.7), C(slo_p99_s) (none), C(min_gain) (0.02), C(patience) (2), C(retries) (1),
        C(max_trials) (12), C(time_budget_s) (none).
    type: dict
    required: true
  elapsed_s:
    description: Seconds the tuning has run so far; with C(time_budget_s), no trial starts that would overrun it.
    type: float
    default: 0
  observation:
    description:
      - The trial just run, to classify and append before deciding. C(value), the candidate; C(load), the result of
        M(llmops.vllm.vllm_benchmark) (omit it when the instance never became ready); C(observed), C(ready), C(oom),
        C(engine_died), C(kv_cache_peak), C(preemptions), C(rss_peak_bytes), C(gpu_memory_used_ratio);
        C(duration_s).
    type: dict
seealso:
  - module: llmops.vllm.vllm_benchmark
  - name: vLLM's offline grid search
    description: benchmarks/auto_tune.sh, whose choices users report to run out of memory under real load.
    link: https://github.com/vllm-project/vllm/tree/main/benchmarks/auto_tune
'''

EXAMPLES = r'''
- name: Decide the next candidate
  llmops.vllm.vllm_autotune:
    trials: "{{ _trials }}"
    settings:
      start: 8
      step: 8
      slo_p99_s: 2.0
      max_trials: 6
    observation:
      value: 16
      load: "{{ __benchmark }}"
      observed:
        ready: true
        kv_cache_peak: 0.42
        preemptions: 0
      duration_s: 51
  delegate_to: localhost
  register: __autotune
'''

RETURN = r'''
trials:
  description: The trials, the observation's appended, each with C(value), C(status), C(throughput_rps), C(p99_s),
    C(p50_s), C(tokens_per_s), C(errors), C(memory_ratio), C(preemptions), C(rss_peak_bytes),
    C(gpu_memory_used_ratio), C(duration_s) and C(verdict) (why it cannot be chosen, or empty).
  returned: always
  type: list
  elements: dict
next:
  description: C(action) (V(try) or V(stop)), C(value) (the candidate to try, or the value to keep) and C(reason)
    (V(start), V(grow), V(retry), V(back_off); V(plateau), V(ceiling), V(memory_limit), V(max_trials),
    V(time_budget), V(no_safe_value), V(max_value), V(explored)).
  returned: always
  type: dict
done:
  description: Whether the tuning is over.
  returned: always
  type: bool
chosen:
  description: When over, the value to keep; null otherwise.
  returned: always
  type: int
restored:
  description: When over, whether no candidate was accepted and the start value is kept.
  returned: always
  type: bool
'''

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.llmops.vllm.plugins.module_utils._autotune import (  # noqa: E402
    AutotuneError, next_step, settings_of, trial_of, verdict)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            trials=dict(type='list', elements='dict', default=[]),
            settings=dict(type='dict', required=True),
            elapsed_s=dict(type='float', default=0),
            observation=dict(type='dict'),
        ),
        supports_check_mode=True,
    )
    p = module.params
    trials = list(p['trials'])
    try:
        settings = settings_of(p['settings'])
        observation = p['observation']
        if observation:
            trials.append(trial_of(observation.get('value'), observation.get('load'), observation.get('observed'),
                                   observation.get('duration_s')))
        decision = next_step(trials, settings, p['elapsed_s'])
    except AutotuneError as e:
        module.fail_json(msg=str(e))
    for trial in trials:
        trial['verdict'] = verdict(trial, settings)
    done = decision['action'] == 'stop'
    module.exit_json(changed=False, trials=trials, next=decision, done=done,
                     chosen=decision['value'] if done else None, restored=bool(decision.get('restored')))


if __name__ == '__main__':
    main()
