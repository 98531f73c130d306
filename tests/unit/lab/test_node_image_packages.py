# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The lab's images hold the Debian packages the baseline, node_exporter and pki roles install, so that the lab's
converges skip those apt runs: the lists in the image recipes must be the roles' own."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]


def _yaml(path):
    return yaml.safe_load((REPO / path).read_text())


def roles_packages():
    return set(_yaml('roles/baseline/defaults/main.yml')['baseline_packages']
               + [_yaml('roles/node_exporter/vars/main.yml')['_node_exporter_package']]
               + _yaml('roles/pki/vars/main.yml')['_pki_packages'])


def test_the_node_image_installs_exactly_the_roles_packages():
    (play,) = _yaml('lab/node-image/provision.yml')
    (task,) = [t for t in play['tasks'] if 'ansible.builtin.apt' in t]
    sealing = _yaml('roles/vllm_server/vars/main.yml')['_vllm_server_sealing_packages']  # vLLM nodes only
    assert set(task['ansible.builtin.apt']['name']) == roles_packages() | set(sealing)


def test_the_director_image_holds_the_roles_packages():
    packages = set((REPO / 'lab/director_vm/packages.txt').read_text().split())
    # The lab's directors run the firewall role (group_vars/lvs_directors.yml): baked in, as keepalived is.
    wanted = roles_packages() | {_yaml('roles/firewall/vars/main.yml')['_firewall_package']}
    assert wanted <= packages, wanted - packages
