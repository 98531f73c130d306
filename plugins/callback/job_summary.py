# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
name: job_summary
type: aggregate
short_description: A closing summary of the run, after the play recap
version_added: 0.1.0
author: llmops.vllm maintainers (@llmops)
description:
  - After the play recap, one block that an AWX user reads at the end of the job output, and anyone at the end of
    C(ansible-playbook)'s. It says what changed on each host (what would change, in check mode), what was refused
    or failed and why (the task and its message; the preflight's refusals name the host, the instance and the
    fix), what failed and was then handled by the playbook (a C(rescue)), the unreachable hosts, and where the
    reports went.
  - The reports are those the playbooks name with C(ansible.builtin.set_stats) under C(llmops_reports); AWX also
    keeps that list as the job's artifacts.
  - Under C(Serving:), what each vLLM instance the run planned computes in and why (for example C(fp8 weight-only
    (W8A16\)) because the GPUs are compute capability 8.0), as C(playbooks/summary.yml) names them with
    C(ansible.builtin.set_stats) under C(llmops_serving).
  - This project's C(ansible.cfg) enables it; elsewhere, add C(llmops.vllm.job_summary) to C(callbacks_enabled).
  - It stays silent when the stdout callback writes JSON (C(json), C(ansible.posix.json), C(ansible.posix.jsonl)),
    whose output a program reads.
requirements:
  - enabled in C(callbacks_enabled) (C(ANSIBLE_CALLBACKS_ENABLED))
'''

from ansible import constants as C
from ansible import context
from ansible.plugins.callback import CallbackBase

from ansible_collections.llmops.vllm.plugins.module_utils._job_summary import SERVING_STAT, JobSummary
from ansible_collections.llmops.vllm.plugins.module_utils._reports import REPORTS_STAT


def _part(result, name):
    """result.host / .task / .result (ansible-core 2.19), or the older _host / _task / _result."""
    return getattr(result, name) if hasattr(type(result), name) else getattr(result, '_' + name)


def _rescued(task):
    """Whether a block's rescue handles a failure of this task (the task is in the block part of such a block)."""
    child, parent = task, getattr(task, '_parent', None)
    while parent is not None:
        if getattr(parent, 'rescue', None) and any(
                getattr(t, '_uuid', None) == getattr(child, '_uuid', False) for t in getattr(parent, 'block', [])):
            return True
        child, parent = parent, getattr(parent, '_parent', None)
    return False


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'aggregate'
    CALLBACK_NAME = 'llmops.vllm.job_summary'
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super(CallbackModule, self).__init__()
        self._summary = JobSummary(check_mode=bool(context.CLIARGS.get('check', False)))

    def _name(self, result):
        task = _part(result, 'task')
        try:
            name = task.get_name(include_role_fqcn=False)
        except TypeError:  # include_role's get_name() takes no argument
            name = task.get_name()
        return name or task.action

    def v2_runner_on_ok(self, result):
        self._summary.ok(_part(result, 'host').get_name(), self._name(result),
                         bool(_part(result, 'result').get('changed')))

    def v2_runner_on_failed(self, result, ignore_errors=False):
        if ignore_errors:
            return
        self._summary.failed(_part(result, 'host').get_name(), self._name(result), _part(result, 'result'),
                             rescued=_rescued(_part(result, 'task')))

    def v2_runner_on_unreachable(self, result):
        self._summary.unreachable_host(_part(result, 'host').get_name(), _part(result, 'result'))

    def v2_playbook_on_stats(self, stats):
        stdout = str(C.config.get_config_value('DEFAULT_STDOUT_CALLBACK') or '')
        if stdout.rsplit('.', maxsplit=1)[-1] in ('json', 'jsonl'):
            return
        reports, serving = [], []
        # set_stats keeps per_host data under the host's name and the rest under _run, where each host's
        # values are appended as it finishes; hosts finish in any order, so the summary sorts both.
        for owner, stat in sorted((getattr(stats, 'custom', None) or {}).items()):
            for key, into in ((REPORTS_STAT, reports), (SERVING_STAT, serving)):
                found = stat.get(key) if isinstance(stat, dict) else None
                found = found if isinstance(found, (list, tuple)) else [found] if found else []
                prefix = '%s: ' % owner if key == SERVING_STAT and owner != '_run' else ''
                into.extend(prefix + str(value) for value in found)
        reports = sorted(set(reports))
        self._display.display('\n'.join([''] + self._summary.lines(reports, serving)))
