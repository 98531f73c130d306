# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The node summary's filters: registered, and serves_on_gpu refuses what is not a summary."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.filter import node


def test_the_filters_are_registered():
    assert node.FilterModule().filters() == {'node_summary': node.node_summary, 'serves_on_gpu': node.serves_on_gpu}


def test_serves_on_gpu_reads_the_instances_devices():
    assert node.serves_on_gpu({'instances': [{'name': 'a', 'device': 'cpu'}, {'name': 'b', 'device': 'cuda'}]})
    assert not node.serves_on_gpu({'instances': [{'name': 'a', 'device': 'cpu'}]})
    assert not node.serves_on_gpu(None)


def test_serves_on_gpu_refuses_a_list():
    with pytest.raises(AnsibleFilterError, match='expected a node summary'):
        node.serves_on_gpu([{'device': 'cuda'}])
