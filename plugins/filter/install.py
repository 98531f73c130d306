# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Filters of the vllm_install role: the install plan and the flags of the installed vLLM.

Documentation: vllm_install_plan.yml, vllm_serve_flags.yml and vllm_wheel_requirements.yml next to this file.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.module_utils._install import (
    InstallPlanError,
    install_plan,
    wheel_requirements,
)
from ansible_collections.llmops.vllm.plugins.module_utils._vllm_cli import serve_flags


def vllm_install_plan(settings, arch, gpu=None, probes=None, host=None, numa=None):
    """How vLLM is installed on a host; see vllm_install_plan.yml."""
    try:
        return install_plan(settings, arch, gpu, probes, host, numa)
    except InstallPlanError as e:
        raise AnsibleFilterError(str(e)) from e


def vllm_serve_flags(help_text):
    """Long options of `vllm serve --help=all`; see vllm_serve_flags.yml."""
    return serve_flags(help_text)


def vllm_wheel_requirements(metadata, drop=None):
    """Installable requirements of a built wheel; see vllm_wheel_requirements.yml."""
    return wheel_requirements(metadata, drop or ())


class FilterModule(object):
    """llmops.vllm install filters."""

    def filters(self):
        return {
            'vllm_install_plan': vllm_install_plan,
            'vllm_serve_flags': vllm_serve_flags,
            'vllm_wheel_requirements': vllm_wheel_requirements,
        }
