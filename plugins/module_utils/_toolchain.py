# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""The build toolchain of a host: tools on PATH, and the headers and version of a given Python.

The module runs under Ansible's interpreter, which need not be the Python a build uses, so that Python is asked
for its include directory and version by running it (``python -c PROBE``); Python.h is then looked up here.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import shutil

# Prints the include directory and major.minor version of the Python that runs it. Python 2.7 and 3.x.
PYTHON_PROBE = ('import json, sys, sysconfig; '
                'print(json.dumps({"include": sysconfig.get_paths()["include"], '
                '"version": "%d.%d" % sys.version_info[:2]}))')
HEADERS_KEY = 'python3-dev'


class ToolchainInfoError(Exception):
    """The given Python cannot be run or does not answer the probe."""


def find_tools(tools, path=None):
    """Return {tool: whether it is an executable on path (default: $PATH)}, in the order given."""
    return dict((tool, shutil.which(tool, path=path) is not None) for tool in tools)


def resolve_python(python, path=None):
    """Return the executable for python: a bare name is looked up on path, a path must be executable."""
    found = python if os.sep in python else shutil.which(python, path=path)
    if not found or not os.path.isfile(found) or not os.access(found, os.X_OK):
        raise ToolchainInfoError('python %s is not an executable file%s. Fix: point python at the interpreter '
                                 'that builds, for example /usr/bin/python3'
                                 % (python, '' if os.sep in python else ' on PATH'))
    return found


def probe_python(run_command, python):
    """Return {'include': dir, 'version': 'X.Y'} of python; run_command is AnsibleModule.run_command or alike."""
    rc, out, err = run_command([python, '-c', PYTHON_PROBE])
    if rc != 0:
        raise ToolchainInfoError('%s -c <probe> failed with rc %d: %s' % (python, rc, (err or out).strip()))
    try:
        answer = json.loads(out)
        return {'include': str(answer['include']), 'version': str(answer['version'])}
    except (ValueError, TypeError, KeyError) as e:
        raise ToolchainInfoError('%s -c <probe> gave no include directory and version (%s): %r'
                                 % (python, e, out[:200])) from e


def collect_toolchain(run_command, tools, python, path=None):
    """Return {'toolchain': {tool: bool, ..., 'python3-dev': bool}, 'python_version', 'python_include'}."""
    executable = resolve_python(python, path)
    answer = probe_python(run_command, executable)
    toolchain = find_tools(tools, path)
    toolchain[HEADERS_KEY] = os.path.exists(os.path.join(answer['include'], 'Python.h'))
    return {
        'toolchain': toolchain,
        'python_version': answer['version'],
        'python_include': answer['include'],
    }
