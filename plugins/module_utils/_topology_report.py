# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""Host topology report as Markdown and as a self-contained SVG picture.

Both take the gpu and numa facts, optional findings (from _topology_findings), optional instance
placements [{name, gpu_indices, cpus, numa_nodes}] (cpus as a cpulist or a list of CPU numbers),
and an optional host name. Output is deterministic, so it can be compared and committed.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import textwrap
from xml.sax.saxutils import escape, quoteattr

from ansible_collections.llmops.vllm.plugins.module_utils._cpulist import format_cpulist, parse_cpulist
from ansible_collections.llmops.vllm.plugins.module_utils._topology_findings import gpu_numa_node

# nvidia-smi topo -m abbreviations of NVML topology levels.
LEVEL_ABBREVIATIONS = {'INTERNAL': 'INT', 'SINGLE': 'PIX', 'MULTIPLE': 'PXB', 'HOSTBRIDGE': 'PHB',
                       'NODE': 'NODE', 'SYSTEM': 'SYS'}
LEVEL_LEGEND = ('NV# = number of NVLinks, PIX = one PCIe switch, PXB = several PCIe switches, '
                'PHB = PCIe host bridge, NODE = same NUMA node, SYS = across NUMA nodes, INT = same board')

# Colour-blind safe instance colours (Okabe-Ito, without the red used for degraded links).
PLACEMENT_COLORS = ('#0072B2', '#E69F00', '#009E73', '#CC79A7', '#56B4E9', '#F0E442', '#999999', '#8C564B')
DEGRADED_COLOR = '#D62728'
NVLINK_COLOR = '#76B900'


# -- shared view -------------------------------------------------------------------------------

def _gib(mib):
    return 'unknown' if mib is None else '%.1f GiB' % (mib / 1024.0)


def _cpu_set(cpus):
    if cpus is None:
        return set()
    if isinstance(cpus, str):
        return set(parse_cpulist(cpus))
    return set(int(cpu) for cpu in cpus)


def _placements(placements):
    result = []
    for number, placement in enumerate(placements or []):
        cpus = _cpu_set(placement.get('cpus'))
        result.append({
            'name': str(placement.get('name', 'instance %d' % number)),
            'gpus': [int(i) for i in placement.get('gpu_indices') or []],
            'cpus': cpus,
            'cpulist': format_cpulist(cpus),
            'numa_nodes': [int(n) for n in placement.get('numa_nodes') or []],
            'color': PLACEMENT_COLORS[number % len(PLACEMENT_COLORS)],
        })
    return result


def _nvlink_groups(devices, links):
    """GPUs connected over NVLink, as [{'gpus': [...], 'label': 'NV8'}] (groups of two or more)."""
    group_of = dict((d.get('index'), {d.get('index')}) for d in devices)
    nvlinked = [link for link in links
                if link.get('nvlinks') and link.get('a') in group_of and link.get('b') in group_of]
    for link in nvlinked:
        merged = group_of[link['a']] | group_of[link['b']]
        for index in merged:
            group_of[index] = merged
    result = []
    for members in sorted(set(frozenset(g) for g in group_of.values() if len(g) > 1), key=min):
        counts = sorted(set(link['nvlinks'] for link in nvlinked if link['a'] in members))
        label = 'NV%d' % counts[0] if len(counts) == 1 else 'NV%d-NV%d' % (counts[0], counts[-1])
        result.append({'gpus': sorted(members), 'label': label})
    return result


def build_view(gpu, numa, findings=None, placements=None, hostname=None):
    """Normalize the facts into what both renderers draw."""
    gpu, numa = gpu or {}, numa or {}
    nodes = [dict(node) for node in numa.get('nodes') or []]
    devices = list(gpu.get('devices') or []) if gpu.get('available') else []
    for node in nodes:
        node['gpus'] = [d for d in devices if gpu_numa_node(d, nodes) == node.get('id')]
    sockets = {}
    for node in nodes:
        sockets.setdefault(node.get('socket'), []).append(node)
    return {
        'title': 'Topology of %s' % hostname if hostname else 'Host topology',
        'cpu': numa.get('cpu') or {},
        'online_cpulist': numa.get('online_cpulist'),
        'online_count': len(numa.get('online_cpus') or []),
        'nodes': nodes,
        'nodes_synthesized': bool(numa.get('nodes_synthesized')),
        'sockets': [(s, sockets[s]) for s in sorted(sockets, key=lambda s: (s is None, s))],
        'unattached_gpus': [d for d in devices if gpu_numa_node(d, nodes) not in [n.get('id') for n in nodes]],
        'gpu': gpu,
        'devices': devices,
        'links': list(gpu.get('links') or []) if devices else [],
        'nvlink_groups': _nvlink_groups(devices, gpu.get('links') or []),
        'placements': _placements(placements),
        'findings': None if findings is None else list(findings),
    }


