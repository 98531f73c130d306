# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""How to build a vLLM wheel from source on a builder host, decided from its numa and gpu facts.

A fleet builds once per wheel cache key: one builder host of a kind builds the wheel, the controller keeps
it in its wheelhouse under the key, and every node with the same key installs that wheel.

The cache key names vLLM version, architecture and target (cuda<version> or cpu), and ends in 8 hex digits
of the sha256 of ``cache_key_inputs``: KEY_SCHEMA, vLLM version, architecture, target device, CUDA version,
torch version, Python version, compiler flags (in order), extra CMake arguments (in order), CUDA arch list
and extra environment. MAX_JOBS, NVCC_THREADS, memory, CPU count and host name do not enter it: they change
how fast the wheel is built, not the wheel.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import hashlib
import json
import re

from ansible_collections.llmops.vllm.plugins.module_utils._cuda import CUDA_VERSION_RE, driver_supports

# Bump when the plan starts to build different wheels from the same inputs: every key changes.
KEY_SCHEMA = 1

TARGET_DEVICES = ('cuda', 'cpu')
SOURCE_BUILD_ARCHITECTURES = ('aarch64', 'x86_64')

# Peak resident memory of one compile job. C++ of the CPU backend (oneDNN, templates) stays under 2 GiB;
# one nvcc process over vLLM's CUTLASS/Marlin/FlashAttention kernels with NVCC_THREADS=2 threads needs up to
# 8 GiB. vLLM runs MAX_JOBS // NVCC_THREADS nvcc processes, so for CUDA one MAX_JOBS unit costs 4 GiB.
CPU_GIB_PER_JOB = 2
CUDA_GIB_PER_NVCC_PROCESS = 8
NVCC_THREADS = 2

# vLLM's setup.py reads CMAKE_ARGS since 0.11.1; 0.11.0 and older ignore it without a word.
CMAKE_ARGS_SINCE = (0, 11, 1)

# x86_64 compiler flags that imply AVX2.
AVX2_FLAGS = ('-march=x86-64-v3', '-march=x86-64-v4', '-march=native', '-mavx2')

# Environment the plan sets itself; extra_env may not override these.
PLAN_ENV_KEYS = ('VLLM_TARGET_DEVICE', 'CFLAGS', 'CXXFLAGS', 'CMAKE_ARGS', 'MAX_JOBS', 'NVCC_THREADS',
                 'TORCH_CUDA_ARCH_LIST')

_VERSION_RE = re.compile(r'^\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?$')
_PYTHON_VERSION_RE = re.compile(r'^3\.\d+$')
_TORCH_VERSION_RE = re.compile(r'^\d+(\.\d+)*[0-9A-Za-z.+]*$')
_CAPABILITY_RE = re.compile(r'^\d+\.\d+[af]?$')
_ARCH_ITEM_RE = re.compile(r'^\d+\.\d+[af]?(\+PTX)?$')
_ENV_NAME_RE = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*$')


class BuildPlanError(ValueError):
    """The inputs do not allow a build plan; the message says what is wrong and how to fix it."""


def _release(version):
    """(0, 11, 1) for "0.11.1rc2": the leading numeric release of a version."""
    return tuple(int(part) for part in re.match(r'^\d+(\.\d+)*', version).group(0).split('.'))


def _text(name, value, pattern, example, required=True):
    """Validated version-like text; None when absent and not required."""
    if value is None or value == '':
        if required:
            raise BuildPlanError('%s is required, for example %s.' % (name, example))
        return None
    if isinstance(value, float):
        raise BuildPlanError('%s is the number %r, not text: quote it (%s=%r), since YAML reads 12.10 as 12.1.'
                             % (name, value, name, str(value)))
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise BuildPlanError('%s must be text such as %s, not %r.' % (name, example, value))
    text = str(value).strip()
    if not pattern.match(text):
        raise BuildPlanError('%s %r is not a valid version: use the form %s.' % (name, text, example))
    return text


def _positive_int(name, value, fix):
    if value is None:
        return None
    number = None
    if not isinstance(value, (bool, float)):
        try:
            number = int(value)
        except (TypeError, ValueError):
            number = None
    if number is None:
        raise BuildPlanError('%s must be a whole number, not %r: %s' % (name, value, fix))
    if number < 1:
        raise BuildPlanError('%s must be at least 1, not %d: %s' % (name, number, fix))
    return number


