# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
name: diagnose_signatures
short_description: The known vLLM failure signatures, as the diagnosis reads them
version_added: 0.1.0
author: llmops.vllm maintainers (@llmops)
description:
  - The signatures R(llmops.vllm.vllm_diagnose,ansible_collections.llmops.vllm.vllm_diagnose_module) finds in the
    vLLM units' journals (out of memory and the retry with a smaller batch, CUDA error 700, Xid, NCCL timeout, engine
    died), each with its id, its regular expression (RE2-compatible, so log shippers use the same), what it means and
    what to do.
  - The filebeat role tags shipped lines with them, so the log store and the diagnosis agree.
options: {}
'''

EXAMPLES = r'''
- name: List the signatures
  ansible.builtin.debug:
    msg: "{{ lookup('llmops.vllm.diagnose_signatures', wantlist=True) | map(attribute='id') }}"
'''

RETURN = r'''
_raw:
  description: One dict per signature with C(id), C(pattern), C(meaning) and C(fix).
  type: list
  elements: dict
'''

from ansible.plugins.lookup import LookupBase

from ansible_collections.llmops.vllm.plugins.module_utils._diagnose import SIGNATURES


class LookupModule(LookupBase):

    def run(self, terms, variables=None, **kwargs):
        return [dict(id=sid, pattern=pattern, meaning=meaning, fix=fix) for sid, pattern, meaning, fix in SIGNATURES]
