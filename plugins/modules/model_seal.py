#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
module: model_seal
short_description: Seal a model directory at rest with age
version_added: 0.9.0
description:
  - Encrypts every file of a model directory with C(age) to one recipient (X25519, ChaCha20-Poly1305) into a sealed
    directory, next to a manifest (C(llmops-sealed.json)) with the recipient and the SHA-256 and size of each file's
    plaintext.
  - The files named in O(clear) are copied in clear (by default C(config.json), which the preflight reads and which
    holds no weights).
  - Runs where the clear model is, normally the controller; the nodes only ever receive the sealed directory.
  - >-
    Idempotent: a file whose plaintext and recipient did not change keeps its ciphertext byte for byte, so copies
    of the sealed directory to the nodes compare equal. Sealing for another recipient (a key rotation) encrypts
    every file again.
author:
  - llmops.vllm maintainers (@llmops)
extends_documentation_fragment:
  - llmops.vllm.attributes
  - llmops.vllm.attributes.modify_module
options:
  src:
    description: The clear model directory.
    type: path
    required: true
  dest:
    description: The sealed directory; created when missing. Files in it that the model no longer has are removed.
    type: path
    required: true
  recipient:
    description: The age recipient (C(age1...)) to seal for; the public half of the key the nodes get.
    type: str
    required: true
  clear:
    description: Paths, relative to O(src), stored in clear.
    type: list
    elements: str
    default: [config.json]
requirements:
  - The C(age) command (Debian and Ubuntu package C(age)).
seealso:
  - name: age
    description: The file encryption tool and format.
    link: https://age-encryption.org/v1
'''

EXAMPLES = r'''
- name: Seal the model for the fleet's key
  llmops.vllm.model_seal:
    src: /srv/models/Qwen2.5-7B-Instruct
    dest: /srv/models/Qwen2.5-7B-Instruct.sealed
    recipient: age1vynd5kuntcn467wquxnyvyuvjy0yyrhpms35hqzryv2cktlenyds7w3mfx
  delegate_to: localhost
'''

RETURN = r'''
encrypted:
  description: Files encrypted by this run, relative to O(src).
  returned: always
  type: list
  elements: str
  sample: [model.safetensors, tokenizer.json]
copied:
  description: Files copied in clear by this run.
  returned: always
  type: list
  elements: str
  sample: [config.json]
removed:
  description: Files removed from O(dest) because the model no longer has them.
  returned: always
  type: list
  elements: str
  sample: []
manifest:
  description: The manifest written to O(dest)/llmops-sealed.json.
  returned: always
  type: dict
  sample: {"format": 1, "recipient": "age1vy...", "clear": ["config.json"],
           "files": {"model.safetensors": {"sha256": "9f86d0...", "size": 1048576}}}
'''

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.llmops.vllm.plugins.module_utils._sealing import (  # noqa: E402
    MANIFEST, SealingError, manifest_text, parse_manifest, seal_plan, stored_name, valid_recipient)

ARGUMENT_SPEC = dict(
    src=dict(type='path', required=True),
    dest=dict(type='path', required=True),
    recipient=dict(type='str', required=True),
    clear=dict(type='list', elements='str', default=['config.json']),
)


def _before(dest):
    path = os.path.join(dest, MANIFEST)
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        text = f.read()
    try:
        manifest = parse_manifest(text, path)
    except SealingError:
        return None  # sealed again from scratch
    # A file whose stored copy went missing is sealed again.
    manifest['files'] = dict((p, v) for p, v in manifest['files'].items()
                             if os.path.isfile(os.path.join(dest, stored_name(p, p in manifest['clear']))))
    return manifest


def _write(module, dest, path, run):
    target = os.path.join(dest, path)
    os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
    partial = target + '.partial'
    rc, _out, err = module.run_command(run(partial))
    if rc != 0:
        if os.path.exists(partial):
            os.unlink(partial)
        module.fail_json(msg='model_seal: %s failed: %s' % (path, err.strip()))
    os.chmod(partial, 0o644)
    os.rename(partial, target)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    src, dest, recipient = module.params['src'], module.params['dest'], module.params['recipient']
    if not os.path.isdir(src):
        module.fail_json(msg='model_seal: %s is not a directory. Fix: point src at the clear model directory' % src)
    if not valid_recipient(recipient):
        module.fail_json(msg='model_seal: %r is not an age recipient (age1..., 62 characters). Fix: give the public '
                             'key of the fleet\'s model key (age-keygen -y)' % recipient)
    if os.path.realpath(dest) == os.path.realpath(src):
        module.fail_json(msg='model_seal: dest is src. Fix: seal into another directory')
    plan = seal_plan(src, recipient, _before(dest), module.params['clear'])
    changed = bool(plan['encrypt'] or plan['copy'] or plan['remove'])
    if os.path.isfile(os.path.join(dest, MANIFEST)):
        with open(os.path.join(dest, MANIFEST)) as f:
            changed = changed or f.read() != manifest_text(plan['manifest'])
    else:
        changed = True
    if changed and not module.check_mode:
        age = module.get_bin_path('age', required=True)
        os.makedirs(dest, mode=0o755, exist_ok=True)
        for path in plan['encrypt']:
            _write(module, dest, stored_name(path, False),
                   lambda out, path=path: [age, '--encrypt', '--recipient', recipient, '--output', out,
                                           os.path.join(src, path)])
        for path in plan['copy']:
            _write(module, dest, path, lambda out, path=path: ['cp', '--', os.path.join(src, path), out])
        for path in plan['remove']:
            os.unlink(os.path.join(dest, path))
        with open(os.path.join(dest, MANIFEST + '.partial'), 'w') as f:
            f.write(manifest_text(plan['manifest']))
        os.chmod(os.path.join(dest, MANIFEST + '.partial'), 0o644)
        os.rename(os.path.join(dest, MANIFEST + '.partial'), os.path.join(dest, MANIFEST))
    module.exit_json(changed=changed, encrypted=plan['encrypt'], copied=plan['copy'], removed=plan['remove'],
                     manifest=plan['manifest'])


if __name__ == '__main__':
    main()
