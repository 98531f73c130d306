# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pytest

from ansible.errors import AnsibleLookupError

from ansible_collections.llmops.vllm.plugins.lookup.report_dir import LookupModule


def test_each_kind_gets_its_directory_under_the_root(monkeypatch):
    monkeypatch.delenv('LLMOPS_REPORT_DIR', raising=False)
    monkeypatch.setenv('AWX_ISOLATED_DATA_DIR', '/runner/artifacts/7')
    assert LookupModule().run(['benchmark', 'topology']) == ['/runner/artifacts/7/reports/benchmark',
                                                             '/runner/artifacts/7/reports/topology']
    monkeypatch.setenv('LLMOPS_REPORT_DIR', '/srv/llmops')
    assert LookupModule().run(['diagnose']) == ['/srv/llmops/diagnose']


@pytest.mark.parametrize('kind', ['', '../etc', 'a/b', 3])
def test_a_kind_is_one_plain_name(kind):
    with pytest.raises(AnsibleLookupError, match='one plain name'):
        LookupModule().run([kind])
