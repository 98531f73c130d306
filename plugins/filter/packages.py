# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Filter of the roles' package tasks: which of the packages a role needs the host does not have yet.

Documentation: missing_packages.yml next to this file.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError


def missing_packages(wanted, installed):
    """The specs of wanted (NAME or NAME=VERSION) that installed ({name: version}) does not satisfy, in order."""
    if isinstance(wanted, str):
        wanted = [wanted]
    if not isinstance(installed, dict):
        raise AnsibleFilterError('missing_packages: the installed packages must be a mapping of name to version, '
                                 'not %s. Fix: pass ansible_local.llmops_packages | default({})'
                                 % type(installed).__name__)
    missing = []
    for spec in wanted:
        if not isinstance(spec, str) or not spec.strip():
            raise AnsibleFilterError('missing_packages: %r is not a package name. Fix: list package names, '
                                     'or NAME=VERSION' % (spec,))
        name, pinned, version = spec.strip().partition('=')
        have = installed.get(name)
        if have is None or (pinned and str(have) != version):
            missing.append(spec)
    return missing


class FilterModule(object):
    """llmops.vllm package filters."""

    def filters(self):
        return {'missing_packages': missing_packages}
