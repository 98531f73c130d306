#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
module: autotune_plot
short_description: Draw a batch-size tuning's trials as a PNG
version_added: 0.1.0
description:
  - "Two panels against the batch size (C(max_num_seqs)): throughput and end-to-end P99 of each trial, with the SLO
    marked; the KV cache's peak use, with the memory limit marked. Failed trials (out of memory, a dead engine, a
    failed load) are crosses at their value; the value kept is a vertical line."
  - Writes O(path) where it runs (the controller, with C(delegate_to)); in check mode it writes nothing.
author:
  - llmops.vllm maintainers (@llmops)
extends_documentation_fragment:
  - llmops.vllm.attributes
  - llmops.vllm.attributes.modify_module
requirements:
  - matplotlib
options:
  path:
    description: The PNG to write.
    type: path
    required: true
  trials:
    description: The trials, as M(llmops.vllm.vllm_autotune) returns them.
    type: list
    elements: dict
    required: true
  chosen:
    description: The value kept.
    type: int
  memory_limit:
    description: The policy's limit on the KV cache's use (0-1).
    type: float
    default: 0.7
  slo_p99_s:
    description: The P99 target in seconds.
    type: float
  title:
    description: The figure's title.
    type: str
    default: Batch-size tuning
'''

EXAMPLES = r'''
- name: Draw the trials
  llmops.vllm.autotune_plot:
    path: reports/autotune/plot.png
    trials: "{{ __autotune.trials }}"
    chosen: "{{ __autotune.chosen }}"
    slo_p99_s: 2.0
    title: node1 / llama (max_num_seqs)
  delegate_to: localhost
'''

RETURN = r'''
path:
  description: The PNG written.
  returned: always
  type: str
'''

import io  # noqa: E402
import os  # noqa: E402
import traceback  # noqa: E402

from ansible.module_utils.basic import AnsibleModule, missing_required_lib  # noqa: E402

MATPLOTLIB_IMPORT_ERROR = None
try:
    import matplotlib
    matplotlib.use('Agg')
    from matplotlib import pyplot
except ImportError:
    MATPLOTLIB_IMPORT_ERROR = traceback.format_exc()

FAILED = ('oom', 'engine_died', 'error')


def render(trials, chosen, memory_limit, slo_p99_s, title):
    """The PNG's bytes."""
    ok = sorted((t for t in trials if t.get('status') == 'ok'), key=lambda t: t['value'])
    failed = [t for t in trials if t.get('status') in FAILED]
    figure, (top, bottom) = pyplot.subplots(2, 1, sharex=True, figsize=(8, 6), dpi=100,
                                            gridspec_kw={'height_ratios': [2, 1]})
    figure.suptitle(title)
    top.plot([t['value'] for t in ok], [t['throughput_rps'] for t in ok], 'o-', color='tab:blue',
             label='throughput (req/s)')
    top.set_ylabel('requests/s', color='tab:blue')
    latency = top.twinx()
    latency.plot([t['value'] for t in ok if t.get('p99_s') is not None],
                 [t['p99_s'] for t in ok if t.get('p99_s') is not None], 's--', color='tab:red', label='P99 (s)')
    latency.set_ylabel('end-to-end P99 (s)', color='tab:red')
    if slo_p99_s is not None:
        latency.axhline(slo_p99_s, color='tab:red', linestyle=':', label='SLO %.3g s' % slo_p99_s)
    for trial in failed:
        top.plot([trial['value']], [0], 'x', color='black', markersize=10)
        top.annotate(trial['status'], (trial['value'], 0), textcoords='offset points', xytext=(4, 6), fontsize=8)
    bottom.plot([t['value'] for t in ok if t.get('memory_ratio') is not None],
                [t['memory_ratio'] for t in ok if t.get('memory_ratio') is not None], 'o-', color='tab:green',
                label='KV cache peak')
    bottom.axhline(memory_limit, color='tab:green', linestyle=':', label='memory limit %.0f %%' % (memory_limit * 100))
    bottom.set_ylim(0, 1.05)
    bottom.set_ylabel('KV cache use')
    bottom.set_xlabel('max_num_seqs')
    if chosen is not None:
        for axis in (top, bottom):
            axis.axvline(chosen, color='grey', linestyle='-', alpha=0.6)
        top.annotate('kept: %d' % chosen, (chosen, 0), xycoords=('data', 'axes fraction'),
                     textcoords='offset points', xytext=(4, 4), fontsize=9)
    handles = top.get_legend_handles_labels()
    more = latency.get_legend_handles_labels()
    top.legend(handles[0] + more[0], handles[1] + more[1], loc='upper left', fontsize=8)
    bottom.legend(loc='upper left', fontsize=8)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format='png', metadata={'Software': None})
    pyplot.close(figure)
    return buffer.getvalue()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type='path', required=True),
            trials=dict(type='list', elements='dict', required=True),
            chosen=dict(type='int'),
            memory_limit=dict(type='float', default=0.7),
            slo_p99_s=dict(type='float'),
            title=dict(type='str', default='Batch-size tuning'),
        ),
        supports_check_mode=True,
    )
    if MATPLOTLIB_IMPORT_ERROR:
        module.fail_json(msg=missing_required_lib('matplotlib'), exception=MATPLOTLIB_IMPORT_ERROR)
    p = module.params
    data = render(p['trials'], p['chosen'], p['memory_limit'], p['slo_p99_s'], p['title'])
    old = None
    if os.path.exists(p['path']):
        with open(p['path'], 'rb') as f:
            old = f.read()
    changed = old != data
    if changed and not module.check_mode:
        with open(p['path'], 'wb') as f:
            f.write(data)
    module.exit_json(changed=changed, path=p['path'])


if __name__ == '__main__':
    main()
