# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""The run's plan warnings: what each preflight shows the operator and the closing summary lists.

Every warning is one line that starts with the host ("host gpu-node01: instance big: ..."). A host's list
(the fact llmops_warnings) keeps each line once, in the order it was first seen, so that a preflight that
runs twice (site.yml's, then the role's own) neither shows nor lists a warning twice.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

FACT = 'llmops_warnings'


def merge_warnings(known, warnings, host, source=None):
    """Return (all, new): the host's warning lines with these added, and the lines not known before.

    known: the host's llmops_warnings so far (or None). warnings: the plan's messages. source: the stage
    that warns (a role name), put between host and message.
    """
    lines = list(known or [])
    seen = set(lines)
    new = []
    for message in warnings or []:
        message = str(message).strip()
        if not message:
            continue
        line = 'host %s: %s%s' % (host, '%s: ' % source if source else '', message)
        if line not in seen:
            seen.add(line)
            lines.append(line)
            new.append(line)
    return lines, new
