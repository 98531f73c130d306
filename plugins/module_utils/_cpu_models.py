# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""Known CPU models and the compiler flags that are safe for them.

Flags are for GCC >= 12 (Debian 12, openEuler 22.03 LTS SP3+, Ubuntu 24.04). GCC 12 does not know
``neoverse-v2`` (added in GCC 13), so Neoverse V2 is tuned for Neoverse N2, the nearest core GCC 12 accepts.
Unknown CPUs get the architecture baseline, never a guess.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type


# Arm "CPU implementer" codes -> vendor (from the Arm ARM MIDR_EL1 register description).
ARM_IMPLEMENTERS = {
    '0x41': 'Arm',
    '0x48': 'HiSilicon',
    '0x4e': 'NVIDIA',
    '0x51': 'Qualcomm',
    '0xc0': 'Ampere',
}

# (implementer, part) -> (model name as lscpu prints it, microarchitecture, compiler flags).
ARM_MODELS = {
    ('0x48', '0xd01'): ('Kunpeng-920', 'tsv110', ['-march=armv8.2-a', '-mtune=tsv110']),
    ('0x41', '0xd0c'): ('Neoverse-N1', 'neoverse-n1', ['-march=armv8.2-a', '-mtune=neoverse-n1']),
    ('0x41', '0xd49'): ('Neoverse-N2', 'neoverse-n2', ['-march=armv9-a', '-mtune=neoverse-n2']),
    ('0x41', '0xd40'): ('Neoverse-V1', 'neoverse-v1', ['-march=armv8.4-a+sve', '-mtune=neoverse-v1']),
    ('0x41', '0xd4f'): ('Neoverse-V2', 'neoverse-v2', ['-march=armv9-a', '-mtune=neoverse-n2']),
}

AARCH64_BASELINE_FLAGS = ['-march=armv8-a']

# cpuinfo "vendor_id" -> vendor.
X86_VENDORS = {
    'GenuineIntel': 'Intel',
    'AuthenticAMD': 'AMD',
    'HygonGenuine': 'Hygon',
}

# x86-64 psABI micro-architecture levels, as Linux /proc/cpuinfo spells the flags ("abm" is LZCNT).
# v4 (AVX-512) is deliberately not emitted: libraries dispatch AVX-512 at run time, and building
# everything for it costs clock speed on some Xeons.
X86_64_V2_FLAGS = frozenset(['cx16', 'lahf_lm', 'popcnt', 'pni', 'sse4_1', 'sse4_2', 'ssse3'])
X86_64_V3_FLAGS = X86_64_V2_FLAGS | frozenset(['avx', 'avx2', 'bmi1', 'bmi2', 'f16c', 'fma', 'abm', 'movbe', 'xsave'])


def normalize_hex(value):
    """Return "0x48" for "0x48", "0X48" or "72"-like hex text; None when it is not hex."""
    if value is None:
        return None
    try:
        number = int(value, 16)
    except ValueError:
        return None
    return '0x%02x' % number if number < 0x100 else '0x%03x' % number


def x86_march(cpu_flags):
    """Return the highest -march level (up to x86-64-v3) that the cpuinfo flags prove."""
    flags = set(cpu_flags)
    if flags >= X86_64_V3_FLAGS:
        return '-march=x86-64-v3'
    if flags >= X86_64_V2_FLAGS:
        return '-march=x86-64-v2'
    return '-march=x86-64'


def identify_cpu(architecture, cpuinfo):
    """Describe the CPU from its architecture and the first /proc/cpuinfo block (dict of fields).

    Returns vendor, model_name, implementer, part, microarchitecture and compiler_flags.
    """
    cpu = {
        'vendor': None,
        'model_name': cpuinfo.get('model name'),
        'implementer': normalize_hex(cpuinfo.get('CPU implementer')),
        'part': normalize_hex(cpuinfo.get('CPU part')),
        'microarchitecture': None,
        'compiler_flags': [],
    }
    if architecture == 'aarch64':
        cpu['vendor'] = ARM_IMPLEMENTERS.get(cpu['implementer'])
        model = ARM_MODELS.get((cpu['implementer'], cpu['part']))
        if model:
            cpu['model_name'], cpu['microarchitecture'], flags = model
            cpu['compiler_flags'] = list(flags)
        else:
            cpu['compiler_flags'] = list(AARCH64_BASELINE_FLAGS)
    elif architecture == 'x86_64':
        vendor_id = cpuinfo.get('vendor_id')
        cpu['vendor'] = X86_VENDORS.get(vendor_id, vendor_id)
        cpu['compiler_flags'] = [x86_march(cpuinfo.get('flags', '').split())]
    return cpu
