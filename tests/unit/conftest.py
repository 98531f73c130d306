# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Shared fixtures: fake sysfs trees from topology descriptions, facts from them, module runs."""

from __future__ import annotations

import contextlib
import hashlib
import json

import pytest

from ansible.module_utils import basic

from ansible_collections.llmops.vllm.plugins.module_utils._gpu import collect_gpu
from ansible_collections.llmops.vllm.plugins.module_utils._numa import collect_numa
from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import fake_nvml, write_sysfs

try:
    from ansible.module_utils.testing import patch_module_args
except ImportError:  # ansible-core < 2.19
    @contextlib.contextmanager
    def patch_module_args(args=None):
        payload = json.dumps({'ANSIBLE_MODULE_ARGS': args or {}}).encode()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(basic, '_ANSIBLE_ARGS', payload)
            yield


@pytest.fixture
def sysfs(tmp_path):
    """Write a topology's sysfs/procfs files under tmp_path; returns the tree root."""
    def build(topo):
        return write_sysfs(tmp_path / topo['name'], topo)
    return build


@pytest.fixture(scope='session')
def _shared_trees(tmp_path_factory):
    return tmp_path_factory.mktemp('trees'), {}


@pytest.fixture
def facts(_shared_trees):
    """(gpu fact, numa fact) of a topology, collected through the real collectors.

    Trees are written once per session and only read; tests that change files use `sysfs`.
    """
    base, trees = _shared_trees

    def collect(topo):
        key = hashlib.sha256(json.dumps(topo, sort_keys=True).encode()).hexdigest()[:16]
        if key not in trees:
            trees[key] = write_sysfs(base / key, topo)
        return collect_gpu(fake_nvml(topo), trees[key]), collect_numa(trees[key])
    return collect


@pytest.fixture
def run_module(capsys):
    """Run a module's main() with args; returns its JSON result with 'rc' (0 or 1) added."""
    def run(module, args):
        with patch_module_args(args), pytest.raises(SystemExit) as exit_info:
            module.main()
        result = json.loads(capsys.readouterr().out)
        result['rc'] = exit_info.value.code
        return result
    return run
