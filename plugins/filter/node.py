# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Filters of the node summary (llmops_node): node_summary builds it from the serving and edge plans (edge role);
serves_on_gpu reads it (GPU exporters).

Documentation: node_summary.yml and serves_on_gpu.yml next to this file; the fact's shape: docs/node-summary.md.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.module_utils._node import node_summary as _node_summary
from ansible_collections.llmops.vllm.plugins.module_utils._node import serves_on_gpu as _serves_on_gpu


def node_summary(serving_plan, edge_plan, settings=None, host=None):
    """What a vLLM node serves, for the roles of other hosts; see node_summary.yml."""
    try:
        return _node_summary(serving_plan, edge_plan, settings, host)
    except (KeyError, IndexError, TypeError) as e:
        raise AnsibleFilterError('host %s: node_summary: the serving or edge plan is incomplete (%s: %s). Fix: pass '
                                 'vllm_server_plan and the edge plan unchanged' % (host, type(e).__name__, e)) from e


def serves_on_gpu(summary):
    """Whether a node summary names an instance on NVIDIA GPUs; see serves_on_gpu.yml."""
    if summary is not None and not isinstance(summary, dict):
        raise AnsibleFilterError('serves_on_gpu: expected a node summary (llmops_node), got %s'
                                 % type(summary).__name__)
    return _serves_on_gpu(summary)


class FilterModule(object):
    """llmops.vllm node summary filter."""

    def filters(self):
        return {
            'node_summary': node_summary,
            'serves_on_gpu': serves_on_gpu,
        }
