# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Filter that plans a vLLM source build (environment, MAX_JOBS, wheel cache key) from the numa and gpu facts.

Documentation: vllm_build_env.yml next to this file.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.module_utils._build import BuildPlanError, build_plan


def vllm_build_env(numa, gpu=None, vllm_version=None, target_device=None, cuda_version=None, torch_version=None,
                   python_version=None, cuda_arch_list=None, extra_cmake_args=None, extra_env=None, memory_mib=None,
                   max_jobs=None):
    """Build plan of a vLLM wheel on this host; see vllm_build_env.yml."""
    try:
        return build_plan(numa, gpu, vllm_version=vllm_version, target_device=target_device,
                          cuda_version=cuda_version, torch_version=torch_version, python_version=python_version,
                          cuda_arch_list=cuda_arch_list, extra_cmake_args=extra_cmake_args, extra_env=extra_env,
                          memory_mib=memory_mib, max_jobs=max_jobs)
    except BuildPlanError as e:
        raise AnsibleFilterError('vllm_build_env: %s' % e) from e


class FilterModule(object):
    """llmops.vllm build filter."""

    def filters(self):
        return {
            'vllm_build_env': vllm_build_env,
        }
