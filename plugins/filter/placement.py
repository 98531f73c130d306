# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Filter that places vLLM instances on a host's GPUs, CPUs and NUMA nodes.

Documentation: vllm_placement.yml next to this file.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.module_utils._placement import PlacementError
from ansible_collections.llmops.vllm.plugins.module_utils._placement import vllm_placement as _placement


def vllm_placement(instances, gpu, numa, reserved_cpus=None, host=None):
    """GPUs, CPUs and NUMA nodes for each instance; see vllm_placement.yml."""
    try:
        return _placement(instances, gpu, numa, reserved_cpus=reserved_cpus, host=host)
    except PlacementError as e:
        raise AnsibleFilterError(str(e)) from e


class FilterModule(object):
    """llmops.vllm placement filter."""

    def filters(self):
        return {
            "vllm_placement": vllm_placement,
        }
