#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
module: ipvs_info
short_description: Report the IPVS table of an LVS director
version_added: 0.1.0
description:
  - Reports the virtual services of the kernel's IP Virtual Server (IPVS) table, each with its real servers, their
    forwarding method, weight and connection counts, and the packet and byte counters of services and real servers.
  - Runs C(ipvsadm -L -n --exact) and C(ipvsadm -L -n --stats --exact) and merges the two listings.
  - Changes nothing on the target.
  - Reading the table needs root (or C(CAP_NET_ADMIN)); use C(become).
author:
  - llmops.vllm maintainers (@llmops)
extends_documentation_fragment:
  - llmops.vllm.attributes
  - llmops.vllm.attributes.info_module
options:
  ipvsadm:
    description:
      - Path of the C(ipvsadm) executable.
      - By default it is looked up on C(PATH) and in the C(sbin) directories.
    type: path
  virtual_address:
    description:
      - Report only the virtual services with this IP address. IPv6 addresses compare in any notation.
      - Firewall-mark services have no address and are then left out.
    type: str
  port:
    description: Report only the virtual services on this port.
    type: int
  protocol:
    description: Report only the virtual services of this protocol.
    type: str
    choices: [tcp, udp, sctp]
  fwmark:
    description: Report only the firewall-mark virtual service with this mark.
    type: int
  fail_when_unavailable:
    description:
      - What to do when C(ipvsadm) is missing or the kernel has no IPVS (C(ip_vs) not loaded and not loadable).
      - With V(true) the module fails with a message that says which and how to fix it.
      - With V(false) it succeeds with RV(available=false), RV(unavailable_reason) and no services, for example to
        probe hosts that need not be directors.
      - Other failures (not root, unparsable output) always fail the module.
    type: bool
    default: true
notes:
  - Runs only on Linux targets.
  - The two listings come from two runs of C(ipvsadm); an entry that appeared between them has no counters
    (V(null) RV(services[].stats)), and one that vanished between them is left out.
seealso:
  - name: ipvsadm(8)
    description: The manual page of ipvsadm.
    link: https://man7.org/linux/man-pages/man8/ipvsadm.8.html
'''

EXAMPLES = r'''
- name: Read the IPVS table
  llmops.vllm.ipvs_info:
  become: true
  register: __ipvs

- name: Wait until the drained node has no active connections on the VIP
  llmops.vllm.ipvs_info:
    virtual_address: 10.89.60.100
    port: 8000
    protocol: tcp
  become: true
  register: __vip
  until: >-
    __vip.services | map(attribute='real_servers') | flatten
    | selectattr('address', 'equalto', '10.89.60.11')
    | map(attribute='active_connections') | sum == 0
  retries: 60
  delay: 5

- name: Direct routing sends no reply through the director
  ansible.builtin.assert:
    that:
      - __ipvs.services | map(attribute='real_servers') | flatten | map(attribute='forward') | unique == ['dr']
      - __ipvs.services | map(attribute='stats.outpkts') | sum == 0

- name: Probe hosts that may not be directors
  llmops.vllm.ipvs_info:
    fail_when_unavailable: false
  become: true
  register: __probe
'''

RETURN = r'''
available:
  description:
    - Whether the IPVS table could be read.
    - V(false) only with O(fail_when_unavailable=false), when C(ipvsadm) is missing or the kernel has no IPVS.
  returned: always
  type: bool
  sample: true
unavailable_reason:
  description:
    - Why the table could not be read; V(null) when RV(available=true).
    - V(ipvsadm_missing) when C(ipvsadm) is not installed (or O(ipvsadm) is no executable file), V(ipvs_unavailable)
      when C(ipvsadm) answers that it cannot initialize IPVS (no C(ip_vs) kernel module).
  returned: always
  type: str
  sample: ipvs_unavailable
msg:
  description: What is unavailable, and how to fix it.
  returned: when RV(available=false)
  type: str
  sample: >-
    the kernel has no IPVS: /usr/sbin/ipvsadm -L -n --exact failed with rc 2: Can't initialize ipvs: Protocol not
    available Are you sure that IP Virtual Server is built in the kernel or as module?. Fix: load the ip_vs kernel
    module (modprobe ip_vs; for a container, on its host)
ipvs_version:
  description: Version of the kernel's IPVS, from the heading of the listing; V(null) when unavailable or not shown.
  returned: always
  type: str
  sample: 1.2.1
connection_table_size:
  description: Size of the kernel's IPVS connection hash table; V(null) when unavailable or not shown.
  returned: always
  type: int
  sample: 4096