def _cpu_summary(view):
    cpu = view['cpu']
    vendor, model = cpu.get('vendor'), cpu.get('model_name')
    if vendor and model and vendor.lower() in model.lower():
        vendor = None
    model = ' '.join(str(p) for p in (vendor, model) if p) or 'unknown CPU'
    details = ', '.join(str(p) for p in (cpu.get('architecture'), cpu.get('microarchitecture')) if p)
    shape = '%s socket(s) x %s core(s) x %s thread(s)' % tuple(
        '?' if cpu.get(k) is None else cpu.get(k) for k in ('sockets', 'cores_per_socket', 'threads_per_core'))
    return '%s (%s), %s, %d online CPUs (%s)' % (
        model, details or 'unknown architecture', shape, view['online_count'], view['online_cpulist'] or 'none')


def _gpu_summary(view):
    gpu = view['gpu']
    if not view['devices']:
        return 'none (%s)' % (gpu.get('reason') or 'no GPU facts')
    names = sorted(set(d.get('name') or 'unknown GPU' for d in view['devices']))
    return '%d x %s, driver %s, CUDA %s' % (
        len(view['devices']), ' / '.join(names), gpu.get('driver_version'), gpu.get('cuda_driver_version'))


def _pcie_label(pcie):
    """(trained link, best link): "Gen<negotiated max> x<current width>", "Gen<GPU max> x<max width>"."""
    pcie = pcie or {}
    link = 'Gen%s x%s' % (pcie.get('gen_max') or '?', pcie.get('width_current') or '?')
    best = 'Gen%s x%s' % (pcie.get('gen_max_gpu') or pcie.get('gen_max') or '?', pcie.get('width_max') or '?')
    return link, best


def _placement_names(view, gpu_index):
    return [p['name'] for p in view['placements'] if gpu_index in p['gpus']]


# -- Markdown ----------------------------------------------------------------------------------

def _md(value):
    return str('' if value is None else value).replace('|', '\\|').replace('\n', ' ')


def _table(header, rows):
    lines = ['| ' + ' | '.join(header) + ' |', '|' + '|'.join(['---'] * len(header)) + '|']
    lines.extend('| ' + ' | '.join(_md(c) for c in row) + ' |' for row in rows)
    return lines


def _link_matrix(view):
    lookup = {}
    for link in view['links']:
        cell = 'NV%d' % link['nvlinks'] if link.get('nvlinks') else LEVEL_ABBREVIATIONS.get(
            link.get('common_ancestor'), '?')
        lookup[(link['a'], link['b'])] = lookup[(link['b'], link['a'])] = cell
    indices = [d.get('index') for d in view['devices']]
    rows = [['GPU%s' % a] + ['X' if a == b else lookup.get((a, b), '?') for b in indices] for a in indices]
    return _table([''] + ['GPU%s' % i for i in indices], rows)


