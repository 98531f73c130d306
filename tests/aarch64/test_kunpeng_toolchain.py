# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The aarch64 source-build path for real, under qemu-user emulation on any Debian/Ubuntu x86_64 host (as root).

facts (numa_facts over a fake Kunpeng 920 sysfs) -> compiler_flags -> build_plan -> CFLAGS -> the arm64 GCC of
Debian bookworm compiles NEON code with exactly those flags -> the arm64 binary runs and computes the right
numbers. Also: GCC rejects bogus tuning, and the pinned vLLM release sdist unpacks into the arm64 tree with the
files its build needs. vLLM itself is not compiled here (hours under emulation): see build_vllm_cpu.sh.

Run: pytest -q tests/aarch64 (cold: about 4 minutes to debootstrap the tree; warm: the cached tree is unpacked).
"""

from __future__ import annotations

import re
import struct
import tarfile

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._build import build_plan
from ansible_collections.llmops.vllm.plugins.module_utils._cpu_models import ARM_MODELS
from ansible_collections.llmops.vllm.plugins.module_utils._numa import collect_numa
from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import (
    KUNPENG920_8xA100,
    arm_cpuinfo,
    variant,
    write_sysfs,
)

pytestmark = pytest.mark.aarch64

EM_AARCH64 = 183
ELFCLASS64 = 2

ARM_FEATURES = 'fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp'
# Every aarch64 CPU the facts know, plus one they do not (Qualcomm Falkor: the armv8-a baseline).
ARM_HOSTS = [KUNPENG920_8xA100] + [
    variant(KUNPENG920_8xA100, 'arm-%s' % model[0].lower(),
            cpuinfo=arm_cpuinfo(range(128), implementer, part, ARM_FEATURES))
    for (implementer, part), model in sorted(ARM_MODELS.items()) if implementer != '0x48'
] + [variant(KUNPENG920_8xA100, 'arm-unknown-falkor',
             cpuinfo=arm_cpuinfo(range(128), '0x51', '0xc00', ARM_FEATURES))]

# What the compiler must enable for each -march (ACLE feature macros): -march decides, so they prove it was used.
EXPECTED_FEATURES = {
    '-march=armv8-a': {'dotprod': 0, 'sve': 0},
    '-march=armv8.2-a': {'dotprod': 0, 'sve': 0},
    '-march=armv8.4-a+sve': {'dotprod': 1, 'sve': 1},
    '-march=armv9-a': {'dotprod': 1, 'sve': 1},
}

NEON_PROGRAM = r'''
#include <arm_neon.h>
#include <stdint.h>
#include <stdio.h>

#ifndef __ARM_NEON
#error "NEON (Advanced SIMD) is not enabled"
#endif

int main(void)
{
    float a[8], b[8];
    uint8_t x[16], y[16];
    for (int i = 0; i < 8; i++) { a[i] = (float)(i + 1); b[i] = (float)(8 - i); }
    for (int i = 0; i < 16; i++) { x[i] = (uint8_t)i; y[i] = (uint8_t)(2 * i); }

    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int i = 0; i < 8; i += 4)
        acc = vfmaq_f32(acc, vld1q_f32(a + i), vld1q_f32(b + i));
    float dot_f32 = vaddvq_f32(acc);

#if defined(__ARM_FEATURE_DOTPROD)
    int dotprod = 1;
    uint32_t dot_u8 = vaddvq_u32(vdotq_u32(vdupq_n_u32(0), vld1q_u8(x), vld1q_u8(y)));
#else
    int dotprod = 0;
    uint16x8_t lo = vmull_u8(vld1_u8(x), vld1_u8(y)), hi = vmull_high_u8(vld1q_u8(x), vld1q_u8(y));
    uint32_t dot_u8 = vaddlvq_u16(lo) + vaddlvq_u16(hi);
#endif
#if defined(__ARM_FEATURE_SVE)
    int sve = 1;
#else
    int sve = 0;
#endif
    printf("dot_f32=%.1f dot_u8=%u dotprod=%d sve=%d\n", dot_f32, (unsigned)dot_u8, dotprod, sve);
    return 0;
}
'''

# vLLM's CPU kernels on aarch64 need dotprod and fp16 vector arithmetic; its CMake adds them to -march.
VLLM_KERNEL_PROGRAM = r'''
#include <arm_neon.h>
#include <cstdio>

#if !defined(__ARM_FEATURE_DOTPROD) || !defined(__ARM_FEATURE_FP16_VECTOR_ARITHMETIC)
#error "vLLM's aarch64 -march did not enable dotprod and fp16"
#endif

int main()
{
    float16x8_t h = vaddq_f16(vdupq_n_f16((float16_t)1.5f), vdupq_n_f16((float16_t)2.25f));
    int8x16_t q = vdupq_n_s8(-3);
    int32x4_t d = vdotq_s32(vdupq_n_s32(0), q, vdupq_n_s8(7));
    std::printf("fp16=%.2f sdot=%d\n", (double)vgetq_lane_f16(h, 0), (int)vaddvq_s32(d));
    return 0;
}
'''


def plan_of(topo, tmp_path):
    """build_plan of a cpu build from the numa fact that the real collector reads from the host's fake sysfs."""
    numa = collect_numa(str(write_sysfs(tmp_path / topo['name'], topo)))
    assert numa['cpu']['architecture'] == 'aarch64'
    return build_plan(numa, None, vllm_version='0.11.0', target_device='cpu')


