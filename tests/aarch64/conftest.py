# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Fixtures for the aarch64 tests: an arm64 Debian tree run under qemu-user emulation, and a pinned vLLM sdist.

Cold, the tree is built with debootstrap (minutes) and the sdist is downloaded from PyPI; both are cached under
aarch64/ of the shared cache outside the clone (lab/cache.sh; or $ARM64_CACHE_DIR), so a warm run only unpacks the
tree (seconds).
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
ROOTFS_SCRIPT = HERE / 'arm64_rootfs.sh'
# The shared cache of lab/cache.sh.
LLMOPS_CACHE = Path(os.environ.get('LLMOPS_CACHE_DIR')
                    or Path(os.environ.get('XDG_CACHE_HOME') or Path.home() / '.cache') / 'llmops.vllm')
CACHE = Path(os.environ.get('ARM64_CACHE_DIR') or LLMOPS_CACHE / 'aarch64')

# The pinned vLLM source: the release sdist from PyPI, checked against its published sha256.
VLLM_VERSION = '0.11.0'
VLLM_SDIST_SHA256 = 'f435a64c24e9c4178d657a76f8edd8548ddc444012f7d06a9f79ac3a6392bfae'
PYPI_SIMPLE = os.environ.get('ARM64_PYPI_SIMPLE', 'https://pypi.org/simple')

CHROOT_ENV = {'PATH': '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'LC_ALL': 'C',
              'HOME': '/root'}


def pytest_configure(config):
    config.addinivalue_line('markers', 'aarch64: runs arm64 binaries under qemu-user emulation (root, binfmt_misc)')


def _skip_reason():
    """Why this machine fundamentally cannot run arm64 code, or None."""
    if not sys.platform.startswith('linux'):
        return 'arm64 emulation needs Linux binfmt_misc; this is %s' % sys.platform
    if os.geteuid() != 0:
        return 'needs root to install qemu-user-static, mount binfmt_misc and chroot: run pytest as root'
    if platform.machine() in ('aarch64', 'arm64'):
        return None
    filesystems = Path('/proc/filesystems').read_text() if Path('/proc/filesystems').exists() else ''
    if 'binfmt_misc' not in filesystems:
        return 'the kernel has no binfmt_misc support (not in /proc/filesystems), so qemu-user cannot run arm64 code'
    if not shutil.which('apt-get') and not shutil.which('qemu-aarch64-static'):
        return 'neither qemu-aarch64-static nor apt-get (Debian/Ubuntu) to install it is available'
    return None


def run_script(*args):
    result = subprocess.run(['bash', str(ROOTFS_SCRIPT), *args], capture_output=True, text=True, check=False,
                            env=dict(os.environ, ARM64_CACHE_DIR=str(CACHE)))
    if result.returncode != 0:
        output = result.stdout + result.stderr
        pytest.fail('arm64_rootfs.sh %s failed (rc %d):\n%s' % (' '.join(args), result.returncode, output),
                    pytrace=False)
    return result.stdout.strip()


@pytest.fixture(scope='session')
def arm64_emulation():
    """qemu-aarch64 registered with binfmt_misc (installed and mounted when missing); skips where impossible."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    run_script('binfmt')


def _mounts_below(directory):
    prefix = str(directory).rstrip('/') + '/'
    with open('/proc/mounts') as mounts:
        points = [line.split()[1] for line in mounts]
    return sorted((point for point in points if (point + '/').startswith(prefix)), reverse=True)


def remove_tree(directory):
    """Unmount anything below directory, then delete it without ever crossing into another file system."""
    for point in _mounts_below(directory):
        subprocess.run(['umount', '-l', point], check=False)
    subprocess.run(['rm', '-rf', '--one-file-system', str(directory)], check=False)


@pytest.fixture(scope='session')
def arm64_root(arm64_emulation):
    """A fresh arm64 Debian bookworm tree (python3, gcc, g++) for this session, unpacked from the cached tarball."""
    tarball = run_script('tarball')
    root = Path(tempfile.mkdtemp(prefix='llmops-arm64-root-'))
    try:
        subprocess.run(['tar', '-xzf', tarball, '--numeric-owner', '-C', str(root)], check=True)
        yield root
    finally:
        remove_tree(root)


def chroot(root, *argv, check=True, stdin=None):
    """Run argv inside the arm64 tree; returns the CompletedProcess (check: fail with its output unless rc 0)."""
    result = subprocess.run(['chroot', str(root), *argv], env=CHROOT_ENV, input=stdin, capture_output=True,
                            text=True, check=False)
    if check and result.returncode != 0:
        output = result.stdout + result.stderr
        pytest.fail('in the arm64 tree, %s failed (rc %d):\n%s' % (' '.join(argv), result.returncode, output),
                    pytrace=False)
    return result


@pytest.fixture
def arm64_chroot(arm64_root):
    """chroot(*argv, check=True, stdin=None) inside the session's arm64 tree."""
    def run(*argv, check=True, stdin=None):
        return chroot(arm64_root, *argv, check=check, stdin=stdin)
    return run


def _sdist_url(version):
    """URL of vllm-<version>.tar.gz from the PyPI simple index (the index pip uses)."""
    request = urllib.request.Request('%s/vllm/' % PYPI_SIMPLE.rstrip('/'), headers={'Accept': 'text/html'})
    with urllib.request.urlopen(request, timeout=60) as response:
        page = response.read().decode('utf-8', 'replace')
    match = re.search(r'href="([^"]*/vllm-%s\.tar\.gz)(#[^"]*)?"' % re.escape(version), page)
    if not match:
        raise OSError('the index lists no vllm-%s.tar.gz' % version)
    return urllib.parse.urljoin(request.full_url, match.group(1))


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            digest.update(block)
    return digest.hexdigest()


@pytest.fixture(scope='session')
def vllm_sdist():
    """(version, path) of the pinned vLLM release sdist, downloaded once into the cache, checked against its sha256.

    Not `pip download --no-binary :all:`: pip then prepares the package metadata, and vLLM's setup.py
    imports torch for that, so pip would first install torch into an isolated build environment.
    """
    path = CACHE / ('vllm-%s.tar.gz' % VLLM_VERSION)
    if path.exists() and sha256_of(path) == VLLM_SDIST_SHA256:
        return VLLM_VERSION, path
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix('.partial')
    try:
        url = _sdist_url(VLLM_VERSION)
        with urllib.request.urlopen(url, timeout=300) as response, open(partial, 'wb') as f:
            shutil.copyfileobj(response, f)
    except OSError as e:
        pytest.fail('cannot download the vLLM %s sdist from %s (%s): allow access to PyPI, or put the file at %s'
                    % (VLLM_VERSION, PYPI_SIMPLE, e, path), pytrace=False)
    actual = sha256_of(partial)
    if actual != VLLM_SDIST_SHA256:
        partial.unlink()
        pytest.fail('vllm-%s.tar.gz from %s has sha256 %s, not the pinned %s' % (VLLM_VERSION, url, actual,
                                                                                 VLLM_SDIST_SHA256), pytrace=False)
    partial.replace(path)
    return VLLM_VERSION, path
