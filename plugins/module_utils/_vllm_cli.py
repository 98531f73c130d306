# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""What the installed vLLM's command line offers, read from its own help text."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

# vLLM and Hugging Face never reach the hub (models are local paths), and send no usage statistics.
OFFLINE_ENV = {'HF_HUB_OFFLINE': '1', 'TRANSFORMERS_OFFLINE': '1'}
QUIET_ENV = {'VLLM_NO_USAGE_STATS': '1', 'DO_NOT_TRACK': '1'}
# How the collection runs the installed vLLM's command line (vllm serve --help, imports).
CLI_ENV = dict(OFFLINE_ENV, **QUIET_ENV)

# An option line of argparse's help: two spaces, then the option strings.
_OPTION_LINE = re.compile(r'^  (-[^ ].*)$')
_LONG_OPTION = re.compile(r'(?<![\w-])(--[a-z0-9][a-z0-9-]*)')


def serve_flags(help_text):
    """Return the sorted long options of `vllm serve --help=all` (or `--help` on older versions)."""
    flags = set()
    for line in (help_text or '').splitlines():
        match = _OPTION_LINE.match(line)
        if not match:
            continue
        # Option strings end where the description column starts (two or more spaces).
        options = re.split(r' {2,}', match.group(1), maxsplit=1)[0]
        flags.update(_LONG_OPTION.findall(options))
    flags.discard('--help')
    return sorted(flags)
