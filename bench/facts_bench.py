# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""How fast numa_facts and gpu_facts are, next to ansible.builtin.setup.

Builds the 128-core, 8-GPU Kunpeng 920 fixture tree in a temporary directory and prints, in one run:

- the in-process time of the numa and gpu collectors (median of --runs);
- the module process alone (python -m <module> <args file>, no controller) for ping, numa_facts on the
  fixture and setup gather_subset=hardware on this machine;
- end to end: `ansible localhost -m <module>` for the same three (ping is the fixed cost of any ad-hoc
  command);

each median of --e2e-runs, the three commands run in turn so load drift hits them alike, and the ratios
numa_facts / setup, raw and above the ping baseline. Goals: collector <= 50 ms, numa_facts <= 10 % of setup.

Usage: .venv/bin/python bench/facts_bench.py [--runs 50] [--e2e-runs 7] [--skip-e2e]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / 'collections'))

from ansible_collections.llmops.vllm.plugins.module_utils._gpu import collect_gpu  # noqa: E402
from ansible_collections.llmops.vllm.plugins.module_utils._numa import collect_numa  # noqa: E402
from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import (  # noqa: E402
    KUNPENG920_8xA100,
    fake_nvml,
    write_sysfs,
)

COLLECTOR_GOAL_MS = 50.0
SETUP_RATIO_GOAL = 0.10
# (label, ansible module, python module, module arguments); '{root}' is the fixture tree.
COMMANDS = [
    ('ping', 'ansible.builtin.ping', 'ansible.modules.ping', {}),
    ('numa_facts root=<fixture>', 'llmops.vllm.numa_facts',
     'ansible_collections.llmops.vllm.plugins.modules.numa_facts', {'root': '{root}'}),
    ('setup gather_subset=hardware', 'ansible.builtin.setup', 'ansible.modules.setup',
     {'gather_subset': 'hardware'}),
]


def median_ms(function, runs):
    function()  # warm the page cache and imports
    timings = []
    for _run in range(runs):
        start = time.perf_counter()
        function()
        timings.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(timings)


def timed_ms(command, env, cwd):
    start = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    elapsed = (time.perf_counter() - start) * 1000.0
    if result.returncode != 0:
        raise SystemExit('%s failed:\n%s%s' % (' '.join(command), result.stdout, result.stderr))
    return elapsed


def interleaved_medians(commands, env, cwd, runs):
    """Run the commands in turn, once to warm up and then runs times; return their median times."""
    timings = [[] for _command in commands]
    for round_number in range(runs + 1):
        for index, command in enumerate(commands):
            elapsed = timed_ms(command, env, cwd)
            if round_number:
                timings[index].append(elapsed)
    return [statistics.median(t) for t in timings]


def process_commands(root, workdir):
    commands = []
    for label, _ansible_name, python_module, args in COMMANDS:
        args_file = Path(workdir) / ('%s.json' % python_module)
        args = dict((k, v.format(root=root)) for k, v in args.items())
        args_file.write_text(json.dumps({'ANSIBLE_MODULE_ARGS': args}))
        commands.append((label, [sys.executable, '-m', python_module, str(args_file)]))
    return commands


def ansible_commands(root):
    ansible = str(REPO / '.venv' / 'bin' / 'ansible')
    commands = []
    for label, ansible_name, _python_module, args in COMMANDS:
        arg_text = ' '.join('%s=%s' % (k, v.format(root=root)) for k, v in args.items())
        commands.append((label, [ansible, 'localhost', '-m', ansible_name] + (['-a', arg_text] if arg_text else [])))
    return commands


def ratios(times):
    ping, numa, setup = times
    above = (numa - ping) / (setup - ping) if setup > ping else float('nan')
    return numa / setup, above


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0])
    parser.add_argument('--runs', type=int, default=50, help='in-process runs per collector (default 50)')
    parser.add_argument('--e2e-runs', type=int, default=7, help='runs per command (default 7)')
    parser.add_argument('--skip-e2e', action='store_true', help='only time the collectors')
    options = parser.parse_args()

    topo = KUNPENG920_8xA100
    env = dict(os.environ, PYTHONPATH=str(REPO / 'collections'), ANSIBLE_COLLECTIONS_PATH=str(REPO / 'collections'),
               ANSIBLE_LOCALHOST_WARNING='False', ANSIBLE_INVENTORY_UNPARSED_WARNING='False',
               ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    sections = []
    with tempfile.TemporaryDirectory(prefix='facts-bench-') as workdir:
        root = write_sysfs(Path(workdir) / 'root', topo)
        collectors = [
            ('numa collector (collect_numa)', median_ms(lambda: collect_numa(root), options.runs)),
            ('gpu collector (collect_gpu, fake NVML)', median_ms(lambda: collect_gpu(fake_nvml(topo), root),
                                                                 options.runs)),
        ]
        sections.append(('in process, median of %d' % options.runs, collectors))
        if not options.skip_e2e:
            for title, commands in (('module process: python -m <module> <args>', process_commands(root, workdir)),
                                    ('end to end: ansible localhost -m <module>', ansible_commands(root))):
                times = interleaved_medians([c for _label, c in commands], env, workdir, options.e2e_runs)
                sections.append(('%s, median of %d' % (title, options.e2e_runs),
                                 list(zip([label for label, _c in commands], times))))

    print('Fixture %s: 128 CPUs, %d NUMA nodes, %d GPUs' % (topo['name'], len(topo['nodes']),
                                                            len(topo['gpu']['devices'])))
    width = max(len(label) for _title, rows in sections for label, _ms in rows)
    for title, rows in sections:
        print('\n%s' % title)
        for label, ms in rows:
            print('  {0:<{1}}  {2:>8.1f} ms'.format(label, width, ms))
    collector_ms = collectors[0][1]
    print('\nnuma collector <= %.0f ms: %s (%.1f ms)' % (
        COLLECTOR_GOAL_MS, 'met' if collector_ms <= COLLECTOR_GOAL_MS else 'MISSED', collector_ms))
    for title, rows in sections[1:]:
        raw, above = ratios([ms for _label, ms in rows])
        print('numa_facts / setup, %s: %.1f %% raw, %.1f %% above the ping baseline (goal <= %.0f %%: %s)' % (
            title.split(':', 1)[0], 100 * raw, 100 * above, 100 * SETUP_RATIO_GOAL,
            'met' if above <= SETUP_RATIO_GOAL else 'MISSED'))


if __name__ == '__main__':
    main()
