# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Who uses which pki file, and how each picks up a new one: the stage table's certificates entries, against the
roles' task files and handlers and against every host of the lab and example inventories."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.vars.manager import VariableManager

REPO = Path(__file__).resolve().parents[3]
STAGES = yaml.safe_load((REPO / 'playbooks' / 'vars' / 'stages.yml').read_text())['llmops_stages']
CONSUMERS = [stage for stage in STAGES if stage.get('certificates')]
# The variable naming each consumer's own client certificate (reads: client).
CLIENT_VARIABLE = {'filebeat': 'filebeat_client', 'lvs_director': 'lvs_director_health_client',
                   'monitoring': 'monitoring_client'}
# Files issued that no daemon checks yet: Redis (the log sink) has no CRL setting.
NOT_CHECKED = {('log_sinks', 'crl')}


def role_yaml(role, *parts):
    return yaml.safe_load((REPO / 'roles' / role / Path(*parts)).read_text()) or []


def notified(tasks):
    for task in tasks:
        names = task.get('notify') or []
        yield from [names] if isinstance(names, str) else names
        yield from notified(task.get('block') or [])


@pytest.mark.parametrize('stage', CONSUMERS, ids=lambda stage: stage['role'])
def test_each_consumer_picks_up_its_files_with_its_own_handlers(stage):
    role, entry = stage['role'], stage['certificates']
    assert set(entry) == {'reads', 'handlers'} and set(entry['reads']) <= {'ca', 'crl', 'server', 'client'}
    assert ('client' in entry['reads']) == (role in CLIENT_VARIABLE)
    handlers = [handler['name'] for handler in role_yaml(role, 'handlers', 'main.yml')]
    assert set(entry['handlers']) <= set(handlers)
    assert all(name.split()[0] in ('Reload', 'Restart') for name in entry['handlers'])
    # tasks/certificates.yml notifies exactly those, and the role's own configuration runs it.
    assert set(notified(role_yaml(role, 'tasks', 'certificates.yml'))) == set(entry['handlers'])
    configure = role_yaml(role, 'tasks', 'configure.yml')
    assert {'name': 'Pick up the certificates', 'ansible.builtin.import_tasks': 'certificates.yml'} in configure


def hosts_files(inventory):
    """{host: {(group, kind): name}} of every pki file the pki role issues there, from the inventory."""
    loader = DataLoader()
    manager = InventoryManager(loader=loader, sources=[str(REPO / 'inventories' / inventory)])
    variable_manager = VariableManager(loader=loader, inventory=manager)
    defaults = role_yaml('pki', 'defaults', 'main.yml')
    pki_groups = next(stage['groups'] for stage in STAGES if stage['role'] == 'pki')
    found = {}
    for host in manager.get_hosts():
        groups = {group.name for group in host.get_groups()}
        if not groups & set(pki_groups):
            continue
        # Unresolved templates are fine here: only lists of names and group names are read.
        variables = variable_manager.get_vars(host=host, include_hostvars=False)
        server_groups = variables.get('pki_server_groups', defaults['pki_server_groups'])
        files = {'ca': 'ca'}
        if groups & set(server_groups):
            files.update(server='server', crl='crl')
        for client in variables.get('pki_host_clients') or []:
            files['client:' + client['name']] = client['name']
        found[host.name] = (groups, files, variables)
    return found


@pytest.mark.parametrize('inventory', ['lab', 'example'])
def test_every_file_the_pki_role_issues_has_a_consumer_that_reloads_it(inventory):
    checked = 0
    for host, (groups, files, variables) in hosts_files(inventory).items():
        reads = set()
        for stage in CONSUMERS:
            if not groups & set(stage['groups']):
                continue
            for kind in stage['certificates']['reads']:
                if kind == 'client':
                    variable = CLIENT_VARIABLE[stage['role']]
                    default = role_yaml(stage['role'], 'defaults', 'main.yml')[variable]
                    kind = 'client:' + variables.get(variable, default)
                    assert kind in files, '%s: %s reads %s, which the pki role does not issue' % (host, stage, kind)
                reads.add(kind)
        unread = {kind for kind in files if kind not in reads
                  and not any((group, kind) in NOT_CHECKED for group in groups)}
        assert not unread, '%s: no daemon picks up %s' % (host, sorted(unread))
        checked += len(files)
    assert checked >= 10
