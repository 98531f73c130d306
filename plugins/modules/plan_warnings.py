#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
module: plan_warnings
short_description: Show a plan's warnings to the operator and keep them for the run's closing summary
version_added: 0.1.0
description:
  - Shows each warning as an Ansible warning that starts with the host, once per run, and adds it to the host's
    C(llmops_warnings) fact, which the closing play of C(site.yml) lists.
  - Runs on the controller only (an action plugin); it never contacts the host.
  - The roles' preflights call it with the warnings of their plans (placement, serving, install and build plans,
    the topology findings).
author:
  - llmops.vllm maintainers (@llmops)
extends_documentation_fragment:
  - llmops.vllm.attributes
  - llmops.vllm.attributes.facts
  - llmops.vllm.attributes.facts_module
options:
  warnings:
    description: The plan's warnings, one message each.
    type: list
    elements: str
    required: true
  source:
    description: The stage that warns (a role name), shown between the host and the message.
    type: str
  show:
    description: Whether to show new warnings; V(false) only records them (for warnings another module showed).
    type: bool
    default: true
seealso:
  - module: llmops.vllm.topology_check
'''

EXAMPLES = r'''
- name: Show the serving plan's warnings
  llmops.vllm.plan_warnings:
    warnings: "{{ vllm_server_plan['warnings'] }}"
    source: vllm_server
'''

RETURN = r'''
new:
  description: The warning lines this call added (and showed).
  returned: always
  type: list
  elements: str
  sample:
    - "host gpu-node01: vllm_server: instance big: its tensor-parallel group spans sockets 0, 1 without NVLink."
ansible_facts:
  description: Facts to add to the host.
  returned: always
  type: dict
  contains:
    llmops_warnings:
      description: Every warning line of the host in this run, each once, in the order first seen.
      returned: always
      type: list
      elements: str
'''

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.llmops.vllm.plugins.module_utils._warnings import FACT, merge_warnings  # noqa: E402


def main():
    # Reached only without the action plugin (e.g. ansible-doc tests): the host's earlier warnings are unknown.
    module = AnsibleModule(
        argument_spec={
            'warnings': {'type': 'list', 'elements': 'str', 'required': True},
            'source': {'type': 'str'},
            'show': {'type': 'bool', 'default': True},
        },
        supports_check_mode=True,
    )
    lines, new = merge_warnings([], module.params['warnings'], 'this host', module.params['source'])
    if module.params['show']:
        for line in new:
            module.warn(line)
    module.exit_json(changed=False, new=new, ansible_facts={FACT: lines})


if __name__ == '__main__':
    main()
