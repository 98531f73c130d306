# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""build_plan: the environment, MAX_JOBS and wheel cache key of a vLLM source build, from real collected facts."""

from __future__ import annotations

import copy
import fnmatch
import json
import os
import re
import subprocess
import sys

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._build import (
    KEY_SCHEMA,
    BuildPlanError,
    build_plan,
)
from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import (
    KUNPENG920_8xA100,
    LAB_2CORE_CPU_ONLY,
    WORKSTATION_1GPU,
    X86_8xA800_NVLINK,
    arm_cpuinfo,
    variant,
)

NEOVERSE_FEATURES = 'fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp'
GIB_KB = 1024 * 1024

# Ampere Altra-like host: Neoverse N1 cores, otherwise the Kunpeng machine (8 x A100).
NEOVERSE_N1_8xA100 = variant(KUNPENG920_8xA100, 'neoverse-n1-8xa100',
                             cpuinfo=arm_cpuinfo(range(128), '0x41', '0xd0c', NEOVERSE_FEATURES))
# Grace-like host: Neoverse V2 cores and Hopper GPUs (compute capability 9.0).
NEOVERSE_V2_8xH100 = variant(KUNPENG920_8xA100, 'neoverse-v2-8xh100',
                             cpuinfo=arm_cpuinfo(range(128), '0x41', '0xd4f', NEOVERSE_FEATURES + ' sve sve2 bf16'),
                             devices=dict((i, {'name': 'NVIDIA H100 80GB HBM3', 'compute_capability': (9, 0)})
                                          for i in range(8)))
# Kunpeng with A100s on socket 0 and H100s on socket 1.
KUNPENG920_MIXED = variant(KUNPENG920_8xA100, 'kunpeng920-4xa100-4xh100',
                           devices=dict((i, {'compute_capability': (9, 0)}) for i in range(4, 8)))
# Same kind as KUNPENG920_8xA100 with a quarter of the memory.
KUNPENG920_8xA100_LESS_MEMORY = variant(KUNPENG920_8xA100, 'kunpeng920-8xa100-128g', nodes=[
    dict(node, mem_total_kb=32 * GIB_KB) for node in KUNPENG920_8xA100['nodes']])
# 128 Kunpeng cores, 16 GiB of memory.
KUNPENG920_16G = variant(KUNPENG920_8xA100, 'kunpeng920-16g', nodes=[
    dict(node, mem_total_kb=4 * GIB_KB) for node in KUNPENG920_8xA100['nodes']])
KUNPENG920_NODE1_MEMORY_UNKNOWN = variant(KUNPENG920_8xA100, 'kunpeng920-node1-no-meminfo', nodes=[
    dict(node, mem_total_kb=None) if node['id'] == 1 else node for node in KUNPENG920_8xA100['nodes']])

KUNPENG_FLAGS = '-march=armv8.2-a -mtune=tsv110'
BASE = {'vllm_version': '0.11.0'}
CUDA = dict(BASE, target_device='cuda', cuda_version='12.8')
CPU = dict(BASE, target_device='cpu')

