#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
module: numa_facts
short_description: Gather NUMA node, CPU topology and CPU model facts
version_added: 0.1.0
description:
  - Returns the NUMA nodes, online CPUs and CPU model of the target as the single fact C(ansible_facts.numa).
  - Changes nothing on the target.
  - >-
    Reads only, below O(root): C(sys/devices/system/node/{online,node*/cpulist,node*/meminfo,node*/distance}),
    C(sys/devices/system/cpu/{online,cpu*/topology/physical_package_id,cpu*/topology/thread_siblings_list}),
    C(sys/devices/system/cpu/cpu*/topology/core_id) of the CPUs without C(thread_siblings_list), and C(proc/cpuinfo).
    A missing optional file makes its field V(null).
  - A kernel without NUMA nodes (no C(node*) directories) is reported as a single node 0 holding all online CPUs,
    with RV(ansible_facts.numa.nodes_synthesized=true).
  - When C(sys/devices/system/cpu/online) is missing, the online CPUs are the C(processor) entries of
    C(proc/cpuinfo), else the CPUs of the NUMA nodes; when none of them is readable the module fails.
  - >-
    Compiler flags are valid for GCC 12 and later. Known Arm server cores get C(-march) and C(-mtune) for their core
    (HiSilicon Kunpeng 920 C(tsv110), Arm Neoverse N1, N2, V1, V2; V2 is tuned as C(neoverse-n2) because GCC 12 does
    not know C(neoverse-v2)). x86-64 CPUs get the highest of C(-march=x86-64), C(-march=x86-64-v2) and
    C(-march=x86-64-v3) whose instructions the C(proc/cpuinfo) flags prove. Other aarch64 CPUs get
    C(-march=armv8-a); anything else gets no flags.
author:
  - llmops.vllm maintainers (@llmops)
extends_documentation_fragment:
  - llmops.vllm.attributes
  - llmops.vllm.attributes.facts
  - llmops.vllm.attributes.facts_module
options:
  root:
    description:
      - Directory holding the C(sys) and C(proc) trees to read, for example a copy of another host's tree.
      - With V(/) the CPU architecture is that of the running machine; otherwise it is derived from C(proc/cpuinfo).
    type: path
    default: /
notes:
  - Runs only on Linux targets.
seealso:
  - module: llmops.vllm.gpu_facts
'''

EXAMPLES = r'''
- name: Gather NUMA facts
  llmops.vllm.numa_facts:

- name: CPUs of the first NUMA node
  ansible.builtin.debug:
    msg: "{{ ansible_facts.numa.nodes[0].cpulist }}"

- name: Compiler flags for a native build
  ansible.builtin.debug:
    msg: "CFLAGS={{ ansible_facts.numa.cpu.compiler_flags | join(' ') }}"
'''

RETURN = r'''
ansible_facts:
  description: Facts to add to C(ansible_facts).
  returned: always
  type: dict
  contains:
    numa:
      description: NUMA and CPU topology of the host.
      returned: always
      type: dict
      contains:
        nodes:
          description: NUMA nodes, ordered by id.
          type: list
          elements: dict
          returned: always
          contains:
            id:
              description: Node number.
              type: int
              sample: 0
            socket:
              description:
                - Physical package (socket) of the node's CPUs.
                - V(null) for nodes without CPUs and when the package is unknown.
              type: int
              sample: 0
            cpus:
              description: Online CPUs of the node; V(null) when its cpulist is missing.
              type: list
              elements: int
              sample: [0, 1, 2, 3]
            cpulist:
              description: The same CPUs as a canonical cpulist.
              type: str
              sample: "0-31"
            memory_total_mib:
              description: Memory of the node in MiB (C(MemTotal)); V(null) when unknown.
              type: int
              sample: 129000
            distances:
              description:
                - SLIT distances from this node to every node, in the order of RV(ansible_facts.numa.nodes).
                - V(null) when unknown.
              type: list
              elements: int
              sample: [10, 12, 20, 22]
        nodes_synthesized:
          description: Whether the kernel exposes no NUMA node and a single node 0 was reported instead.
          type: bool
          returned: always
          sample: false
        online_cpus:
          description: Online CPUs.
          type: list
          elements: int
          returned: always
          sample: [0, 1, 2, 3]
        online_cpulist:
          description: Online CPUs as a canonical cpulist.
          type: str
          returned: always
          sample: "0-127"
        cores:
          description:
            - Physical cores of the online CPUs, ordered by their lowest CPU. Each core is the list of its online
              hardware threads (SMT siblings), lowest first; without SMT every core holds one CPU.
            - Read from C(cpu*/topology/thread_siblings_list), so it is right however the machine numbers its
              siblings (CPUs C(c) and C(c+N) on many x86 servers, C(c) and C(c+1) on some virtual machines and
              client CPUs).
              A CPU without that file is grouped by C(core_id) within its C(physical_package_id).
            - V(null) when neither tells the core of some online CPU.
            - The C(llmops.vllm.vllm_placement) filter keeps the threads of a core together and binds one OpenMP
              thread per core from it.
          type: list
          elements: list
          returned: always
          sample: [[0, 64], [1, 65], [2, 66], [3, 67]]
        cpu:
          description: CPU model and topology; each value V(null) when unknown.
          type: dict
          returned: always
          contains:
            architecture:
              description: Machine architecture, for example V(aarch64) or V(x86_64).
              type: str
              sample: aarch64
            vendor:
              description: CPU vendor (V(HiSilicon), V(Arm), V(Intel), V(AMD), ...).
              type: str
              sample: HiSilicon
            model_name:
              description: CPU model, from the table of known Arm cores or the x86 C(model name).
              type: str
              sample: Kunpeng-920
            implementer:
              description: Arm CPU implementer code (aarch64 only).
              type: str
              sample: "0x48"
            part:
              description: Arm CPU part number (aarch64 only).
              type: str
              sample: "0xd01"
            microarchitecture:
              description: Core microarchitecture of known Arm cores; V(null) otherwise.
              type: str
              sample: tsv110
            sockets:
              description: Number of sockets.
              type: int
              sample: 2
            cores_per_socket:
              description: Physical cores per socket.
              type: int
              sample: 64
            threads_per_core:
              description: Hardware threads per core.
              type: int
              sample: 1
            compiler_flags:
              description: GCC flags that are safe for this CPU (see the module description); may be empty.
              type: list
              elements: str
              sample: ["-march=armv8.2-a", "-mtune=tsv110"]
'''

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.llmops.vllm.plugins.module_utils._numa import NumaFactsError, collect_numa  # noqa: E402

ARGUMENT_SPEC = dict(root=dict(type='path', default='/'))


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    try:
        numa = collect_numa(module.params['root'])
    except NumaFactsError as e:
        module.fail_json(msg=str(e))
    module.exit_json(changed=False, ansible_facts={'numa': numa})


if __name__ == '__main__':
    main()
