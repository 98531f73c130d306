# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""Models sealed at rest: every file encrypted with age (X25519, ChaCha20-Poly1305) to one key's recipient.

A sealed model directory holds <file>.age for each model file, the files kept in clear (config.json by default:
the preflight reads it, and it holds no weights) and MANIFEST, which records the recipient and the SHA-256 and
size of every file's plaintext. The node decrypts it at the instance's start into the unit's private tmpfs and
checks every checksum there (roles/vllm_server/files/vllm-model-open).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import hashlib
import json
import os

MANIFEST = 'llmops-sealed.json'
FORMAT = 1
SUFFIX = '.age'
CLEAR_DEFAULT = ('config.json',)
# What vllm-model-open exits with when the key or the files are wrong: the unit does not restart in a loop.
REFUSAL_STATUS = 78
# The systemd credential's name, in the credential file and in LoadCredentialEncrypted=.
CREDENTIAL_ID = 'model-key'
# Where an instance's plaintext lives: a tmpfs in the unit's own mount namespace.
PLAIN_ROOT = '/run/vllm-models'
# The opener (roles/vllm_server/files/vllm-model-open), run by the system's Python in isolated mode.
OPENER_PATH = '/usr/local/libexec/llmops/vllm-model-open'
OPENER = ('/usr/bin/python3', '-I', OPENER_PATH)

_CHARSET = 'qpzry9x8gf2tvdw0s3jn54khce6mua7l'
_GENERATOR = (0x3b6a57b2, 0x26508e6d, 0x1ea119fa, 0x3d4233dd, 0x2a1462b3)
_SECRET_HRP = 'age-secret-key-'
_PUBLIC_HRP = 'age'


class SealingError(ValueError):
    """A key, a manifest or a model directory is not usable; the message says what and how to fix it."""


def _polymod(values):
    check = 1
    for value in values:
        top = check >> 25
        check = (check & 0x1ffffff) << 5 ^ value
        for i in range(5):
            check ^= _GENERATOR[i] if (top >> i) & 1 else 0
    return check


def _hrp_expand(hrp):
    return [ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp]


def _convert(data, source, target, pad):
    acc, bits, out, top = 0, 0, [], (1 << target) - 1
    for value in data:
        acc = (acc << source) | value
        bits += source
        while bits >= target:
            bits -= target
            out.append((acc >> bits) & top)
    if pad and bits:
        out.append((acc << (target - bits)) & top)
    elif not pad and (bits >= source or (acc << (target - bits)) & top):
        raise ValueError('bad padding')
    return out


def bech32_decode(text):
    """(hrp, bytes) of a Bech32 string, as age writes its keys (no length limit)."""
    lower = text.strip().lower()
    pos = lower.rfind('1')
    if pos < 1 or len(lower) - pos < 7 or any(c not in _CHARSET for c in lower[pos + 1:]):
        raise ValueError('not Bech32')
    hrp, data = lower[:pos], [_CHARSET.index(c) for c in lower[pos + 1:]]
    if _polymod(_hrp_expand(hrp) + data) != 1:
        raise ValueError('bad checksum')
    return hrp, bytes(_convert(data[:-6], 5, 8, False))


def bech32_encode(hrp, payload):
    data = _convert(bytearray(payload), 8, 5, True)
    check = _polymod(_hrp_expand(hrp) + data + [0] * 6) ^ 1
    data += [(check >> 5 * (5 - i)) & 31 for i in range(6)]
    return hrp + '1' + ''.join(_CHARSET[d] for d in data)


def age_recipient(identity, name='the key'):
    """The age1... recipient of an AGE-SECRET-KEY-1... identity. The message of an error never holds the key."""
    try:
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
    except ImportError as e:
        raise SealingError('%s: the Python package cryptography is needed on the controller to read age keys. Fix: '
                           'install python3-cryptography (or pip install cryptography)' % name) from e
    lines = [line.strip() for line in str(identity or '').splitlines() if line.strip() and not line.startswith('#')]
    try:
        if len(lines) != 1:
            raise ValueError('one key line expected')
        hrp, raw = bech32_decode(lines[0])
        if hrp != _SECRET_HRP or len(raw) != 32:
            raise ValueError('not an age X25519 identity')
        public = X25519PrivateKey.from_private_bytes(raw).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    except ValueError:
        raise SealingError('%s is not an age identity (one line AGE-SECRET-KEY-1..., as age-keygen writes). Fix: '
                           'put the secret key line of age-keygen\'s output in the vault' % name) from None
    return bech32_encode(_PUBLIC_HRP, public)