# id, topology, options, expected env, expected key prefix
ENV_CASES = [
    ('kunpeng920 cuda', KUNPENG920_8xA100, CUDA, {
        'VLLM_TARGET_DEVICE': 'cuda', 'CFLAGS': KUNPENG_FLAGS, 'CXXFLAGS': KUNPENG_FLAGS, 'CMAKE_ARGS': '',
        'MAX_JOBS': '124', 'NVCC_THREADS': '2', 'TORCH_CUDA_ARCH_LIST': '8.0'}, 'vllm-0.11.0-aarch64-cuda12.8-'),
    ('kunpeng920 cpu', KUNPENG920_8xA100, CPU, {
        'VLLM_TARGET_DEVICE': 'cpu', 'CFLAGS': KUNPENG_FLAGS, 'CXXFLAGS': KUNPENG_FLAGS, 'CMAKE_ARGS': '',
        'MAX_JOBS': '128'}, 'vllm-0.11.0-aarch64-cpu-'),
    ('neoverse n1 cpu', NEOVERSE_N1_8xA100, CPU, {
        'VLLM_TARGET_DEVICE': 'cpu', 'CFLAGS': '-march=armv8.2-a -mtune=neoverse-n1',
        'CXXFLAGS': '-march=armv8.2-a -mtune=neoverse-n1', 'CMAKE_ARGS': '', 'MAX_JOBS': '128'},
     'vllm-0.11.0-aarch64-cpu-'),
    ('neoverse v2 cuda (GCC 12 tunes for N2)', NEOVERSE_V2_8xH100, dict(CUDA, cuda_version='12.9'), {
        'VLLM_TARGET_DEVICE': 'cuda', 'CFLAGS': '-march=armv9-a -mtune=neoverse-n2',
        'CXXFLAGS': '-march=armv9-a -mtune=neoverse-n2', 'CMAKE_ARGS': '', 'MAX_JOBS': '124', 'NVCC_THREADS': '2',
        'TORCH_CUDA_ARCH_LIST': '9.0'}, 'vllm-0.11.0-aarch64-cuda12.9-'),
    ('kunpeng920 a100 + h100', KUNPENG920_MIXED, CUDA, {
        'VLLM_TARGET_DEVICE': 'cuda', 'CFLAGS': KUNPENG_FLAGS, 'CXXFLAGS': KUNPENG_FLAGS, 'CMAKE_ARGS': '',
        'MAX_JOBS': '124', 'NVCC_THREADS': '2', 'TORCH_CUDA_ARCH_LIST': '8.0;9.0'}, 'vllm-0.11.0-aarch64-cuda12.8-'),
    ('x86 a800 cuda', X86_8xA800_NVLINK, CUDA, {
        'VLLM_TARGET_DEVICE': 'cuda', 'CFLAGS': '-march=x86-64-v3', 'CXXFLAGS': '-march=x86-64-v3', 'CMAKE_ARGS': '',
        'MAX_JOBS': '128', 'NVCC_THREADS': '2', 'TORCH_CUDA_ARCH_LIST': '8.0'}, 'vllm-0.11.0-x86_64-cuda12.8-'),
    ('x86 rtx4090 cuda', WORKSTATION_1GPU, CUDA, {
        'VLLM_TARGET_DEVICE': 'cuda', 'CFLAGS': '-march=x86-64-v3', 'CXXFLAGS': '-march=x86-64-v3', 'CMAKE_ARGS': '',
        'MAX_JOBS': '14', 'NVCC_THREADS': '2', 'TORCH_CUDA_ARCH_LIST': '8.9'}, 'vllm-0.11.0-x86_64-cuda12.8-'),
    ('lab 2 vCPU cpu, 4 GiB', LAB_2CORE_CPU_ONLY, dict(CPU, memory_mib=3936), {
        'VLLM_TARGET_DEVICE': 'cpu', 'CFLAGS': '-march=x86-64', 'CXXFLAGS': '-march=x86-64', 'CMAKE_ARGS': '',
        'MAX_JOBS': '1'}, 'vllm-0.11.0-x86_64-cpu-'),
    ('a800 host building the cpu backend', X86_8xA800_NVLINK, dict(CPU, cuda_version='12.8'), {
        'VLLM_TARGET_DEVICE': 'cpu', 'CFLAGS': '-march=x86-64-v3', 'CXXFLAGS': '-march=x86-64-v3', 'CMAKE_ARGS': '',
        'MAX_JOBS': '128'}, 'vllm-0.11.0-x86_64-cpu-'),
]


@pytest.mark.parametrize('topo, options, env, key_prefix', [case[1:] for case in ENV_CASES],
                         ids=[case[0] for case in ENV_CASES])
def test_environment_from_facts(facts, topo, options, env, key_prefix):
    gpu, numa = facts(topo)
    before = copy.deepcopy((gpu, numa))
    plan = build_plan(numa, gpu, **options)
    assert plan['env'] == env
    assert all(isinstance(value, str) for value in plan['env'].values())
    assert plan['max_jobs'] == int(env['MAX_JOBS'])
    assert re.match(r'^%s[0-9a-f]{8}$' % re.escape(key_prefix), plan['cache_key'])
    assert plan['wheel_dir'] == plan['cache_key']
    assert plan['compiler_flags'] == env['CFLAGS'].split()
    assert plan['nvcc_threads'] == (2 if options['target_device'] == 'cuda' else None)
    assert (gpu, numa) == before, 'build_plan must not change the facts'
    json.dumps(plan)  # plain data, fit for set_fact and a manifest next to the wheel


# sha256 of the canonical JSON of the cache_key_inputs below, first 8 hex digits.
GOLDEN_KUNPENG_CUDA_HASH = 'a902b969'


