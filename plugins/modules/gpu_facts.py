#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
module: gpu_facts
short_description: Gather NVIDIA GPU, PCIe link and NVLink facts through NVML
version_added: 0.1.0
description:
  - Reads the NVIDIA GPUs of the target through NVML and returns them as the single fact C(ansible_facts.gpu).
  - Changes nothing on the target.
  - A host without NVIDIA driver, without NVML or without the Python library still succeeds, with
    RV(ansible_facts.gpu.available=false) and a RV(ansible_facts.gpu.reason), unless O(required=true).
  - A GPU on which NVML fails part way (for example C(GPU is lost)) is still listed with what could be read,
    and its RV(ansible_facts.gpu.devices[].error) says which call failed.
  - The NUMA node of a GPU comes from NVML when it knows it, else from C(/sys/bus/pci/devices/<bus id>/numa_node).
  - >-
    PCIe degradation: NVIDIA GPUs lower the PCIe generation at idle to save power, so a current generation below
    the maximum is not reported. A link is degraded when its current width is below its maximum width, or when the
    maximum generation GPU and slot negotiated (C(nvmlDeviceGetMaxPcieLinkGeneration)) is below the maximum
    generation of the GPU itself (C(nvmlDeviceGetGpuMaxPcieLinkGeneration)), for example a Gen4 GPU in a slot
    trained to Gen3.
author:
  - llmops.vllm maintainers (@llmops)
requirements:
  - nvidia-ml-py (Python module C(pynvml)) in the Python that runs the module on the target, to report GPUs. The
    C(llmops.vllm.baseline) role installs it in a tools venv on every host (C(llmops_tools_venv)), and the roles
    of this collection run this module with that venv's Python.
  - The NVIDIA driver (kernel module and C(libnvidia-ml.so.1)) on the target, to report GPUs.
extends_documentation_fragment:
  - llmops.vllm.attributes
  - llmops.vllm.attributes.facts
  - llmops.vllm.attributes.facts_module
options:
  required:
    description:
      - Fail when no NVIDIA GPU can be queried (no C(nvidia-ml-py), no driver, NVML not initialising, no GPU).
      - When V(false), such a host gets RV(ansible_facts.gpu.available=false) and the play goes on.
    type: bool
    default: false
notes:
  - Runs only on Linux targets.
seealso:
  - module: llmops.vllm.numa_facts
  - plugin: llmops.vllm.topology_findings
    plugin_type: filter
'''

EXAMPLES = r'''
- name: Gather GPU facts; CPU-only hosts get gpu.available=false
  llmops.vllm.gpu_facts:

- name: GPU hosts must have a working driver
  llmops.vllm.gpu_facts:
    required: true

- name: Show GPUs whose PCIe link is degraded
  ansible.builtin.debug:
    msg: "{{ ansible_facts.gpu.devices | selectattr('pcie.degraded') | map(attribute='pci_bus_id') }}"

- name: Pairs of GPUs joined by NVLink
  ansible.builtin.debug:
    msg: "{{ ansible_facts.gpu.links | selectattr('type', '==', 'NVLINK') | map(attribute='a') }}"
