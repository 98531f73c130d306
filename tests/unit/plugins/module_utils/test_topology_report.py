# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._topology_findings import topology_findings
from ansible_collections.llmops.vllm.plugins.module_utils._topology_report import (
    DEGRADED_COLOR,
    PLACEMENT_COLORS,
    render_markdown,
    render_svg,
)
from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import (
    ALL_TOPOLOGIES,
    KUNPENG920_8xA100,
    KUNPENG920_8xA100_GPU3_LOST,
    KUNPENG920_8xA100_GPU5_GEN3_X8,
    LAB_2CORE_CPU_ONLY,
    X86_8xA800_NVLINK,
    variant,
)

SVG = '{http://www.w3.org/2000/svg}'
PLACEMENTS = [
    {'name': 'qwen-72b', 'gpu_indices': [0, 1, 2, 3], 'cpus': '0-27', 'numa_nodes': [0]},
    {'name': 'llama-8b', 'gpu_indices': [4], 'cpus': list(range(64, 72)), 'numa_nodes': [2]},
]


def _svg(*args, **kwargs):
    return ET.fromstring(render_svg(*args, **kwargs))


def _texts(root, cls=None):
    return [t.text for t in root.iter(SVG + 'text') if cls is None or t.get('class') == cls]


# -- Markdown ------------------------------------------------------------------------------------

# topology, lines the report must contain
MARKDOWN_CASES = [
    (KUNPENG920_8xA100, [
        '- **CPU:** HiSilicon Kunpeng-920 (aarch64, tsv110), 2 socket(s) x 64 core(s) x 1 thread(s), '
        '128 online CPUs (0-127)',
        '- **Compiler flags:** `-march=armv8.2-a -mtune=tsv110`',
        '- **GPUs:** 8 x NVIDIA A100 80GB PCIe, driver 550.54.15, CUDA 12.4',
        '| 0 | 0 | 0-31 | 125.5 GiB | 10 12 20 22 | 0, 1, 2, 3 |',
        '| 1 | 0 | 32-63 | 126.0 GiB | 12 10 22 24 | - |',
        '| GPU0 | X | PIX | PHB | PHB | SYS | SYS | SYS | SYS |',
    ]),
    (X86_8xA800_NVLINK, [
        '| GPU0 | X | NV8 | NV8 | NV8 | NV8 | NV8 | NV8 | NV8 |',
        'NVLink group (NV8): GPUs 0, 1, 2, 3, 4, 5, 6, 7',
        '| 1 | 1 | 32-63,96-127 | 504.0 GiB | 20 10 | 4, 5, 6, 7 |',
    ]),
    (LAB_2CORE_CPU_ONLY, [
        '- **GPUs:** none (NVML (libnvidia-ml.so.1) is not installed: install the NVIDIA driver on the target.)',
        '| 0 | 0 | 0-1 | unknown | 10 | - |',
    ]),
]


@pytest.mark.parametrize('topo, lines', MARKDOWN_CASES, ids=[c[0]['name'] for c in MARKDOWN_CASES])
def test_markdown_contains(facts, topo, lines):
    gpu, numa = facts(topo)
    report = render_markdown(gpu, numa, hostname=topo['name']).splitlines()
    assert report[0] == '# Topology of %s' % topo['name']
    assert [line for line in lines if line not in report] == []


def test_markdown_cpu_only_has_no_gpu_sections(facts):
    report = render_markdown(*facts(LAB_2CORE_CPU_ONLY))
    assert '## GPUs' not in report and '## GPU interconnect' not in report
    assert report.startswith('# Host topology\n')


def test_markdown_degraded_and_lost_gpus(facts):
    report = render_markdown(*facts(KUNPENG920_8xA100_GPU5_GEN3_X8))
    assert ('| 5 | NVIDIA A100 80GB PCIe | 0000:85:00.0 | 2 | 64-95 | Gen4 x16 / Gen3 x8 | 80.0 GiB | disabled | - '
            '| **DEGRADED:** width x8 below x16; link max Gen3 below GPU max Gen4 |') in report.splitlines()
    report = render_markdown(*facts(KUNPENG920_8xA100_GPU3_LOST))
    assert '| unknown | disabled | - | **ERROR:** nvmlDeviceGetMemoryInfo: GPU is lost |' in report


@pytest.mark.parametrize('findings, expected, absent', [
    (None, None, '## Findings'),
    ([], 'No findings.', None),
])
def test_markdown_findings_section(facts, findings, expected, absent):
    report = render_markdown(*facts(KUNPENG920_8xA100), findings=findings)
    assert expected is None or expected in report
    assert absent is None or absent not in report


def test_markdown_lists_findings_and_placements(facts):
    gpu, numa = facts(KUNPENG920_8xA100_GPU5_GEN3_X8)
    findings = topology_findings(gpu, numa, {'fail_on': ['pcie_degraded']})
    report = render_markdown(gpu, numa, findings, PLACEMENTS).splitlines()
    assert any(line.startswith('- **failure** `pcie_degraded`: GPU 5 (0000:85:00.0)') for line in report)
    assert '| qwen-72b | 0, 1, 2, 3 | 0-27 | 0 |' in report
    assert '| llama-8b | 4 | 64-71 | 2 |' in report


def test_markdown_escapes_table_cells(facts):
    gpu, numa = facts(KUNPENG920_8xA100)
    gpu['devices'][0] = dict(gpu['devices'][0], name='A|B')
    assert '| 0 | A\\|B |' in render_markdown(gpu, numa)