def elf_header(path):
    """(EI_CLASS, e_machine) of an ELF file."""
    with open(path, 'rb') as f:
        head = f.read(20)
    assert head[:4] == b'\x7fELF', '%s is not an ELF file' % path
    return head[4], struct.unpack_from('<H' if head[5] == 1 else '>H', head, 18)[0]


def test_kunpeng_flags_come_from_the_facts(tmp_path):
    plan = plan_of(KUNPENG920_8xA100, tmp_path)
    assert plan['env']['CFLAGS'] == plan['env']['CXXFLAGS'] == '-march=armv8.2-a -mtune=tsv110'
    assert plan['cache_key'].startswith('vllm-0.11.0-aarch64-cpu-')


@pytest.mark.parametrize('topo', ARM_HOSTS, ids=lambda topo: topo['name'])
def test_neon_program_built_with_the_plan_flags_runs(arm64_root, arm64_chroot, tmp_path, topo):
    plan = plan_of(topo, tmp_path)
    cflags = plan['env']['CFLAGS'].split()
    work = arm64_root / 'tmp' / topo['name']
    work.mkdir()
    (work / 'neon.c').write_text(NEON_PROGRAM)
    inside = '/tmp/%s/' % topo['name']
    arm64_chroot('gcc', '-O2', '-Wall', '-Werror', *cflags, '-o', inside + 'neon', inside + 'neon.c')
    assert elf_header(work / 'neon') == (ELFCLASS64, EM_AARCH64)
    output = arm64_chroot(inside + 'neon').stdout.strip()
    features = EXPECTED_FEATURES[cflags[0]]
    assert output == 'dot_f32=120.0 dot_u8=2480 dotprod=%(dotprod)d sve=%(sve)d' % features


def test_gcc_checks_the_tuning(arm64_root, arm64_chroot, tmp_path):
    """The flags are really checked: GCC reports the tuning it applies and rejects one it does not know."""
    cflags = plan_of(KUNPENG920_8xA100, tmp_path)['env']['CFLAGS'].split()
    target = arm64_chroot('gcc', *cflags, '-Q', '--help=target').stdout
    assert re.search(r'^\s*-mtune=\s+tsv110$', target, re.MULTILINE), target
    assert re.search(r'^\s*-march=\s+armv8\.2-a$', target, re.MULTILINE), target
    (arm64_root / 'tmp' / 'empty.c').write_text('int main(void) { return 0; }\n')
    bogus = arm64_chroot('gcc', '-march=armv8.2-a', '-mtune=tsv111', '-c', '-o', '/tmp/empty.o', '/tmp/empty.c',
                         check=False)
    assert bogus.returncode != 0
    assert "unknown value 'tsv111' for '-mtune'" in bogus.stderr and "did you mean 'tsv110'?" in bogus.stderr
    x86 = arm64_chroot('gcc', '-march=x86-64-v3', '-c', '-o', '/tmp/empty.o', '/tmp/empty.c', check=False)
    assert x86.returncode != 0 and "unknown value 'x86-64-v3' for '-march'" in x86.stderr


