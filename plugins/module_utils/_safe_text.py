# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""What an inventory value may hold when a unit, nginx.conf, keepalived.conf or redis.conf takes it as it is.

One rule each, for every plan: a value that breaks one (a newline starts a directive of its own, a space or a quote
ends the value, a % is a unit specifier, ; { } $ # end or change an nginx or keepalived directive) is refused by the
plan that reads it, naming the host and the variable.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

_PATH = re.compile(r'/[A-Za-z0-9._/@+=,:-]*\Z')
PATH_RULE = 'an absolute path of letters, digits and . _ / @ + = , : - without ..'
CONTROL = re.compile(r'[\x00-\x1f\x7f]')


def safe_path(value):
    """Whether value is an absolute path that any of those files may hold unquoted."""
    return isinstance(value, str) and bool(_PATH.match(value)) and '/../' not in value + '/'


# A served model name: what a request's "model" names, the edge routes by and the unit's description shows.
SERVED_MODEL_NAME = re.compile(r'^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}\Z')
SERVED_MODEL_NAME_RULE = 'letters, digits and . _ : / @ + - (at most 128), e.g. meta-llama/Llama-3.1-8B'
# A model hub id: owner/name.
HUB_ID = re.compile(r'^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*\Z')
