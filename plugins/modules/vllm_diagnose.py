#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
module: vllm_diagnose
short_description: Find known vLLM failure signatures in the journal of the vLLM units
version_added: 0.1.0
description:
  - Reads the systemd journal of the given units with C(journalctl -o json) and reports the known failure signatures it
    finds, one finding per unit and signature, each with what it means and what to do.
  - Only the lines that the units' own processes logged count; systemd's lines about a unit quote its command line.
  - "The signatures: V(oom) (out of GPU memory, and the engine's retry with a smaller batch),
    V(cuda_illegal_memory_access) (CUDA error 700), V(xid) (an NVIDIA Xid error), V(nccl_timeout) (a collective timed
    out) and V(engine_died)."
  - Changes nothing on the target. Reading other units' journals needs root or the C(systemd-journal) group; use
    C(become).
author:
  - llmops.vllm maintainers (@llmops)
extends_documentation_fragment:
  - llmops.vllm.attributes
  - llmops.vllm.attributes.info_module
options:
  units:
    description:
      - The systemd units whose journal is read, for example the C(vllm-<instance>.service) units of a node.
      - A name without a type means a service, as for C(journalctl -u).
    type: list
    elements: str
    required: true
  since:
    description:
      - Read the journal from this time on, in any form C(journalctl --since) takes, for example V(-1h) or
        V(2026-12-03 10:00:00).
    type: str
    default: -24h
  journalctl:
    description: Path of the C(journalctl) executable; by default it is looked up on C(PATH).
    type: path
notes:
  - Runs only on Linux targets with systemd's journal.
seealso:
  - name: journalctl(1)
    description: The manual page of journalctl.
    link: https://man7.org/linux/man-pages/man1/journalctl.1.html
'''

EXAMPLES = r'''
- name: Look for known failures of the node's vLLM instances in the last hour
  llmops.vllm.vllm_diagnose:
    units: "{{ llmops_node.instances | map(attribute='unit') | list }}"
    since: -1h
  become: true
  register: __diagnose

- name: Say what was found and what to do
  ansible.builtin.debug:
    msg: "{{ item.unit }}: {{ item.meaning }} ({{ item.count }} lines). Fix: {{ item.fix }}"
  loop: "{{ __diagnose.findings }}"
  loop_control:
    label: "{{ item.unit }} {{ item.signature }}"
'''

RETURN = r'''
findings:
  description: One entry per unit and signature found, in the order they first appear in the journal.
  returned: always
  type: list
  elements: dict
  contains:
    unit:
      description: The unit whose journal holds the lines.
      type: str
      returned: always
      sample: vllm-tiny.service
    signature:
      description: The signature's id.
      type: str
      returned: always
      choices: [oom, cuda_illegal_memory_access, xid, nccl_timeout, engine_died]
      sample: oom
    count:
      description: How many lines of the unit show the signature.
      type: int
      returned: always
      sample: 3
    first:
      description: Time of the first such line, in microseconds since the epoch (the journal's C(__REALTIME_TIMESTAMP)).
      type: int
      returned: always
      sample: 1764756000000000
    last:
      description: Time of the last such line, in microseconds since the epoch.
      type: int
      returned: always
      sample: 1764756060000000
    sample:
      description: The first such line, cut at 500 characters.
      type: str
      returned: always
      sample: OOM detected, retrying with reduced batch size
    meaning:
      description: What the signature means.
      type: str
      returned: always
      sample: the engine ran out of GPU memory (and retried with a smaller batch)
    fix:
      description: What to do about it.
      type: str
      returned: always
      sample: lower the instance's max_num_seqs or max_num_batched_tokens, or its gpu_memory_utilization
lines_scanned:
  description: How many journal lines were read.
  returned: always
  type: int
  sample: 1204
'''

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.llmops.vllm.plugins.module_utils._diagnose import parse_journal, scan  # noqa: E402

ARGUMENT_SPEC = dict(
    units=dict(type='list', elements='str', required=True),
    since=dict(type='str', default='-24h'),
    journalctl=dict(type='path'),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    if not params['units']:
        module.fail_json(msg='units is empty. Fix: name the vLLM units to read, for example vllm-tiny.service')
    journalctl = params['journalctl'] or module.get_bin_path('journalctl')
    if not journalctl:
        module.fail_json(msg='journalctl was not found on PATH. Fix: run this on a host with systemd\'s journal, '
                             'or give its path in the journalctl option')
    units = [unit if '.' in unit else unit + '.service' for unit in params['units']]
    argv = [journalctl, '-o', 'json', '--no-pager', '--since', params['since']]
    for unit in units:
        argv += ['-u', unit]
    rc, out, err = module.run_command(argv)
    if rc != 0:
        module.fail_json(msg='%s failed with rc %d: %s. Fix: check the since option (%s) and that the journal is '
                             'readable (become)' % (' '.join(argv), rc, err.strip(), params['since']))
    records = parse_journal(out)
    module.exit_json(changed=False, findings=scan(records, units), lines_scanned=len(records))


if __name__ == '__main__':
    main()
