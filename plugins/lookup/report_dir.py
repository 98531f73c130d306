# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
name: report_dir
short_description: Where the playbooks write their reports on the controller
version_added: 0.1.0
author: llmops.vllm maintainers (@llmops)
description:
  - The directory of each named kind of report (C(topology), C(benchmark), C(autotune), C(diagnose)) under one root.
  - The root is C(LLMOPS_REPORT_DIR) when set; else, under ansible-runner (AWX's jobs, ansible-navigator), the
    job's artifact directory's C(reports/), which the runner keeps and AWX brings back from the execution node;
    else C(reports/) under the working directory.
  - Each playbook's own variable (C(benchmark_report_dir) and the like) still wins.
options:
  _terms:
    description: The kinds of report.
    type: list
    elements: str
    required: true
'''

EXAMPLES = r'''
- name: Where the benchmark writes
  ansible.builtin.debug:
    msg: "{{ benchmark_report_dir | default(lookup('llmops.vllm.report_dir', 'benchmark')) }}"
'''

RETURN = r'''
_raw:
  description: One directory per kind of report.
  type: list
  elements: str
'''

import os

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.llmops.vllm.plugins.module_utils._reports import report_root


class LookupModule(LookupBase):

    def run(self, terms, variables=None, **kwargs):
        root = report_root(os.environ)
        out = []
        for kind in terms:
            if not isinstance(kind, str) or not kind or '/' in kind or kind.startswith('.'):
                raise AnsibleLookupError('report_dir: a kind of report is one plain name (topology, benchmark, '
                                         '...), got %r' % (kind,))
            out.append(os.path.join(root, kind))
        return out
