"""Verify the LVS front door of the lab with real components: keepalived, IPVS and the breaker in the two director
VMs, two vLLM nodes behind their TLS edges, and this machine as the client, which only knows the VIP.

Every test here has deadlines of seconds (ejection, failover): make test runs them last, by themselves (marker
`alone`). They run in file order. Each leaves the fleet as it found it: both nodes serving at full weight. The
directors' idempotence is the fleet's (scripts/fleet.py up: a second site.yml changes nothing on any host).
"""

import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest
import testinfra
import yaml
from conftest import PROJECT, wait_for

sys.path.insert(0, str(PROJECT / "lab"))
from lvs_probe import (  # noqa: E402
    BREAKER, CA, CERT, DIRECTORS, FULL, HALF_OPEN, INVENTORY, KEY, NODES, VIP, KeepAlive, Load, Watch, client_address,
    completion, full_weight_everywhere, master, measure_failover, play, set_fault, ssh, weights)

pytestmark = pytest.mark.alone


def node(name):
    return testinfra.get_host("podman://" + name)


def test_the_summary_commands_get_completions_through_the_vip_and_each_edge():
    summary = subprocess.run([sys.executable, os.path.join(PROJECT, "lab", "lab.py"), "summary"], capture_output=True,
                             text=True, check=True, cwd=PROJECT).stdout
    commands = [line.strip() for line in summary.splitlines() if line.strip().startswith("curl ")]
    assert len(commands) == 3 and "https://%s:8000/" % VIP in commands[0], summary
    for command in commands:
        answer = subprocess.run(["bash", "-c", command], text=True, capture_output=True, check=False)
        assert answer.returncode == 0, answer.stderr
        assert json.loads(answer.stdout)["choices"][0]["text"], answer.stdout


def test_one_director_holds_the_vip_and_both_program_the_dr_service():
    master()
    for director in DIRECTORS:
        table = ssh(director, "ipvsadm -Ln --exact")
        assert re.search(r"TCP\s+%s:8000 wlc" % re.escape(VIP), table), table
        assert weights(director) == {address: FULL for address in NODES.values()}
        assert "lvs_sync_daemon" in ssh(director, "cat /etc/keepalived/keepalived.conf")
        for unit in ("keepalived", "llmops-breaker"):
            assert ssh(director, "systemctl is-enabled %s" % unit).strip() == "enabled"
            assert ssh(director, "systemctl is-active %s" % unit).strip() == "active"
        # A director reads no GPU: the baseline gives it no tools venv (baseline_tools_groups).
        assert ssh(director, "test -e /opt/llmops-vllm/tools && echo present || echo absent").strip() == "absent"
        # A new connection that reuses a drained node's old entry is scheduled again (DR keeps FIN_WAIT entries).
        assert ssh(director, "sysctl -n net.ipv4.vs.expire_nodest_conn net.ipv4.vs.conn_reuse_mode").split() == [
            "1", "2"]


def test_the_vip_reaches_both_nodes_and_replies_bypass_the_director():
    director = master()
    before = {name: node(name).run("wc -l < /var/log/llmops-vllm/edge-audit.log").stdout.strip() or "0"
              for name in NODES}
    ssh(director, "ipvsadm -Z -t %s:8000" % VIP)
    for _attempt in range(10):
        out = completion()
        assert out.endswith("\n200"), out
    served, me = {}, client_address()
    for name in NODES:
        lines = node(name).file("/var/log/llmops-vllm/edge-audit.log").content_string.splitlines()
        served[name] = [json.loads(line) for line in lines[int(before[name]):]
                        if '"/v1/completions"' in line]
        # The node saw the client's own address: DR does not rewrite it.
        assert all(line["remote_addr"] == me for line in served[name]), served[name]
    assert all(served.values()), served
    # Direct routing: the director forwarded the client's packets and carried none of the replies.
    stats = ssh(director, "ipvsadm -Ln --stats --exact -t %s:8000" % VIP).splitlines()
    service = [line.split() for line in stats if line.startswith("TCP")][0]
    conns, inpkts, outpkts = int(service[2]), int(service[3]), int(service[4])
    print("direct routing: %d connections, %d packets in, %d out through %s" % (conns, inpkts, outpkts, director))
    assert conns >= 10 and inpkts > 0 and outpkts == 0, stats


