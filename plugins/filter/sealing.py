# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Filter of sealed models: the age recipients of the model keys (age_recipients).

Documentation: age_recipients.yml next to this file.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.module_utils._sealing import SealingError, age_recipient


def age_recipients(keys):
    """{name: age recipient} of {name: age identity}; see age_recipients.yml. Errors never hold a key."""
    if not isinstance(keys, Mapping):
        raise AnsibleFilterError('age_recipients: expected a mapping of key names to age identities '
                                 '(vllm_server_model_keys), got %s' % type(keys).__name__)
    try:
        return dict((name, age_recipient(identity, 'model key %s' % name)) for name, identity in keys.items())
    except SealingError as e:
        raise AnsibleFilterError(str(e)) from None


class FilterModule(object):
    """llmops.vllm sealed-model filter."""

    def filters(self):
        return {
            'age_recipients': age_recipients,
        }