# -- SVG -----------------------------------------------------------------------------------------

@pytest.mark.parametrize('topo', ALL_TOPOLOGIES, ids=lambda t: t['name'])
def test_svg_is_a_standalone_document(facts, topo):
    gpu, numa = facts(topo)
    text = render_svg(gpu, numa, topology_findings(gpu, numa), PLACEMENTS if topo is KUNPENG920_8xA100 else None,
                      hostname=topo['name'])
    root = ET.fromstring(text)
    assert root.tag == SVG + 'svg' and int(root.get('width')) > 0 and int(root.get('height')) > 0
    assert root.find(SVG + 'title').text == 'Topology of %s' % topo['name']
    assert not any(marker in text for marker in ('href', 'url(', '@import', '<script', '<style'))
    gpu_labels = [t for t in _texts(root) if t and t.startswith('GPU ') and t[4:].isdigit()]
    assert gpu_labels == ['GPU %d' % d['index'] for d in gpu['devices']] if gpu['available'] else gpu_labels == []
    node_labels = [t for t in _texts(root) if t and t.startswith(('NUMA node', 'Node 0 (no NUMA)'))]
    assert len(node_labels) == len(numa['nodes'])
    assert text == render_svg(gpu, numa, topology_findings(gpu, numa),
                              PLACEMENTS if topo is KUNPENG920_8xA100 else None, hostname=topo['name'])


def test_svg_draws_degraded_link_red_and_labelled(facts):
    root = _svg(*facts(KUNPENG920_8xA100_GPU5_GEN3_X8))
    red_lines = [line for line in root.iter(SVG + 'line') if line.get('stroke') == DEGRADED_COLOR]
    assert len(red_lines) == 1 and red_lines[0].get('stroke-dasharray')
    assert _texts(root, 'degraded') == ['DEGRADED', 'PCIe Gen3 x8']
    healthy = _svg(*facts(KUNPENG920_8xA100))
    assert [line for line in healthy.iter(SVG + 'line') if line.get('stroke') == DEGRADED_COLOR] == []


def test_svg_groups_nvlink(facts):
    root = _svg(*facts(X86_8xA800_NVLINK))
    assert _texts(root, 'nvlink') == ['NVLink NV8: GPUs 0, 1, 2, 3, 4, 5, 6, 7']
    assert _texts(_svg(*facts(KUNPENG920_8xA100)), 'nvlink') == []


def test_svg_colours_placements(facts):
    root = _svg(*facts(KUNPENG920_8xA100), placements=PLACEMENTS)
    strokes = [r.get('stroke') for r in root.iter(SVG + 'rect')]
    assert strokes.count(PLACEMENT_COLORS[0]) == 4 and strokes.count(PLACEMENT_COLORS[1]) == 1
    cpu_segments = [r for r in root.iter(SVG + 'rect') if r.get('fill') in PLACEMENT_COLORS[:2]
                    and r.get('height') == '10']
    assert [r.get('fill') for r in cpu_segments] == list(PLACEMENT_COLORS[:2])
    assert _texts(root, 'placement') == ['qwen-72b: GPUs 0, 1, 2, 3, CPUs 0-27, NUMA nodes 0',
                                         'llama-8b: GPUs 4, CPUs 64-71, NUMA nodes 2']


def test_svg_lists_findings(facts):
    gpu, numa = facts(KUNPENG920_8xA100_GPU3_LOST)
    root = _svg(gpu, numa, topology_findings(gpu, numa))
    assert ' '.join(_texts(root, 'finding')).startswith('[warning] gpu_query_error: GPU 3 (0000:09:00.0)')
    assert _texts(root, 'error') == ['ERROR: GPU is lost']
    assert 'No findings.' in _texts(_svg(gpu, numa, []))


def test_svg_cpu_only(facts):
    root = _svg(*facts(LAB_2CORE_CPU_ONLY))
    assert 'GPUs: none (NVML (libnvidia-ml.so.1) is not installed: install the NVIDIA driver on the target.)' in (
        _texts(root))
    assert 'Node 0 (no NUMA) - memory unknown' in _texts(root)


def test_svg_gpu_with_unknown_node(facts):
    topo = variant(KUNPENG920_8xA100, 'kunpeng-gpu6-unknown-node', devices={6: {'numa_node': -1}})
    root = _svg(*facts(topo))
    assert 'GPUs with unknown NUMA node' in _texts(root)
    assert len([t for t in _texts(root) if t and t.startswith('GPU ') and t[4:].isdigit()]) == 8


def test_svg_escapes_text(facts):
    gpu, numa = facts(KUNPENG920_8xA100)
    root = _svg(gpu, numa, hostname='<kp&01>', placements=[{'name': '"a"<b>', 'gpu_indices': [0], 'cpus': '0'}])
    assert root.find(SVG + 'title').text == 'Topology of <kp&01>'
    assert '"a"<b>: GPUs 0, CPUs 0, NUMA nodes -' in _texts(root, 'placement')


@pytest.mark.parametrize('gpu, numa', [(None, None), ({}, {}), ({'available': False}, {'nodes': []})])
def test_renders_without_facts(gpu, numa):
    ET.fromstring(render_svg(gpu, numa))
    assert render_markdown(gpu, numa).startswith('# Host topology')
