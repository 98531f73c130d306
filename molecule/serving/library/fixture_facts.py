# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Test-only module of the serving scenario: returns recorded facts (a fixture topology) as ansible_facts.

The only fake of the GPU rendering check: the host's gpu and numa facts, and the install's device.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
module: fixture_facts
short_description: Return recorded facts
description: Returns O(facts) as C(ansible_facts), for tests that render for hardware this machine lacks.
options:
  facts:
    description: The facts.
    type: dict
    required: true
author: llmops.vllm maintainers (@llmops)
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec={'facts': {'type': 'dict', 'required': True}}, supports_check_mode=True)
    module.exit_json(changed=False, ansible_facts=module.params['facts'])


if __name__ == '__main__':
    main()
