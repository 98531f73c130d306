#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
module: build_toolchain_info
short_description: Tell whether a host can build native Python extensions
version_added: 0.1.0
description:
  - Tells which of the build tools O(tools) are on the C(PATH) of the target.
  - Runs the Python O(python) once (C(python -c ...)) to learn its version and include directory, and tells whether
    that directory holds C(Python.h), that is whether the headers of this very Python (C(python3-dev)) are installed.
    The module itself runs under Ansible's interpreter, which need not be the Python that builds.
  - Changes nothing on the target.
author:
  - llmops.vllm maintainers (@llmops)
extends_documentation_fragment:
  - llmops.vllm.attributes
  - llmops.vllm.attributes.info_module
options:
  tools:
    description: Executables to look up on C(PATH).
    type: list
    elements: str
    default: [gcc, g++, cmake, git]
  python:
    description:
      - The Python whose headers and version matter, as a path or a name looked up on C(PATH).
      - The module fails when it is not executable or does not answer.
    type: path
    default: /usr/bin/python3
notes:
  - Runs only on POSIX targets.
seealso:
  - module: llmops.vllm.numa_facts
'''

EXAMPLES = r'''
- name: Probe the build toolchain
  llmops.vllm.build_toolchain_info:
    tools: [gcc, g++, cmake]
    python: /usr/bin/python3
  register: __toolchain

- name: Require a complete toolchain
  ansible.builtin.assert:
    that: __toolchain.toolchain.values() is all
    fail_msg: >-
      missing: {{ __toolchain.toolchain | dict2items | rejectattr('value') | map(attribute='key') | join(', ') }}
'''

RETURN = r'''
toolchain:
  description:
    - Whether each tool of O(tools) is on C(PATH), and under the key C(python3-dev) whether C(Python.h) of O(python)
      exists.
  returned: always
  type: dict
  sample: {"gcc": true, "g++": true, "cmake": false, "git": true, "python3-dev": true}
python_version:
  description: Version (C(major.minor)) of O(python).
  returned: always
  type: str
  sample: "3.11"
python_include:
  description: Include directory of O(python), where C(Python.h) is looked for.
  returned: always
  type: str
  sample: /usr/include/python3.11
'''

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.llmops.vllm.plugins.module_utils._toolchain import (  # noqa: E402
    ToolchainInfoError,
    collect_toolchain,
)

ARGUMENT_SPEC = dict(
    tools=dict(type='list', elements='str', default=['gcc', 'g++', 'cmake', 'git']),
    python=dict(type='path', default='/usr/bin/python3'),
)


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    try:
        result = collect_toolchain(module.run_command, module.params['tools'], module.params['python'])
    except ToolchainInfoError as e:
        module.fail_json(msg=str(e))
    module.exit_json(changed=False, **result)


if __name__ == '__main__':
    main()