def render_markdown(gpu, numa, findings=None, placements=None, hostname=None):
    """Return the topology report as Markdown text."""
    view = build_view(gpu, numa, findings, placements, hostname)
    flags = ' '.join(view['cpu'].get('compiler_flags') or []) or 'none'
    lines = ['# %s' % _md(view['title']), '',
             '- **CPU:** %s' % _md(_cpu_summary(view)),
             '- **Compiler flags:** `%s`' % flags,
             '- **GPUs:** %s' % _md(_gpu_summary(view)), '',
             '## NUMA nodes', '']
    lines += _table(['Node', 'Socket', 'CPUs', 'Memory', 'Distances', 'GPUs'], [
        [n.get('id'), '?' if n.get('socket') is None else n.get('socket'), n.get('cpulist') or '-',
         _gib(n.get('memory_total_mib')), ' '.join(str(d) for d in n.get('distances') or []) or '?',
         ', '.join(str(d.get('index')) for d in n['gpus']) or '-'] for n in view['nodes']])
    if view['devices']:
        lines += ['', '## GPUs', '']
        rows = []
        for d in view['devices']:
            pcie = d.get('pcie') or {}
            status = 'ok'
            if pcie.get('degraded'):
                status = '**DEGRADED:** %s' % pcie.get('degraded_reason')
            if d.get('error'):
                status = '**ERROR:** %s' % d.get('error')
            rows.append([d.get('index'), d.get('name'), d.get('pci_bus_id'),
                         '?' if d.get('numa_node') is None else d.get('numa_node'), d.get('cpu_affinity') or '?',
                         '%s / Gen%s x%s' % (_pcie_label(pcie)[1], pcie.get('gen_current') or '?',
                                             pcie.get('width_current') or '?'),
                         _gib(d.get('memory_total_mib')), d.get('mig_mode') or '-',
                         ', '.join(_placement_names(view, d.get('index'))) or '-', status])
        lines += _table(['GPU', 'Name', 'PCI bus', 'NUMA', 'CPU affinity', 'PCIe max / now', 'Memory', 'MIG',
                         'Instance', 'Status'], rows)
    if len(view['devices']) > 1:
        lines += ['', '## GPU interconnect', ''] + _link_matrix(view) + ['', LEVEL_LEGEND + '.']
        for group in view['nvlink_groups']:
            lines.append('')
            lines.append('NVLink group (%s): GPUs %s' % (group['label'], ', '.join(str(g) for g in group['gpus'])))
    if view['placements']:
        lines += ['', '## Instances', '']
        lines += _table(['Instance', 'GPUs', 'CPUs', 'NUMA nodes'], [
            [p['name'], ', '.join(str(g) for g in p['gpus']) or '-', p['cpulist'] or '-',
             ', '.join(str(n) for n in p['numa_nodes']) or '-'] for p in view['placements']])
    if view['findings'] is not None:
        lines += ['', '## Findings', '']
        if not view['findings']:
            lines.append('No findings.')
        for f in view['findings']:
            lines.append('- **%s** `%s`: %s Fix: %s' % (
                _md(f.get('severity')), _md(f.get('code')), _md(f.get('message')), _md(f.get('fix'))))
    return '\n'.join(lines) + '\n'


# -- SVG ---------------------------------------------------------------------------------------

MARGIN = 20
CHAR_W = 7          # approximate width of a 12 px character
GPU_W, GPU_H, GAP = 176, 104, 12
NODE_MIN_W, NODE_H = 260, 74
LINK_H = 56         # vertical room for the PCIe link between a node and its GPUs
SOCKET_HEADER = 26


class _Svg(object):
    def __init__(self):
        self.parts = []

    def rect(self, x, y, w, h, fill='none', stroke='#333333', width=1, rx=4, dash=None):
        self.parts.append('<rect x="%d" y="%d" width="%d" height="%d" rx="%d" fill="%s" stroke="%s" '
                          'stroke-width="%s"%s/>' % (x, y, w, h, rx, fill, stroke, width,
                                                     ' stroke-dasharray="%s"' % dash if dash else ''))

    def line(self, x1, y1, x2, y2, stroke='#333333', width=1, dash=None):
        self.parts.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="%s"%s/>' % (
            x1, y1, x2, y2, stroke, width, ' stroke-dasharray="%s"' % dash if dash else ''))

    def text(self, x, y, content, size=12, fill='#000000', weight=None, anchor=None, cls=None):
        attrs = ' font-weight="%s"' % weight if weight else ''
        attrs += ' text-anchor="%s"' % anchor if anchor else ''
        attrs += ' class=%s' % quoteattr(cls) if cls else ''
        self.parts.append('<text x="%d" y="%d" font-size="%d" fill="%s"%s>%s</text>' % (
            x, y, size, fill, attrs, escape(str(content))))


def _fit(text, width, size=12):
    """Cut text to what fits in width pixels at font size (about 0.6 em per character)."""
    text = str(text)
    chars = max(4, int(width / (size * 0.6)))
    return text if len(text) <= chars else text[:chars - 1] + '~'


def _column_width(node):
    return max(NODE_MIN_W, len(node['gpus']) * (GPU_W + GAP) - GAP)


def _draw_cpu_bar(svg, view, node, x, y, w):
    cpus = node.get('cpus') or []
    svg.rect(x, y, w, 10, fill='#EEEEEE', stroke='#999999', rx=2)
    owner = {}
    for p in view['placements']:
        for cpu in p['cpus']:
            owner.setdefault(cpu, p)
    run_start = None
    for i, cpu in enumerate(cpus + [None]):
        current = owner.get(cpu)
        previous = owner.get(cpus[i - 1]) if i else None
        if run_start is not None and current is not previous:
            x1, x2 = x + w * run_start // len(cpus), x + w * i // len(cpus)
            svg.rect(x1, y, max(1, x2 - x1), 10, fill=previous['color'], stroke='none', rx=0)
            run_start = None
        if current is not None and run_start is None:
            run_start = i


