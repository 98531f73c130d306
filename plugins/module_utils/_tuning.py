# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""Where a tuned batch size lives and when it applies.

playbooks/autotune.yml leaves its choice on the node, in the local fact vllm_tuning
(/etc/ansible/facts.d/vllm_tuning.fact): {'instances': {name: {'max_num_seqs', 'fingerprint', 'tuned_at',
'previous'}}}. The serving plan reads it: a tuned value replaces the inventory's max_num_seqs as long as the
instance is still the one it was measured on (same settings but max_num_seqs, same vLLM build: its fingerprint);
otherwise the inventory's value runs and a warning says to tune again. During a trial, the candidate (the role's
vllm_server_tuning_trial) wins over both.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import hashlib
import json
from collections.abc import Mapping

TUNED = 'max_num_seqs'
FACT = 'vllm_tuning'


def fingerprint(item, install):
    """What a tuned value was measured on: the instance's settings but max_num_seqs, and the vLLM build."""
    settings = dict((k, v) for k, v in dict(item or {}).items() if k != TUNED)
    build = dict(install or {})
    seen = {'instance': settings, 'vllm': [build.get('version'), build.get('device'), build.get('package')]}
    return hashlib.sha256(json.dumps(seen, sort_keys=True, default=str).encode('utf-8')).hexdigest()[:16]


def tuned_instance(item, install, tuned=None, trial=None):
    """(item with its max_num_seqs decided, {'source', 'fingerprint', 'tuned_at'}, warning or None).

    tuned: this instance's entry of the vllm_tuning fact, or None. trial: a candidate for this instance, or None.
    """
    item = dict(item or {})
    mark = fingerprint(item, install)
    info = {'source': 'inventory' if item.get(TUNED) is not None else 'default', 'fingerprint': mark,
            'tuned_at': None}
    if trial is not None:
        item[TUNED] = trial
        info['source'] = 'trial'
        return item, info, None
    if not isinstance(tuned, Mapping) or tuned.get(TUNED) is None:
        return item, info, None
    if tuned.get('fingerprint') != mark:
        kept = item.get(TUNED)
        warning = ('its tuned max_num_seqs %s (playbooks/autotune.yml, %s) was measured with other settings or '
                   'another vLLM build, so %s runs. Fix: run playbooks/autotune.yml for it again'
                   % (tuned[TUNED], tuned.get('tuned_at') or 'no date',
                      'the inventory\'s %s' % kept if kept is not None else 'vLLM\'s default'))
        return item, info, warning
    item[TUNED] = tuned[TUNED]
    info.update(source='tuned', tuned_at=tuned.get('tuned_at'))
    return item, info, None


def tuning_inputs(tuning):
    """({name: tuned entry}, {name: trial value}) from the serving plan's tuning argument."""
    tuning = dict(tuning or {})
    tuned = tuning.get('tuned') or {}
    if isinstance(tuned, Mapping) and isinstance(tuned.get('instances'), Mapping):
        tuned = tuned['instances']
    return dict(tuned if isinstance(tuned, Mapping) else {}), dict(tuning.get('trial') or {})
