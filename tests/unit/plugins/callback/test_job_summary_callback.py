# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The callback llmops.vllm.job_summary in a real ansible-playbook run on this machine: what changed, what failed
and was rescued, what was refused and why, what each instance computes in and the reports named by set_stats, after
the recap."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

REPO = pathlib.Path(__file__).resolve().parents[4]
BIN = pathlib.Path(sys.executable).parent

PLAY = textwrap.dedent('''\
    - name: A run with something of everything
      hosts: one,two
      connection: local
      gather_facts: false
      tasks:
        - name: Change something
          ansible.builtin.copy:
            content: changed
            dest: "{{ playbook_dir }}/{{ inventory_hostname }}.txt"
            mode: "0644"
          when: inventory_hostname == 'one'

        - name: Name a report
          ansible.builtin.set_stats:
            data:
              llmops_reports: ["{{ playbook_dir }}/reports/{{ inventory_hostname }}"]

        - name: Name what an instance computes in (playbooks/summary.yml)
          ansible.builtin.set_stats:
            data:
              llmops_serving: ["tiny computes in fp8 weight-only (W8A16) (GPUs are compute capability 8.0)"]
            per_host: true
          when: inventory_hostname == 'one'

        - name: Fail and be rescued
          block:
            - name: Try the canary
              ansible.builtin.fail:
                msg: the canary did not start
              when: inventory_hostname == 'one'
          rescue:
            - name: Put it back
              ansible.builtin.debug:
                msg: put back

        - name: Include a role in a loop (its result reaches the callback as an include_role task)
          ansible.builtin.include_role:
            name: "{{ item }}"
          loop: [quiet]

        - name: Ignore a failure
          ansible.builtin.fail:
            msg: not worth a line
          ignore_errors: true

        - name: Refuse the instance
          ansible.builtin.assert:
            that: inventory_hostname == 'one'
            fail_msg: "host {{ inventory_hostname }}, instance tiny: max_model_len 9999 is over the model's 2048.
              Fix: lower max_model_len"
            quiet: true
    ''')


def _run(tmp_path, *args, **env_vars):
    (tmp_path / 'play.yml').write_text(PLAY)
    (tmp_path / 'roles' / 'quiet' / 'tasks').mkdir(parents=True)
    (tmp_path / 'roles' / 'quiet' / 'tasks' / 'main.yml').write_text('- ansible.builtin.meta: noop\n')
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / 'ansible.cfg'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_COLLECTIONS_PATH=str(REPO / 'collections'), ANSIBLE_CALLBACKS_ENABLED='llmops.vllm.job_summary',
               **env_vars)
    result = subprocess.run([str(BIN / 'ansible-playbook'), '-i', 'one,two,', str(tmp_path / 'play.yml'),
                             '-e', 'ansible_python_interpreter=%s' % sys.executable, *args],
                            cwd=REPO, env=env, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    assert result.returncode == 2, result.stdout + result.stderr
    assert 'Callback dispatch' not in result.stderr, result.stderr
    out = result.stdout
    if env_vars:
        return out
    assert out.index('PLAY RECAP') < out.index('JOB SUMMARY'), out
    return out[out.index('JOB SUMMARY'):].splitlines()


def test_the_summary_says_what_changed_what_was_refused_and_where_the_reports_went(tmp_path):
    summary = _run(tmp_path)
    assert summary[:3] == ['JOB SUMMARY', 'What changed:', '  one: 1 task(s): Change something']
    assert summary[3] == '  two: nothing'
    assert summary[4:6] == ['Refused or failed:', "  two: Refuse the instance: host two, instance tiny: max_model_len "
                            "9999 is over the model's 2048. Fix: lower max_model_len"]
    assert summary[6:8] == ['Failed, then handled by the playbook:', '  one: Try the canary: the canary did not start']
    assert summary[8:10] == ['Serving:', '  one: tiny computes in fp8 weight-only (W8A16) (GPUs are compute '
                             'capability 8.0)']
    assert summary[10] == 'Reports: %s/reports/one, %s/reports/two' % (tmp_path, tmp_path)
    assert 'not worth a line' not in '\n'.join(summary)


def test_in_check_mode_it_says_what_would_change(tmp_path):
    summary = _run(tmp_path, '--check')
    assert summary[1:3] == ['What would change (check mode):', '  one: 1 task(s): Change something']


def test_it_keeps_out_of_json_output(tmp_path):
    """A program reads the json callbacks' output: the summary would break it."""
    out = _run(tmp_path, ANSIBLE_STDOUT_CALLBACK='ansible.posix.json')
    assert 'JOB SUMMARY' not in out and json.loads(out[out.index('{'):])['stats']['one']['changed'] == 1
