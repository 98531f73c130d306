#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
module: model_info
short_description: Read model directories on the target
version_added: 0.1.0
description:
  - For each named model path, tells whether the directory exists and returns its C(config.json).
  - Changes nothing on the target; reads only C(<path>/config.json) and C(<path>/llmops-sealed.json) of each path.
  - A model sealed at rest (M(llmops.vllm.model_seal)) returns its manifest in RV(models.NAME.sealed).
  - >-
    A C(config.json) that cannot be read, is not JSON or is not a JSON object does not fail the module: its
    RV(models.NAME.config) is V(null) and RV(models.NAME.config_error) says why.
author:
  - llmops.vllm maintainers (@llmops)
extends_documentation_fragment:
  - llmops.vllm.attributes
  - llmops.vllm.attributes.info_module
options:
  paths:
    description:
      - Model directories to read, as a mapping of a name (for example the vLLM instance name) to an absolute path.
      - The module fails when a path is not an absolute path.
    type: dict
    default: {}
notes:
  - Runs only on POSIX targets.
'''

EXAMPLES = r'''
- name: Read the models of the instances
  llmops.vllm.model_info:
    paths:
      chat: /var/lib/vllm/models/Qwen2.5-7B-Instruct
      embed: /var/lib/vllm/models/bge-m3
  register: __models

- name: Context length of the chat model
  ansible.builtin.debug:
    msg: "{{ __models.models.chat.config.max_position_embeddings | default('unknown') }}"
'''

RETURN = r'''
models:
  description: One entry per name of O(paths).
  returned: always
  type: dict
  sample:
    chat:
      exists: true
      config: {"architectures": ["Qwen2ForCausalLM"], "max_position_embeddings": 32768}
      config_error: null
      sealed: null
      sealed_error: null
  contains:
    NAME:
      description: The model directory given for this name.
      type: dict
      returned: always
      contains:
        exists:
          description: Whether the path is a directory.
          type: bool
          returned: always
          sample: true
        config:
          description:
            - The contents of C(config.json) in the directory.
            - V(null) when the directory or its C(config.json) is missing, or when RV(models.NAME.config_error) is set.
          type: dict
          returned: always
          sample: {"architectures": ["Qwen2ForCausalLM"], "max_position_embeddings": 32768}
        config_error:
          description:
            - Why C(config.json) exists but could not be used (unreadable, not JSON, not a JSON object).
            - V(null) when there is no such problem.
          type: str
          returned: always
          sample: "/var/lib/vllm/models/chat/config.json is not JSON: Expecting value: line 1 column 1 (char 0)"
        sealed:
          description:
            - The manifest (C(llmops-sealed.json)) of a model sealed at rest, with its recipient and the SHA-256 and
              size of each file's plaintext.
            - V(null) for a model in clear, or when RV(models.NAME.sealed_error) is set.
          type: dict
          returned: always
          sample: {"format": 1, "recipient": "age1vy...", "clear": ["config.json"], "files": {}}
        sealed_error:
          description: Why C(llmops-sealed.json) exists but is not a usable manifest; V(null) otherwise.
          type: str
          returned: always
          sample: null
'''

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.llmops.vllm.plugins.module_utils._models import collect_models  # noqa: E402

ARGUMENT_SPEC = dict(paths=dict(type='dict', default={}))


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    paths = module.params['paths']
    bad = sorted(str(name) for name, path in paths.items() if not isinstance(path, str) or not os.path.isabs(path))
    if bad:
        module.fail_json(msg='paths: the path of %s is not an absolute path. Fix: give each model as an absolute '
                             'directory path, or leave hub ids out' % ', '.join(bad))
    module.exit_json(changed=False, models=collect_models(paths))


if __name__ == '__main__':
    main()