def test_kunpeng_cuda_plan_in_full(facts):
    gpu, numa = facts(KUNPENG920_8xA100)
    plan = build_plan(numa, gpu, vllm_version='0.11.0', target_device='cuda', cuda_version='12.8',
                      torch_version='2.8.0', python_version='3.11')
    # The golden key: a change here orphans every wheelhouse in the field, so it must be deliberate
    # (bump KEY_SCHEMA when the plan starts to build different wheels from the same inputs).
    assert plan['cache_key'] == 'vllm-0.11.0-aarch64-cuda12.8-%s' % GOLDEN_KUNPENG_CUDA_HASH
    assert plan['cache_key_inputs'] == {
        'schema': KEY_SCHEMA, 'vllm_version': '0.11.0', 'architecture': 'aarch64', 'target_device': 'cuda',
        'cuda_version': '12.8', 'torch_version': '2.8.0', 'python_version': '3.11',
        'compiler_flags': ['-march=armv8.2-a', '-mtune=tsv110'], 'cmake_args': [], 'cuda_arch_list': '8.0',
        'extra_env': {}}
    assert plan['max_jobs_reason'] == ('memory-bound: 503.3 GiB from the NUMA nodes / 8 GiB per nvcc process = '
                                       '62 nvcc process(es) x NVCC_THREADS=2 = 124 jobs < 128 online CPUs')
    assert plan['memory_mib'] == 515412 and plan['max_jobs_by_memory'] == 124
    assert plan['wheel_glob'] == 'vllm-0.11.0[+-]*_aarch64.whl'
    assert plan['warnings'] == ['vLLM is built for CUDA 12.8 but the NVIDIA driver 550.54.15 supports CUDA 12.4 at '
                                'most: the wheel builds on this host, but runs here only after a driver upgrade.']


# --- cache key ------------------------------------------------------------------------------------------------------

