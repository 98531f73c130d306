# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type


class ModuleDocFragment(object):

    # Standard attribute descriptions; combine with one of the fragments below.
    DOCUMENTATION = r'''
options: {}
attributes:
  check_mode:
    description: Can run in C(check_mode) and return changed status prediction without modifying target.
  diff_mode:
    description: >-
      Will return details on what has changed (or possibly needs changing in C(check_mode)), when in diff mode.
'''

    # Modules that only read the target.
    INFO_MODULE = r'''
options: {}
attributes:
  check_mode:
    support: full
    details:
      - This action does not modify state.
  diff_mode:
    support: N/A
    details:
      - This action does not modify state.
'''

    # Modules that change something, with a full check mode and no diff.
    MODIFY_MODULE = r'''
options: {}
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
'''

    # Description of the facts attribute; combine with FACTS_MODULE.
    FACTS = r'''
options: {}
attributes:
  facts:
    description: Action returns an C(ansible_facts) dictionary that will update existing host facts.
'''

    # Facts modules: read only, return ansible_facts.
    FACTS_MODULE = r'''
options: {}
attributes:
  check_mode:
    support: full
    details:
      - This action does not modify state.
  diff_mode:
    support: N/A
    details:
      - This action does not modify state.
  facts:
    support: full
'''
