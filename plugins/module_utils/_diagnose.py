# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""Known vLLM failure signatures in journal records, each with what it means and what to do."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import re

# id, pattern, what it means, what to do (the remediation list of the deployment's runbook).
SIGNATURES = (
    ('oom', r'OOM detected|CUDA out of memory|OutOfMemoryError',
     'the engine ran out of GPU memory (and retried with a smaller batch)',
     'lower the instance\'s max_num_seqs or max_num_batched_tokens, or its gpu_memory_utilization; check the '
     'KV-cache size against the model\'s max_model_len'),
    ('cuda_illegal_memory_access', r'CUDA error 700|illegal memory access',
     'a kernel touched memory it does not own (CUDA error 700)',
     'check that the driver supports the CUDA of the installed vLLM (gpu_facts: driver_version, cuda_version), '
     'the PCIe link of the GPU (lspci -vvv: LnkSta against LnkCap), and its memory bandwidth (bandwidthTest)'),
    ('xid', r'\bXid\b',
     'the NVIDIA driver reported an Xid error for a GPU',
     'look the Xid code up in NVIDIA\'s Xid table; 48, 63, 64, 74, 79 and 94/95 point at the GPU or its link: '
     'drain the node and check it (nvidia-smi -q, lspci -vvv)'),
    ('nccl_timeout', r'NCCL.*(timed out|[Tt]imeout)|Watchdog caught collective operation timeout',
     'a collective between the instance\'s GPUs or hosts timed out (NCCL)',
     'check the interconnect of the tensor- and pipeline-parallel group (NVLink, PCIe topology, the network '
     'between hosts); rerun with NCCL_DEBUG=INFO'),
    ('engine_died', r'EngineDeadError|EngineCore encountered a fatal error|Engine core proc(ess)? \S+ died|'
     r'engine core exited unexpectedly',
     'the engine process died, and the instance answers nothing until systemd restarts it',
     'read the instance\'s journal lines before this one for the cause; systemd restarts the unit'),
)
_COMPILED = tuple((sid, re.compile(pattern), meaning, fix) for sid, pattern, meaning, fix in SIGNATURES)


def message_of(record):
    """The MESSAGE of a journal record as text: journalctl -o json gives bytes that are not UTF-8 as a list."""
    message = record.get('MESSAGE')
    if isinstance(message, list):
        return bytes(message).decode('utf-8', 'replace')
    return message if isinstance(message, str) else ''


def _shown(message):
    """(id, meaning, fix) of each signature a message shows, in SIGNATURES' order."""
    return [(sid, meaning, fix) for sid, pattern, meaning, fix in _COMPILED if pattern.search(message)]


def matches(message):
    """The ids of the signatures a message shows, in SIGNATURES' order."""
    return [sid for sid, _meaning, _fix in _shown(message)]


def scan(records, units=None):
    """Findings in journal records (dicts of journalctl -o json), one per unit and signature, in the order first seen.

    With UNITS, only what the units' own processes logged counts: journalctl -u also gives systemd's lines about a
    unit (from init.scope), and those quote its command line. Each finding: unit, signature, count, first and last
    (microseconds since the epoch, as the journal gives them), sample (the first matching line), meaning and fix."""
    findings = {}
    for record in records:
        unit = record.get('_SYSTEMD_UNIT') or record.get('SYSLOG_IDENTIFIER') or ''
        if units is not None and unit not in units:
            continue
        message = message_of(record)
        for sid, meaning, fix in _shown(message):
            stamp = int(record.get('__REALTIME_TIMESTAMP') or 0)
            finding = findings.get((unit, sid))
            if finding is None:
                findings[(unit, sid)] = {'unit': unit, 'signature': sid, 'count': 1, 'first': stamp, 'last': stamp,
                                         'sample': message[:500], 'meaning': meaning, 'fix': fix}
            else:
                finding['count'] += 1
                finding['last'] = max(finding['last'], stamp)
    return list(findings.values())


def parse_journal(output):
    """Records of journalctl -o json's output (one JSON object per line); lines that are not JSON are skipped."""
    records = []
    for line in output.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


# What the host's facts add to each signature's fix (diagnose.yml's context).
_CONTEXT = {
    'oom': ('numa_memory_mib',),
    'cuda_illegal_memory_access': ('gpu', 'degraded_pcie'),
    'xid': ('gpu', 'degraded_pcie'),
    'nccl_timeout': ('gpu', 'degraded_pcie'),
    'engine_died': ('warnings',),
}


def _context_text(name, value):
    if name == 'degraded_pcie':
        return 'degraded PCIe links: %s' % (', '.join(value) if value else 'none')
    if name == 'numa_memory_mib':
        nodes = ', '.join('node %s %s MiB' % item for item in sorted(value.items()))
        return 'memory per NUMA node: %s' % (nodes or 'unknown')
    if name == 'warnings':
        return 'preflight warnings: %s' % (' | '.join(value) if value else 'none')
    return str(value)


def explain(finding, context=None):
    """One line for the operator: the unit, what the signature means, how often, the fix, and what the host adds.

    context: {gpu: text, degraded_pcie: [bus ids], numa_memory_mib: {node: MiB}, warnings: [text]};
    a missing key is left out.
    """
    context = context or {}
    extra = ['%s' % _context_text(name, context[name]) for name in _CONTEXT.get(finding['signature'], ())
             if name in context]
    line = '%s: %s (%d line%s, e.g. "%s"). Fix: %s.' % (
        finding['unit'], finding['meaning'], finding['count'], '' if finding['count'] == 1 else 's', finding['sample'],
        finding['fix'])
    return line + (' On this host: %s.' % '; '.join(extra) if extra else '')
