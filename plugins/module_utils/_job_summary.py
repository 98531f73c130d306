# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A run's closing summary, as an AWX user reads it at the end of the job output: what changed on each host, what
was refused or failed and why, which hosts were unreachable, and where the reports went (_reports).

The callback llmops.vllm.job_summary feeds JobSummary.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

# The set_stats key under which playbooks/summary.yml names what each instance computes in, and why.
SERVING_STAT = 'llmops_serving'
# Tasks listed per host before the rest is counted; characters of a failure's message kept.
MAX_TASKS = 12
MAX_MESSAGE = 600


def one_line(text, limit=MAX_MESSAGE):
    flat = ' '.join(str(text).split())
    return flat if len(flat) <= limit else flat[:limit - 3] + '...'


def failure_message(result):
    """What a failed task said: its msg, else its stderr, else the failed items' messages."""
    for key in ('msg', 'stderr', 'reason'):
        if result.get(key):
            return one_line(result[key])
    items = [one_line(item.get('msg') or item.get('stderr') or 'failed', 200)
             for item in result.get('results') or [] if isinstance(item, dict) and item.get('failed')]
    return '; '.join(items) if items else 'failed (no message)'


class JobSummary(object):
    """What a run did, gathered result by result."""

    def __init__(self, check_mode=False):
        self.check_mode = check_mode
        self.hosts = []
        self.changed = {}
        self.failures = []
        self.unreachable = {}

    def _host(self, host):
        if host not in self.hosts:
            self.hosts.append(host)

    def ok(self, host, task, changed):
        self._host(host)
        if changed:
            tasks = self.changed.setdefault(host, [])
            if task not in tasks:
                tasks.append(task)

    def failed(self, host, task, result, rescued=False):
        self._host(host)
        self.failures.append(dict(host=host, task=task, message=failure_message(result), rescued=rescued))

    def unreachable_host(self, host, result):
        self._host(host)
        self.unreachable[host] = failure_message(result)

    def lines(self, reports=(), serving=()):
        """The summary's lines; serving: 'host: instance computes in ... (why)' of each instance the run planned."""
        verb = 'would change (check mode)' if self.check_mode else 'changed'
        lines = ['JOB SUMMARY']
        if not self.changed:
            lines.append('Nothing %s.' % verb)
        else:
            lines.append('What %s:' % verb)
            for host in self.hosts:
                tasks = self.changed.get(host, [])
                if not tasks:
                    lines.append('  %s: nothing' % host)
                    continue
                shown = ', '.join(tasks[:MAX_TASKS])
                more = ' and %d more' % (len(tasks) - MAX_TASKS) if len(tasks) > MAX_TASKS else ''
                lines.append('  %s: %d task(s): %s%s' % (host, len(tasks), shown, more))
        stopped = [f for f in self.failures if not f['rescued']]
        rescued = [f for f in self.failures if f['rescued']]
        if stopped:
            lines.append('Refused or failed:')
            lines.extend('  %s: %s: %s' % (f['host'], f['task'], f['message']) for f in stopped)
        else:
            lines.append('Nothing refused or failed.')
        if rescued:
            lines.append('Failed, then handled by the playbook:')
            lines.extend('  %s: %s: %s' % (f['host'], f['task'], f['message']) for f in rescued)
        if self.unreachable:
            lines.append('Unreachable:')
            lines.extend('  %s: %s' % (host, message) for host, message in sorted(self.unreachable.items()))
        if serving:
            lines.append('Serving:')
            lines.extend('  %s' % one_line(line, 300) for line in serving)
        unique = []
        for report in reports:
            if report not in unique:
                unique.append(report)
        lines.append('Reports: %s' % (', '.join(unique) if unique else 'none written'))
        return lines
