# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._cuda import driver_supports, parse_cuda_version

# The gpu fact of a Kunpeng 920 node with 8 x A100 on the R550 driver branch (CUDA 12.4), as gpu_facts reports it.
A100_R550 = {'available': True, 'reason': None, 'driver_version': '550.54.15', 'cuda_driver_version': '12.4',
             'count': 8}


def gpu(cuda_driver_version, **changes):
    return dict(A100_R550, cuda_driver_version=cuda_driver_version, **changes)


@pytest.mark.parametrize('text, expected', [
    ('12.8', (12, 8)),
    ('12.10', (12, 10)),
    ('13.0', (13, 0)),
    (' 12.4 ', (12, 4)),
    ('11.8', (11, 8)),
])
def test_parse_cuda_version(text, expected):
    assert parse_cuda_version(text) == expected


@pytest.mark.parametrize('value, message', [
    ('12', r"CUDA version '12' is not of the form major\.minor, such as \"12\.8\""),
    ('12.x', r"CUDA version '12\.x' is not of the form major\.minor"),
    ('twelve', r"CUDA version 'twelve' is not of the form major\.minor"),
    ('12.8.1', r"CUDA version '12\.8\.1' is not of the form major\.minor"),
    ('v12.8', r"CUDA version 'v12\.8' is not of the form major\.minor"),
    ('', r"CUDA version '' is not of the form major\.minor"),
    (None, r'CUDA version None is not of the form major\.minor'),
    (True, r'CUDA version True is not of the form major\.minor'),
    (12.1, r'CUDA version 12\.1 is a number, not text: quote it \("12\.1"\), since YAML reads 12\.10 as 12\.1'),
    (12040, r'CUDA version 12040 is a number, not text'),
])
def test_parse_cuda_version_refuses(value, message):
    with pytest.raises(ValueError, match='^%s' % message):
        parse_cuda_version(value)


@pytest.mark.parametrize('name, fact, wanted, expected', [
    ('older driver', gpu('12.4'), '12.8',
     'vLLM is built for CUDA 12.8 but the NVIDIA driver 550.54.15 supports CUDA 12.4 at most'),
    ('same version', gpu('12.8'), '12.8', None),
    ('newer major', gpu('13.0'), '12.8', None),
    ('newer minor compares as a number, not as text', gpu('12.10'), '12.8', None),
    ('12.8 driver, 13.0 build', gpu('12.8'), '13.0',
     'vLLM is built for CUDA 13.0 but the NVIDIA driver 550.54.15 supports CUDA 12.8 at most'),
    ('12.10 driver, 13.0 build', gpu('12.10'), '13.0',
     'vLLM is built for CUDA 13.0 but the NVIDIA driver 550.54.15 supports CUDA 12.10 at most'),
    ('blanks around the wanted version', gpu('12.4'), ' 12.8 ',
     'vLLM is built for CUDA 12.8 but the NVIDIA driver 550.54.15 supports CUDA 12.4 at most'),
    ('driver version unknown', gpu('12.4', driver_version=None), '12.8',
     'vLLM is built for CUDA 12.8 but the NVIDIA driver (version unknown) supports CUDA 12.4 at most'),
    ('driver reports no CUDA version', gpu(None), '12.8',
     'vLLM is built for CUDA 12.8 but the NVIDIA driver 550.54.15 reports no CUDA version it supports (None)'),
    ('driver reports an empty CUDA version', gpu(''), '12.8',
     "vLLM is built for CUDA 12.8 but the NVIDIA driver 550.54.15 reports no CUDA version it supports ('')"),
    ('driver reports a malformed CUDA version', gpu('12'), '12.8',
     "vLLM is built for CUDA 12.8 but the NVIDIA driver 550.54.15 reports no CUDA version it supports ('12')"),
    ('driver reports the raw NVML number', gpu(12040), '12.8',
     'vLLM is built for CUDA 12.8 but the NVIDIA driver 550.54.15 reports no CUDA version it supports (12040)'),
    ('no CUDA build expected (empty)', gpu('12.4'), '', None),
    ('no CUDA build expected (blank)', gpu('12.4'), '  ', None),
    ('no CUDA build expected (None)', gpu('12.4'), None, None),
    ('no usable GPU', {'available': False, 'reason': 'NVML is not installed', 'cuda_driver_version': None}, '12.8',
     None),
    ('no gpu fact', None, '12.8', None),
    ('empty gpu fact', {}, '12.8', None),
])
def test_driver_supports(name, fact, wanted, expected):
    assert driver_supports(fact, wanted) == expected


@pytest.mark.parametrize('wanted', ['12', '12.x', 'twelve', 12.8, 13])
@pytest.mark.parametrize('fact', [gpu('12.4'), gpu('13.0'), None], ids=['old driver', 'new driver', 'no gpu'])
def test_a_malformed_wanted_version_is_refused_with_or_without_a_gpu(fact, wanted):
    with pytest.raises(ValueError, match='^CUDA version'):
        driver_supports(fact, wanted)


def test_the_gpu_fact_is_not_changed():
    fact = gpu('12.4')
    before = dict(fact)
    driver_supports(fact, '12.8')
    assert fact == before
