#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
module: topology_check
short_description: Preflight findings about a host's GPU and NUMA topology
version_added: 0.1.0
description:
  - Turns the facts of M(llmops.vllm.gpu_facts) and M(llmops.vllm.numa_facts) into findings, each with a fix hint.
  - Every finding is shown as a warning; the module fails when a finding's code is listed in O(fail_on).
  - The checks are those of the filter P(llmops.vllm.topology_findings#filter), which documents each code.
author:
  - llmops.vllm maintainers (@llmops)
extends_documentation_fragment:
  - llmops.vllm.attributes
  - llmops.vllm.attributes.info_module
options:
  gpu:
    description: The C(gpu) fact of M(llmops.vllm.gpu_facts).
    type: dict
    required: true
  numa:
    description: The C(numa) fact of M(llmops.vllm.numa_facts).
    type: dict
    required: true
  max_gpus_per_socket:
    description: Most GPUs one socket should carry.
    type: int
    default: 4
  min_cuda_driver:
    description:
      - CUDA version (C(major.minor), as text) the NVIDIA driver must support, the CUDA of the vLLM build. The role
        R(llmops.vllm.discovery,ansible_collections.llmops.vllm.discovery_role) passes the fleet setting
        C(vllm_cuda_version), which R(llmops.vllm.vllm_install,ansible_collections.llmops.vllm.vllm_install_role)
        also checks, with the same comparison and the same words.
      - A usable GPU whose driver reports no CUDA version gets the finding V(cuda_driver_too_old) too.
      - Not checked when unset or empty, or on hosts without a usable GPU.
    type: str
  fail_on:
    description: Finding codes that fail the module instead of warning.
    type: list
    elements: str
    default: []
    choices: [too_many_gpus_per_socket, pcie_degraded, gpu_numa_node_unknown, numa_node_without_memory,
              cuda_driver_too_old, gpu_query_error]
  ignore:
    description: Finding codes to leave out.
    type: list
    elements: str
    default: []
    choices: [too_many_gpus_per_socket, pcie_degraded, gpu_numa_node_unknown, numa_node_without_memory,
              cuda_driver_too_old, gpu_query_error]
seealso:
  - module: llmops.vllm.gpu_facts
  - module: llmops.vllm.numa_facts
'''

EXAMPLES = r'''
- name: Warn about topology problems, stop on degraded PCIe links
  llmops.vllm.topology_check:
    gpu: "{{ ansible_facts['gpu'] }}"
    numa: "{{ ansible_facts['numa'] }}"
    min_cuda_driver: "{{ vllm_cuda_version }}"
    fail_on:
      - pcie_degraded
'''

RETURN = r'''
findings:
  description: The findings, warnings and failures alike.
  returned: always
  type: list
  elements: dict
  sample:
    - code: pcie_degraded
      severity: failure
      message: "GPU 3 (0000:81:00.0) runs its PCIe link at Gen3 x8, below Gen4 x16."
      fix: "Reseat the card or move it to a x16 slot; check the BIOS link settings."
      gpus: [3]
      numa_nodes: [2]
      sockets: [1]
  contains:
    code:
      description: What was found.
      type: str
      returned: always
    severity:
      description: V(warning) or V(failure).
      type: str
      returned: always
    message:
      description: What is wrong, with the GPUs and nodes concerned.
      type: str
      returned: always
    fix:
      description: How to fix it.
      type: str
      returned: always
    gpus:
      description: Indexes of the GPUs concerned.
      type: list
      elements: int
      returned: always
    numa_nodes:
      description: NUMA nodes concerned.
      type: list
      elements: int
      returned: always
    sockets:
      description: Sockets concerned.
      type: list
      elements: int
      returned: always
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.vllm.plugins.module_utils._topology_findings import CODES, topology_findings


def describe(finding):
    return '%s: %s Fix: %s' % (finding['code'], finding['message'], finding['fix'])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            gpu=dict(type='dict', required=True),
            numa=dict(type='dict', required=True),
            max_gpus_per_socket=dict(type='int', default=4),
            min_cuda_driver=dict(type='str'),
            fail_on=dict(type='list', elements='str', default=[], choices=list(CODES)),
            ignore=dict(type='list', elements='str', default=[], choices=list(CODES)),
        ),
        supports_check_mode=True,
    )
    options = dict((key, module.params[key]) for key in ('max_gpus_per_socket', 'min_cuda_driver', 'fail_on', 'ignore'))
    try:
        findings = topology_findings(module.params['gpu'], module.params['numa'], options)
    except ValueError as e:
        module.fail_json(msg='topology_check: %s' % e)

    failures = [f for f in findings if f['severity'] == 'failure']
    for finding in findings:
        if finding['severity'] == 'warning':
            module.warn(describe(finding))
    if failures:
        module.fail_json(
            msg='topology check failed: %s' % ' | '.join(describe(f) for f in failures),
            findings=findings,
        )
    module.exit_json(changed=False, findings=findings)


if __name__ == '__main__':
    main()
