# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""systemd credentials: a secret encrypted with systemd-creds (the host key, and TPM2 where present), so that it
is never on the node's disk in clear; a unit gets it with LoadCredentialEncrypted=.

Encryption is randomised, so whether a credential file holds the wanted secret is read by decrypting it.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

WITH_KEYS = ('auto', 'host', 'tpm2', 'host+tpm2')


def normalised(secret):
    return secret.strip() + '\n'


def holds(run, systemd_creds, path, name, secret):
    """Whether the credential file at path decrypts (as credential `name`) to the secret.

    run(argv, data=None) -> (rc, stdout, stderr). A file that does not decrypt (another host's key, damaged)
    does not hold it.
    """
    if not os.path.isfile(path):
        return False
    rc, out, _err = run([systemd_creds, 'decrypt', '--name=%s' % name, path, '-'])
    return rc == 0 and out == normalised(secret)


def encrypt(run, systemd_creds, path, name, secret, with_key):
    """Write the credential file: encrypted to a temporary file beside it, then renamed into place (mode 0600)."""
    partial = path + '.partial'
    rc, _out, err = run([systemd_creds, 'encrypt', '--name=%s' % name, '--with-key=%s' % with_key, '-', partial],
                        data=normalised(secret))
    if rc != 0:
        if os.path.exists(partial):
            os.unlink(partial)
        return err.strip() or 'systemd-creds exited %d' % rc
    os.chmod(partial, 0o600)
    os.rename(partial, path)
    return None