@pytest.fixture(scope='module')
def vllm_tree(arm64_root, vllm_sdist):
    """The pinned vLLM sdist unpacked into the arm64 tree at /usr/src/vllm-<version>."""
    version, sdist = vllm_sdist
    with tarfile.open(sdist) as archive:
        names = archive.getnames()
        assert all(name == 'vllm-%s' % version or name.startswith('vllm-%s/' % version) for name in names)
        safe = {'filter': 'data'} if hasattr(tarfile, 'data_filter') else {}  # Python >= 3.8.17 / 3.11.4
        archive.extractall(arm64_root / 'usr' / 'src', **safe)
    return version, arm64_root / 'usr' / 'src' / ('vllm-%s' % version)


def test_pinned_vllm_source_in_the_arm64_tree(arm64_chroot, vllm_tree):
    version, tree = vllm_tree
    for name in ('setup.py', 'pyproject.toml', 'CMakeLists.txt', 'cmake/cpu_extension.cmake', 'requirements/cpu.txt',
                 'requirements/cpu-build.txt', 'requirements/build.txt', 'csrc/cpu/attention.cpp', 'PKG-INFO'):
        assert (tree / name).is_file(), '%s is missing from the vLLM %s sdist' % (name, version)
    # The arm64 Python reads the version from the sdist metadata.
    code = ('import email.parser, platform; meta = email.parser.Parser().parse(open("/usr/src/vllm-%s/PKG-INFO")); '
            'print(platform.machine(), meta["Name"], meta["Version"])' % version)
    assert arm64_chroot('python3', '-c', code).stdout.split() == ['aarch64', 'vllm', version]
    # The build reads VLLM_TARGET_DEVICE and MAX_JOBS, which the plan sets.
    setup = (tree / 'setup.py').read_text() + (tree / 'vllm' / 'envs.py').read_text()
    assert '"VLLM_TARGET_DEVICE"' in setup and '"MAX_JOBS"' in setup
    # The torch that vLLM pins for an aarch64 CPU build is the torch the wheel is built against.
    pins = re.findall(r'^torch==([\d.]+); .*platform_machine == "aarch64"', (tree / 'requirements' / 'cpu-build.txt')
                      .read_text(), re.MULTILINE)
    assert pins == ['2.8.0']


def test_vllm_aarch64_march_with_the_plan_flags(arm64_root, arm64_chroot, vllm_tree, tmp_path):
    """vLLM's CMake appends its own -march for its aarch64 CPU kernels after CXXFLAGS (the later -march wins, the
    plan's -mtune stays); chosen like vLLM does from /proc/cpuinfo, the pair compiles and runs vLLM-style code."""
    version, tree = vllm_tree
    cmake = (tree / 'cmake' / 'cpu_extension.cmake').read_text()
    with_bf16, without_bf16 = re.findall(r'set\(MARCH_FLAGS "(-march=armv8[^"]*)"\)', cmake)
    cpuinfo = KUNPENG920_8xA100['cpuinfo']
    assert 'asimd' in cpuinfo
    march = with_bf16 if 'bf16' in cpuinfo else without_bf16  # CMake's string(FIND) on /proc/cpuinfo
    assert march == '-march=armv8.2-a+dotprod+fp16'
    cxxflags = plan_of(KUNPENG920_8xA100, tmp_path)['env']['CXXFLAGS'].split()
    (arm64_root / 'tmp' / 'kernel.cpp').write_text(VLLM_KERNEL_PROGRAM)
    arm64_chroot('g++', '-O2', '-std=c++17', *cxxflags, march, '-o', '/tmp/kernel', '/tmp/kernel.cpp')
    assert elf_header(arm64_root / 'tmp' / 'kernel') == (ELFCLASS64, EM_AARCH64)
    assert arm64_chroot('/tmp/kernel').stdout.strip() == 'fp16=3.75 sdot=-336'
