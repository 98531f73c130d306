# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Where the playbooks' reports go on the controller (report_root, for the lookup llmops.vllm.report_dir), and the
set_stats key that names them for AWX's job artifacts and the closing summary (REPORTS_STAT)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

# The set_stats key under which playbooks name the reports they wrote.
REPORTS_STAT = 'llmops_reports'


def report_root(environ):
    """Where playbooks write their reports on the controller.

    LLMOPS_REPORT_DIR when set; else, under ansible-runner (AWX's jobs, ansible-navigator), the job's artifact
    directory, which the runner keeps and AWX brings back from the execution node; else reports/ under the working
    directory.
    """
    if environ.get('LLMOPS_REPORT_DIR'):
        return environ['LLMOPS_REPORT_DIR'].rstrip('/') or '/'
    if environ.get('AWX_ISOLATED_DATA_DIR'):
        return os.path.join(environ['AWX_ISOLATED_DATA_DIR'], 'reports')
    return 'reports'
