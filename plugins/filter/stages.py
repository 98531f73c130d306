# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Filter of the playbooks' stage table: the stages a run applies, and which task file of each.

Documentation: apply_stages.yml next to this file.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

# The stage whose run makes the certificate consumers pick up what it changed.
PKI = 'pki'


def apply_stages(stages, only=None):
    """The stages to apply, in order, each with tasks_from: main, or certificates for a consumer of the pki files
    (a stage with a certificates entry) that a run of the pki stage leaves out of llmops_only_stages."""
    if not isinstance(stages, (list, tuple)) or not all(isinstance(s, Mapping) and s.get('role') for s in stages):
        raise AnsibleFilterError('llmops_stages must be a list of {role, groups, ...}')
    roles = [str(s['role']) for s in stages]
    if only is not None:
        if isinstance(only, (str, bytes)) or not isinstance(only, (list, tuple)):
            raise AnsibleFilterError('llmops_only_stages is %r: it must be a list of these stages\' roles: %s. Fix: '
                                     'e.g. -e \'{"llmops_only_stages": ["pki"]}\'' % (only, ', '.join(roles)))
        unknown = [r for r in only if r not in roles]
        if unknown:
            raise AnsibleFilterError('llmops_only_stages names %s, not a stage. Fix: use these stages\' roles: %s'
                                     % (', '.join(map(str, unknown)), ', '.join(roles)))
    applied, pickups = [], []
    for stage in stages:
        if stage.get('check_only'):
            continue
        if only is None or stage['role'] in only:
            applied.append(dict(stage, tasks_from='main'))
        elif PKI in only and stage.get('certificates'):
            pickups.append(dict(stage, tasks_from='certificates'))
    # The daemons that present a client certificate first: their handlers then run before those of the servers
    # that enforce a new CRL (handlers run in the order their roles were included), so that a client whose old
    # certificate the run revokes has its new one loaded before an edge refuses the old one.
    pickups.sort(key=lambda stage: 'client' not in stage['certificates'].get('reads', []))
    return applied + pickups


class FilterModule(object):
    """llmops.vllm stages filter."""

    def filters(self):
        return {'apply_stages': apply_stages}
