# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Filter of the ray_cluster role: what one host of a Ray cluster runs.

Documentation: ray_cluster_plan.yml next to this file.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.module_utils._ray import RayPlanError, ray_plan


def ray_cluster_plan(settings, ranks=None, host=None):
    """The host's Ray node; see ray_cluster_plan.yml."""
    try:
        return ray_plan(settings, ranks, host)
    except RayPlanError as e:
        raise AnsibleFilterError(str(e)) from e


class FilterModule(object):
    """llmops.vllm Ray filter."""

    def filters(self):
        return {
            'ray_cluster_plan': ray_cluster_plan,
        }