def test_cache_key_is_stable_across_processes(facts):
    """Same inputs, same key, also in a fresh interpreter with another hash seed (no dict/set order leaks in)."""
    gpu, numa = facts(KUNPENG920_MIXED)
    options = dict(CUDA, extra_env={'CC': 'gcc-12', 'CXX': 'g++-12'}, cuda_arch_list='9.0;8.0')
    key = build_plan(numa, gpu, **options)['cache_key']
    assert key == build_plan(copy.deepcopy(numa), copy.deepcopy(gpu), **options)['cache_key']
    code = ('import json, sys\n'
            'from ansible_collections.llmops.vllm.plugins.module_utils._build import build_plan\n'
            'numa, gpu, options = json.load(sys.stdin)\n'
            'print(build_plan(numa, gpu, **options)["cache_key"])\n')
    for seed in ('1', '2', 'random'):
        env = dict(os.environ, PYTHONHASHSEED=seed,
                   PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        result = subprocess.run([sys.executable, '-c', code], input=json.dumps([numa, gpu, options]), env=env,
                                capture_output=True, text=True, check=True)
        assert result.stdout.strip() == key


def test_cache_key_equal_for_hosts_of_one_kind(facts):
    """Memory, CPU count, MAX_JOBS and host do not enter the key; they change the build, not the wheel."""
    big = build_plan(*reversed(facts(KUNPENG920_8xA100)), **CUDA)
    small = build_plan(*reversed(facts(KUNPENG920_8xA100_LESS_MEMORY)), **CUDA)
    tiny = build_plan(*reversed(facts(KUNPENG920_8xA100)), memory_mib=16384, **CUDA)
    fixed = build_plan(*reversed(facts(KUNPENG920_8xA100)), max_jobs=3, **CUDA)
    assert (big['max_jobs'], small['max_jobs'], tiny['max_jobs'], fixed['max_jobs']) == (124, 32, 4, 3)
    assert big['cache_key'] == small['cache_key'] == tiny['cache_key'] == fixed['cache_key']
    # The cpu target ignores GPUs and CUDA options: a GPU host and a GPU-less host of one CPU kind share the wheel.
    gpu, numa = facts(KUNPENG920_8xA100)
    cpu_keys = {build_plan(numa, gpu, **CPU)['cache_key'],
                build_plan(numa, None, **CPU)['cache_key'],
                build_plan(numa, gpu, cuda_version='12.8', cuda_arch_list='9.0', **CPU)['cache_key']}
    assert len(cpu_keys) == 1


KEY_CHANGES = [
    ('vllm version', KUNPENG920_8xA100, dict(CUDA, vllm_version='0.11.1')),
    ('cuda version', KUNPENG920_8xA100, dict(CUDA, cuda_version='12.9')),
    ('target device', KUNPENG920_8xA100, CPU),
    ('cpu flags (neoverse n1)', NEOVERSE_N1_8xA100, CUDA),
    ('arch list from the GPUs', KUNPENG920_MIXED, CUDA),
    ('explicit arch list', KUNPENG920_8xA100, dict(CUDA, cuda_arch_list='8.0;8.6')),
    ('arch list +PTX', KUNPENG920_8xA100, dict(CUDA, cuda_arch_list='8.0+PTX')),
    ('torch version', KUNPENG920_8xA100, dict(CUDA, torch_version='2.8.0')),
    ('other torch version', KUNPENG920_8xA100, dict(CUDA, torch_version='2.9.0')),
    ('python version', KUNPENG920_8xA100, dict(CUDA, python_version='3.11')),
    ('cmake args', KUNPENG920_8xA100, dict(CUDA, vllm_version='0.11.1', extra_cmake_args=['-DFOO=1'])),
    ('extra env', KUNPENG920_8xA100, dict(CUDA, extra_env={'CXX': 'g++-12'})),
    ('architecture', X86_8xA800_NVLINK, CUDA),
]


def test_cache_key_differs_when_the_wheel_differs(facts):
    base = build_plan(*reversed(facts(KUNPENG920_8xA100)), **CUDA)['cache_key']
    keys = {'base': base}
    for name, topo, options in KEY_CHANGES:
        keys[name] = build_plan(*reversed(facts(topo)), **options)['cache_key']
    assert len(set(keys.values())) == len(keys), keys
    # The same vLLM release on a different arch list or cmake args keeps the readable part of the key.
    assert keys['explicit arch list'].rsplit('-', 1)[0] == base.rsplit('-', 1)[0]
    # An arch list is the same input whether it comes from the GPUs or from cuda_arch_list.
    options = dict(CUDA, cuda_arch_list='9.0;8.0')
    explicit = build_plan(*reversed(facts(KUNPENG920_8xA100)), **options)['cache_key']
    assert explicit == keys['arch list from the GPUs']


def test_compiler_flag_order_enters_the_key(facts):
    gpu, numa = facts(KUNPENG920_8xA100)
    swapped = copy.deepcopy(numa)
    swapped['cpu']['compiler_flags'].reverse()  # for GCC the last -march wins, so order matters
    assert build_plan(numa, gpu, **CUDA)['cache_key'] != build_plan(swapped, gpu, **CUDA)['cache_key']


# --- MAX_JOBS -------------------------------------------------------------------------------------------------------

# id, topology, options, MAX_JOBS, reason pattern, warning pattern (None: no warning)
MAX_JOBS_CASES = [
    ('128 cores, 16 GiB, cpu: memory-bound', KUNPENG920_16G, CPU, 8,
     r'^memory-bound: 16\.0 GiB from the NUMA nodes / 2 GiB per compile job = 8 jobs < 128 online CPUs$', None),
    ('128 cores, 16 GiB, cuda: memory-bound', KUNPENG920_16G, CUDA, 4,
     r'^memory-bound: 16\.0 GiB .* / 8 GiB per nvcc process = 2 nvcc process\(es\) x NVCC_THREADS=2 = 4 jobs', None),
    ('memory_mib wins over the NUMA nodes', KUNPENG920_8xA100, dict(CPU, memory_mib=16 * 1024), 8,
     r'^memory-bound: 16\.0 GiB from memory_mib /', None),
    ('128 cores, 503 GiB, cpu: CPU-bound', KUNPENG920_8xA100, CPU, 128,
     r'^CPU-bound: 128 online CPUs <= 503\.3 GiB from the NUMA nodes / 2 GiB per compile job = 251 jobs$', None),
    ('2 vCPU, 8 GiB: CPU-bound', LAB_2CORE_CPU_ONLY, dict(CPU, memory_mib=8192), 2, r'^CPU-bound: 2 online CPUs', None),
    ('1 GiB cpu: at least 1', LAB_2CORE_CPU_ONLY, dict(CPU, memory_mib=1024), 1,
     r'^memory-bound: 1\.0 GiB from memory_mib / 2 GiB per compile job = 0 jobs; at least 1$',
     r'^Memory allows no compile job'),
    ('7 GiB cuda: at least 1', KUNPENG920_8xA100, dict(CUDA, memory_mib=7 * 1024), 1,
     r'= 0 nvcc process\(es\) .*; at least 1$', r'^Memory allows no compile job'),
    ('explicit max_jobs', KUNPENG920_8xA100, dict(CPU, max_jobs=6), 6,
     r'^max_jobs=6 given explicitly \(memory would allow 503\.3 GiB', None),
    ('explicit max_jobs beyond memory', KUNPENG920_16G, dict(CPU, max_jobs='64'), 64,
     r'^max_jobs=64 given explicitly', r'^max_jobs=64 is more than memory allows .* 8 jobs\)'),
    ('explicit max_jobs, memory unknown', LAB_2CORE_CPU_ONLY, dict(CPU, max_jobs=2), 2,
     r'^max_jobs=2 given explicitly; memory unknown$', None),
    ('a node without meminfo counts as 0', KUNPENG920_NODE1_MEMORY_UNKNOWN, CPU, 128,
     r'^CPU-bound: 128 online CPUs <= 377\.4 GiB', r'^1 of 4 NUMA nodes do not report their memory'),
]


@pytest.mark.parametrize('topo, options, max_jobs, reason, warning', [case[1:] for case in MAX_JOBS_CASES],
                         ids=[case[0] for case in MAX_JOBS_CASES])
def test_max_jobs(facts, topo, options, max_jobs, reason, warning):
    plan = build_plan(*reversed(facts(topo)), **options)
    assert (plan['max_jobs'], plan['env']['MAX_JOBS']) == (max_jobs, str(max_jobs))
    assert re.search(reason, plan['max_jobs_reason']), plan['max_jobs_reason']
    memory_warnings = [w for w in plan['warnings'] if 'AVX2' not in w and 'driver' not in w]
    if warning is None:
        assert memory_warnings == []
    else:
        assert len(memory_warnings) == 1 and re.search(warning, memory_warnings[0]), memory_warnings


# --- other options --------------------------------------------------------------------------------------------------

def test_explicit_cuda_arch_list(facts):
    gpu, numa = facts(KUNPENG920_8xA100)
    assert build_plan(numa, gpu, cuda_arch_list=' 9.0; 8.0,8.0 ', **CUDA)['cuda_arch_list'] == '8.0;9.0'
    assert build_plan(numa, gpu, cuda_arch_list=['9.0a', '8.0'], **CUDA)['env']['TORCH_CUDA_ARCH_LIST'] == '8.0;9.0a'
    assert build_plan(numa, gpu, cuda_arch_list=8.0, **CUDA)['cuda_arch_list'] == '8.0'  # unquoted in YAML
    plan = build_plan(numa, gpu, cuda_arch_list='9.0', **CUDA)
    assert plan['env']['TORCH_CUDA_ARCH_LIST'] == '9.0'
    assert any('leaves out compute capability 8.0' in w for w in plan['warnings'])
    # A CPU-only builder can build CUDA wheels for other nodes when told the architectures.
    lab = build_plan(*reversed(facts(LAB_2CORE_CPU_ONLY)), memory_mib=8192, cuda_arch_list='8.0', **CUDA)
    assert lab['env']['TORCH_CUDA_ARCH_LIST'] == '8.0' and lab['env']['MAX_JOBS'] == '2'


def test_extra_cmake_args_and_env(facts):
    gpu, numa = facts(KUNPENG920_8xA100)
    plan = build_plan(numa, gpu, vllm_version='0.11.1', target_device='cpu',
                      extra_cmake_args='-DCMAKE_CXX_COMPILER=/usr/bin/g++-12  -DVLLM_BUILD_ACL=ON',
                      extra_env={'CC': '/usr/bin/gcc-12', 'VLLM_CPU_DISABLE_AVX512': True})
    assert plan['env']['CMAKE_ARGS'] == '-DCMAKE_CXX_COMPILER=/usr/bin/g++-12 -DVLLM_BUILD_ACL=ON'
    assert plan['cmake_args'] == ['-DCMAKE_CXX_COMPILER=/usr/bin/g++-12', '-DVLLM_BUILD_ACL=ON']
    assert plan['env']['CC'] == '/usr/bin/gcc-12' and plan['env']['VLLM_CPU_DISABLE_AVX512'] == 'true'
    assert plan['cache_key_inputs']['extra_env'] == {'CC': '/usr/bin/gcc-12', 'VLLM_CPU_DISABLE_AVX512': 'true'}


def test_no_cross_compiler_by_default(facts):
    """The seed forced /usr/bin/aarch64-linux-gnu-g++ (a cross compiler name); a native builder uses its g++."""
    for topo in (KUNPENG920_8xA100, NEOVERSE_N1_8xA100, X86_8xA800_NVLINK):
        env = build_plan(*reversed(facts(topo)), **CUDA)['env']
        assert env['CMAKE_ARGS'] == '' and 'CC' not in env and 'CXX' not in env


def test_warnings(facts):
    lab = build_plan(*reversed(facts(LAB_2CORE_CPU_ONLY)), memory_mib=8192, **CPU)
    assert lab['warnings'] == ["This x86_64 CPU shows no AVX2 (compiler flags -march=x86-64): vLLM's CPU backend "
                               'needs AVX2 or AVX-512 to run, and older releases to build.']
    no_flags = copy.deepcopy(facts(KUNPENG920_8xA100)[1])
    no_flags['cpu']['compiler_flags'] = []
    plan = build_plan(no_flags, None, **CPU)
    assert plan['env']['CFLAGS'] == '' and plan['warnings'][0].startswith('The numa fact has no compiler flags')
    gpu, numa = facts(X86_8xA800_NVLINK)
    driver_new_enough = dict(CUDA)
    driver_new_enough['cuda_version'] = '12.2'
    assert build_plan(numa, gpu, **driver_new_enough)['warnings'] == []


@pytest.mark.parametrize('name, architecture', [
    ('vllm-0.11.0+cpu-cp311-cp311-linux_aarch64.whl', 'aarch64'),
    ('vllm-0.11.0-cp38-abi3-linux_aarch64.whl', 'aarch64'),
    ('vllm-0.11.0+cu126-cp38-abi3-manylinux_2_28_aarch64.whl', 'aarch64'),
    ('vllm-0.11.0+cpu-cp312-cp312-linux_x86_64.whl', 'x86_64'),
    ('vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl', 'x86_64'),
])
def test_wheel_glob_matches_built_wheels(facts, tmp_path, name, architecture):
    topo = KUNPENG920_8xA100 if architecture == 'aarch64' else X86_8xA800_NVLINK
    plan = build_plan(*reversed(facts(topo)), **CPU)
    other_architecture = 'x86_64' if architecture == 'aarch64' else 'aarch64'
    others = ['vllm-0.11.01-cp38-abi3-linux_%s.whl' % architecture,
              'vllm-0.11.0.post1-cp38-abi3-linux_%s.whl' % architecture,
              'vllm-0.11.0-cp38-abi3-linux_%s.whl' % other_architecture,
              'vllm-0.11.0.tar.gz']
    assert fnmatch.fnmatchcase(name, plan['wheel_glob'])
    assert not [other for other in others if fnmatch.fnmatchcase(other, plan['wheel_glob'])]
    house = tmp_path / plan['wheel_dir']
    house.mkdir()
    for file_name in [name] + others:
        (house / file_name).touch()
    assert sorted(p.name for p in house.glob(plan['wheel_glob'])) == [name]


# --- errors ---------------------------------------------------------------------------------------------------------

def _ppc64le(numa):
    changed = copy.deepcopy(numa)
    changed['cpu']['architecture'] = 'ppc64le'
    return changed


def _without(key, value):
    def change(numa):
        changed = copy.deepcopy(numa)
        changed[key] = value
        return changed
    return change


def _gpu_capability(value):
    def change(gpu):
        changed = copy.deepcopy(gpu)
        changed['devices'][0]['compute_capability'] = value
        return changed
    return change


# id, topology, change of numa, change of gpu, options, message pattern (what is wrong ... the fix)
ERROR_CASES = [
    ('unknown target device', KUNPENG920_8xA100, None, None, dict(BASE, target_device='gpu'),
     r"^target_device 'gpu' is not one of cuda, cpu: use cuda for NVIDIA GPU hosts, cpu for CPU-only hosts\.$"),
    ('no target device', KUNPENG920_8xA100, None, None, BASE, r"^target_device None is not one of cuda, cpu: use"),
    ('no vllm version', KUNPENG920_8xA100, None, None, dict(target_device='cpu'),
     r"^vllm_version is required, for example '0\.11\.0'\.$"),
    ('vllm version with v', KUNPENG920_8xA100, None, None, dict(CPU, vllm_version='v0.11.0'),
     r"^vllm_version 'v0\.11\.0' is not a valid version: use the form '0\.11\.0'\.$"),
    ('vllm version with local part', KUNPENG920_8xA100, None, None, dict(CPU, vllm_version='0.11.0+cpu'),
     r"^vllm_version '0\.11\.0\+cpu' is not a valid version"),
    ('cuda without cuda_version', KUNPENG920_8xA100, None, None, dict(CUDA, cuda_version=None),
     r"^cuda_version is required, for example '12\.8' \(the CUDA toolkit the build uses\)\.$"),
    ('cuda version as a YAML number', KUNPENG920_8xA100, None, None, dict(CUDA, cuda_version=12.1),
     r"^cuda_version is the number 12\.1, not text: quote it \(cuda_version='12\.1'\), since YAML reads 12\.10 as"),
    ('cuda version without minor', KUNPENG920_8xA100, None, None, dict(CUDA, cuda_version='12'),
     r"^cuda_version '12' is not a valid version: use the form '12\.8'"),
    ('cuda on a host without GPUs', LAB_2CORE_CPU_ONLY, None, None, dict(CUDA, memory_mib=8192),
     r'^target_device cuda needs the CUDA architectures to build for, and this host has no GPU in its gpu fact '
     r'\(NVML \(libnvidia-ml\.so\.1\) is not installed: install the NVIDIA driver on the target\): run '
     r"llmops\.vllm\.gpu_facts on a host with its GPUs, or pass cuda_arch_list, e\.g\. '8\.0' for A100/A800"),
    ('cuda without a gpu fact', KUNPENG920_8xA100, None, lambda gpu: None, CUDA,
     r'this host has no GPU in its gpu fact \(no devices\): run llmops\.vllm\.gpu_facts'),
    ('bad arch list', KUNPENG920_8xA100, None, None, dict(CUDA, cuda_arch_list='sm_80'),
     r"^cuda_arch_list item 'sm_80' is not a CUDA architecture: use major\.minor .*'8\.0;9\.0a'\.$"),
    ('arch list of the wrong type', KUNPENG920_8xA100, None, None, dict(CUDA, cuda_arch_list={'8.0': True}),
     r"^cuda_arch_list must be a list or a ';'-separated string such as '8\.0;9\.0', not \{'8\.0': True\}\.$"),
    ('bad compute capability in the fact', KUNPENG920_8xA100, None, _gpu_capability('eight'), CUDA,
     r"^GPU 0 reports compute capability 'eight', which is not major\.minor: .*pass cuda_arch_list\.$"),
    ('ppc64le builder', KUNPENG920_8xA100, _ppc64le, None, CPU,
     r"^Source builds are supported on aarch64 and x86_64 builders, and this host reports architecture 'ppc64le': "
     r'build on an aarch64 \(e\.g\. Kunpeng 920\) or x86_64 host'),
    ('no numa fact', KUNPENG920_8xA100, lambda numa: None, None, CPU,
     r"^The numa fact is missing or has no cpu entry: run llmops\.vllm\.numa_facts first and pass "
     r"ansible_facts\['numa'\]\.$"),
    ('gpu fact of the wrong type', KUNPENG920_8xA100, None, lambda gpu: ['GPU 0'], CPU,
     r"^gpu must be the gpu fact \(ansible_facts\['gpu'\]\) or None"),
    ('memory unknown', LAB_2CORE_CPU_ONLY, None, None, CPU,
     r"^The numa fact does not tell the memory of this host .*: pass memory_mib=ansible_facts\['memtotal_mb'\], or "
     r'max_jobs\.$'),
    ('memory_mib 0', KUNPENG920_8xA100, None, None, dict(CPU, memory_mib=0),
     r"^memory_mib must be at least 1, not 0: pass ansible_facts\['memtotal_mb'\]\.$"),
    ('memory_mib text', KUNPENG920_8xA100, None, None, dict(CPU, memory_mib='lots'),
     r"^memory_mib must be a whole number, not 'lots'"),
    ('max_jobs 0', KUNPENG920_8xA100, None, None, dict(CPU, max_jobs=0),
     r'^max_jobs must be at least 1, not 0: omit it to derive MAX_JOBS from CPUs and memory\.$'),
    ('max_jobs float', KUNPENG920_8xA100, None, None, dict(CPU, max_jobs=2.5), r'^max_jobs must be a whole number'),
    ('max_jobs bool', KUNPENG920_8xA100, None, None, dict(CPU, max_jobs=True), r'^max_jobs must be a whole number'),
    ('no online CPUs', KUNPENG920_8xA100, _without('online_cpus', []), None, CPU,
     r'^The numa fact lists no online CPUs: run llmops\.vllm\.numa_facts first, or pass max_jobs\.$'),
    ('cmake args ignored by 0.11.0', KUNPENG920_8xA100, None, None,
     dict(CPU, extra_cmake_args=['-DCMAKE_CXX_COMPILER=/usr/bin/aarch64-linux-gnu-g++']),
     r'^vLLM 0\.11\.0 ignores CMAKE_ARGS \(its setup\.py reads it from 0\.11\.1 on\), so extra_cmake_args '
     r'-DCMAKE_CXX_COMPILER=/usr/bin/aarch64-linux-gnu-g\+\+ would have no effect: use vLLM 0\.11\.1 or newer, or '
     r'pass a compiler as extra_env CC/CXX instead\.$'),
    ('cmake arg with a space', KUNPENG920_8xA100, None, None,
     dict(CPU, vllm_version='0.12.0', extra_cmake_args=['-DA=b c']), r"^extra_cmake_args item '-DA=b c' is not one"),
    ('cmake arg without dash', KUNPENG920_8xA100, None, None,
     dict(CPU, vllm_version='0.12.0', extra_cmake_args=['ARCH=arm64']), r"^extra_cmake_args item 'ARCH=arm64'"),
    ('cmake args of the wrong type', KUNPENG920_8xA100, None, None,
     dict(CPU, vllm_version='0.12.0', extra_cmake_args={'A': 1}), r'^extra_cmake_args must be a list of strings'),
    ('extra env overriding MAX_JOBS', KUNPENG920_8xA100, None, None, dict(CPU, extra_env={'MAX_JOBS': '4'}),
     r'^extra_env sets MAX_JOBS, which the plan derives itself: use the matching option instead \(max_jobs'),
    ('extra env name', KUNPENG920_8xA100, None, None, dict(CPU, extra_env={'A-B': '1'}),
     r"^extra_env key 'A-B' is not an environment variable name\.$"),
    ('extra env value', KUNPENG920_8xA100, None, None, dict(CPU, extra_env={'A': ['1']}),
     r"^extra_env A must be text, not \['1'\]\.$"),
    ('extra env type', KUNPENG920_8xA100, None, None, dict(CPU, extra_env='A=1'),
     r"^extra_env must be a dict of environment variables, not 'A=1'\.$"),
    ('python version', KUNPENG920_8xA100, None, None, dict(CPU, python_version='3'),
     r"^python_version '3' is not a valid version: use the form '3\.11'\.$"),
    ('torch version', KUNPENG920_8xA100, None, None, dict(CPU, torch_version='latest'),
     r"^torch_version 'latest' is not a valid version: use the form '2\.8\.0'\.$"),
    ('torch version list', KUNPENG920_8xA100, None, None, dict(CPU, torch_version=['2.8.0']),
     r"^torch_version must be text such as '2\.8\.0', not \['2\.8\.0'\]\.$"),
]


@pytest.mark.parametrize('topo, change_numa, change_gpu, options, message', [case[1:] for case in ERROR_CASES],
                         ids=[case[0] for case in ERROR_CASES])
def test_errors(facts, topo, change_numa, change_gpu, options, message):
    gpu, numa = facts(topo)
    numa = change_numa(numa) if change_numa else numa
    gpu = change_gpu(gpu) if change_gpu else gpu
    with pytest.raises(BuildPlanError, match=message):
        build_plan(numa, gpu, **options)


def test_error_is_a_value_error():
    assert issubclass(BuildPlanError, ValueError)


@pytest.mark.parametrize('architecture', [None, 'riscv64'])
def test_unknown_architecture(facts, architecture):
    numa = copy.deepcopy(facts(KUNPENG920_8xA100)[1])
    numa['cpu']['architecture'] = architecture
    with pytest.raises(BuildPlanError, match=r'this host reports architecture %r' % architecture):
        build_plan(numa, None, **CPU)


@pytest.mark.parametrize('version', ['0.11.0', '0.11.1rc1', '0.12.0.dev3', '1.0.0.post1'])
def test_valid_versions(facts, version):
    options = dict(CPU)
    options['vllm_version'] = version
    plan = build_plan(*reversed(facts(KUNPENG920_8xA100)), **options)
    assert plan['cache_key'].startswith('vllm-%s-aarch64-cpu-' % version)