'''

RETURN = r'''
ansible_facts:
  description: Facts to add to C(ansible_facts).
  returned: always
  type: dict
  contains:
    gpu:
      description: NVIDIA GPUs of the host.
      returned: always
      type: dict
      contains:
        available:
          description: Whether NVML could be queried and reports at least one GPU.
          type: bool
          returned: always
          sample: true
        reason:
          description: Why no GPU is available and how to fix it; V(null) when RV(ansible_facts.gpu.available=true).
          type: str
          returned: always
          sample: >-
            The NVIDIA kernel driver is not loaded: install the NVIDIA driver and load it (modprobe nvidia) or reboot.
        driver_version:
          description: NVIDIA driver version, V(null) when unknown.
          type: str
          returned: always
          sample: "550.54.15"
        cuda_driver_version:
          description: Highest CUDA version the driver supports, as C(major.minor); V(null) when unknown.
          type: str
          returned: always
          sample: "12.4"
        count:
          description: Number of GPUs.
          type: int
          returned: always
          sample: 8
        devices:
          description: One entry per GPU, ordered by NVML index.
          type: list
          elements: dict
          returned: always
          contains:
            index:
              description: NVML index of the GPU.
              type: int
              sample: 0
            uuid:
              description: GPU UUID.
              type: str
              sample: GPU-5a8b2c1e-0f3d-4b6a-9c7e-1d2f3a4b5c6d
            name:
              description: Product name.
              type: str
              sample: NVIDIA A100 80GB PCIe
            pci_bus_id:
              description: PCI address as sysfs spells it, C(dddd:bb:dd.f) in lower case.
              type: str
              sample: "0000:3b:00.0"
            numa_node:
              description: NUMA node of the GPU, V(null) when unknown.
              type: int
              sample: 0
            cpu_affinity:
              description: CPUs NVML considers local to the GPU, as a cpulist; V(null) when unknown.
              type: str
              sample: "0-31"
            memory_total_mib:
              description: Total GPU memory in MiB.
              type: int
              sample: 81920
            memory_used_mib:
              description: Used GPU memory in MiB.
              type: int
              sample: 0
            compute_capability:
              description: CUDA compute capability, C(major.minor).
              type: str
              sample: "8.0"
            mig_mode:
              description: Current MIG mode, V(enabled) or V(disabled); V(null) when the GPU has no MIG.
              type: str
              sample: disabled
            pcie:
              description: PCIe link of the GPU; each value V(null) when NVML cannot tell.
              type: dict
              contains:
                gen_current:
                  description: Current PCIe generation (lower at idle is normal).
                  type: int
                  sample: 1
                gen_max:
                  description: Highest generation the GPU and its slot negotiated.
                  type: int
                  sample: 4
                gen_max_gpu:
                  description: Highest generation the GPU supports.
                  type: int
                  sample: 4
                width_current:
                  description: Current link width (lanes).
                  type: int
                  sample: 16
                width_max:
                  description: Maximum link width (lanes).
                  type: int
                  sample: 16
                degraded:
                  description: Whether the link is degraded (see the module description); V(null) when unknown.
                  type: bool
                  sample: false
                degraded_reason:
                  description: Short reason when RV(ansible_facts.gpu.devices[].pcie.degraded=true).
                  type: str
                  sample: width x8 below x16
            error:
              description: "First NVML failure on this GPU as C(function: message), V(null) when none."
              type: str
              sample: "nvmlDeviceGetMemoryInfo: GPU is lost"
        links:
          description:
            - One entry per unordered pair of GPUs (RV(ansible_facts.gpu.links[].a) < RV(ansible_facts.gpu.links[].b)).
            - GPUs behind an NVSwitch count as linked when they reach a common NVSwitch; their link count is the
              smaller number of NVLinks either GPU has into the switches.
          type: list
          elements: dict
          returned: always
          contains:
            a:
              description: Index of the first GPU.
              type: int
              sample: 0
            b:
              description: Index of the second GPU.
              type: int
              sample: 1
            type:
              description:
                - V(NVLINK) when the GPUs have active NVLinks between them, else the value of
                  RV(ansible_facts.gpu.links[].common_ancestor).
              type: str
              sample: NVLINK
            nvlinks:
              description: Number of active NVLinks between the two GPUs, V(0) when none.
              type: int
              sample: 8
            common_ancestor:
              description:
                - Nearest common point of the PCIe path, from nearest to farthest
                  V(INTERNAL) (same board), V(SINGLE) (one PCIe switch), V(MULTIPLE) (several PCIe switches),
                  V(HOSTBRIDGE) (same host bridge), V(NODE) (same NUMA node), V(SYSTEM) (across NUMA nodes).
                - V(null) when NVML cannot tell.
              type: str
              sample: NODE
            same_pcie_switch:
              description: Whether the GPUs share a PCIe switch (V(INTERNAL), V(SINGLE) or V(MULTIPLE)).
              type: bool
              sample: false
            same_numa_node:
              description: Whether the PCIe path stays inside one NUMA node (any level but V(SYSTEM)).
              type: bool
              sample: true
'''

import traceback  # noqa: E402

from ansible.module_utils.basic import AnsibleModule, missing_required_lib  # noqa: E402

from ansible_collections.llmops.vllm.plugins.module_utils._gpu import collect_gpu  # noqa: E402

try:
    import pynvml
except ImportError:
    pynvml = None
    PYNVML_IMPORT_ERROR = traceback.format_exc()
else:
    PYNVML_IMPORT_ERROR = None

# Root of the sysfs tree the NUMA node of a GPU is read from when NVML does not know it.
SYSFS_ROOT = '/'

ARGUMENT_SPEC = dict(required=dict(type='bool', default=False))


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    gpu = collect_gpu(pynvml, SYSFS_ROOT)
    if module.params['required'] and not gpu['available']:
        if pynvml is None:
            module.fail_json(msg=missing_required_lib('nvidia-ml-py', reason='to query NVIDIA GPUs'),
                             exception=PYNVML_IMPORT_ERROR)
        module.fail_json(msg='No usable NVIDIA GPU on this host (required=true): %s' % gpu['reason'])
    module.exit_json(changed=False, ansible_facts={'gpu': gpu})


if __name__ == '__main__':
    main()
