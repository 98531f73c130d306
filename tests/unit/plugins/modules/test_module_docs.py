# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The module documentation parses and matches the argument specs."""

from __future__ import annotations

import pytest
import yaml

from ansible_collections.llmops.vllm.plugins.modules import gpu_facts, numa_facts

MODULES = [gpu_facts, numa_facts]


@pytest.mark.parametrize('module', MODULES, ids=lambda m: m.__name__.rsplit('.', 1)[-1])
def test_docs_match_argument_spec(module):
    docs = yaml.safe_load(module.DOCUMENTATION)
    yaml.safe_load(module.EXAMPLES)
    returned = yaml.safe_load(module.RETURN)
    assert docs['module'] == module.__name__.rsplit('.', 1)[-1]
    assert set(docs['options']) == set(module.ARGUMENT_SPEC)
    for name, spec in module.ARGUMENT_SPEC.items():
        assert docs['options'][name]['type'] == spec['type']
        assert docs['options'][name]['default'] == spec['default']
    (fact,) = returned['ansible_facts']['contains']
    assert fact in ('gpu', 'numa')
