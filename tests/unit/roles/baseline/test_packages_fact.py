# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The baseline's fact of the installed packages, run against this machine's real dpkg database."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess

import pytest

from ansible_collections.llmops.vllm.plugins.filter.packages import missing_packages

FACT = pathlib.Path(__file__).resolve().parents[4] / "roles" / "baseline" / "files" / "llmops_packages.fact"


def run_fact(path=None):
    env = dict(os.environ, PATH=path) if path is not None else None
    result = subprocess.run([str(FACT)], capture_output=True, text=True, check=True, env=env)
    return json.loads(result.stdout)


def test_the_fact_is_an_executable_script():
    assert os.access(FACT, os.X_OK)


@pytest.mark.skipif(not shutil.which("dpkg-query"), reason="needs a Debian host's dpkg")
def test_it_lists_what_dpkg_says_is_installed():
    installed = run_fact()
    listed = subprocess.run(["dpkg-query", "--show", "--showformat=${db:Status-Abbrev} ${Package} ${Version}\\n"],
                            capture_output=True, text=True, check=True).stdout.splitlines()
    expected = {line.split()[1]: line.split()[2] for line in listed if line.startswith("ii ")}
    assert installed == expected
    assert "dpkg" in installed
    assert missing_packages(["dpkg", "coreutils=" + installed["coreutils"]], installed) == []


def test_without_dpkg_it_is_empty(tmp_path):
    # awk and sh from a directory of their own, and no dpkg-query on the PATH.
    for tool in ("awk", "sh"):
        (tmp_path / tool).symlink_to(shutil.which(tool))
    assert run_fact(str(tmp_path)) == {}
