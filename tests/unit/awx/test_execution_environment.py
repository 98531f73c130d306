# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""execution-environment.yml renders a build context with ansible-builder (building the image needs a registry),
meta/execution-environment.yml gives the installed collection's requirements to any EE that takes it, and
ansible-navigator accepts ansible-navigator.yml."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[3]
BIN = pathlib.Path(sys.executable).parent
GALAXY = yaml.safe_load((REPO / 'galaxy.yml').read_text())
ARCHIVE = 'llmops-vllm-%s.tar.gz' % GALAXY['version']


def _lines(path):
    """A requirements or bindep file's entries, without comments."""
    return [line.split('#')[0].strip() for line in path.read_text().splitlines() if line.split('#')[0].strip()]


def _run(*command, cwd):
    env = dict(os.environ, PATH='%s:%s' % (BIN, os.environ['PATH']), ANSIBLE_CONFIG=str(REPO / 'ansible.cfg'))
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture(scope='module')
def archive(tmp_path_factory):
    """The collection's archive, built as the EE build does."""
    out = tmp_path_factory.mktemp('collection')
    _run(str(BIN / 'ansible-galaxy'), 'collection', 'build', '--force', '--output-path', str(out), str(REPO),
         cwd=REPO)
    return out / ARCHIVE


def test_the_build_context_holds_the_collection_its_collections_and_its_requirements(tmp_path, archive):
    project = tmp_path / 'project'
    for name in ('execution-environment.yml', 'bindep.txt', 'collections/requirements.yml',
                 'requirements/controller.txt'):
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, project / name)
    (project / 'build' / 'collection').mkdir(parents=True)
    shutil.copy(archive, project / 'build' / 'collection')

    _run(str(BIN / 'ansible-builder'), 'create', '--context', str(tmp_path / 'context'), '-f',
         'execution-environment.yml', cwd=project)

    build = tmp_path / 'context' / '_build'
    collections = [c['name'] for c in yaml.safe_load((build / 'requirements.yml').read_text())['collections']]
    assert {'ansible.posix', 'community.crypto'} <= set(collections)
    assert set(GALAXY['dependencies']) <= set(collections)
    assert _lines(build / 'requirements.txt') == _lines(REPO / 'requirements' / 'controller.txt')
    assert 'ansible-core==' in (build / 'requirements.txt').read_text()
    assert _lines(build / 'bindep.txt') == _lines(REPO / 'bindep.txt')
    with tarfile.open(build / 'collection' / ARCHIVE) as packed:
        manifest = json.load(packed.extractfile('MANIFEST.json'))['collection_info']
    assert (manifest['namespace'], manifest['name']) == ('llmops', 'vllm')
    containerfile = (tmp_path / 'context' / 'Containerfile').read_text()
    assert 'ansible-galaxy collection install --no-deps --collections-path /usr/share/ansible/collections' \
        in containerfile and '/tmp/llmops-collection/llmops-vllm-*.tar.gz' in containerfile


def test_an_ee_that_installs_the_collection_gets_its_requirements(tmp_path, archive):
    """ansible-builder's introspection over the installed collection (meta/execution-environment.yml)."""
    _run(str(BIN / 'ansible-galaxy'), 'collection', 'install', '--force', '--no-deps', '-p', str(tmp_path),
         str(archive), cwd=tmp_path)
    import ansible_builder  # pylint: disable=import-outside-toplevel

    introspect = pathlib.Path(ansible_builder.__file__).parent / '_target_scripts' / 'introspect.py'
    found = yaml.safe_load(_run(sys.executable, str(introspect), 'introspect', str(tmp_path), '--sanitize',
                                cwd=tmp_path))
    python = [line.split('  #')[0] for line in found['python'] if line.endswith('from collection llmops.vllm')]
    # ansible-core is the EE's own (ansible-builder leaves a collection's pin of it out).
    assert python == [r for r in _lines(REPO / 'requirements' / 'controller.txt') if not r.startswith('ansible-core')]
    system = [line.split('  #')[0] for line in found['system'] if line.endswith('from collection llmops.vllm')]
    assert system == _lines(REPO / 'bindep.txt') and any(s.startswith('age ') for s in system)


def test_the_collection_archive_leaves_out_the_project_and_the_tests(archive):
    with tarfile.open(archive) as packed:
        tops = {name.split('/')[0] for name in packed.getnames()}
    assert {'plugins', 'roles', 'playbooks', 'meta', 'bindep.txt', 'requirements'} <= tops
    assert not tops & {'tests', 'molecule', 'lab', 'awx', '.cache', '.hypothesis', 'build', 'scripts'}


def test_ansible_navigator_accepts_its_settings(tmp_path):
    shutil.copy(REPO / 'ansible-navigator.yml', tmp_path)
    out = _run(str(BIN / 'ansible-navigator'), 'settings', '--effective', '--mode', 'stdout', '--ee', 'false',
               cwd=tmp_path)
    settings = yaml.safe_load(out)['ansible-navigator']
    assert settings['execution-environment']['image'] == 'llmops-vllm-ee:latest'
    assert settings['execution-environment']['pull']['policy'] == 'never'
    assert settings['mode'] == 'stdout' and settings['playbook-artifact']['enable'] is True
