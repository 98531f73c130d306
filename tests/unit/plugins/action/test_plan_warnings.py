# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from unittest.mock import MagicMock

import pytest

from ansible.errors import AnsibleActionFail
from ansible.playbook.task import Task

from ansible_collections.llmops.vllm.plugins.action.plan_warnings import ActionModule


def run(args, task_vars):
    task = Task()
    task.args = args
    action = ActionModule(task, MagicMock(), MagicMock(check_mode=False), loader=None, templar=None,
                          shared_loader_obj=None)
    return action.run(task_vars=task_vars)


def test_new_warnings_are_shown_and_recorded_in_the_hosts_fact():
    result = run({'warnings': ['instance a: x'], 'source': 'vllm_server'}, {'inventory_hostname': 'n1'})
    assert result['warnings'] == ['host n1: vllm_server: instance a: x'] and result['changed'] is False
    assert result['ansible_facts'] == {'llmops_warnings': ['host n1: vllm_server: instance a: x']}


def test_known_warnings_are_neither_shown_nor_recorded_again():
    known = ['host n1: vllm_server: instance a: x']
    result = run({'warnings': ['instance a: x', 'instance b: y'], 'source': 'vllm_server'},
                 {'inventory_hostname': 'n1', 'ansible_facts': {'llmops_warnings': known}})
    assert result['warnings'] == ['host n1: vllm_server: instance b: y']
    assert result['ansible_facts']['llmops_warnings'] == known + ['host n1: vllm_server: instance b: y']


def test_show_false_only_records():
    args = {'warnings': ['GPU 3 is degraded'], 'source': 'discovery', 'show': False}
    result = run(args, {'inventory_hostname': 'n1'})
    assert 'warnings' not in result and result['new'] == ['host n1: discovery: GPU 3 is degraded']


def test_bad_arguments_are_refused():
    with pytest.raises(AnsibleActionFail, match="plan_warnings: .*'show'"):
        run({'warnings': 'not a list of', 'show': 'perhaps'}, {'inventory_hostname': 'n1'})
