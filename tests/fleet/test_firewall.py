"""Verify the firewall role on a lab node with real nftables: the fleet reaches what it needs (the edge, node
exporter from the monitoring host; test_monitoring.py and test_observability.py then scrape everything through
it), anything else is dropped and counted, and a ruleset that would cut the controller's connection is rolled back
and the run fails saying so.

This machine is the controller and a client; lab-mon1 is the monitoring host. The lab's containers run no sshd:
lab/lab.py starts a stand-in listener on port 22 (unit lab-ssh-stand-in), the port the controller checks after a
change.

What it changes, and how it puts it back: a listener on port 8555 of NODE (a transient unit, stopped by its
fixture); the rolled-back run loads a ruleset that the role itself reverts, and the test asserts that the kernel's
table and the file loaded at boot are the ones from before (no rollback unit left).
"""

import json
import shlex
import socket

import pytest
from conftest import MONITORING, NODES, get_host, play

NODE = "lab-node2"
RULESET = "/etc/llmops/firewall.nft"
EDGE = 8000  # the edge role's edge_port


@pytest.fixture(scope="module")
def node():
    return get_host(NODE)


@pytest.fixture(scope="module")
def prom():
    return get_host(MONITORING)


@pytest.fixture(scope="module")
def address():
    return NODES[NODE]


@pytest.fixture(scope="module")
def listener(node):
    """An arbitrary listener that nothing in the inventory names, on every address of the node."""
    node.check_output("systemd-run --unit=test-listener --collect python3 -m http.server 8555")
    try:
        node.check_output("for i in $(seq 50); do ss -ltn | grep -q ':8555 ' && exit 0; sleep 0.2; done; exit 1")
        yield 8555
    finally:
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
    extra = {"llmops_only_stages": ["firewall"], "firewall_admin_sources": ["192.0.2.1"],
             "firewall_rollback_seconds": 10}
    # On the node under test only: not on the emulated directors (the firewall stage runs there too).
    output = " ".join(play("playbooks/site.yml", "--limit", NODE, "-e", json.dumps(extra), passes=False).split())
    assert ("host %s: firewall: the new ruleset was not confirmed: Check from the controller that the node's "
            "ssh port still answers failed (Timeout when waiting for %s:22). It was reverted after 10 s and the port "
            "answers again; ssh (%s:22) is open to 192.0.2.1. Fix: add the controller's address as the node sees it to "
            "firewall_admin_sources" % (NODE, address, address)) in output, output[-4000:]
    # The kernel's table and the file loaded at boot are the ones from before; the controller connects.
    assert node.check_output("nft --stateless list table inet llmops") == table
    assert node.check_output("cat %s" % RULESET) == ruleset
    assert reach(address, 22) == "open"
    assert not node.run("systemctl list-units --all --no-legend 'llmops-firewall-rollback*'").stdout.strip()
