# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""Can this host's NVIDIA driver run the CUDA build of vLLM? The one place that answers it.

The gpu fact (llmops.vllm.gpu_facts) holds cuda_driver_version, the newest CUDA the loaded driver supports
("12.4", from NVML). A vLLM built for CUDA 12.8 (the fleet setting vllm_cuda_version) needs a driver that
supports 12.8 or newer. driver_supports() gives the verdict; each caller keeps its own reaction with the same
words: discovery makes the finding cuda_driver_too_old, vllm_install refuses the host, the build plan warns.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

# A CUDA version is major.minor text: "12.8", "12.10", "13.0".
CUDA_VERSION_RE = re.compile(r'^\d+\.\d+$')


def parse_cuda_version(version):
    """(12, 8) for "12.8" and (12, 10) for "12.10" (surrounding blanks allowed).

    Raises ValueError, naming the value, for anything else: a number (YAML reads 12.10 as 12.1, so it must be
    quoted), text without a minor version ("12") or with other characters ("12.x", "twelve").
    """
    if isinstance(version, float) or (isinstance(version, int) and not isinstance(version, bool)):
        raise ValueError('CUDA version %r is a number, not text: quote it ("%s"), since YAML reads 12.10 as 12.1'
                         % (version, version))
    if not isinstance(version, str) or not CUDA_VERSION_RE.match(version.strip()):
        raise ValueError('CUDA version %r is not of the form major.minor, such as "12.8"' % (version,))
    major, minor = version.strip().split('.')
    return int(major), int(minor)


def driver_supports(gpu, cuda_version):
    """Whether the NVIDIA driver of the gpu fact can run a vLLM built for CUDA cuda_version.

    Returns None when it can, or when there is nothing to check: cuda_version empty (no CUDA build expected), or
    no usable GPU in the fact. Else returns the problem as one sentence without a final full stop, naming the
    CUDA of the build, the driver version and the CUDA the driver supports; a usable GPU whose driver reports no
    CUDA version (NVML too old to tell, so a driver older than CUDA 10) is a problem too.
    Raises ValueError (see parse_cuda_version) when cuda_version is set but is not a CUDA version.
    """
    if cuda_version is None or (isinstance(cuda_version, str) and not cuda_version.strip()):
        return None
    wanted = parse_cuda_version(cuda_version)
    if not isinstance(gpu, dict) or not gpu.get('available'):
        return None
    reported = gpu.get('cuda_driver_version')
    try:
        supported = parse_cuda_version(reported)
    except ValueError:
        supported = None
    head = 'vLLM is built for CUDA %d.%d but the NVIDIA driver %s' % (wanted[0], wanted[1],
                                                                      gpu.get('driver_version') or '(version unknown)')
    if supported is None:
        return '%s reports no CUDA version it supports (%r)' % (head, reported)
    if supported < wanted:
        return '%s supports CUDA %d.%d at most' % (head, supported[0], supported[1])
    return None