services:
  description:
    - The virtual services matching the filters O(virtual_address), O(port), O(protocol) and O(fwmark), in the order
      of C(ipvsadm); empty when there are none or RV(available=false).
  returned: always
  type: list
  elements: dict
  contains:
    protocol:
      description: Protocol of the service; V(null) for a firewall-mark service.
      type: str
      returned: always
      choices: [tcp, udp, sctp]
      sample: tcp
    address:
      description: Virtual IP address, without brackets for IPv6; V(null) for a firewall-mark service.
      type: str
      returned: always
      sample: 10.89.60.100
    port:
      description: Virtual port; V(null) for a firewall-mark service. V(0) for a service on all ports.
      type: int
      returned: always
      sample: 8000
    fwmark:
      description: Firewall mark of a firewall-mark service (C(FWM) in C(ipvsadm)); V(null) for the others.
      type: int
      returned: always
      sample: null
    family:
      description: Address family of the service.
      type: str
      returned: always
      choices: [ipv4, ipv6]
      sample: ipv4
    scheduler:
      description: Scheduling algorithm.
      type: str
      returned: always
      sample: wlc
    persistent:
      description: Persistence timeout in seconds; V(null) when the service is not persistent.
      type: int
      returned: always
      sample: 300
    persistence_mask:
      description:
        - Netmask that groups clients for persistence, a dotted mask for IPv4 and a prefix length for IPv6.
        - V(null) when not shown, that is when not persistent or the mask is that of one host.
      type: str
      returned: always
      sample: 255.255.255.0
    persistence_engine:
      description: Persistence engine (C(pe)), for example V(sip); V(null) when none.
      type: str
      returned: always
      sample: null
    flags:
      description:
        - Other service flags as C(ipvsadm) shows them, in its order. V(ops) for one-packet scheduling, and
          scheduler flags such as V(flag-1), V(sh-fallback) or V(sh-port).
      type: list
      elements: str
      returned: always
      sample: [sh-fallback, sh-port]
    stats:
      description:
        - Counters of the service since it was created; V(null) when the service appeared between the two runs of
          C(ipvsadm).
      type: dict
      returned: always
      contains:
        conns:
          description: Connections scheduled.
          type: int
          returned: always
          sample: 30
        inpkts:
          description: Packets from the clients.
          type: int
          returned: always
          sample: 154
        outpkts:
          description:
            - Packets from the real servers that passed the director. Stays V(0) with direct routing and tunnelling,
              where the replies bypass the director.
          type: int
          returned: always
          sample: 0
        inbytes:
          description: Bytes from the clients.
          type: int
          returned: always
          sample: 12345
        outbytes:
          description: Bytes from the real servers that passed the director.
          type: int
          returned: always
          sample: 0
    real_servers:
      description: Real servers of the service, in the order of C(ipvsadm) (sorted by address and port).
      type: list
      elements: dict
      returned: always
      contains:
        address:
          description: Address of the real server, without brackets for IPv6.
          type: str
          returned: always
          sample: 10.89.60.11
        port:
          description: Port of the real server.
          type: int
          returned: always
          sample: 8000
        forward:
          description:
            - Forwarding method. V(dr) (direct routing, C(Route)), V(nat) (C(Masq)), V(tunnel) (IP-IP, C(Tunnel)),
              V(local) (C(Local)); an unknown method in lower case as C(ipvsadm) shows it.
          type: str
          returned: always
          sample: dr
        weight:
          description: Weight; V(0) for a quiesced (drained) server that gets no new connections.
          type: int
          returned: always
          sample: 1
        active_connections:
          description: Connections in the established state (C(ActiveConn)).
          type: int
          returned: always
          sample: 2
        inactive_connections:
          description: Other connections still in the connection table (C(InActConn)).
          type: int
          returned: always
          sample: 5
        stats:
          description:
            - Counters of the real server, as RV(services[].stats); V(null) when it appeared between the two runs of
              C(ipvsadm).
          type: dict
          returned: always
          contains:
            conns:
              description: Connections scheduled.
              type: int
              returned: always
              sample: 30
            inpkts:
              description: Packets from the clients.
              type: int
              returned: always
              sample: 154
            outpkts:
              description:
                - Packets from the real servers that passed the director. Stays V(0) with direct routing and tunnelling,
                  where the replies bypass the director.
              type: int
              returned: always
              sample: 0
            inbytes:
              description: Bytes from the clients.
              type: int
              returned: always
              sample: 12345
            outbytes:
              description: Bytes from the real servers that passed the director.
              type: int
              returned: always
              sample: 0
'''

import ipaddress  # noqa: E402
import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.llmops.vllm.plugins.module_utils._ipvs import (  # noqa: E402
    IpvsError,
    filter_services,
    missing_ipvsadm,
    read_ipvs,
)

ARGUMENT_SPEC = dict(
    ipvsadm=dict(type='path'),
    virtual_address=dict(type='str'),
    port=dict(type='int'),
    protocol=dict(type='str', choices=['tcp', 'udp', 'sctp']),
    fwmark=dict(type='int'),
    fail_when_unavailable=dict(type='bool', default=True),
)


def _ipvsadm(module):
    """Return the ipvsadm to run; raise IpvsError when there is none."""
    path = module.params['ipvsadm']
    if path is None:
        found = module.get_bin_path('ipvsadm')
        if not found:
            raise missing_ipvsadm()
        return found
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise missing_ipvsadm(path)
    return path


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    params = module.params
    if params['virtual_address'] is not None:
        try:
            ipaddress.ip_address(params['virtual_address'])
        except ValueError:
            module.fail_json(msg='virtual_address %s is not an IP address. Fix: give the VIP as ipvsadm -L -n shows '
                                 'it, for example 10.89.60.100 or 2001:db8::100' % params['virtual_address'])
    try:
        table = read_ipvs(module.run_command, _ipvsadm(module))
    except IpvsError as e:
        if not e.unavailable or params['fail_when_unavailable']:
            module.fail_json(msg=str(e), unavailable_reason=e.reason if e.unavailable else None)
        module.exit_json(changed=False, available=False, unavailable_reason=e.reason, msg=str(e), ipvs_version=None,
                         connection_table_size=None, services=[])
    table['services'] = filter_services(table['services'], params['virtual_address'], params['port'],
                                        params['protocol'], params['fwmark'])
    module.exit_json(changed=False, available=True, unavailable_reason=None, **table)


if __name__ == '__main__':
    main()