def valid_recipient(recipient):
    try:
        hrp, raw = bech32_decode(recipient)
    except ValueError:
        return False
    return hrp == _PUBLIC_HRP and len(raw) == 32 and recipient == recipient.strip().lower()


def file_digest(path):
    digest = hashlib.sha256()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            digest.update(block)
    return digest.hexdigest()


def model_files(src):
    """Relative paths of the regular files under a model directory, sorted; hidden entries are left out."""
    found = []
    for root, dirs, files in os.walk(src):
        dirs[:] = sorted(d for d in dirs if not d.startswith('.'))
        for name in files:
            if not name.startswith('.') and os.path.isfile(os.path.join(root, name)):
                found.append(os.path.relpath(os.path.join(root, name), src))
    return sorted(found)


def parse_manifest(text, where):
    """The manifest of a sealed model, checked; SealingError names `where` and the fix."""
    try:
        manifest = json.loads(text)
    except ValueError as e:
        raise SealingError('%s is not JSON (%s). Fix: seal the model again (playbooks/model_seal.yml)'
                           % (where, e)) from None
    files = manifest.get('files') if isinstance(manifest, dict) else None
    if (not isinstance(files, dict) or manifest.get('format') != FORMAT
            or not valid_recipient(manifest.get('recipient') or '')
            or not all(isinstance(v, dict) and len(str(v.get('sha256', ''))) == 64 and isinstance(v.get('size'), int)
                       for v in files.values())
            or any(os.path.isabs(p) or '..' in p.split('/') for p in files)):
        raise SealingError('%s is not a sealed-model manifest of format %d. Fix: seal the model again '
                           '(playbooks/model_seal.yml)' % (where, FORMAT))
    manifest.setdefault('clear', [])
    return manifest


def seal_plan(src, recipient, before=None, clear=CLEAR_DEFAULT, digests=None):
    """What sealing src for recipient does to a sealed directory whose manifest is `before`.

    Returns {'manifest': the new manifest, 'encrypt': [paths], 'copy': [clear paths], 'remove': [paths in the
    sealed directory that are gone]}. A file whose plaintext and recipient are unchanged is left as it is: its
    ciphertext stays byte for byte, so that copies of the sealed directory compare equal.
    """
    digests = digests if digests is not None else {}
    files = {}
    for path in model_files(src):
        full = os.path.join(src, path)
        files[path] = {'sha256': digests.get(path) or file_digest(full), 'size': os.path.getsize(full)}
    clear = sorted(p for p in files if p in set(clear or ()))
    manifest = {'format': FORMAT, 'recipient': recipient, 'files': files, 'clear': clear}
    old = before or {}
    same_key = old.get('recipient') == recipient
    old_files, old_clear = old.get('files') or {}, set(old.get('clear') or [])
    # A clear file does not depend on the key; a sealed one is encrypted again for another recipient.
    unchanged = [p for p in files if old_files.get(p) == files[p] and (p in clear) == (p in old_clear)
                 and (same_key or p in clear)]
    stored = set(stored_name(p, p in clear) for p in files)
    gone = [stored_name(p, p in old_clear) for p in old_files]
    return {'manifest': manifest,
            'encrypt': [p for p in files if p not in clear and p not in unchanged],
            'copy': [p for p in clear if p not in unchanged],
            'remove': sorted(p for p in set(gone) if p not in stored)}


def stored_name(path, clear):
    return path if clear else path + SUFFIX


def manifest_text(manifest):
    return json.dumps(manifest, indent=1, sort_keys=True) + '\n'


def sealed_summary(manifest):
    """What the serving plan keeps of a manifest: recipient, the plaintext's size and its file count."""
    return {'recipient': manifest['recipient'], 'files': len(manifest['files']),
            'plain_bytes': sum(f['size'] for f in manifest['files'].values())}


def tmpfs_bytes(plain_bytes):
    """The private tmpfs's size for a model's plaintext: the files, plus 64 MiB and 1 % for the file system."""
    return int(plain_bytes * 1.01) + (64 << 20)
