# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""vLLM 0.32's start-time rules on the models a Kunpeng 920 + A100 site serves (config.json as published), through
the serving plan on the seed's recorded hardware, and the rules' functions on their own."""

from __future__ import annotations

import copy
import json
import pathlib

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils import _serving_rules as rules
from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import KUNPENG920_8xA100, WORKSTATION_1GPU
from ansible_collections.llmops.vllm.tests.unit.plugins.module_utils.test_serving import CUDA_INSTALL, plan, refused

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / 'fixtures' / 'model_configs'
MODELS = ('llama-2-7b', 'llama-3-70b', 'mixtral-8x7b', 'deepseek-moe-16b', 'falcon-7b')


def config(model):
    return json.loads((CONFIGS / ('%s.json' % model)).read_text())


def instance(**item):
    return dict({'name': 'chat', 'model': '/models/m', 'port': 8101}, **item)


def served(facts, model, topo=None, **item):
    """The plan of one instance of the model on the topology (the seed's Kunpeng 920 + 8 x A100 by default)."""
    found = plan(facts, topo or KUNPENG920_8xA100, [instance(**item)], install=CUDA_INSTALL, config=config(model))
    return found['instances'][0]


def refused_on(facts, model, *fragments, **item):
    return refused(facts, KUNPENG920_8xA100, [instance(**item)], 'instance chat', *fragments, install=CUDA_INSTALL,
                   config=config(model))


class Refused(Exception):
    pass


def fail(what, fix):
    raise Refused('%s. Fix: %s' % (what, fix))


@pytest.mark.parametrize('model, shape', [
    ('llama-2-7b', {'heads': 32, 'kv_heads': 32, 'layers': 32, 'experts': None, 'mla': False}),
    ('llama-3-70b', {'heads': 64, 'kv_heads': 8, 'layers': 80, 'experts': None, 'mla': False}),
    ('mixtral-8x7b', {'heads': 32, 'kv_heads': 8, 'layers': 32, 'experts': 8, 'mla': False}),
    ('deepseek-moe-16b', {'heads': 16, 'kv_heads': 16, 'layers': 28, 'experts': 64, 'mla': False}),
    # multi_query: one key-value head.
    ('falcon-7b', {'heads': 71, 'kv_heads': 1, 'layers': 32, 'experts': None, 'mla': False}),
])
def test_the_shape_of_each_model_as_vllm_reads_it(model, shape):
    assert rules.model_shape(config(model)) == shape


def test_a_multimodal_model_is_read_from_its_text_config():
    shape = rules.model_shape({'model_type': 'llava', 'text_config': config('llama-2-7b'), 'vision_config': {}})
    assert (shape['heads'], shape['layers']) == (32, 32)


@pytest.mark.parametrize('model, sizes', [
    ('llama-2-7b', (1, 2, 4, 8)),
    ('llama-3-70b', (1, 2, 4, 8)),
    ('mixtral-8x7b', (1, 2, 4, 8)),
    ('deepseek-moe-16b', (1, 2, 4, 8)),
    ('falcon-7b', (1,)),
])
def test_every_tensor_parallel_size_that_divides_the_heads_is_served(facts, model, sizes):
    for tp in sizes:
        argv = served(facts, model, tensor_parallel_size=tp)['argv']
        assert ('--tensor-parallel-size' in argv) == (tp > 1)


@pytest.mark.parametrize('model, tp, heads, sizes', [
    ('llama-2-7b', 3, 32, '1, 2, 4, 8, 16, 32'),
    ('llama-3-70b', 6, 64, '1, 2, 4, 8, 16, 32, 64'),
    ('mixtral-8x7b', 5, 32, '1, 2, 4, 8, 16, 32'),
    ('deepseek-moe-16b', 3, 16, '1, 2, 4, 8, 16'),
    # 71 heads: prime, so Falcon-7B runs on one GPU per replica.
    ('falcon-7b', 2, 71, '1'),
])
def test_a_tensor_parallel_size_that_does_not_divide_the_heads_is_refused(facts, model, tp, heads, sizes):
    refused_on(facts, model, 'tensor_parallel_size %d does not divide the model\'s %d attention heads' % (tp, heads),
               'vLLM refuses to start', 'Fix: set tensor_parallel_size to a divisor of %d (%s)' % (heads, sizes),
               tensor_parallel_size=tp)


def test_key_value_heads_are_split_or_replicated_and_otherwise_refused():
    llama70 = rules.model_shape(config('llama-3-70b'))
    rules.check_parallel(fail, llama70, 16, 1)  # 8 KV heads, each on two ranks
    rules.check_parallel(fail, llama70, 4, 1)  # two KV heads a rank
    # Qwen2.5-32B's shape: 40 heads, 8 KV heads. TP 5 and 10 divide the heads but neither split nor replicate.
    for tp in (5, 10):
        with pytest.raises(Refused, match='tensor_parallel_size %d and the model\'s 8 key-value heads' % tp):
            rules.check_parallel(fail, {'heads': 40, 'kv_heads': 8, 'layers': 64, 'mla': False}, tp, 1)
    # Latent attention (DeepSeek-V2/V3) keeps one latent head on every rank: only the heads split.
    rules.check_parallel(fail, {'heads': 40, 'kv_heads': 8, 'layers': 64, 'mla': True}, 5, 1)


def test_a_pipeline_stage_without_layers_is_refused():
    deepseek = rules.model_shape(config('deepseek-moe-16b'))
    rules.check_parallel(fail, deepseek, 1, 28)
    with pytest.raises(Refused, match=r'pipeline_parallel_size 32 is above the model\'s 28 layers.*28 or less'):
        rules.check_parallel(fail, deepseek, 1, 32)


def test_a_config_without_the_numbers_is_left_to_vllm(facts):
    rules.check_parallel(fail, rules.model_shape({}), 3, 3)


# FP8 on the seed's A100s (compute capability 8.0): weight-only, W8A16.

def test_fp8_weights_with_fp16_activations_run_weight_only_on_a100(facts):
    chat = served(facts, 'llama-2-7b', precision={'weight': 'fp8', 'activation': 'fp16'})
    argv = ' '.join(chat['argv'])
    assert '--quantization fp8' in argv and '--dtype float16' in argv
    assert chat['precision'] == 'fp8 weight-only (W8A16)'
    assert chat['precision_reason'] == 'GPUs are compute capability 8.0'


def test_fp8_activations_on_a100_are_refused_naming_weight_only(facts):
    refused_on(facts, 'llama-2-7b', 'precision.activation fp8 needs GPUs of compute capability 8.9 or newer',
               'these GPUs have 8.0', 'Fix: use precision {weight: fp8, activation: fp16} (FP8 weight-only, W8A16',
               precision={'weight': 'fp8', 'activation': 'fp8'})


def test_fp8_on_an_ada_gpu_computes_in_fp8(facts):
    gpu = served(facts, 'llama-2-7b', topo=WORKSTATION_1GPU, precision={'weight': 'fp8', 'activation': 'fp8'})
    assert '--quantization' in gpu['argv'] and gpu['precision'] == 'fp8 (W8A8)'
    assert gpu['precision_reason'] == 'GPUs are compute capability 8.9'


def test_fp8_on_gpus_older_than_turing_is_refused(facts):
    volta = copy.deepcopy(KUNPENG920_8xA100)
    for device in volta['gpu']['devices']:
        device['compute_capability'] = (7, 0)
    refused(facts, volta, [instance(precision={'weight': 'fp8', 'activation': 'fp16'})], 'instance chat',
            'compute capability 7.5 or newer (weight-only)', 'these GPUs have 7.0', install=CUDA_INSTALL,
            config=config('llama-2-7b'))


def test_an_fp8_checkpoint_on_a100_is_described_as_weight_only(facts):
    fp8 = dict(config('llama-3-70b'), quantization_config={'quant_method': 'fp8', 'activation_scheme': 'dynamic'})
    chat = plan(facts, KUNPENG920_8xA100, [instance(tensor_parallel_size=4)], install=CUDA_INSTALL,
                config=fp8)['instances'][0]
    # vLLM reads the checkpoint's method itself.
    assert '--quantization' not in chat['argv']
    assert chat['precision'] == 'fp8 weight-only (W8A16)'
    assert 'the checkpoint\'s FP8 activations need 8.9' in chat['precision_reason']


@pytest.mark.parametrize('model', ['mixtral-8x7b', 'deepseek-moe-16b'])
def test_fp8_experts_run_weight_only_on_a100(facts, model):
    # fused_moe/oracle/fp8.py picks the Marlin MoE kernels (W8A16) below 8.9.
    moe = served(facts, model, tensor_parallel_size=4, precision={'weight': 'fp8', 'activation': 'bf16'})
    assert '--quantization fp8' in ' '.join(moe['argv']) and moe['precision'] == 'fp8 weight-only (W8A16)'


def test_fp8_in_float32_is_refused(facts):
    refused_on(facts, 'llama-2-7b', 'dtype float32 with fp8 weights', dtype='float32', precision={'weight': 'fp8'})


# int8 weights with fp16 activations (the seed's precision block).

@pytest.mark.parametrize('model', ['mixtral-8x7b', 'deepseek-moe-16b'])
def test_int8_on_a_mixture_of_experts_without_a_checkpoint_is_experts_int8(facts, model):
    moe = served(facts, model, tensor_parallel_size=2, precision={'weight': 'int8', 'activation': 'fp16'})
    assert '--quantization experts_int8' in ' '.join(moe['argv']) and '--dtype float16' in ' '.join(moe['argv'])
    assert moe['precision'] == 'int8 experts (experts_int8, W8A16)'
    assert moe['precision_reason'].startswith('a mixture of experts without a quantized checkpoint')
    assert moe['precision_reason'].endswith('the other layers stay in float16')


@pytest.mark.parametrize('model', ['llama-2-7b', 'llama-3-70b'])
def test_int8_on_a_dense_model_still_needs_a_checkpoint(facts, model):
    refused_on(facts, model, 'precision.weight int8 needs a quantized checkpoint', 'GPTQ, AWQ',
               tensor_parallel_size=8, precision={'weight': 'int8', 'activation': 'fp16'})


def test_int4_on_a_mixture_of_experts_needs_a_checkpoint(facts):
    refused_on(facts, 'mixtral-8x7b', 'quantizes a mixture of experts at load only to int8',
               'Fix: point model at an int4 checkpoint', precision={'weight': 'int4', 'activation': 'fp16'})


def test_experts_int8_on_a_dense_model_is_refused(facts):
    refused_on(facts, 'llama-2-7b', 'quantization experts_int8 on a model without experts', 'would quantize nothing',
               quantization='experts_int8')


def test_the_reason_for_a_plain_dtype(facts):
    chat = served(facts, 'llama-3-70b', tensor_parallel_size=4)
    assert (chat['precision'], chat['precision_reason']) == ('bfloat16', 'the model\'s config.json')
    chat = served(facts, 'llama-3-70b', tensor_parallel_size=4, precision={'weight': 'fp16', 'activation': 'fp16'})
    assert (chat['precision'], chat['precision_reason']) == ('float16', 'precision.activation fp16')


# Memory shares of a GPU.

def two_on_gpu0(first, second):
    return [instance(name='a', gpus=[0], gpu_memory_utilization=first),
            instance(name='b', port=8102, gpus=[0], cpus='8-9', gpu_memory_utilization=second)]


def test_two_instances_share_a_gpu_within_the_limit(facts):
    a, b = plan(facts, KUNPENG920_8xA100, two_on_gpu0(0.45, 0.5), install=CUDA_INSTALL,
                config=config('llama-2-7b'))['instances']
    assert a['placement']['gpu_indices'] == b['placement']['gpu_indices'] == [0]
    assert '--gpu-memory-utilization 0.5' in ' '.join(b['argv'])


def test_shares_above_the_limit_are_refused_naming_both(facts):
    refused(facts, KUNPENG920_8xA100, two_on_gpu0(0.5, 0.5), 'instance b: instances a, b share GPU 0',
            'ask for 1 of its memory together (gpu_memory_utilization 0.5 + 0.5)',
            'Fix: lower their gpu_memory_utilization to 0.95 or less in all (for example 0.47 each)',
            install=CUDA_INSTALL, config=config('llama-2-7b'))


def test_a_gpu_is_shared_only_when_both_instances_name_a_share(facts):
    first, second = two_on_gpu0(0.45, 0.45)
    del first['gpu_memory_utilization']
    refused(facts, KUNPENG920_8xA100, [first, second], 'asks for GPU 0 but it is already held by a',
            'set gpu_memory_utilization on both instances to share the GPU', install=CUDA_INSTALL,
            config=config('llama-2-7b'))


def test_shares_count_vllms_default_for_an_instance_without_one():
    plans = [{'name': n, 'device': 'cuda', 'runs_vllm': True, 'gpu_memory_utilization': u,
              'placement': {'gpu_indices': [0]}} for n, u in (('a', None), ('b', 0.05))]
    with pytest.raises(Refused, match=r'ask for 0.97 of its memory together \(gpu_memory_utilization 0.92 \+ 0.05\)'):
        rules.check_gpu_shares(lambda name: fail, plans)


# The scheduler's batch against the longest request.

def test_a_batch_below_max_model_len_needs_chunked_prefill(facts):
    item = {'max_num_batched_tokens': 2048, 'max_model_len': 4096}
    served(facts, 'llama-2-7b', **item)  # chunked prefill is on by default
    refused_on(facts, 'llama-2-7b', 'max_num_batched_tokens 2048 is below max_model_len 4096 with '
               '--no-enable-chunked-prefill', 'Fix: raise max_num_batched_tokens to 4096',
               extra_args=['--no-enable-chunked-prefill'], **item)
    # Without max_model_len, the model's context is the longest request.
    refused_on(facts, 'llama-2-7b', 'below max_model_len 4096', max_num_batched_tokens=2048,
               extra_args=['--no-enable-chunked-prefill'])


def test_a_batch_smaller_than_max_num_seqs_is_refused(facts):
    refused_on(facts, 'llama-2-7b', 'max_num_batched_tokens 128 is below max_num_seqs 256',
               'Fix: raise max_num_batched_tokens to 256 or more', max_num_batched_tokens=128, max_num_seqs=256)


def test_a_batch_size_that_is_not_a_number_is_refused_before_the_rule(facts):
    refused_on(facts, 'llama-2-7b', "max_num_batched_tokens must be an integer >= 1, got 'many'",
               'Fix: correct max_num_batched_tokens', max_num_batched_tokens='many', max_num_seqs=256)