def test_a_dead_edge_leaves_the_pool_within_3_s_and_clients_see_only_successes():
    director, address = master(), NODES["lab-node2"]
    watch = Watch(director)
    try:
        time.sleep(1)
        # The edge dies at once (SIGKILL, no graceful quit), timed by the node's own clock (a container shares this
        # machine's), not from before the podman exec that kills it.
        issued = time.monotonic()
        killed_at = float(node("lab-node2").check_output("systemctl kill --signal=KILL nginx && date +%s.%N"))
        died = killed_at - (time.time() - time.monotonic())
        out = watch.first(address, lambda w: w == 0, died, timeout=30)
        print("dead edge out of the pool after %s s (the kill's podman exec began %.2f s before it)"
              % (out if out is None else round(out, 2), died - issued))
        assert out is not None and out <= 3, out
        results = [completion() for _attempt in range(10)]
        assert all(r.endswith("\n200") for r in results), results
    finally:
        node("lab-node2").check_output("systemctl start nginx")
        back = watch.first(address, lambda w: w == FULL, time.monotonic(), timeout=60)
        watch.stop()
    assert back is not None


def test_the_breaker_leaves_2_percent_in_ejects_10_percent_and_readmits_half_open_then_full():
    director, address, other = master(), NODES["lab-node1"], NODES["lab-node2"]
    watch = Watch(director)
    load = Load(rate=10, seconds=900)
    try:
        set_fault(["lab-node1"], {"share": 0.02, "status": 503})
        two_percent = time.monotonic()
        time.sleep(BREAKER["window"] * 1.5)
        assert set(watch.seen(address, two_percent)) == {FULL}
        set_fault(["lab-node1"], {"share": 0.1, "status": 503})
        faulted = time.monotonic()
        ejected = watch.first(address, lambda w: w == 0, faulted, timeout=BREAKER["window"] + 10)
        print("breaker: 10 %% of 5xx ejected the node after %s s" % (ejected if ejected is None else round(ejected, 1)))
        assert ejected is not None and ejected <= BREAKER["window"], ejected
    finally:
        set_fault(["lab-node1"], {})
    lifted = time.monotonic()
    half_open = watch.first(address, lambda w: w == HALF_OPEN, lifted, timeout=BREAKER["cooldown"] * 2 + 30)
    full = watch.first(address, lambda w: w == FULL, lifted, timeout=BREAKER["cooldown"] * 2 + BREAKER["window"] * 2)
    result = load.stop()
    watch.stop()
    print("breaker: fault lifted; half open after %s s, full weight after %s s"
          % tuple(None if t is None else round(t, 1) for t in (half_open, full)))
    assert half_open is not None and full is not None and half_open < full, watch.seen(address, lifted)
    # The other node stayed at full weight throughout.
    assert set(watch.seen(other, two_percent)) == {FULL}
    log = ssh(director, "cat /var/log/llmops-vllm/breaker.log")
    changes = [json.loads(line) for line in log.splitlines() if '"lab-node1"' in line and '"to"' in line]
    assert [c["to"] for c in changes][-3:] == ["open", "half_open", "closed"], changes
    metrics = ssh(director, "cat /var/lib/prometheus/node-exporter/llmops_breaker.prom")
    assert 'llmops_breaker_transitions_total{service="vllm_nodes",node="lab-node1",to="open"}' in metrics
    # Only the injected faults failed; nothing else did.
    assert set(result["statuses"]) <= {"200", "503"}, result


