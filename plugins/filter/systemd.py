# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Filter of the roles that install systemd units: the validate command that has systemd check a unit first.

Documentation: systemd_verify_command.yml next to this file.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

from ansible.errors import AnsibleFilterError

# A unit file name as systemd accepts it (systemd.unit(5)), with its type.
_UNIT = re.compile(r'^[A-Za-z0-9:_.-]+(@[A-Za-z0-9:_.-]*)?\.(service|socket|timer|path|mount|target|slice)$')

# systemd reads a unit by its name, so the candidate is checked as a copy with the unit's name. systemd-analyze
# verify exits 0 on some problems of the unit itself (an unknown key), which it prints naming the file: those fail
# too. %s is the candidate (template's validate); %% is a literal % for Python's formatting.
_COMMAND = (
    "/bin/sh -c 'dir=$(mktemp -d) && cp \"$1\" \"$dir/$2\" && out=$(systemd-analyze verify \"$dir/$2\" 2>&1); "
    "rc=$?; rm -rf \"$dir\"; printf \"%%s\\n\" \"$out\" >&2; [ \"$rc\" -eq 0 ] && ! printf \"%%s\" \"$out\" "
    "| grep -qF \"$2\"' verify %s {unit}"
)


def systemd_verify_command(unit):
    """The validate command for a template or copy that writes the unit file named unit."""
    if not isinstance(unit, str) or not _UNIT.match(unit):
        raise AnsibleFilterError('systemd_verify_command: %r is not a systemd unit file name such as '
                                 'vllm-tiny.service' % (unit,))
    return _COMMAND.format(unit=unit)


class FilterModule(object):
    """llmops.vllm systemd filter."""

    def filters(self):
        return {
            'systemd_verify_command': systemd_verify_command,
        }
