# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.llmops.vllm.plugins.module_utils._job_summary import MAX_TASKS, JobSummary, failure_message


def test_a_failure_says_its_message_else_its_stderr_else_its_failed_items():
    assert failure_message({'msg': 'host a,\n  instance b:  no model.'}) == 'host a, instance b: no model.'
    assert failure_message({'msg': '', 'stderr': 'boom'}) == 'boom'
    assert failure_message({'results': [{'failed': True, 'msg': 'x'}, {'failed': False}, {'failed': True}]}) \
        == 'x; failed'
    assert failure_message({}) == 'failed (no message)'
    assert failure_message({'msg': 'y' * 5000}).endswith('...') and len(failure_message({'msg': 'y' * 5000})) == 600


def test_a_quiet_run_says_nothing_changed_and_no_report():
    summary = JobSummary()
    summary.ok('a', 'Check', False)
    assert summary.lines() == ['JOB SUMMARY', 'Nothing changed.', 'Nothing refused or failed.',
                               'Reports: none written']


def test_a_long_change_list_is_counted_and_each_task_named_once():
    summary = JobSummary()
    for i in range(MAX_TASKS + 3):
        summary.ok('a', 'task %d' % i, True)
        summary.ok('a', 'task %d' % i, True)
    summary.unreachable_host('b', {'msg': 'ssh: no route'})
    lines = summary.lines(['/r/x', '/r/x'])
    assert lines[2].startswith('  a: %d task(s): task 0, task 1' % (MAX_TASKS + 3)) and lines[2].endswith(' and 3 more')
    assert lines[-3:] == ['Unreachable:', '  b: ssh: no route', 'Reports: /r/x']


def test_what_each_instance_computes_in_comes_before_the_reports():
    summary = JobSummary()
    summary.ok('a', 'Check', False)
    assert summary.lines(['/r/x'], ['a: chat computes in bfloat16 (the model\'s config.json)']) == [
        'JOB SUMMARY', 'Nothing changed.', 'Nothing refused or failed.', 'Serving:',
        "  a: chat computes in bfloat16 (the model's config.json)", 'Reports: /r/x']
