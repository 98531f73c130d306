# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.llmops.vllm.plugins.module_utils._reports import report_root


def test_the_report_root_is_the_variable_else_the_runners_artifacts_else_reports():
    assert report_root({'LLMOPS_REPORT_DIR': '/srv/reports/', 'AWX_ISOLATED_DATA_DIR': '/runner/artifacts/1'}) \
        == '/srv/reports'
    assert report_root({'AWX_ISOLATED_DATA_DIR': '/runner/artifacts/1'}) == '/runner/artifacts/1/reports'
    assert report_root({'LLMOPS_REPORT_DIR': ''}) == 'reports'
