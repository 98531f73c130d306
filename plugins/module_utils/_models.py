# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""Model directories on a host: whether each exists, its config.json and, for a sealed model, its manifest.

Reads only <path>/config.json and <path>/llmops-sealed.json of each model directory. A config.json that cannot be
read, or is not a JSON object, is reported in ``config_error`` instead of failing: the caller decides what it means.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os

from ansible_collections.llmops.vllm.plugins.module_utils._sealing import MANIFEST, SealingError, parse_manifest

CONFIG_NAME = 'config.json'


def read_config(path):
    """Return (config dict or None, error text or None) for the config.json of the model directory at path.

    A missing config.json is not an error (hub-layout directories, GGUF files): both are None.
    """
    config_path = os.path.join(path, CONFIG_NAME)
    if not os.path.isfile(config_path):
        return None, None
    try:
        with open(config_path, 'rb') as f:
            config = json.loads(f.read().decode('utf-8'))
    except (IOError, OSError) as e:
        return None, 'cannot read %s: %s' % (config_path, e.strerror or e)
    except ValueError as e:  # also UnicodeDecodeError
        return None, '%s is not JSON: %s' % (config_path, e)
    if not isinstance(config, dict):
        return None, '%s is not a JSON object but a %s' % (config_path, type(config).__name__)
    return config, None


def read_sealed(path):
    """Return (manifest or None, error text or None) of a sealed model directory (_sealing.py)."""
    manifest_path = os.path.join(path, MANIFEST)
    if not os.path.isfile(manifest_path):
        return None, None
    try:
        with open(manifest_path, 'rb') as f:
            return parse_manifest(f.read().decode('utf-8'), manifest_path), None
    except (IOError, OSError) as e:
        return None, 'cannot read %s: %s' % (manifest_path, e.strerror or e)
    except (SealingError, UnicodeDecodeError) as e:
        return None, str(e).split('. Fix: ', maxsplit=1)[0]


def model_info(path):
    """Return {'exists', 'config', 'config_error', 'sealed', 'sealed_error'} of one model directory."""
    exists = os.path.isdir(path)
    config, error = read_config(path) if exists else (None, None)
    sealed, sealed_error = read_sealed(path) if exists else (None, None)
    return {'exists': exists, 'config': config, 'config_error': error, 'sealed': sealed,
            'sealed_error': sealed_error}


def collect_models(paths):
    """Return {name: model_info(path)} for a {name: absolute path} mapping."""
    return dict((name, model_info(path)) for name, path in paths.items())