def _draw_gpu(svg, view, device, x, y):
    pcie = device.get('pcie') or {}
    names = _placement_names(view, device.get('index'))
    color = next((p['color'] for p in view['placements'] if device.get('index') in p['gpus']), None)
    degraded = bool(pcie.get('degraded'))
    stroke = color or (DEGRADED_COLOR if device.get('error') else '#555555')
    svg.rect(x, y, GPU_W, GPU_H, fill='#F7FBEF', stroke=stroke, width=1 if stroke == '#555555' else 3)
    svg.text(x + 8, y + 16, 'GPU %s' % device.get('index'), weight='bold')
    if names:
        svg.text(x + GPU_W - 8, y + 16, _fit(', '.join(names), GPU_W // 2), fill=color, anchor='end')
    svg.text(x + 8, y + 31, _fit(device.get('name') or 'unknown', GPU_W - 16, 11), size=11)
    svg.text(x + 8, y + 46, '%s  %s' % (device.get('pci_bus_id') or '?', _gib(device.get('memory_total_mib'))),
             size=11, fill='#444444')
    link, best = _pcie_label(pcie)
    if degraded:
        svg.text(x + 8, y + 61, 'PCIe %s' % link, size=11, fill=DEGRADED_COLOR, weight='bold', cls='degraded')
        svg.text(x + 8, y + 76, 'max %s' % best, size=11, fill=DEGRADED_COLOR)
    else:
        svg.text(x + 8, y + 61, 'PCIe %s' % link, size=11)
    if device.get('error'):
        message = str(device.get('error')).split(': ', 1)[-1]
        svg.text(x + 8, y + 91, _fit('ERROR: %s' % message, GPU_W - 16, 10), size=10,
                 fill=DEGRADED_COLOR, cls='error')
    elif device.get('mig_mode') == 'enabled':
        svg.text(x + 8, y + 91, 'MIG enabled', size=10)


def _draw_sockets(svg, view, top):
    """Draw sockets, nodes and GPUs from y=top.

    Returns (bottom y, {gpu index: (centre x, bottom y)}, right edge x).
    """
    has_gpus = bool(view['devices'])
    gpu_y = top + SOCKET_HEADER + NODE_H + LINK_H
    bottom = (gpu_y + GPU_H if has_gpus else top + SOCKET_HEADER + NODE_H) + 12
    anchors = {}
    x = MARGIN
    for socket, nodes in view['sockets']:
        socket_x = x
        x += 10
        for node in nodes:
            w = _column_width(node)
            node_y = top + SOCKET_HEADER
            svg.rect(x, node_y, w, NODE_H, fill='#EEF3FA', stroke='#336699')
            memory = node.get('memory_total_mib')
            name = ('Node %s (no NUMA)' if view['nodes_synthesized'] else 'NUMA node %s') % node.get('id')
            svg.text(x + 8, node_y + 18, _fit('%s - %s' % (name, 'memory unknown' if memory is None else _gib(memory)),
                                              w - 16), weight='bold')
            cpus = node.get('cpus') or []
            svg.text(x + 8, node_y + 36, _fit('CPUs %s (%d)' % (node.get('cpulist') or 'none', len(cpus)), w - 16))
            if cpus:
                _draw_cpu_bar(svg, view, node, x + 8, node_y + 48, w - 16)
            for i, device in enumerate(node['gpus']):
                gx = x + i * (GPU_W + GAP)
                _draw_pcie_link(svg, device, gx + GPU_W // 2, node_y + NODE_H, gpu_y)
                _draw_gpu(svg, view, device, gx, gpu_y)
                anchors[device.get('index')] = (gx + GPU_W // 2, gpu_y + GPU_H)
            x += w + GAP
        x += 10 - GAP
        label = 'Socket %s' % socket if socket is not None else 'Nodes without CPUs / unknown socket'
        svg.rect(socket_x, top, x - socket_x, bottom - top, stroke='#222222', width=1.5, rx=8)
        svg.text(socket_x + 10, top + 17, label, size=13, weight='bold')
        x += 2 * GAP
    if view['unattached_gpus']:
        box_x = x
        x += 10
        for device in view['unattached_gpus']:
            _draw_gpu(svg, view, device, x, gpu_y)
            anchors[device.get('index')] = (x + GPU_W // 2, gpu_y + GPU_H)
            x += GPU_W + GAP
        x += 10 - GAP
        svg.rect(box_x, top, x - box_x, bottom - top, stroke='#888888', dash='6,4', rx=8)
        svg.text(box_x + 10, top + 17, 'GPUs with unknown NUMA node', size=13, weight='bold')
        x += 2 * GAP
    return bottom, anchors, x


def _draw_pcie_link(svg, device, x, y1, y2):
    """Vertical PCIe link from the NUMA node box down to the GPU; red, dashed and labelled when degraded."""
    if (device.get('pcie') or {}).get('degraded'):
        svg.line(x, y1, x, y2, stroke=DEGRADED_COLOR, width=3, dash='6,3')
        svg.text(x + 6, (y1 + y2) // 2 + 4, 'DEGRADED', size=10, fill=DEGRADED_COLOR, weight='bold', cls='degraded')
    else:
        svg.line(x, y1, x, y2, stroke='#777777', width=1.5)


def _draw_nvlink_groups(svg, view, anchors, top):
    y = top
    for group in view['nvlink_groups']:
        y += 18
        xs = [anchors[g][0] for g in group['gpus'] if g in anchors]
        if not xs:
            continue
        for g in group['gpus']:
            if g in anchors:
                svg.line(anchors[g][0], anchors[g][1], anchors[g][0], y, stroke=NVLINK_COLOR, width=2)
        svg.line(min(xs), y, max(xs), y, stroke=NVLINK_COLOR, width=4)
        y += 16
        svg.text(min(xs), y, 'NVLink %s: GPUs %s' % (group['label'], ', '.join(str(g) for g in group['gpus'])),
                 fill='#4A7A00', weight='bold', cls='nvlink')
    return y


def _draw_text_block(svg, lines, x, y, width):
    """Draw (text, size, colour, weight, class) lines wrapped to width; return the y below them."""
    for content, size, fill, weight, cls in lines:
        for part in textwrap.wrap(content, max(20, width // CHAR_W)) or ['']:
            y += size + 5
            svg.text(x, y, part, size=size, fill=fill, weight=weight, cls=cls)
    return y


def render_svg(gpu, numa, findings=None, placements=None, hostname=None):
    """Return the topology picture as a standalone SVG document."""
    view = build_view(gpu, numa, findings, placements, hostname)
    svg = _Svg()
    svg.text(MARGIN, 28, view['title'], size=18, weight='bold')
    svg.text(MARGIN, 48, _cpu_summary(view), size=12, fill='#333333')
    svg.text(MARGIN, 64, 'GPUs: %s' % _gpu_summary(view), size=12, fill='#333333')
    bottom, anchors, right = _draw_sockets(svg, view, 80)
    y = _draw_nvlink_groups(svg, view, anchors, bottom)
    width = max(right + MARGIN, 760)
    text_width = width - 2 * MARGIN

    lines = []
    if view['placements']:
        lines.append(('Instances', 14, '#000000', 'bold', None))
    y = _draw_text_block(svg, lines, MARGIN, y + 10, text_width)
    for p in view['placements']:
        y += 18
        svg.rect(MARGIN, y - 11, 12, 12, fill=p['color'], stroke='none', rx=2)
        svg.text(MARGIN + 18, y, '%s: GPUs %s, CPUs %s, NUMA nodes %s' % (
            p['name'], ', '.join(str(g) for g in p['gpus']) or '-', p['cpulist'] or '-',
            ', '.join(str(n) for n in p['numa_nodes']) or '-'), cls='placement')
    if view['findings'] is not None:
        lines = [('Findings', 14, '#000000', 'bold', None)]
        if not view['findings']:
            lines.append(('No findings.', 12, '#333333', None, None))
        for f in view['findings']:
            failure = f.get('severity') == 'failure'
            lines.append(('[%s] %s: %s' % (f.get('severity'), f.get('code'), f.get('message')), 12,
                          DEGRADED_COLOR if failure else '#8A5A00', 'bold' if failure else None, 'finding'))
            lines.append(('Fix: %s' % f.get('fix'), 11, '#444444', None, 'fix'))
        y = _draw_text_block(svg, lines, MARGIN, y + 14, text_width)
    height = y + MARGIN
    return ''.join([
        '<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
        'font-family="DejaVu Sans, Arial, sans-serif">' % (width, height, width, height),
        '<title>%s</title>' % escape(view['title']),
        '<rect x="0" y="0" width="%d" height="%d" fill="#FFFFFF"/>' % (width, height),
    ] + svg.parts + ['</svg>\n'])
