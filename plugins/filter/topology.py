# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Filters over the gpu and numa facts: preflight findings and topology reports.

Documentation: topology_findings.yml, topology_markdown.yml and topology_svg.yml next to this file.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.module_utils._topology_findings import topology_findings as _findings
from ansible_collections.llmops.vllm.plugins.module_utils._topology_report import render_markdown, render_svg


def topology_findings(gpu, numa, max_gpus_per_socket=None, min_cuda_driver=None, fail_on=None, ignore=None):
    """Findings about the host topology; see topology_findings.yml."""
    options = {'max_gpus_per_socket': max_gpus_per_socket, 'min_cuda_driver': min_cuda_driver,
               'fail_on': fail_on, 'ignore': ignore}
    try:
        return _findings(gpu, numa, options)
    except (TypeError, ValueError) as e:
        raise AnsibleFilterError('topology_findings: %s' % e) from e


def topology_markdown(gpu, numa, findings=None, placements=None, hostname=None):
    """Markdown topology report; see topology_markdown.yml."""
    try:
        return render_markdown(gpu, numa, findings, placements, hostname)
    except (AttributeError, TypeError, ValueError) as e:
        raise AnsibleFilterError('topology_markdown: %s' % e) from e


def topology_svg(gpu, numa, findings=None, placements=None, hostname=None):
    """SVG topology picture; see topology_svg.yml."""
    try:
        return render_svg(gpu, numa, findings, placements, hostname)
    except (AttributeError, TypeError, ValueError) as e:
        raise AnsibleFilterError('topology_svg: %s' % e) from e


class FilterModule(object):
    """llmops.vllm topology filters."""

    def filters(self):
        return {
            'topology_findings': topology_findings,
            'topology_markdown': topology_markdown,
            'topology_svg': topology_svg,
        }
