# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Filter of the pki role: the certificates the fleet CA issues to one holder.

Documentation: pki_plan.yml, pki_crl_plan.yml and pki_ca_plan.yml next to this file.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.module_utils._pki import PkiPlanError
from ansible_collections.llmops.vllm.plugins.module_utils._pki import ca_plan as _ca_plan
from ansible_collections.llmops.vllm.plugins.module_utils._pki import crl_plan as _crl_plan
from ansible_collections.llmops.vllm.plugins.module_utils._pki import pki_plan as _pki_plan


def pki_plan(settings, identity=None, host=None):
    """Certificates of one holder; see pki_plan.yml."""
    try:
        return _pki_plan(settings, identity, host)
    except PkiPlanError as e:
        raise AnsibleFilterError(str(e)) from e


def pki_ca_plan(settings, found, stage='', host=None):
    """The fleet CAs and a rollover's stage; see pki_ca_plan.yml."""
    try:
        return _ca_plan(settings, found, stage, host)
    except PkiPlanError as e:
        raise AnsibleFilterError(str(e)) from e


def pki_crl_plan(settings, revoked=None, one_more=None, host=None, next_update=None):
    """The fleet CA's CRL; see pki_crl_plan.yml."""
    try:
        return _crl_plan(settings, revoked or [], one_more or None, host, next_update or None)
    except PkiPlanError as e:
        raise AnsibleFilterError(str(e)) from e


class FilterModule(object):
    """llmops.vllm pki filter."""

    def filters(self):
        return {
            'pki_ca_plan': pki_ca_plan,
            'pki_crl_plan': pki_crl_plan,
            'pki_plan': pki_plan,
        }
