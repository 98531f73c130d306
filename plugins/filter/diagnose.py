# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Filter of playbooks/diagnose.yml: one vllm_diagnose finding as a line for the operator (diagnose_line).

Documentation: diagnose_line.yml next to this file.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.module_utils._diagnose import explain


def diagnose_line(finding, context=None):
    """The finding's unit, meaning, count, sample and fix, with what the host's facts add; see diagnose_line.yml."""
    try:
        return explain(finding, context)
    except (KeyError, TypeError) as e:
        raise AnsibleFilterError('diagnose_line: not a vllm_diagnose finding (%s: %s)' % (type(e).__name__, e)) from e


class FilterModule(object):
    """llmops.vllm diagnose filter."""

    def filters(self):
        return {
            'diagnose_line': diagnose_line,
        }
