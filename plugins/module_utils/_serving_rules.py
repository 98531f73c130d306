# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""What vLLM 0.32 refuses at start (or gets silently wrong), checked from the model's config.json and the placement.

Each rule cites the place in vLLM 0.32.0's source it follows. The serving plan (_serving.py) calls these with its
own fail(what, fix), which names the host and the instance.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

# config.json keys of the total key-value heads, first present wins (vllm/transformers_utils/
# model_arch_config_convertor.py, get_total_num_kv_heads); without any, every attention head has its own.
_KV_HEAD_KEYS = ('n_head_kv', 'num_kv_heads', 'num_key_value_heads', 'multi_query_group_num', 'num_attention_groups')
# Keys that make a model a mixture of experts, first present wins (the same convertor, get_num_experts).
_EXPERT_KEYS = ('num_experts', 'moe_num_experts', 'n_routed_experts', 'num_local_experts')
# FP8 on NVIDIA GPUs (vllm/model_executor/layers/quantization/fp8.py, Fp8Config.get_min_capability: 75; the FP8
# kernels' selection in vllm/model_executor/kernels/linear/__init__.py and, for experts,
# fused_moe/oracle/fp8.py select_fp8_moe_backend): from 8.9 weights and activations in FP8 (W8A8); from 7.5 the
# Marlin kernels keep the weights in FP8 and compute in 16 bits (W8A16), for dense and expert layers alike.
FP8_W8A8_CAPABILITY = (8, 9)
FP8_WEIGHT_ONLY_CAPABILITY = (7, 5)
# experts_int8 (quantization/experts_int8.py, ExpertsInt8Config.get_min_capability: 80).
EXPERTS_INT8_CAPABILITY = (8, 0)
# The share of a GPU's memory that the instances on it may ask for together. vLLM checks at each start that the
# GPU has gpu_memory_utilization x its memory free (vllm/v1/worker/utils.py, request_memory); the instances
# started before hold their share plus a CUDA context each (about 0.5 GiB) outside vLLM's budget, and the driver
# and the exporters hold some more. 0.95 leaves 4 GiB of an 80 GiB A100 to them.
GPU_MEMORY_SHARE_LIMIT = 0.95
# vLLM's default gpu_memory_utilization (vllm/config/cache.py, CacheConfig.gpu_memory_utilization).
GPU_MEMORY_UTILIZATION_DEFAULT = 0.92


def _text_config(config):
    """The language model's part of config.json: text_config for multimodal models (vLLM's hf_text_config)."""
    config = config or {}
    text = config.get('text_config')
    return text if isinstance(text, dict) else config


def _positive(value):
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def model_shape(config):
    """{'heads', 'kv_heads', 'layers', 'experts', 'mla'} of a config.json; None where it does not say."""
    text = _text_config(config)
    heads = _positive(text.get('num_attention_heads')) or _positive(text.get('n_head'))
    kv_heads = None
    # Falcon's multi_query means one key-value head, unless new_decoder_architecture (get_total_num_kv_heads).
    if text.get('model_type') in ('falcon', 'RefinedWeb', 'RefinedWebModel') and \
            not text.get('new_decoder_architecture') and text.get('multi_query'):
        kv_heads = 1
    for key in _KV_HEAD_KEYS:
        if kv_heads is None and _positive(text.get(key)):
            kv_heads = text[key]
    experts = next((_positive(text.get(k)) for k in _EXPERT_KEYS if text.get(k) is not None), None)
    return {
        'heads': heads,
        'kv_heads': kv_heads or heads,
        'layers': _positive(text.get('num_hidden_layers')) or _positive(text.get('n_layer')),
        'experts': experts,
        # Multi-head latent attention (DeepSeek-V2/V3): one latent KV head on every rank, so only the heads split.
        'mla': bool(text.get('kv_lora_rank')),
    }


def check_parallel(fail, shape, tensor_parallel_size, pipeline_parallel_size):
    """The model's heads split over the tensor-parallel ranks, and every pipeline stage gets a layer."""
    tp, pp = tensor_parallel_size, pipeline_parallel_size
    heads, kv_heads, layers = shape['heads'], shape['kv_heads'], shape['layers']
    # vllm/config/model.py, ModelConfig.verify_with_parallel_config.
    if heads and heads % tp:
        fail('tensor_parallel_size %d does not divide the model\'s %d attention heads (num_attention_heads in '
             'config.json): vLLM refuses to start' % (tp, heads),
             'set tensor_parallel_size to a divisor of %d (%s), and use pipeline_parallel_size for more GPUs'
             % (heads, ', '.join(str(d) for d in _divisors(heads) if d <= 64)))
    # vllm/model_executor/layers/linear.py, QKVParallelLinear.__init__: KV heads split over the ranks, or each
    # replicated on tp / kv_heads ranks; anything else fails while the worker builds the model.
    if kv_heads and not shape['mla'] and kv_heads % tp and tp % kv_heads:
        fail('tensor_parallel_size %d and the model\'s %d key-value heads (num_key_value_heads): neither divides the '
             'other, so vLLM cannot split or replicate them' % (tp, kv_heads),
             'set tensor_parallel_size to a divisor or a multiple of %d that divides %d'
             % (kv_heads, heads or kv_heads))
    # vllm/distributed/utils.py, get_pp_indices: more stages than layers leaves a stage without layers, which vLLM
    # does not refuse at start.
    if layers and pp > layers:
        fail('pipeline_parallel_size %d is above the model\'s %d layers (num_hidden_layers): a stage would hold no '
             'layer' % (pp, layers), 'set pipeline_parallel_size to %d or less' % layers)


def _divisors(number):
    return [d for d in range(1, number + 1) if number % d == 0]


