# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pytest

from ansible_collections.llmops.vllm.plugins.modules import gpu_facts
from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import (
    KUNPENG920_8xA100,
    KUNPENG920_8xA100_GPU3_LOST,
    LAB_2CORE_CPU_ONLY,
    WORKSTATION_1GPU,
    X86_8xA800_NVLINK,
    fake_nvml,
    variant,
)

NO_DRIVER = variant(KUNPENG920_8xA100, 'kunpeng-no-driver',
                    gpu=dict(KUNPENG920_8xA100['gpu'], init_error='DRIVER_NOT_LOADED'))


@pytest.fixture
def host(monkeypatch, sysfs):
    """Make gpu_facts see the topology's GPUs (fake NVML) and sysfs tree; None means pynvml is missing."""
    def use(topo, nvml=True):
        fake = fake_nvml(topo) if nvml else None
        monkeypatch.setattr(gpu_facts, 'pynvml', fake)
        monkeypatch.setattr(gpu_facts, 'SYSFS_ROOT', sysfs(topo))
        return fake
    return use


@pytest.mark.parametrize('topo, count', [(KUNPENG920_8xA100, 8), (X86_8xA800_NVLINK, 8), (WORKSTATION_1GPU, 1)],
                         ids=lambda v: v['name'] if isinstance(v, dict) else str(v))
@pytest.mark.parametrize('check_mode', [False, True])
def test_reports_gpus(run_module, host, topo, count, check_mode):
    fake = host(topo)
    result = run_module(gpu_facts, {'_ansible_check_mode': check_mode})
    assert (result['rc'], result['changed']) == (0, False)
    assert list(result['ansible_facts']) == ['gpu']
    gpu = result['ansible_facts']['gpu']
    assert (gpu['available'], gpu['count'], len(gpu['devices'])) == (True, count, count)
    assert (fake.init_calls, fake.shutdown_calls) == (1, 1)


def test_gpu_lost_mid_query_still_succeeds(run_module, host):
    host(KUNPENG920_8xA100_GPU3_LOST)
    result = run_module(gpu_facts, {})
    assert result['rc'] == 0 and not result.get('failed')
    devices = result['ansible_facts']['gpu']['devices']
    assert [(d['index'], d['error']) for d in devices if d['error']] == [(3, 'nvmlDeviceGetMemoryInfo: GPU is lost')]


@pytest.mark.parametrize('topo, nvml, reason', [
    (KUNPENG920_8xA100, False, 'nvidia-ml-py'),
    (NO_DRIVER, True, 'NVIDIA kernel driver is not loaded'),
    (LAB_2CORE_CPU_ONLY, True, 'libnvidia-ml.so.1'),
], ids=['no-library', 'no-driver', 'cpu-only'])
def test_unavailable_is_not_a_failure_by_default(run_module, host, topo, nvml, reason):
    host(topo, nvml)
    result = run_module(gpu_facts, {})
    assert result['rc'] == 0 and not result.get('failed')
    gpu = result['ansible_facts']['gpu']
    assert gpu['available'] is False and reason in gpu['reason']


@pytest.mark.parametrize('topo, nvml, message', [
    (KUNPENG920_8xA100, False, 'Failed to import the required Python library (nvidia-ml-py)'),
    (NO_DRIVER, True, 'No usable NVIDIA GPU on this host (required=true): The NVIDIA kernel driver is not loaded: '
                      'install the NVIDIA driver and load it (modprobe nvidia) or reboot.'),
    (LAB_2CORE_CPU_ONLY, True, 'NVML (libnvidia-ml.so.1) is not installed: install the NVIDIA driver'),
], ids=['no-library', 'no-driver', 'cpu-only'])
def test_required_fails_with_a_fix(run_module, host, topo, nvml, message):
    host(topo, nvml)
    result = run_module(gpu_facts, {'required': True})
    assert (result['rc'], result['failed']) == (1, True)
    assert message in result['msg']


def test_required_succeeds_with_gpus(run_module, host):
    host(WORKSTATION_1GPU)
    result = run_module(gpu_facts, {'required': True})
    assert result['rc'] == 0 and result['ansible_facts']['gpu']['available'] is True


def test_rejects_unknown_options(run_module, host):
    host(WORKSTATION_1GPU)
    result = run_module(gpu_facts, {'root': '/tmp'})
    assert result['failed'] and 'Unsupported parameters' in result['msg']