def _words(name, value):
    """A list of strings from a list or a whitespace-separated string."""
    if value is None:
        return []
    if isinstance(value, str):
        return value.split()
    if not isinstance(value, (list, tuple)):
        raise BuildPlanError('%s must be a list of strings, not %r.' % (name, value))
    return [str(item) for item in value]


def _cmake_args(value, vllm_version):
    args = _words('extra_cmake_args', value)
    for arg in args:
        if not arg.startswith('-') or re.search(r'\s', arg):
            raise BuildPlanError(
                'extra_cmake_args item %r is not one CMake option: vLLM splits CMAKE_ARGS on white space, so give '
                'options like -DNAME=VALUE, one per list item, without spaces.' % arg)
    since = '.'.join(str(part) for part in CMAKE_ARGS_SINCE)
    if args and _release(vllm_version) < CMAKE_ARGS_SINCE:
        raise BuildPlanError(
            'vLLM %s ignores CMAKE_ARGS (its setup.py reads it from %s on), so extra_cmake_args %s would have no '
            'effect: use vLLM %s or newer, or pass a compiler as extra_env CC/CXX instead.'
            % (vllm_version, since, ' '.join(args), since))
    return args


def _extra_env(value):
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BuildPlanError('extra_env must be a dict of environment variables, not %r.' % (value,))
    env = {}
    for name, item in value.items():
        name = str(name)
        if not _ENV_NAME_RE.match(name):
            raise BuildPlanError('extra_env key %r is not an environment variable name.' % name)
        if name in PLAN_ENV_KEYS:
            raise BuildPlanError(
                'extra_env sets %s, which the plan derives itself: use the matching option instead (max_jobs, '
                'cuda_arch_list, extra_cmake_args; compiler flags come from the numa fact).' % name)
        if item is None or isinstance(item, (dict, list)):
            raise BuildPlanError('extra_env %s must be text, not %r.' % (name, item))
        env[name] = str(item).lower() if isinstance(item, bool) else str(item)
    return env


def _arch_sort_key(item):
    major, minor = re.match(r'^(\d+)\.(\d+)', item).groups()
    return int(major), int(minor), item


def _gpu_capabilities(gpu):
    gpu = gpu or {}
    devices = (gpu.get('devices') or []) if gpu.get('available') else []
    capabilities = set()
    for device in devices:
        capability = device.get('compute_capability')
        if capability is None:
            continue
        capability = str(capability).strip()
        if not _CAPABILITY_RE.match(capability):
            raise BuildPlanError('GPU %s reports compute capability %r, which is not major.minor: check the gpu '
                                 'fact, or pass cuda_arch_list.' % (device.get('index'), capability))
        capabilities.add(capability)
    return sorted(capabilities, key=_arch_sort_key)


def _cuda_arch_list(value, gpu, warnings):
    host = _gpu_capabilities(gpu)
    if value is None or value == '' or value == []:
        if not host:
            raise BuildPlanError(
                'target_device cuda needs the CUDA architectures to build for, and this host has no GPU in its gpu '
                'fact (%s): run llmops.vllm.gpu_facts on a host with its GPUs, or pass cuda_arch_list, e.g. '
                "'8.0' for A100/A800, '9.0' for H100/H200, '8.0;9.0' for both."
                % ((gpu or {}).get('reason') or 'no devices').rstrip('.'))
        return ';'.join(host)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, str):
        items = re.split(r'[;,\s]+', value.strip())
    elif isinstance(value, (list, tuple)):
        items = [str(item).strip() for item in value]
    else:
        raise BuildPlanError("cuda_arch_list must be a list or a ';'-separated string such as '8.0;9.0', not %r."
                             % (value,))
    items = [item for item in items if item]
    for item in items:
        if not _ARCH_ITEM_RE.match(item):
            raise BuildPlanError("cuda_arch_list item %r is not a CUDA architecture: use major.minor with an optional "
                                 "a/f suffix or +PTX, e.g. '8.0;9.0a'." % item)
    items = sorted(set(items), key=_arch_sort_key)
    built = set(re.match(r'^\d+\.\d+', item).group(0) for item in items)
    uncovered = [capability for capability in host if re.match(r'^\d+\.\d+', capability).group(0) not in built]
    if uncovered:
        warnings.append('cuda_arch_list %s leaves out compute capability %s of this host\'s GPUs: the wheel will not '
                        'run on this host.' % (';'.join(items), ', '.join(uncovered)))
    return ';'.join(items)


