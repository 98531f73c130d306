# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Every playbook runs the way AWX runs it: nothing asks for input (no vars_prompt, no pause without a time), and
every report lands under the reports' root (llmops.vllm.report_dir), which an AWX job keeps with its artifacts."""

from __future__ import annotations

import pathlib

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[3]
FILES = sorted(p for d in ('playbooks', 'roles', 'awx') for p in (REPO / d).rglob('*.yml')) + [REPO / 'site.yml']


def _walk(node):
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


@pytest.mark.parametrize('path', FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_nothing_asks_for_input(path):
    for node in _walk(yaml.safe_load(path.read_text())):
        assert 'vars_prompt' not in node, path
        for name in ('ansible.builtin.pause', 'pause'):
            if name in node:
                args = node[name] or {}
                assert 'seconds' in args or 'minutes' in args, '%s: %s waits for a key press' % (path, node.get('name'))


def test_no_playbook_writes_reports_under_a_fixed_directory():
    sources = '\n'.join(p.read_text() for p in FILES)
    assert "default('reports/" not in sources
    for kind in ('benchmark', 'autotune', 'diagnose', 'topology'):
        assert "lookup('llmops.vllm.report_dir', '%s')" % kind in sources
