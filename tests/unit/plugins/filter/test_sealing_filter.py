# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.filter.sealing import FilterModule

IDENTITY = 'AGE-SECRET-KEY-1EJE0YLAPFECDUR6LGYQRDHJRYMXYDM6Z7QDJLC48F3QZ0AVVA4HSA6C5M9'
RECIPIENT = 'age1vynd5kuntcn467wquxnyvyuvjy0yyrhpms35hqzryv2cktlenyds7w3mfx'
age_recipients = FilterModule().filters()['age_recipients']


def test_each_key_maps_to_its_recipient():
    assert age_recipients({'fleet': IDENTITY}) == {'fleet': RECIPIENT}
    assert age_recipients({}) == {}


def test_a_bad_key_is_named_and_not_shown():
    with pytest.raises(AnsibleFilterError) as error:
        age_recipients({'fleet': IDENTITY, 'old': IDENTITY[:-2]})
    assert str(error.value).startswith('model key old is not an age identity') and IDENTITY[16:-2] not in str(
        error.value)
    with pytest.raises(AnsibleFilterError, match='expected a mapping'):
        age_recipients(['fleet'])