def _memory_mib(numa, memory_mib, warnings):
    """(MiB, where it came from); (None, None) when neither memory_mib nor the NUMA nodes tell."""
    explicit = _positive_int('memory_mib', memory_mib, "pass ansible_facts['memtotal_mb'].")
    if explicit is not None:
        return explicit, 'memory_mib'
    nodes = numa.get('nodes') or []
    known = [node.get('memory_total_mib') for node in nodes if node.get('memory_total_mib') is not None]
    if not known or sum(known) < 1:
        return None, None
    if len(known) < len(nodes):
        warnings.append('%d of %d NUMA nodes do not report their memory: MAX_JOBS counts only %d MiB.'
                        % (len(nodes) - len(known), len(nodes), sum(known)))
    return sum(known), 'the NUMA nodes'


def _max_jobs(numa, target_device, memory_mib, max_jobs, warnings):
    """(jobs, reason, memory MiB or None, jobs memory allows or None)."""
    cpus = len(numa.get('online_cpus') or [])
    explicit = _positive_int('max_jobs', max_jobs, 'omit it to derive MAX_JOBS from CPUs and memory.')
    memory, source = _memory_mib(numa, memory_mib, warnings)
    if explicit is None and cpus < 1:
        raise BuildPlanError('The numa fact lists no online CPUs: run llmops.vllm.numa_facts first, or pass max_jobs.')
    if explicit is None and memory is None:
        raise BuildPlanError(
            'The numa fact does not tell the memory of this host (no NUMA node reports memory_total_mib), and '
            "MAX_JOBS must fit in memory: pass memory_mib=ansible_facts['memtotal_mb'], or max_jobs.")
    if memory is None:
        return explicit, 'max_jobs=%d given explicitly; memory unknown' % explicit, None, None
    gib = memory / 1024.0
    if target_device == 'cuda':
        processes = int(gib // CUDA_GIB_PER_NVCC_PROCESS)
        by_memory = processes * NVCC_THREADS
        memory_text = ('%.1f GiB from %s / %d GiB per nvcc process = %d nvcc process(es) x NVCC_THREADS=%d = %d jobs'
                       % (gib, source, CUDA_GIB_PER_NVCC_PROCESS, processes, NVCC_THREADS, by_memory))
    else:
        by_memory = int(gib // CPU_GIB_PER_JOB)
        memory_text = '%.1f GiB from %s / %d GiB per compile job = %d jobs' % (gib, source, CPU_GIB_PER_JOB, by_memory)
    if explicit is not None:
        if by_memory < explicit:
            warnings.append('max_jobs=%d is more than memory allows (%s): the build may be killed for lack of memory.'
                            % (explicit, memory_text))
        reason = 'max_jobs=%d given explicitly (memory would allow %s)' % (explicit, memory_text)
        return explicit, reason, memory, by_memory
    if by_memory < 1:
        warnings.append('Memory allows no compile job (%s): building with 1 job, which may still run out of memory.'
                        % memory_text)
        return 1, 'memory-bound: %s; at least 1' % memory_text, memory, by_memory
    if by_memory < cpus:
        return by_memory, 'memory-bound: %s < %d online CPUs' % (memory_text, cpus), memory, by_memory
    return cpus, 'CPU-bound: %d online CPUs <= %s' % (cpus, memory_text), memory, by_memory


def cache_key_of(inputs):
    """vllm-<version>-<arch>-<cuda<version>|cpu>-<8 hex digits of the sha256 of the canonical JSON of inputs>."""
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True, separators=(',', ':')).encode('utf-8')).hexdigest()
    device = 'cuda%s' % inputs['cuda_version'] if inputs['target_device'] == 'cuda' else 'cpu'
    return 'vllm-%s-%s-%s-%s' % (inputs['vllm_version'], inputs['architecture'], device, digest[:8])


def wheel_glob_of(vllm_version, architecture):
    """File name pattern of the wheel vLLM builds: vllm-0.11.0+cpu-cp311-cp311-linux_aarch64.whl,
    vllm-0.11.0+cu126-cp38-abi3-linux_x86_64.whl, vllm-0.11.0-cp38-abi3-manylinux_2_28_x86_64.whl."""
    return 'vllm-%s[+-]*_%s.whl' % (vllm_version, architecture)


