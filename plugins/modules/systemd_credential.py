#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
module: systemd_credential
short_description: Keep a secret as a systemd credential encrypted for this host
version_added: 0.9.0
description:
  - Writes O(secret) to O(path) encrypted with C(systemd-creds encrypt) under the credential name O(name), so that
    the secret is never on the host's disk in clear. A unit gets it with C(LoadCredentialEncrypted=NAME:PATH).
  - The encryption key is the host's credential secret, and also its TPM2 where O(with_key) asks for it (V(auto)
    takes the TPM2 when the host has one).
  - >-
    Idempotent: an existing file is decrypted and compared; it is written again only when it does not hold the
    secret (or does not decrypt on this host).
  - With O(state=absent), removes the file.
author:
  - llmops.vllm maintainers (@llmops)
extends_documentation_fragment:
  - llmops.vllm.attributes
  - llmops.vllm.attributes.modify_module
options:
  path:
    description: The credential file, in a directory that exists (it is written with mode 0600).
    type: path
    required: true
  name:
    description: The credential's name, embedded in the file; the unit's C(LoadCredentialEncrypted=) uses it.
    type: str
    default: model-key
  secret:
    description: The secret. Required with O(state=present); never logged.
    type: str
  with_key:
    description: The key of C(systemd-creds encrypt --with-key).
    type: str
    choices: [auto, host, tpm2, host+tpm2]
    default: auto
  state:
    description: Whether the credential file exists.
    type: str
    choices: [present, absent]
    default: present
requirements:
  - systemd 250 or newer (C(systemd-creds)).
seealso:
  - name: systemd credentials
    description: How units receive credentials.
    link: https://systemd.io/CREDENTIALS/
'''

EXAMPLES = r'''
- name: Deliver the model key to the node
  llmops.vllm.systemd_credential:
    path: /etc/llmops/credentials/model-fleet.cred
    secret: "{{ vault_model_key_fleet }}"
  no_log: true
'''

RETURN = r'''
path:
  description: The credential file.
  returned: always
  type: str
  sample: /etc/llmops/credentials/model-fleet.cred
'''

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.llmops.vllm.plugins.module_utils._credentials import WITH_KEYS, encrypt, holds  # noqa: E402

ARGUMENT_SPEC = dict(
    path=dict(type='path', required=True),
    name=dict(type='str', default='model-key'),
    secret=dict(type='str', no_log=True),
    with_key=dict(type='str', choices=list(WITH_KEYS), default='auto'),
    state=dict(type='str', choices=['present', 'absent'], default='present'),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True,
                           required_if=[('state', 'present', ['secret'])])
    path, name = module.params['path'], module.params['name']
    if module.params['state'] == 'absent':
        changed = os.path.exists(path)
        if changed and not module.check_mode:
            os.unlink(path)
        module.exit_json(changed=changed, path=path)
    systemd_creds = module.get_bin_path('systemd-creds', required=True)

    def run(argv, data=None):
        return module.run_command(argv, data=data, binary_data=True)

    if holds(run, systemd_creds, path, name, module.params['secret']):
        module.exit_json(changed=False, path=path)
    if not module.check_mode:
        error = encrypt(run, systemd_creds, path, name, module.params['secret'], module.params['with_key'])
        if error:
            module.fail_json(msg='systemd_credential: %s: %s' % (path, error))
    module.exit_json(changed=True, path=path)


if __name__ == '__main__':
    main()
