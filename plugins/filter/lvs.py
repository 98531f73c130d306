# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Filters of LVS directors: what a director announces and balances (lvs_plan), and its IPVS table as
ipvsadm prints it (ipvs_table).

Documentation: lvs_plan.yml and ipvs_table.yml next to this file.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.module_utils._ipvs import IpvsError, parse_listing
from ansible_collections.llmops.vllm.plugins.module_utils._lvs import LvsPlanError
from ansible_collections.llmops.vllm.plugins.module_utils._lvs import lvs_plan as _lvs_plan


def lvs_plan(nodes, directors, settings, host=None):
    """VRRP, IPVS services, real servers, checks and breaker of one director; see lvs_plan.yml."""
    try:
        return _lvs_plan(nodes, directors, settings, host)
    except LvsPlanError as e:
        raise AnsibleFilterError(str(e)) from e
    except (KeyError, TypeError) as e:
        raise AnsibleFilterError('host %s: lvs_director: a node summary is incomplete (%s: %s). Fix: update the edge '
                                 'role on the nodes so that they publish llmops_node'
                                 % (host, type(e).__name__, e)) from e


def ipvs_table(listing):
    """`ipvsadm -L -n --exact` as text, parsed as the ipvs_info module reads it (without the counters)."""
    try:
        return parse_listing(listing)
    except IpvsError as e:
        raise AnsibleFilterError(str(e)) from e


class FilterModule(object):
    """llmops.vllm LVS filter."""

    def filters(self):
        return {
            'lvs_plan': lvs_plan,
            'ipvs_table': ipvs_table,
        }