def build_plan(numa, gpu=None, vllm_version=None, target_device=None, cuda_version=None, torch_version=None,
               extra_cmake_args=None, memory_mib=None, max_jobs=None, cuda_arch_list=None, python_version=None,
               extra_env=None):
    """Return the build plan of a vLLM wheel on the host of the numa and gpu facts; BuildPlanError on bad input.

    numa and gpu are the facts of llmops.vllm.numa_facts and llmops.vllm.gpu_facts (gpu may be None for
    cpu targets). cuda_version, cuda_arch_list and the GPUs are ignored for target_device cpu.
    """
    warnings = []
    if not isinstance(numa, dict) or not isinstance(numa.get('cpu'), dict):
        raise BuildPlanError('The numa fact is missing or has no cpu entry: run llmops.vllm.numa_facts first and '
                             "pass ansible_facts['numa'].")
    if gpu is not None and not isinstance(gpu, dict):
        raise BuildPlanError("gpu must be the gpu fact (ansible_facts['gpu']) or None, not %r." % (gpu,))
    version = _text('vllm_version', vllm_version, _VERSION_RE, "'0.11.0'")
    if target_device not in TARGET_DEVICES:
        raise BuildPlanError('target_device %r is not one of %s: use cuda for NVIDIA GPU hosts, cpu for CPU-only '
                             'hosts.' % (target_device, ', '.join(TARGET_DEVICES)))
    cpu = numa['cpu']
    architecture = cpu.get('architecture')
    if architecture not in SOURCE_BUILD_ARCHITECTURES:
        raise BuildPlanError(
            'Source builds are supported on %s builders, and this host reports architecture %r: build on an aarch64 '
            '(e.g. Kunpeng 920) or x86_64 host of the kind of the nodes, or install a released vLLM wheel.'
            % (' and '.join(SOURCE_BUILD_ARCHITECTURES), architecture))
    torch = _text('torch_version', torch_version, _TORCH_VERSION_RE, "'2.8.0'", required=False)
    python = _text('python_version', python_version, _PYTHON_VERSION_RE, "'3.11'", required=False)
    flags = [str(flag) for flag in cpu.get('compiler_flags') or []]
    if not flags:
        warnings.append('The numa fact has no compiler flags for this CPU: building for the compiler default.')
    cmake_args = _cmake_args(extra_cmake_args, version)
    extra = _extra_env(extra_env)

    cuda = arch_list = None
    if target_device == 'cuda':
        cuda = _text('cuda_version', cuda_version, CUDA_VERSION_RE, "'12.8' (the CUDA toolkit the build uses)")
        arch_list = _cuda_arch_list(cuda_arch_list, gpu, warnings)
        problem = driver_supports(gpu, cuda)
        if problem:
            warnings.append('%s: the wheel builds on this host, but runs here only after a driver upgrade.' % problem)
    elif architecture == 'x86_64' and not set(flags) & set(AVX2_FLAGS):
        warnings.append('This x86_64 CPU shows no AVX2 (compiler flags %s): vLLM\'s CPU backend needs AVX2 or AVX-512 '
                        'to run, and older releases to build.' % (' '.join(flags) or 'none'))

    jobs, reason, memory, by_memory = _max_jobs(numa, target_device, memory_mib, max_jobs, warnings)

    inputs = {
        'schema': KEY_SCHEMA,
        'vllm_version': version,
        'architecture': architecture,
        'target_device': target_device,
        'cuda_version': cuda,
        'torch_version': torch,
        'python_version': python,
        'compiler_flags': flags,
        'cmake_args': cmake_args,
        'cuda_arch_list': arch_list,
        'extra_env': extra,
    }
    env = {
        'VLLM_TARGET_DEVICE': target_device,
        'CFLAGS': ' '.join(flags),
        'CXXFLAGS': ' '.join(flags),
        'CMAKE_ARGS': ' '.join(cmake_args),
        'MAX_JOBS': str(jobs),
    }
    if target_device == 'cuda':
        env['NVCC_THREADS'] = str(NVCC_THREADS)
        env['TORCH_CUDA_ARCH_LIST'] = arch_list
    env.update(extra)
    key = cache_key_of(inputs)
    return {
        'vllm_version': version,
        'architecture': architecture,
        'target_device': target_device,
        'cuda_version': cuda,
        'torch_version': torch,
        'python_version': python,
        'compiler_flags': flags,
        'cmake_args': cmake_args,
        'cuda_arch_list': arch_list,
        'env': env,
        'max_jobs': jobs,
        'max_jobs_reason': reason,
        'max_jobs_by_memory': by_memory,
        'memory_mib': memory,
        'nvcc_threads': NVCC_THREADS if target_device == 'cuda' else None,
        'cache_key': key,
        'cache_key_inputs': inputs,
        'wheel_dir': key,
        'wheel_glob': wheel_glob_of(version, architecture),
        'warnings': warnings,
    }
