# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Filter of the edge role: what the TLS edge of a vLLM node serves.

Documentation: edge_plan.yml and edge_fault.yml next to this file.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.module_utils._edge import EdgePlanError
from ansible_collections.llmops.vllm.plugins.module_utils._edge import edge_plan as _edge_plan
from ansible_collections.llmops.vllm.plugins.module_utils._edge import fault_injection as _fault_injection


def edge_plan(serving_plan, settings=None, host=None):
    """Listeners, routes, API key digests and rate limits of a node's edge; see edge_plan.yml."""
    try:
        return _edge_plan(serving_plan, settings, host)
    except EdgePlanError as e:
        raise AnsibleFilterError(str(e)) from e


def edge_fault(fault, host=None):
    """A fault injection as the edge's fault file holds it (None: off); see edge_fault.yml."""
    try:
        return _fault_injection(fault, host)
    except EdgePlanError as e:
        raise AnsibleFilterError(str(e)) from e


class FilterModule(object):
    """llmops.vllm edge filter."""

    def filters(self):
        return {
            'edge_fault': edge_fault,
            'edge_plan': edge_plan,
        }
