# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Action of llmops.vllm.plan_warnings: runs on the controller only (documentation: plugins/modules/)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase

from ansible_collections.llmops.vllm.plugins.module_utils._warnings import FACT, merge_warnings

ARGUMENT_SPEC = {
    'warnings': {'type': 'list', 'elements': 'str', 'required': True},
    'source': {'type': 'str'},
    'show': {'type': 'bool', 'default': True},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        task_vars = task_vars or {}
        validation = ArgumentSpecValidator(ARGUMENT_SPEC).validate(self._task.args)
        if validation.error_messages:
            raise AnsibleActionFail('plan_warnings: %s' % '; '.join(validation.error_messages))
        args = validation.validated_parameters
        host = task_vars.get('inventory_hostname') or 'this host'
        known = (task_vars.get('ansible_facts') or {}).get(FACT)
        lines, new = merge_warnings(known, args['warnings'], host, args.get('source'))
        if args['show'] and new:
            result['warnings'] = new
        result.update(changed=False, new=new, ansible_facts={FACT: lines})
        return result
