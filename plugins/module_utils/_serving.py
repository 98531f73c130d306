# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""What each vLLM instance of a host runs: its systemd unit's command line, environment and pinning.

serving_plan() is the one decision of the vllm_server role: it validates the instances, takes their
placement from vllm_placement() (computed once per host, by the role's preflight), translates precision blocks to
the installed vLLM's options and renders only flags that version has. The role renders and applies the result;
the edge plan and the node summary read each instance's address, port, served model name and metrics path from it.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import json
import re

from collections.abc import Mapping

from ansible_collections.llmops.vllm.plugins.module_utils._placement import PlacementError, vllm_placement
from ansible_collections.llmops.vllm.plugins.module_utils._safe_text import (
    CONTROL, HUB_ID, PATH_RULE, SERVED_MODEL_NAME, SERVED_MODEL_NAME_RULE, safe_path)
from ansible_collections.llmops.vllm.plugins.module_utils import _sealing
from ansible_collections.llmops.vllm.plugins.module_utils import _serving_rules as _rules
from ansible_collections.llmops.vllm.plugins.module_utils._serving_span import span_part
from ansible_collections.llmops.vllm.plugins.module_utils._topology_findings import version_tuple
from ansible_collections.llmops.vllm.plugins.module_utils._tuning import tuned_instance, tuning_inputs
from ansible_collections.llmops.vllm.plugins.module_utils._vllm_cli import OFFLINE_ENV, QUIET_ENV

# How long vLLM's HTTP server (uvicorn) keeps an idle connection: far above the edge's upstream pool timeout (4 s,
# roles/edge/vars), so that a busy edge never sends a request on a connection vLLM is closing. vLLM's own 5 s left
# one second, and a starved nginx answered 502 to a benchmark request under two busy test lanes.
KEEP_ALIVE_ENV = {'VLLM_HTTP_TIMEOUT_KEEP_ALIVE': '60'}

# The instance-name rule: the name becomes the systemd unit vllm-<name>.service and the edge's /instances/<name>.
INSTANCE_NAME = re.compile(r'^[a-z0-9][a-z0-9-]{0,39}\Z')
# A model key's name: it names the credential file /etc/llmops/credentials/model-<name>.cred.
KEY_NAME = re.compile(r'^[a-z0-9][a-z0-9_-]{0,39}$')
# LoadCredentialEncrypted= came with systemd 250.
SYSTEMD_CREDENTIALS = 250
# Instances listen here only; the edge is the node's one way in.
LOOPBACK = '127.0.0.1'
# vLLM's Prometheus endpoint on each instance.
METRICS_PATH = '/metrics'
DTYPES = ('auto', 'float32', 'float16', 'bfloat16')
# --quantization methods of vLLM that a site names in inventory; others are refused as typos.
QUANTIZATIONS = ('awq', 'awq_marlin', 'bitsandbytes', 'compressed-tensors', 'experts_int8', 'fbgemm_fp8', 'fp8',
                 'gguf', 'gptq', 'gptq_marlin', 'modelopt', 'mxfp4', 'torchao')
# Precision blocks of the seed, as (weight, activation).
_PRECISION_DTYPE = {'fp32': 'float32', 'fp16': 'float16', 'bf16': 'bfloat16'}
_WEIGHT_PRECISIONS = ('int8', 'int4', 'fp8', 'fp16', 'bf16', 'fp32')
_RESERVED_ENV = ('CUDA_VISIBLE_DEVICES', 'CUDA_DEVICE_ORDER', 'VLLM_CPU_OMP_THREADS_BIND', 'VLLM_CACHE_ROOT',
                 'TMPDIR', 'HOME', 'VLLM_HOST_IP', 'GLOO_SOCKET_IFNAME', 'RAY_ADDRESS')


class ServingPlanError(ValueError):
    """The instances cannot be served as asked; the message names host, instance, the problem and the fix."""


def _fail(host, instance, what, fix):
    raise ServingPlanError('host %s, instance %s: %s. Fix: %s' % (host or 'this host', instance, what, fix))


def _int(host, name, item, key, minimum=1, required=False):
    value = item.get(key)
    if value is None or value == '':
        if required:
            _fail(host, name, '%s is missing' % key, 'set %s' % key)
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        _fail(host, name, '%s must be an integer >= %d, got %r' % (key, minimum, value), 'correct %s' % key)
    return value


def _capabilities(gpu, indices):
    caps = []
    for device in (gpu or {}).get('devices') or []:
        if device.get('index') in indices and device.get('compute_capability'):
            caps.append(version_tuple(device['compute_capability'])[:2])
    return caps


# The unit's Environment="NAME=value" lines: a name systemd and a shell accept (lower case too, for http_proxy and
# its kin); a value without a control character (a newline would start a directive of its own), a double quote or a
# backslash (either would end or change the quoted value) or a % (a unit specifier).
_ENV_NAME = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*\Z')
_UNSAFE_IN_UNIT = re.compile(r'[\x00-\x1f\x7f"\\%]')
# NCCL_SOCKET_IFNAME: interface names or prefixes, comma-separated, optionally after ^ (exclude) or = (exact).
_IFNAMES = re.compile(r'^[\^=]?[A-Za-z0-9_.:@-]+(,[A-Za-z0-9_.:@-]+)*\Z')


def check_env(env, variable, fail):
    """Refuse, through fail(what, fix), an environment (variable: its name in messages) unsafe in a unit."""
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        fail('%s is %r, not a mapping of variable names to values' % (variable, env), 'write %s as {NAME: value}'
             % variable)
    for key, value in env.items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            fail('%s has the name %r, which is not an environment variable name' % (variable, key),
                 'use letters, digits and underscores, not starting with a digit')
        if value is None or isinstance(value, (Mapping, list)):
            fail('%s.%s is %r, not a string or a number' % (variable, key, value), 'give it a string or a number')
        if _UNSAFE_IN_UNIT.search(str(value)):
            fail('%s.%s is %r: a control character (a newline), a double quote, a backslash or a %% would end the '
                 'value in the unit file or change it' % (variable, key, str(value)),
                 'remove those characters from the value')
    return dict((key, str(value)) for key, value in env.items())


def _failer(host, name):
    """fail(what, fix) for one instance of one host: the rules' way to refuse (_serving_rules)."""
    def fail(what, fix):
        _fail(host, name, what, fix)
    return fail


def _precision(host, name, item, placement, gpu, model_config):
    """(dtype, quantization, label, why) from dtype, quantization, the seed's precision block and the GPUs; label and
    why say what the instance computes in, and why, for the node summary and the closing summary."""
    fail = _failer(host, name)
    dtype = item.get('dtype') or 'auto'
    why = 'dtype' if dtype != 'auto' else None
    if dtype not in DTYPES:
        fail('dtype %r is not one of %s' % (dtype, ', '.join(DTYPES)), 'use one of them')
    quantization = item.get('quantization') or None
    precision = item.get('precision') or {}
    if not isinstance(precision, Mapping):
        fail('precision must be a dict like {weight: int8, activation: fp16}', 'correct precision')
    weight, activation = precision.get('weight'), precision.get('activation')
    if weight is not None and weight not in _WEIGHT_PRECISIONS:
        fail('precision.weight %r is not one of %s' % (weight, ', '.join(_WEIGHT_PRECISIONS)), 'use one of them')
    if activation is not None:
        if activation not in _PRECISION_DTYPE and activation != 'fp8':
            fail('precision.activation %r is not one of fp32, fp16, bf16, fp8' % activation, 'use one of them')
        if activation in _PRECISION_DTYPE:
            if dtype != 'auto' and dtype != _PRECISION_DTYPE[activation]:
                fail('dtype %s contradicts precision.activation %s' % (dtype, activation),
                     'drop dtype or make it %s' % _PRECISION_DTYPE[activation])
            dtype, why = _PRECISION_DTYPE[activation], 'precision.activation %s' % activation
    if weight in _PRECISION_DTYPE and activation in _PRECISION_DTYPE and weight != activation:
        fail('precision.weight %s with activation %s: vLLM computes in the weights\' dtype' % (weight, activation),
             'use the same floating-point precision for both, or a quantized checkpoint')
    if weight in _PRECISION_DTYPE and activation is None:
        dtype, why = _PRECISION_DTYPE[weight], 'precision.weight %s' % weight
    checkpoint = ((model_config or {}).get('quantization_config') or {})
    method = checkpoint.get('quant_method')
    shape = _rules.model_shape(model_config)
    cuda = placement['device'] == 'cuda'
    caps = _capabilities(gpu, placement['gpu_indices']) if cuda else []
    if dtype == 'float32' and (weight in ('fp8', 'int8') or activation == 'fp8') and cuda:
        # vllm/config/vllm.py, VllmConfig._get_quantization_config: fp8 and experts_int8 compute in float16 or
        # bfloat16 (their get_supported_act_dtypes).
        fail('dtype float32 with %s weights: vLLM computes them in float16 or bfloat16' % (weight or 'fp8'),
             'drop dtype, or make precision.activation fp16 or bf16')
    if weight == 'fp8' or activation == 'fp8' or (cuda and 'fp8' in str(method or '')):
        if quantization not in (None, 'fp8', 'fbgemm_fp8', 'compressed-tensors', 'modelopt'):
            fail('precision fp8 contradicts quantization %s' % quantization, 'drop quantization')
        if not cuda:
            fail('fp8 needs an NVIDIA GPU (compute capability 7.5 or newer), and this is a cpu instance',
                 'use fp32 or bf16 on CPU')
        label, fp8_why = _rules.fp8(fail, activation, checkpoint, caps)
        if quantization is None and not checkpoint:
            # vLLM 0.32 takes fp8 on a 16-bit checkpoint as its online fp8_per_tensor (with a deprecation warning,
            # vllm/model_executor/model_loader/weight_utils.py); the name works in the versions before it too.
            quantization = 'fp8'
        return dtype, quantization, label, fp8_why + ('' if quantization == 'fp8' else '; the checkpoint\'s %s'
                                                      % (quantization or method))
    if weight in ('int8', 'int4'):
        bits = checkpoint.get('bits') or checkpoint.get('weight_bits')
        if not method and quantization in (None, 'experts_int8') and \
                _rules.experts_int8(fail, weight, shape, caps, placement['device']):
            return (dtype, 'experts_int8', 'int8 experts (experts_int8, W8A16)',
                    'a mixture of experts without a quantized checkpoint: vLLM quantizes the experts to int8 at load, '
                    'the other layers stay in %s' % (dtype if dtype != 'auto' else 'the checkpoint\'s dtype'))
        if not method:
            fail('precision.weight %s needs a quantized checkpoint, and the model\'s config.json has no '
                 'quantization_config' % weight,
                 'point model at a %s checkpoint (GPTQ, AWQ or compressed-tensors W8A16/W8A8), or use fp16 weights'
                 % weight)
        if bits and str(bits) != weight[3:]:
            fail('precision.weight %s but the checkpoint is quantized to %s bits (%s)' % (weight, bits, method),
                 'make precision.weight int%s' % bits)
    if quantization == 'experts_int8' and not shape['experts']:
        # quantization/experts_int8.py quantizes only expert layers: on a dense model it changes nothing.
        fail('quantization experts_int8 on a model without experts (config.json names no num_local_experts, '
             'n_routed_experts or num_experts): vLLM would quantize nothing', 'drop quantization, or point model '
             'at an int8 checkpoint')
    if quantization is not None and quantization not in QUANTIZATIONS:
        fail('quantization %r is unknown' % quantization,
             'use one of %s, or leave it empty to let vLLM read the checkpoint' % ', '.join(QUANTIZATIONS))
    if quantization:
        why = 'quantization'
    elif method:
        why = 'the checkpoint\'s quantization_config'
    elif why is None:
        why = 'the model\'s config.json' if (model_config or {}).get('torch_dtype') else 'vLLM\'s default'
    return dtype, quantization, precision_label(dtype, quantization, model_config), why


def precision_label(dtype, quantization, model_config):
    """What the instance computes in, for reports: the quantization (or the checkpoint's), else the dtype, with
    auto read from the model's config.json."""
    if quantization:
        return quantization
    checkpoint = (model_config or {}).get('quantization_config') or {}
    if checkpoint.get('quant_method'):
        bits = checkpoint.get('bits') or checkpoint.get('weight_bits')
        return '%s-int%s' % (checkpoint['quant_method'], bits) if bits else str(checkpoint['quant_method'])
    if dtype != 'auto':
        return dtype
    return str((model_config or {}).get('torch_dtype') or (model_config or {}).get('dtype') or 'auto')


def systemd_quote(word):
    """One word of an ExecStart= line: quoted where needed, % doubled (a unit specifier), control characters as C
    escapes (systemd reads them back)."""
    word = str(word)
    if word and re.match(r'^[A-Za-z0-9_@+=:,./-]+\Z', word):
        return word
    quoted = word.replace('\\', '\\\\').replace('"', '\\"').replace('%', '%%').replace('$', '$$')
    # A control character as a C escape: a newline in the file would start a directive of its own.
    return '"%s"' % CONTROL.sub(lambda m: '\\x%02x' % ord(m.group()), quoted)


def _model_src(host, name, item, probes):
    """The controller copy of a model: it must be a model directory with a config.json."""
    if not item['model'].startswith('/'):
        _fail(host, name, 'model_src is set, so model must be the absolute path it is copied to, not %r'
              % item['model'], 'set model to a path such as /var/lib/vllm/models/%s' % name)
    content = (probes.get('model_srcs') or {}).get(name)
    if not content:
        _fail(host, name, 'model_src %s has no config.json on the controller' % item['model_src'],
              'point model_src at a model directory (config.json, tokenizer and weights)')
    try:
        return {'exists': True, 'config': json.loads(base64.b64decode(content).decode('utf-8'))}
    except (ValueError, TypeError) as e:
        _fail(host, name, 'the config.json of model_src %s is not JSON (%s)' % (item['model_src'], e),
              'point model_src at a valid model directory')


def _sealed(host, name, item, found, probes, settings):
    """The sealed-model part of an instance's plan, or None for a model in clear."""
    key = item.get('model_key')
    manifest, where = None, item.get('model_src') or item['model']
    if item.get('model_src'):
        content = (probes.get('model_src_seals') or {}).get(name)
        if content:
            try:
                manifest = _sealing.parse_manifest(base64.b64decode(content).decode('utf-8'),
                                                   '%s/%s' % (where, _sealing.MANIFEST))
            except _sealing.SealingError as e:
                _fail(host, name, str(e).split('. Fix: ', maxsplit=1)[0],
                      'seal the model again (playbooks/model_seal.yml)')
    else:
        if found.get('sealed_error'):
            _fail(host, name, found['sealed_error'], 'seal the model again (playbooks/model_seal.yml) and deploy it')
        manifest = found.get('sealed')
    if manifest is None:
        if key:
            _fail(host, name, 'model_key %s is set, but %s is not a sealed model (no %s)'
                  % (key, where, _sealing.MANIFEST),
                  'seal it with playbooks/model_seal.yml and point the instance at the sealed directory, or drop '
                  'model_key')
        return None
    recipient = manifest['recipient']
    if not key:
        _fail(host, name, '%s is a sealed model (for %s), and the instance names no model_key' % (where, recipient),
              'set model_key to the name of its key in vllm_server_model_keys')
    if not isinstance(key, str) or not KEY_NAME.match(key):
        _fail(host, name, 'model_key %r is not a key name (lower-case letters, digits, - and _, at most 40)' % (key,),
              'rename the key')
    keys = settings.get('model_keys') or {}
    if key not in keys:
        _fail(host, name, 'model_key %s is not in vllm_server_model_keys (it holds %s)'
              % (key, ', '.join(sorted(keys)) or 'no key'),
              'add the key\'s age identity to vllm_server_model_keys (from the vault), or name one it holds')
    if keys[key] != recipient:
        _fail(host, name, 'the model %s is sealed for %s, and key %s is %s' % (where, recipient, key, keys[key]),
              'name the key it was sealed for, or seal it again for key %s (playbooks/model_seal.yml)' % key)
    version = re.match(r'\d+', str(settings.get('systemd_version') or ''))
    if version and int(version.group()) < SYSTEMD_CREDENTIALS:
        _fail(host, name, 'a sealed model needs systemd %d or newer (LoadCredentialEncrypted=), and the host has %s'
              % (SYSTEMD_CREDENTIALS, version.group()),
              'serve it from a host with a newer systemd (Debian 12, Ubuntu 24.04)')
    summary = _sealing.sealed_summary(manifest)
    mount = '%s/%s' % (_sealing.PLAIN_ROOT, name)
    credential_dir = settings.get('credential_dir') or '/etc/llmops/credentials'
    return dict(summary, key=key, credential='%s/model-%s.cred' % (credential_dir, key),
                credential_id=_sealing.CREDENTIAL_ID, mount=mount, plain=mount + '/model',
                tmpfs_bytes=_sealing.tmpfs_bytes(summary['plain_bytes']), refusal_status=_sealing.REFUSAL_STATUS,
                opener=list(_sealing.OPENER))


def serving_plan(instances, gpu, numa, install, probes=None, settings=None, host=None, placements=None, tuning=None):
    """Return {'instances', 'headless', 'ranks', 'units', 'warnings'} for the host, or raise ServingPlanError.

    instances are what the host serves; headless, the ranks of spanning instances that run vLLM here without an API
    server; ranks, this host's part of each spanning instance (_serving_span.py); units, every vLLM unit of the host.

    instances: vllm_instances. gpu, numa: facts of gpu_facts and numa_facts. placements: vllm_placement()'s
    result for these instances and facts (placed here when None).
    install: the vllm local fact of vllm_install (venv, serve_flags, device); before the first install, the
    install plan's prediction with serve_flags None (every flag assumed).
    probes: {'models': {instance name: {'exists': bool, 'config': the model's config.json or None}},
    'model_srcs': {instance name: base64 of model_src/config.json on the controller, or ''},
    'model_src_seals': {instance name: base64 of model_src/llmops-sealed.json on the controller, or ''}}; a model
    on the host also carries 'sealed' (its manifest or None) and 'sealed_error'.
    settings: port_range [low, high], reserved_cpus, hub_access, cache_dir, default_shutdown_timeout,
    nccl_socket_ifname, nccl_env, model_keys {key name: age recipient} (never the secret), credential_dir,
    systemd_version (None when unknown); for instances that span hosts, rank_interface (this host's interface for
    the ranks) and span_addresses ({host: its address on its rank interface}).
    tuning: {'tuned': the vllm_tuning local fact, 'trial': {instance name: a candidate max_num_seqs}} (_tuning.py).
    """
    settings, probes = dict(settings or {}), dict(probes or {})
    tuned, trial = tuning_inputs(tuning)
    label = host or 'this host'
    if not isinstance(install, Mapping) or not install.get('venv'):
        raise ServingPlanError('host %s: no installed vLLM is recorded (ansible_local.vllm). Fix: run the '
                               'llmops.vllm.vllm_install role on this host first' % label)
    # Before the first install (site.yml's preflight) the flags are not known yet: assume them.
    flags = None if install.get('serve_flags') is None else set(install['serve_flags'])
    if placements is None:
        try:
            placements = vllm_placement(instances, gpu, numa, settings.get('reserved_cpus'), host=label)
        except PlacementError as e:
            raise ServingPlanError(str(e)) from e
    if len(placements or []) != len(instances or []):
        raise ServingPlanError('host %s: %d placements for %d instances. Fix: place vllm_instances of this host with '
                               'llmops.vllm.vllm_placement and pass that result' % (label, len(placements or []),
                                                                                    len(instances or [])))
    low, high = (list(settings.get('port_range') or (8001, 8999)) + [None, None])[:2]
    multi_node = len((numa or {}).get('nodes') or []) > 1
    unknown = sorted(set(trial) - set(p['name'] for p in placements))
    if unknown:
        raise ServingPlanError('host %s: a tuning trial names instance %s, which this host does not serve. Fix: name '
                               'one of its vllm_instances' % (label, ', '.join(unknown)))
    ports, plans, tuning_warnings = {}, [], []

    def host_fail(what, fix):
        raise ServingPlanError('host %s: %s. Fix: %s' % (label, what, fix))
    check_env(settings.get('nccl_env'), 'vllm_server_nccl_env', host_fail)
    for key, example in (('cache_dir', '/var/cache/vllm/instances'), ('credential_dir', '/etc/llmops/credentials')):
        if settings.get(key) and not safe_path(settings[key]):
            host_fail('vllm_server_%s is %r, not %s (the unit holds it as it is)' % (key, settings[key], PATH_RULE),
                      'set vllm_server_%s to a path such as %s' % (key, example))
    if settings.get('nccl_socket_ifname') and not _IFNAMES.match(str(settings['nccl_socket_ifname'])):
        host_fail('vllm_server_nccl_socket_ifname is %r, not interface names (comma-separated, after an optional ^ '
                  'or =)' % (settings['nccl_socket_ifname'],), 'set it to interfaces such as bond0 or ^docker,lo')
    for item, placement in zip(instances or [], placements):
        name = placement['name']
        item, tuning_info, warning = tuned_instance(item, install, tuned.get(name), trial.get(name))
        if warning:
            tuning_warnings.append('instance %s: %s' % (name, warning))
        if not INSTANCE_NAME.match(name):
            _fail(label, name, 'the name must be lower-case letters, digits and dashes (at most 40), as it names the '
                  'systemd unit', 'rename it, e.g. %s' % re.sub(r'[^a-z0-9-]+', '-', name.lower()).strip('-'))
        port = _int(label, name, item, 'port', required=True)
        if not low <= port <= high:
            _fail(label, name, 'port %d is outside the allowed range %d-%d' % (port, low, high),
                  'pick a free port in %d-%d (vllm_server_port_range); the edge owns the service port' % (low, high))
        if port in ports:
            _fail(label, name, 'port %d is already used by instance %s' % (port, ports[port]),
                  'give every instance of a host its own port')
        ports[port] = name
        model = item.get('model')
        if not model or not isinstance(model, str):
            _fail(label, name, 'model is missing', 'set model to a local path (or a hub id where the hub is reachable)')
        local = model.startswith('/')
        if not (safe_path(model) if local else HUB_ID.match(model)):
            _fail(label, name, 'model %r is neither %s nor a hub id (owner/name of letters, digits and . _ -)'
                  % (model, PATH_RULE), 'correct model; the unit holds it as it is')
        served = item.get('served_model_name')
        if served is not None and not (isinstance(served, str) and SERVED_MODEL_NAME.match(served)):
            _fail(label, name, 'served_model_name %r is not a name requests can give' % (served,),
                  'use %s' % SERVED_MODEL_NAME_RULE)
        if not local and not settings.get('hub_access'):
            _fail(label, name, 'model %r is a hub id, and this host may not reach the hub (vllm_server_hub_access is '
                  'false)' % model, 'pre-stage the model and set model to its path, or set model_src to a directory '
                  'on the controller to copy; or set vllm_server_hub_access: true')
        found = (probes.get('models') or {}).get(name) or {}
        if item.get('model_src'):
            found = _model_src(label, name, item, probes)
        elif local and not found.get('exists'):
            _fail(label, name, 'the model path %s does not exist on the host' % model,
                  'stage the model there, or set model_src to a directory on the controller to copy to it')
        sealed = _sealed(label, name, item, found, probes, settings)
        config = found.get('config') or {}
        context = config.get('max_position_embeddings')
        max_model_len = _int(label, name, item, 'max_model_len')
        if max_model_len and context and max_model_len > context:
            _fail(label, name, 'max_model_len %d is above the model\'s context of %d tokens (max_position_embeddings)'
                  % (max_model_len, context), 'set max_model_len to %d or less' % context)
        if placement['device'] == 'cuda' and install.get('device') == 'cpu':
            _fail(label, name, 'device cuda, but the installed vLLM (%s) is a CPU build' % install.get('package'),
                  'install vLLM for cuda on this host (vllm_install_device: cuda), or set device: cpu')
        dtype, quantization, computes_in, computes_why = _precision(label, name, item, placement, gpu, config)
        fail = _failer(label, name)
        _rules.check_parallel(fail, _rules.model_shape(config), placement['tensor_parallel_size'],
                              placement['pipeline_parallel_size'])
        extra_args = [str(a) for a in item.get('extra_args') or []]
        for arg in extra_args:
            if CONTROL.search(arg):
                _fail(label, name, 'extra_args has %r: a control character (a newline) would start a line of its own '
                      'in the unit file' % arg, 'remove it from the argument')
        _rules.check_batched_tokens(fail, _int(label, name, item, 'max_num_batched_tokens'),
                                    _int(label, name, item, 'max_num_seqs'), extra_args, max_model_len, context)
        if placement['device'] == 'cpu' and placement['pipeline_parallel_size'] > 1 \
                and '--enforce-eager' in extra_args:
            _fail(label, name, 'pipeline_parallel_size %d with --enforce-eager on CPU: vLLM 0.32\'s CPU worker then '
                  'skips its warm-up, the later stages never allocate their receive buffer, and the first request '
                  'fails (HTTP 500, "assert self.intermediate_tensors is not None")'
                  % placement['pipeline_parallel_size'],
                  'replace --enforce-eager with --compilation-config \'{"mode":2,"backend":"eager"}\'')
        env = check_env(item.get('env'), 'env', fail)
        clash = sorted(set(env) & set(_RESERVED_ENV))
        if clash:
            _fail(label, name, 'env sets %s, which the placement decides' % ', '.join(clash),
                  'drop them from env; pin with cpus/gpus instead')
        span = span_part(fail, host, name, placement, settings)
        plan = _instance_plan(item, placement, install, flags, settings, multi_node, dtype, quantization,
                              max_model_len, port, local, label, sealed, span)
        plan['precision'], plan['precision_reason'] = computes_in, computes_why
        plan['max_num_seqs'] = item.get('max_num_seqs')
        plan['tuning'] = tuning_info
        plans.append(plan)
    _rules.check_gpu_shares(lambda name: _failer(label, name), plans)
    warnings = ['instance %s: %s' % (p['name'], w) for p in plans for w in p['placement']['warnings']]
    warnings += tuning_warnings
    return {
        # What this host serves (an API server each): the edge, the node summary and the later tiers read these.
        'instances': [p for p in plans if p['serves']],
        # The ranks of spanning instances that run vLLM headless here: a unit each, no API server.
        'headless': [p for p in plans if p['runs_vllm'] and not p['serves']],
        # This host's part of every spanning instance (_serving_span.py).
        'ranks': [p['rank'] for p in plans if p['rank']],
        'units': [p['unit'] for p in plans if p['runs_vllm']],
        'warnings': warnings,
    }


def _instance_plan(item, placement, install, flags, settings, multi_node, dtype, quantization, max_model_len, port,
                   local, label, sealed, span):
    name = placement['name']
    served = item.get('served_model_name') or name
    cache_dir = '%s/%s' % (settings.get('cache_dir') or '/var/cache/vllm/instances', name)
    # A sealed model is served from the plaintext its unit opens (_sealing.py).
    model = sealed['plain'] if sealed else item['model']
    argv = ['%s/bin/vllm' % install['venv'], 'serve', model]
    if span['serves']:
        argv += ['--host', LOOPBACK, '--port', str(port)]
    argv += ['--served-model-name', served, '--dtype', dtype]
    if placement['tensor_parallel_size'] > 1:
        argv += ['--tensor-parallel-size', str(placement['tensor_parallel_size'])]
    if placement['pipeline_parallel_size'] > 1:
        argv += ['--pipeline-parallel-size', str(placement['pipeline_parallel_size'])]
    argv += span['argv']
    for key in ('max_num_seqs', 'max_num_batched_tokens'):
        value = _int(label, name, item, key)
        if value:
            argv += ['--%s' % key.replace('_', '-'), str(value)]
    if max_model_len:
        argv += ['--max-model-len', str(max_model_len)]
    if quantization:
        argv += ['--quantization', quantization]
    # HOME too: under ProtectSystem=strict the cache directory is the only place the instance may write.
    env = {'VLLM_CACHE_ROOT': cache_dir, 'TMPDIR': cache_dir + '/tmp', 'HOME': cache_dir}
    env.update(QUIET_ENV)
    env.update(KEEP_ALIVE_ENV)
    if local:
        env.update(OFFLINE_ENV)
    if placement['device'] == 'cuda':
        utilization = item.get('gpu_memory_utilization')
        if utilization is not None:
            if isinstance(utilization, bool) or not isinstance(utilization, (int, float)) or not 0 < utilization <= 1:
                _fail(label, name, 'gpu_memory_utilization must be in (0, 1], got %r' % (utilization,),
                      'set it to a fraction such as 0.9')
            argv += ['--gpu-memory-utilization', str(utilization)]
        env['CUDA_VISIBLE_DEVICES'] = placement['cuda_visible_devices']
        env['CUDA_DEVICE_ORDER'] = 'PCI_BUS_ID'
        if settings.get('nccl_socket_ifname'):
            env['NCCL_SOCKET_IFNAME'] = settings['nccl_socket_ifname']
        env.update(dict((k, str(v)) for k, v in (settings.get('nccl_env') or {}).items()))
    else:
        env['VLLM_CPU_OMP_THREADS_BIND'] = placement['omp_threads_bind']
    kv_bytes = _int(label, name, item, 'kv_cache_memory_bytes')
    if kv_bytes:
        if flags is None or '--kv-cache-memory-bytes' in flags:
            argv += ['--kv-cache-memory-bytes', str(kv_bytes)]
        elif placement['device'] == 'cpu':
            env['VLLM_CPU_KVCACHE_SPACE'] = str(max(1, -(-kv_bytes // (1 << 30))))
        else:
            _fail(label, name, 'kv_cache_memory_bytes is set, and the installed vLLM %s has no --kv-cache-memory-bytes'
                  % install.get('version'), 'use gpu_memory_utilization instead')
    shutdown = _int(label, name, item, 'shutdown_timeout', minimum=0)
    if shutdown is None:
        shutdown = int(settings.get('default_shutdown_timeout') or 0)
    if shutdown and (flags is None or '--shutdown-timeout' in flags):
        argv += ['--shutdown-timeout', str(shutdown)]
    else:
        shutdown = 0
    argv += [str(a) for a in item.get('extra_args') or []]
    env.update(span['env'])
    env.update(dict((k, str(v)) for k, v in (item.get('env') or {}).items()))
    command = argv
    if sealed:
        command = sealed['opener'] + ['--instance', name, '--key', sealed['key'], '--sealed', item['model'],
                                      '--into', sealed['plain'], '--'] + argv
    command = span['guard'] + command
    return {
        'name': name,
        'unit': 'vllm-%s.service' % name,
        'address': LOOPBACK,
        'port': port,
        'url': 'http://%s:%d' % (LOOPBACK, port),
        'metrics_path': METRICS_PATH,
        'served_model_name': served,
        'model': item['model'],
        'model_src': item.get('model_src') or None,
        'device': placement['device'],
        'argv': argv,
        'exec_start': ' '.join(systemd_quote(a) for a in command),
        'sealed': sealed,
        'gpu_memory_utilization': item.get('gpu_memory_utilization') if placement['device'] == 'cuda' else None,
        'environment': dict(sorted(env.items())),
        'cpu_affinity': placement['cpulist'],
        'numa_mask': ','.join(str(n) for n in placement['numa_nodes']) if multi_node else None,
        'cache_dir': cache_dir,
        'timeout_stop_sec': shutdown + 30,
        'placement': placement,
        'serves': span['serves'],
        'runs_vllm': span['runs_vllm'],
        'after': span['after'],
        'rank': span['rank'],
    }
