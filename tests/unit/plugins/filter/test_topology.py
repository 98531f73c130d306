# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import inspect
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.filter import topology
from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import (
    KUNPENG920_8xA100_GPU5_GEN3_X8,
    LAB_2CORE_CPU_ONLY,
    X86_8xA800_NVLINK,
)

FILTERS = topology.FilterModule().filters()
DOCS_DIR = Path(inspect.getsourcefile(topology)).parent


def test_filter_names():
    assert sorted(FILTERS) == ['topology_findings', 'topology_markdown', 'topology_svg']


def test_findings_filter_options(facts):
    gpu, numa = facts(KUNPENG920_8xA100_GPU5_GEN3_X8)
    findings = FILTERS['topology_findings'](gpu, numa, min_cuda_driver='12.8', fail_on=['pcie_degraded'])
    assert [(f['code'], f['severity']) for f in findings] == [('pcie_degraded', 'failure'),
                                                              ('cuda_driver_too_old', 'warning')]
    assert FILTERS['topology_findings'](gpu, numa, ignore=['pcie_degraded']) == []
    assert len(FILTERS['topology_findings'](gpu, numa, max_gpus_per_socket=2)) == 3


@pytest.mark.parametrize('kwargs, message', [
    ({'fail_on': ['typo']}, 'topology_findings: fail_on lists unknown finding code'),
    ({'max_gpus_per_socket': 'four'}, 'topology_findings: invalid literal'),
])
def test_findings_filter_errors(facts, kwargs, message):
    with pytest.raises(AnsibleFilterError, match=message):
        FILTERS['topology_findings'](*facts(X86_8xA800_NVLINK), **kwargs)


@pytest.mark.parametrize('topo', [X86_8xA800_NVLINK, LAB_2CORE_CPU_ONLY], ids=lambda t: t['name'])
def test_report_filters(facts, topo):
    gpu, numa = facts(topo)
    findings = FILTERS['topology_findings'](gpu, numa)
    placements = [{'name': 'a', 'gpu_indices': [0], 'cpus': '0-1', 'numa_nodes': [0]}]
    markdown = FILTERS['topology_markdown'](gpu, numa, findings, placements, hostname='h1')
    assert markdown.startswith('# Topology of h1\n') and '## Findings' in markdown
    svg = FILTERS['topology_svg'](gpu, numa, findings=findings, placements=placements, hostname='h1')
    assert ET.fromstring(svg).get('width')


@pytest.mark.parametrize('name', ['topology_markdown', 'topology_svg'])
def test_report_filters_wrap_bad_input(name):
    with pytest.raises(AnsibleFilterError, match=name):
        FILTERS[name]({'available': True, 'devices': [{'index': 0}]}, {'nodes': [42]})


@pytest.mark.parametrize('name', sorted(FILTERS))
def test_documentation_matches_signature(name):
    docs = yaml.safe_load((DOCS_DIR / (name + '.yml')).read_text())
    assert set(docs) == {'DOCUMENTATION', 'EXAMPLES', 'RETURN'}
    assert docs['DOCUMENTATION']['name'] == name
    parameters = list(inspect.signature(FILTERS[name]).parameters)
    assert ['_input'] + parameters[1:] == list(docs['DOCUMENTATION']['options'])
    assert docs['DOCUMENTATION']['positional'] == '_input, numa'
    assert 'llmops.vllm.%s' % name in docs['EXAMPLES']