def test_all_nodes_failing_do_not_empty_the_pool():
    director = master()
    watch = Watch(director)
    load = Load(rate=10, seconds=900)
    try:
        set_fault(list(NODES), {"share": 1.0, "status": 503})
        start = time.monotonic()
        time.sleep(BREAKER["window"] + 10)
        samples = [sample for stamp, sample in list(watch.samples) if stamp >= start + 5]
    finally:
        set_fault(list(NODES), {})
        load.stop()
    watch.stop()
    # One node may be ejected; the floor (1) keeps the other serving.
    assert samples and all(max(sample.values()) > 0 for sample in samples), samples[-5:]
    assert wait_for(full_weight_everywhere, timeout=BREAKER["cooldown"] * 4 + BREAKER["window"] * 2 + 60, step=2)


def test_a_failover_moves_the_vip_within_3_s_and_a_stream_survives():
    # A long streaming completion through the VIP, in flight while the master's keepalived stops.
    body = json.dumps({"model": "tiny-llama", "prompt": "failover", "max_tokens": 400, "stream": True,
                       "ignore_eos": True})
    stream = subprocess.Popen(["curl", "-sS", "-N", "--noproxy", "*", "--max-time", "300", "--cacert", CA, "--cert",
                               CERT, "--key", KEY, "-H", "Content-Type: application/json", "-d", body,
                               "https://%s:8000/v1/completions" % VIP], stdout=subprocess.PIPE, text=True)
    time.sleep(3)
    assert stream.poll() is None, "the stream ended before the failover"
    failover = measure_failover()
    out, _err = stream.communicate(timeout=300)
    print("failover: the VIP moved from %(from)s to %(to)s after %(failover_s).2f s (ssh round trip "
          "%(ssh_round_trip_s).2f s)" % failover)
    assert failover["failover_s"] is not None and failover["failover_s"] <= 3, failover
    assert master() == failover["to"]
    assert stream.returncode == 0 and out.rstrip().endswith("data: [DONE]"), out[-500:]
    chunks = [line for line in out.splitlines() if line.startswith("data: {")]
    assert len(chunks) >= 400
    assert wait_for(full_weight_everywhere, timeout=60, step=2)


def synced(director):
    """Whether the director's IPVS table has this machine's established connection to the VIP (the sync daemon's)."""
    return re.search(r"TCP\s+\S+\s+ESTABLISHED\s+%s:\d+\s+%s:8000\s" % (re.escape(client_address()), re.escape(VIP)),
                     ssh(director, "ipvsadm -Lnc"))


def test_a_keep_alive_connection_survives_five_failovers_and_each_return():
    """One HTTP/1.1 keep-alive connection through the VIP, a completion every 0.25 s on the same socket, while the
    master's keepalived stops (the backup takes the VIP and the synced connection) and starts again (it returns as
    backup and learns the connection, and the next failover moves the VIP back to it), five times."""
    client = KeepAlive(interval=0.25, seconds=900)
    failovers, result = [], None
    try:
        assert wait_for(lambda: synced(next(d for d in DIRECTORS if d != master())), timeout=60, step=1)
        while len(failovers) < 5:
            failovers.append(measure_failover())
            # The returned director knows the connection before the VIP goes back to it.
            assert wait_for(lambda: synced(failovers[-1]["from"]), timeout=60, step=1), failovers[-1]
    except AssertionError as error:
        # A connection that failed sends nothing more to sync: say what it saw.
        result = client.stop()
        raise AssertionError("%s after %d failover(s); the connection: %s" % (error, len(failovers), result)) from error
    finally:
        result = result or client.stop()
    print("keep-alive across %d failovers (%s s): %d requests on one connection, failures %s" % (
        len(failovers), ", ".join("%.2f" % f["failover_s"] for f in failovers), result["requests"],
        result["failures"]))
    assert result["failures"] == [] and result["requests"] >= 40, result
    assert all(f["failover_s"] is not None and f["failover_s"] <= 3 for f in failovers), failovers
    assert wait_for(full_weight_everywhere, timeout=60, step=2)


