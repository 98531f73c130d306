# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Filters of playbooks/benchmark.yml: where the load goes, what it costs, the report, and the comparison of two runs.

Documentation: benchmark_targets.yml, benchmark_tco.yml, benchmark_report.yml and benchmark_compare.yml next to this
file.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.module_utils import _benchmark
from ansible_collections.llmops.vllm.plugins.module_utils._tco import TcoError


def _wrap(function, *args, **kwargs):
    try:
        return function(*args, **kwargs)
    except _benchmark.BenchmarkError as e:
        raise AnsibleFilterError(str(e)) from e
    except (KeyError, TypeError) as e:
        raise AnsibleFilterError('%s: an input is incomplete (%s: %s). Fix: pass the node summaries and the results '
                                 'as playbooks/benchmark.yml does' % (function.__name__, type(e).__name__, e)) from e


def benchmark_targets(nodes, path='/v1/completions', through='auto'):
    """Where the benchmark's load goes; see benchmark_targets.yml."""
    return _wrap(_benchmark.benchmark_targets, nodes, path, through)


def benchmark_tco(results, costs, node_kinds, currency='CNY', utilisation=1.0):
    """What each target's capacity costs; see benchmark_tco.yml."""
    try:
        return _wrap(_benchmark.benchmark_tco, results, costs, node_kinds, currency, utilisation)
    except TcoError as e:
        raise AnsibleFilterError(str(e)) from e


def benchmark_report(results, shape=None, title='Fleet benchmark', tco=None):
    """The Markdown report of a run; see benchmark_report.yml."""
    return _wrap(_benchmark.benchmark_report, results, shape, title, tco)


def benchmark_compare(before, after):
    """Two runs side by side; see benchmark_compare.yml."""
    return _wrap(_benchmark.benchmark_compare, before, after)


class FilterModule(object):
    """llmops.vllm benchmark filters."""

    def filters(self):
        return {
            'benchmark_targets': benchmark_targets,
            'benchmark_tco': benchmark_tco,
            'benchmark_report': benchmark_report,
            'benchmark_compare': benchmark_compare,
        }
