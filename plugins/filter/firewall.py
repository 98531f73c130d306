# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Filter of the host firewall: who may reach what on a vLLM node or an LVS director (firewall_plan).

Documentation: firewall_plan.yml next to this file.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.module_utils._firewall import firewall_plan as _firewall_plan


def firewall_plan(node, settings, peers, host=None, director=None):
    """The nftables rules of one node or director; see firewall_plan.yml."""
    try:
        return _firewall_plan(node, settings, peers, host, director)
    except (KeyError, TypeError, ValueError) as e:
        raise AnsibleFilterError('host %s: firewall: a node summary or setting is incomplete (%s: %s). Fix: run the '
                                 'firewall through site.yml, whose edge preflight publishes llmops_node'
                                 % (host, type(e).__name__, e)) from e


class FilterModule(object):
    """llmops.vllm firewall filter."""

    def filters(self):
        return {
            'firewall_plan': firewall_plan,
        }