def test_the_directors_firewall_drops_what_it_does_not_name():
    """Every test above ran through the directors' firewalls (inventories/lab/group_vars/lvs_directors.yml): VRRP,
    the connection sync, the VIP's port, health checks, the scrapes. Here: what they do not name is dropped."""
    for director, address in DIRECTORS.items():
        table = ssh(director, "nft list table inet llmops")
        for rule in ("ssh", "lvs_service", "vrrp", "ipvs_sync", "node_exporter"):
            assert 'comment "%s"' % rule in table, (director, table)
        assert "policy drop;" in table and "tcp dport 8000 notrack" in table  # DR: the service is not tracked
        ssh(director, "systemd-run --unit=test-listener --collect python3 -m http.server 8555 && "
                      "for i in $(seq 50); do ss -ltn | grep -q ':8555 ' && exit 0; sleep 0.2; done; exit 1")
        try:
            before = int(ssh(director, "nft list counter inet llmops dropped").split("packets ")[1].split()[0])
            with pytest.raises((socket.timeout, TimeoutError)):  # dropped, not refused: no reset comes back
                socket.create_connection((address, 8555), timeout=3).close()
            after = int(ssh(director, "nft list counter inet llmops dropped").split("packets ")[1].split()[0])
            assert after > before
            assert "open" in ssh(director, "python3 -c \"import socket; socket.create_connection(('127.0.0.1', 8555), "
                                           "timeout=3); print('open')\"")
        finally:
            ssh(director, "systemctl stop test-listener", check=False)


def test_a_rolling_upgrade_under_load_fails_no_request():
    # One node (--limit): the drain, the wait for an empty node, the upgrade and the readmission under load are the
    # same for every node, and the other node's turn would double the test's time (each turn restarts vLLM).
    upgraded, *untouched = sorted(NODES)
    with open(os.path.join(INVENTORY, "group_vars", "vllm_nodes.yml")) as f:
        instances = yaml.safe_load(f)["vllm_instances"]
    for instance in instances:
        instance["max_num_seqs"] = 6  # an engine-argument change: every instance restarts
        instance["model_src"] = instance["model_src"].replace("{{ inventory_dir }}", INVENTORY)
    load = Load(rate=20, seconds=1200)
    started = time.monotonic()
    # A short drain bound: in DR mode a director sees only the client's half of a connection, and an entry whose
    # FIN it missed (one synced from the other director, say) stays "active" for IPVS's 15 min. vLLM's own count
    # of running requests is what the upgrade waits for; a bound cut too short would show here as failed requests.
    # The vLLM stages only, as an operator upgrades vLLM (validate and preflight still cover every stage).
    output = play("playbooks/rolling_upgrade.yml", "--limit", upgraded, "-e", json.dumps({
        "vllm_instances": instances, "rolling_upgrade_drain_timeout": 10,
        "llmops_only_stages": ["vllm_install", "vllm_server", "edge"]}))
    upgrade = time.monotonic() - started
    result = load.stop()
    print("rolling upgrade of %s: %.0f s, %d requests at %.1f/s, failures %s" % (
        upgraded, upgrade, result["requests"], result["rate"], result["failures"]))
    assert re.search(r"%s\s+: ok=\d+\s+changed=[1-9]" % upgraded, output), output[-3000:]
    assert result["failures"] == [] and result["rate"] >= 18, result
    unit = node(upgraded).file("/etc/systemd/system/vllm-tiny.service").content_string
    assert "--max-num-seqs 6" in unit or "--max-num-seqs=6" in unit
    for name in untouched:
        unit = node(name).file("/etc/systemd/system/vllm-tiny.service").content_string
        assert "--max-num-seqs 6" not in unit and "--max-num-seqs=6" not in unit
    for name in NODES:
        assert not node(name).file("/var/lib/llmops-vllm/edge/draining").exists
    assert full_weight_everywhere()
