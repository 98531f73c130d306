# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Filter of playbooks/autotune.yml: the report of a batch-size tuning.

Documentation: autotune_report.yml next to this file.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.module_utils._autotune import report_markdown


def autotune_report(tuning):
    """The Markdown report of one tuning; see autotune_report.yml."""
    try:
        return report_markdown(tuning)
    except (KeyError, TypeError, ValueError) as e:
        raise AnsibleFilterError('autotune_report: the tuning is incomplete (%s: %s). Fix: pass what '
                                 'playbooks/autotune.yml gathers' % (type(e).__name__, e)) from e


class FilterModule(object):
    """llmops.vllm autotune filters."""

    def filters(self):
        return {'autotune_report': autotune_report}
