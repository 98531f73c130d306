# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The validate command for systemd units, run against real systemd-analyze on a good and a bad unit."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.filter import systemd

GOOD = "[Unit]\nDescription=good\n[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"
# systemd-analyze verify exits 0 on an unknown key; the command fails it all the same.
UNKNOWN_KEY = "[Unit]\nDescription=bad\n[Service]\nExecStart=/bin/true\nRestartSecs=5\n"


def test_the_filter_is_registered():
    assert systemd.FilterModule().filters() == {'systemd_verify_command': systemd.systemd_verify_command}


@pytest.mark.parametrize('unit', ['vllm-tiny.service', 'llmops-vllm-vips.service', 'getty@tty1.service',
                                  'a.timer'])
def test_unit_names_are_taken(unit):
    command = systemd.systemd_verify_command(unit)
    assert command.endswith(' verify %s ' + unit) and command.replace('%%', '').count('%s') == 1


@pytest.mark.parametrize('unit', ['x.service; rm -rf /', "x'.service", 'vllm-tiny', 'x.conf', '', None, 3])
def test_other_names_are_refused(unit):
    with pytest.raises(AnsibleFilterError, match='is not a systemd unit file name'):
        systemd.systemd_verify_command(unit)


@pytest.mark.skipif(shutil.which('systemd-analyze') is None, reason='needs systemd-analyze')
@pytest.mark.parametrize('content, passes', [(GOOD, True), (UNKNOWN_KEY, False)], ids=['good', 'unknown-key'])
def test_the_command_checks_the_unit_with_systemd(tmp_path, content, passes):
    candidate = tmp_path / 'tmpabc123'  # the module's temporary file has no unit name
    candidate.write_text(content)
    command = systemd.systemd_verify_command('llmops-test.service') % candidate
    result = subprocess.run(command, shell=True, capture_output=True, text=True, check=False)
    assert (result.returncode == 0) == passes, result.stderr
    if not passes:
        assert "Unknown key 'RestartSecs'" in result.stderr
