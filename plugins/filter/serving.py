# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Filter of the vllm_server role: what each vLLM instance of a host runs.

Documentation: vllm_serving_plan.yml next to this file.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.module_utils._serving import ServingPlanError, serving_plan


def vllm_serving_plan(instances, gpu, numa, install, probes=None, settings=None, host=None, placements=None,
                      tuning=None):
    """Units of the vLLM instances of a host; see vllm_serving_plan.yml."""
    try:
        return serving_plan(instances, gpu, numa, install, probes, settings, host, placements, tuning)
    except ServingPlanError as e:
        raise AnsibleFilterError(str(e)) from e


class FilterModule(object):
    """llmops.vllm serving filter."""

    def filters(self):
        return {
            'vllm_serving_plan': vllm_serving_plan,
        }
