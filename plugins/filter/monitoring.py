# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Filter of the monitoring role: what a Prometheus host scrapes (monitoring_plan).

Documentation: monitoring_plan.yml next to this file.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.module_utils._monitoring import MonitoringPlanError
from ansible_collections.llmops.vllm.plugins.module_utils._monitoring import monitoring_plan as _monitoring_plan


def monitoring_plan(nodes, exporters, settings, host=None):
    """Scrape jobs and file_sd targets of one Prometheus host; see monitoring_plan.yml."""
    try:
        return _monitoring_plan(nodes, exporters, settings, host)
    except MonitoringPlanError as e:
        raise AnsibleFilterError(str(e)) from e
    except (KeyError, TypeError) as e:
        raise AnsibleFilterError('host %s: monitoring: a node summary is incomplete (%s: %s). Fix: update the edge '
                                 'role on the nodes so that they publish llmops_node'
                                 % (host, type(e).__name__, e)) from e


class FilterModule(object):
    """llmops.vllm monitoring filter."""

    def filters(self):
        return {
            'monitoring_plan': monitoring_plan,
        }
