"""Verify the firewall role on mon-node with real nftables: the fleet reaches what it needs (the edge, node exporter
from the monitoring host; test_monitoring.py then scrapes everything through it), anything else is dropped and
counted, and a ruleset that would cut the controller's connection is rolled back and the run fails saying so.

This machine is the controller and a client; mon-prometheus is the monitoring host. The lab's containers run no sshd:
prepare.yml starts a stand-in listener on port 22, the port the controller checks after a change.
"""

import os
import shlex
import socket
import subprocess

import pytest
import testinfra

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
SITE = os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "playbooks", "site.yml")
RULESET = "/etc/llmops/firewall.nft"
EDGE = 8000  # the edge role's edge_port


@pytest.fixture(scope="module")
def node():
    return testinfra.get_host("podman://mon-node")


@pytest.fixture(scope="module")
def prom():
    return testinfra.get_host("podman://mon-prometheus")


@pytest.fixture(scope="module")
def address(node):
    return node.check_output("hostname -I").split()[0]


@pytest.fixture(scope="module")
def listener(node):
    """An arbitrary listener that nothing in the inventory names, on every address of the node."""
    node.check_output("systemd-run --unit=test-listener --collect python3 -m http.server 8555")
    node.check_output("for i in $(seq 50); do ss -ltn | grep -q ':8555 ' && exit 0; sleep 0.2; done; exit 1")
    yield 8555
    node.run("systemctl stop test-listener")


def reach(address, port, timeout=3):
    """'open', 'refused' (a reset: nothing listens) or 'dropped' (no answer: the firewall)."""
    try:
        socket.create_connection((address, port), timeout=timeout).close()
        return "open"
    except ConnectionRefusedError:
        return "refused"
    except (socket.timeout, TimeoutError):
        return "dropped"


def reach_from(host, address, port):
    script = ("import socket, sys\ntry:\n socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)"
              "; print('open')\nexcept ConnectionRefusedError: print('refused')\n"
              "except OSError: print('dropped')")
    return host.check_output("python3 -c %s %s %d" % (shlex.quote(script), address, port))


def dropped(node):
    """The table's counter of what no rule accepted, in packets."""
    out = node.check_output("nft list counter inet llmops dropped")
    return int(out.split("packets ")[1].split()[0])


def test_the_ruleset_is_loaded_and_kept_for_boot(node):
    assert node.service("llmops-firewall.service").is_enabled
    table = node.check_output("nft list table inet llmops")
    assert "policy drop;" in table and 'comment "edge"' in table and 'comment "node_exporter"' in table
    assert node.run("nft --check --file %s" % RULESET).rc == 0


def test_the_edge_answers_and_everything_else_is_dropped_and_counted(node, prom, address, listener):
    before = dropped(node)
    assert reach(address, EDGE) == "open"
    assert reach(address, 22) == "open"  # the controller's ssh
    # vLLM itself (on loopback only, so without the firewall this would be a reset), node exporter from a host that
    # is not a monitoring host, and the test's own listener.
    for port in (8101, 9100, listener):
        assert reach(address, port) == "dropped", port
    assert reach_from(prom, address, listener) == "dropped"
    assert reach_from(prom, address, 22) == "dropped"  # ssh only from the controller
    assert reach_from(node, "127.0.0.1", listener) == "open"  # the listener is there
    assert dropped(node) >= before + 5


def test_node_exporter_answers_the_monitoring_host(prom, address):
    assert reach_from(prom, address, 9100) == "open"
    assert reach_from(prom, address, EDGE) == "open"


def test_a_ruleset_that_would_cut_the_controller_is_rolled_back(node, address):
    table, ruleset = node.check_output("nft --stateless list table inet llmops"), node.check_output("cat %s" % RULESET)
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    extra = ('{"llmops_only_stages": ["firewall"], "firewall_admin_sources": ["192.0.2.1"], '
             '"firewall_rollback_seconds": 10}')
    result = subprocess.run(["ansible-playbook", "-i", INVENTORY, SITE, "-e", extra],
                            capture_output=True, text=True, check=False, env=env)
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0, output[-4000:]
    assert ("host mon-node: firewall: the new ruleset was not confirmed: Check from the controller that the node's "
            "ssh port still answers failed (Timeout when waiting for %s:22). It was reverted after 10 s and the port "
            "answers again; ssh (%s:22) is open to 192.0.2.1. Fix: add the controller's address as the node sees it to "
            "firewall_admin_sources" % (address, address)) in output, output[-4000:]
    # The kernel's table and the file loaded at boot are the ones from before; the controller connects.
    assert node.check_output("nft --stateless list table inet llmops") == table
    assert node.check_output("cat %s" % RULESET) == ruleset
    assert reach(address, 22) == "open"
    assert not node.run("systemctl list-units --all --no-legend 'llmops-firewall-rollback*'").stdout.strip()