def _caps_text(caps):
    return ', '.join(sorted(set('%d.%d' % c for c in caps))) or 'unknown'


def fp8(fail, activation, checkpoint, caps):
    """(label, why) of FP8 weights on GPUs of these compute capabilities; refuses what vLLM cannot run."""
    oldest = min(caps) if caps else None
    if oldest is None or oldest < FP8_WEIGHT_ONLY_CAPABILITY:
        fail('fp8 weights need NVIDIA GPUs of compute capability 7.5 or newer (weight-only) or 8.9 or newer '
             '(weights and activations), and these GPUs have %s' % _caps_text(caps),
             'use precision {weight: fp16, activation: fp16}, or place it on A100-class GPUs or newer')
    if oldest >= FP8_W8A8_CAPABILITY:
        if activation in (None, 'fp8'):
            return 'fp8 (W8A8)', 'GPUs are compute capability %s' % _caps_text(caps)
        return 'fp8 (W8A8)', ('GPUs are compute capability %s: vLLM computes FP8 weights in FP8 there, whatever '
                              'precision.activation says' % _caps_text(caps))
    if activation == 'fp8':
        fail('precision.activation fp8 needs GPUs of compute capability 8.9 or newer (Ada, Hopper), and these GPUs '
             'have %s; vLLM would run the weights in FP8 and compute in 16 bits instead' % _caps_text(caps),
             'use precision {weight: fp8, activation: fp16} (FP8 weight-only, W8A16, half the memory of fp16 '
             'weights), or place it on GPUs of compute capability 8.9 or newer')
    why = 'GPUs are compute capability %s' % _caps_text(caps)
    if checkpoint.get('activation_scheme') in ('static', 'dynamic'):
        why += '; the checkpoint\'s FP8 activations need 8.9'
    return 'fp8 weight-only (W8A16)', why


def experts_int8(fail, weight, shape, caps, device):
    """Whether int8 weights without a quantized checkpoint run as vLLM's online experts_int8; refuses otherwise."""
    if not shape['experts']:
        return False
    if device != 'cuda':
        fail('precision.weight %s on a cpu instance: vLLM\'s experts_int8 (int8 experts quantized at load) is for '
             'NVIDIA GPUs' % weight, 'point model at a quantized checkpoint, or use fp32 or bf16 on CPU')
    if weight != 'int8':
        fail('precision.weight int4 needs a quantized checkpoint, and the model\'s config.json has no '
             'quantization_config (vLLM quantizes a mixture of experts at load only to int8: experts_int8)',
             'point model at an int4 checkpoint (GPTQ, AWQ), or use precision.weight int8')
    if not caps or min(caps) < EXPERTS_INT8_CAPABILITY:
        fail('experts_int8 (int8 experts quantized at load) needs GPUs of compute capability 8.0 or newer, and these '
             'GPUs have %s' % _caps_text(caps), 'use fp16 weights, or place it on A100-class GPUs or newer')
    return True


def check_batched_tokens(fail, tokens, seqs, extra_args, max_model_len, context):
    """max_num_batched_tokens against the longest request (vllm/config/scheduler.py, SchedulerConfig); the numbers
    are the plan's, already checked to be integers."""
    if not tokens:
        return
    # verify_max_model_len: a step must hold a whole prompt unless prefills are chunked (the default in 0.32).
    longest = max_model_len or context
    if longest and tokens < longest and '--no-enable-chunked-prefill' in extra_args:
        fail('max_num_batched_tokens %d is below max_model_len %d with --no-enable-chunked-prefill: a prompt of '
             'max_model_len tokens would not fit one step, and vLLM refuses to start' % (tokens, longest),
             'raise max_num_batched_tokens to %d, lower max_model_len, or drop --no-enable-chunked-prefill'
             % longest)
    # verify_max_model_len too: every sequence of a full batch needs a token of the step.
    if seqs and tokens < seqs:
        fail('max_num_batched_tokens %d is below max_num_seqs %d: vLLM refuses to start' % (tokens, seqs),
             'raise max_num_batched_tokens to %d or more, or lower max_num_seqs' % seqs)


def gpu_shares(plans):
    """{GPU index: [(instance, share)]} of the GPUs that several instances of a host use."""
    users = {}
    for plan in plans:
        if plan['device'] != 'cuda' or not plan['runs_vllm']:
            continue
        share = plan.get('gpu_memory_utilization') or GPU_MEMORY_UTILIZATION_DEFAULT
        for index in plan['placement']['gpu_indices']:
            users.setdefault(index, []).append((plan['name'], share))
    return dict((index, found) for index, found in users.items() if len(found) > 1)


def check_gpu_shares(failer, plans):
    """The instances sharing a GPU ask for at most GPU_MEMORY_SHARE_LIMIT of its memory together; failer(instance)
    is the fail(what, fix) of that instance."""
    for index, found in sorted(gpu_shares(plans).items()):
        names, shares = [n for n, _s in found], [s for _n, s in found]
        if sum(shares) > GPU_MEMORY_SHARE_LIMIT + 1e-9:
            each = int(GPU_MEMORY_SHARE_LIMIT / len(found) * 100) / 100.0
            failer(names[-1])(
                'instances %s share GPU %d and ask for %s of its memory together (gpu_memory_utilization %s): the '
                'last to start would not find its share free'
                % (', '.join(names), index, _fraction(sum(shares)), ' + '.join(_fraction(s) for s in shares)),
                'lower their gpu_memory_utilization to %s or less in all (for example %s each)'
                % (_fraction(GPU_MEMORY_SHARE_LIMIT), _fraction(each)))


def _fraction(value):
    return ('%.3f' % value).rstrip('0').rstrip('.')
