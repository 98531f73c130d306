# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import os

from ansible_collections.llmops.vllm.plugins.module_utils._credentials import encrypt, holds


class FakeCreds(object):
    """systemd-creds with a reversible 'encryption' (the bytes reversed), recording each call."""

    def __init__(self, fail=False):
        self.calls, self.fail = [], fail

    def __call__(self, argv, data=None):
        self.calls.append(argv)
        if argv[1] == 'decrypt':
            with open(argv[-2]) as f:
                return 0, f.read()[::-1], ''
        if self.fail:
            return 1, '', 'TPM2 not available'
        with open(argv[-1], 'w') as f:
            f.write(data[::-1])
        return 0, '', ''


def test_a_missing_credential_is_written_and_then_held(tmp_path):
    path, creds = str(tmp_path / 'model-lab.cred'), FakeCreds()
    assert not holds(creds, 'systemd-creds', path, 'model-key', 'AGE-SECRET-KEY-1X')
    assert encrypt(creds, 'systemd-creds', path, 'model-key', 'AGE-SECRET-KEY-1X\n\n', 'auto') is None
    assert creds.calls[-1] == ['systemd-creds', 'encrypt', '--name=model-key', '--with-key=auto', '-',
                               path + '.partial']
    assert oct(os.stat(path).st_mode & 0o777) == '0o600' and not os.path.exists(path + '.partial')
    assert holds(creds, 'systemd-creds', path, 'model-key', 'AGE-SECRET-KEY-1X')
    assert not holds(creds, 'systemd-creds', path, 'model-key', 'AGE-SECRET-KEY-1Y')


def test_a_failed_encryption_leaves_nothing(tmp_path):
    path = str(tmp_path / 'model-lab.cred')
    assert encrypt(FakeCreds(fail=True), 'systemd-creds', path, 'model-key', 'k', 'tpm2') == 'TPM2 not available'
    assert os.listdir(str(tmp_path)) == []
