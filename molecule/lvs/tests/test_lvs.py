"""Verify the LVS front door with real components: keepalived and IPVS in two director VMs, two vLLM nodes behind
their TLS edges, and a client container that only knows the VIP.

The tests run in file order. Each leaves the fleet as it found it: both nodes serving at full weight.
"""

import json
import os
import re
import subprocess
import threading
import time

import pytest
import testinfra
import yaml
from conftest import wait_for

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
EPHEMERAL = os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]
SCENARIO = os.environ["MOLECULE_SCENARIO_DIRECTORY"]
PROJECT = os.environ["MOLECULE_PROJECT_DIRECTORY"]
PKI = os.path.join(EPHEMERAL, "pki")
VIP = "10.89.61.100"
NODES = {"lvs-node1": "10.89.61.11", "lvs-node2": "10.89.61.12"}
DIRECTORS = {"lvs-lb1": "10.89.61.21", "lvs-lb2": "10.89.61.22"}
KEY = os.path.join(PROJECT, ".cache", "director-vms", "id_ed25519")
SSH = ["ssh", "-i", KEY, "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o",
       "LogLevel=ERROR", "-o", "BatchMode=yes"]
CERTS = "/etc/lvs-test"  # on the client
FULL, HALF_OPEN = 100, 25
# The client: requests to the VIP, a new TLS 1.3 connection with the lab client's certificate for each, at a
# steady rate, for SECONDS or until /tmp/stop-load exists; every answer that is not a 200 completion counts as a
# failure. Prints a JSON summary at the end.
LOAD = r"""
import http.client, json, os, ssl, sys, threading, time
ctx = ssl.create_default_context(cafile=sys.argv[1] + "/ca.crt")
ctx.minimum_version = ssl.TLSVersion.TLSv1_3
ctx.load_cert_chain(sys.argv[1] + "/molecule-client.crt", sys.argv[1] + "/molecule-client.key")
host, rate, seconds = sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
body = json.dumps({"model": "tiny-llama", "prompt": "lvs", "max_tokens": 2, "ignore_eos": True})
lock, done, failures, statuses = threading.Lock(), [0], [], {}
def one():
    try:
        conn = http.client.HTTPSConnection(host, 8000, context=ctx, timeout=60)
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read()
        conn.close()
        ok = response.status == 200 and json.loads(data)["usage"]["completion_tokens"] == 2
        status = response.status
    except Exception as e:
        ok, status = False, type(e).__name__
    with lock:
        done[0] += 1
        statuses[str(status)] = statuses.get(str(status), 0) + 1
        if not ok:
            failures.append([round(time.time(), 2), str(status)])
threads, start = [], time.time()
while time.time() - start < seconds and not os.path.exists("/tmp/stop-load"):
    thread = threading.Thread(target=one)
    thread.start()
    threads.append(thread)
    time.sleep(1 / rate)
for thread in threads:
    thread.join()
print(json.dumps({"requests": done[0], "failures": failures, "statuses": statuses,
                  "rate": done[0] / (time.time() - start)}))
"""


def node(name):
    return testinfra.get_host("podman://" + name)


def ssh(director, command, check=True):
    result = subprocess.run(SSH + ["root@" + DIRECTORS[director], command], capture_output=True, text=True,
                            check=False, timeout=120)
    assert not check or result.returncode == 0, result.stderr
    return result.stdout


def master():
    """The director that holds the VIP (exactly one does)."""
    holders = [d for d in DIRECTORS if "inet %s/32" % VIP in ssh(d, "ip -4 address show dev eth0")]
    assert len(holders) == 1, holders
    return holders[0]


def weights(director):
    """{node address: weight} of the VIP's real servers on a director (ipvsadm -Ln --exact)."""
    table = ssh(director, "ipvsadm -Ln --exact -t %s:8000" % VIP)
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"->\s+([0-9.]+):8000\s+Route\s+(\d+)", table)}


class Watch:
    """Samples a director's weights every 0.2 s over one ssh session, each line stamped with this machine's clock."""

    SCRIPT = ("while :; do echo $(ipvsadm -Ln --exact -t %s:8000 | awk '$1 == \"->\" && $3 == \"Route\" "
              "{print $2 \"=\" $4}'); sleep 0.2; done" % VIP)

    def __init__(self, director):
        self.samples = []
        self.process = subprocess.Popen(SSH + ["root@" + DIRECTORS[director], self.SCRIPT], stdout=subprocess.PIPE,
                                        text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.process.stdout:
            sample = dict(item.replace(":8000", "").split("=") for item in line.split())
            self.samples.append((time.monotonic(), {k: int(v) for k, v in sample.items()}))

    def first(self, address, test, since, timeout):
        """Seconds from `since` to the first sample whose weight of `address` passes `test`, or None."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for stamp, sample in list(self.samples):
                if stamp >= since and address in sample and test(sample[address]):
                    return stamp - since
            time.sleep(0.1)
        return None

    def seen(self, address, since):
        return [sample[address] for stamp, sample in list(self.samples) if stamp >= since and address in sample]

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=10)


@pytest.fixture(scope="module")
def client():
    """The client container, with the lab client's certificate of the fleet CA."""
    host = testinfra.get_host("podman://lvs-client")
    host.check_output("mkdir -p %s", CERTS)
    for name in ("ca.crt", "molecule-client.crt", "molecule-client.key"):
        with open(os.path.join(PKI, "clients", name)) as f:
            subprocess.run(["podman", "exec", "-i", "lvs-client", "sh", "-c", "cat > %s/%s" % (CERTS, name)],
                           input=f.read(), text=True, check=True)
    return host


class Load:
    """A steady load at the VIP from the client container, in the background; .result() waits for its summary."""

    def __init__(self, rate, seconds):
        subprocess.run(["podman", "exec", "lvs-client", "rm", "-f", "/tmp/stop-load"], check=True)
        self.process = subprocess.Popen(["podman", "exec", "-i", "lvs-client", "python3", "-", CERTS, VIP, str(rate),
                                         str(seconds)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.process.stdin.write(LOAD)
        self.process.stdin.close()

    def stop(self):
        subprocess.run(["podman", "exec", "lvs-client", "touch", "/tmp/stop-load"], check=True)
        return self.result()

    def result(self):
        out = self.process.stdout.read()
        self.process.wait(timeout=900)
        return json.loads(out)


def completion(client, stream=False, tokens=2):
    body = json.dumps({"model": "tiny-llama", "prompt": "lvs", "max_tokens": tokens, "stream": stream,
                       "ignore_eos": True})
    return client.run("curl -sS --max-time 300 --cacert %s/ca.crt --cert %s/molecule-client.crt --key "
                      "%s/molecule-client.key -H 'Content-Type: application/json' -d %s "
                      "-w '\\n%%{http_code}' https://%s:8000/v1/completions", CERTS, CERTS, CERTS, body, VIP)


def play(playbook, *args):
    cmd = ["ansible-playbook", "-i", INVENTORY, playbook, *args]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False,
                            env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0"))
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    return result.stdout


def set_fault(host, fault):
    """Re-apply the edge of one node with edge_fault_injection (nothing else changes)."""
    play(os.path.join(SCENARIO, "converge.yml"), "--limit", host, "--tags", "edge_configure,edge_run",
         "-e", json.dumps({"edge_fault_injection": fault}))


def full_weight_everywhere():
    return all(weights(d) == {a: FULL for a in NODES.values()} for d in DIRECTORS)


def test_one_director_holds_the_vip_and_both_program_the_dr_service():
    master()
    for director in DIRECTORS:
        table = ssh(director, "ipvsadm -Ln --exact")
        assert re.search(r"TCP\s+%s:8000 wlc" % re.escape(VIP), table), table
        assert weights(director) == {address: FULL for address in NODES.values()}
        assert "lvs_sync_daemon" in ssh(director, "cat /etc/keepalived/keepalived.conf")
        assert ssh(director, "systemctl is-enabled keepalived").strip() == "enabled"


def test_the_vip_reaches_both_nodes_and_replies_bypass_the_director(client):
    director = master()
    before = {name: node(name).run("wc -l < /var/log/llmops-vllm/edge-audit.log").stdout.strip() or "0"
              for name in NODES}
    ssh(director, "ipvsadm -Z -t %s:8000" % VIP)
    for _attempt in range(10):
        out = completion(client).stdout
        assert out.endswith("\n200"), out
    served = {}
    for name in NODES:
        lines = node(name).file("/var/log/llmops-vllm/edge-audit.log").content_string.splitlines()
        served[name] = [json.loads(line) for line in lines[int(before[name]):]
                        if '"/v1/completions"' in line]
        # The node saw the client's own address: DR does not rewrite it.
        assert all(line["remote_addr"] == "10.89.61.31" for line in served[name])
    assert all(served.values()), served
    # Direct routing: the director forwarded the client's packets and carried none of the replies.
    stats = ssh(director, "ipvsadm -Ln --stats --exact -t %s:8000" % VIP).splitlines()
    service = [line.split() for line in stats if line.startswith("TCP")][0]
    conns, inpkts, outpkts = int(service[2]), int(service[3]), int(service[4])
    assert conns >= 10 and inpkts > 0 and outpkts == 0, stats


def test_a_dead_edge_leaves_the_pool_within_3_s_and_clients_see_only_successes(client):
    director, address = master(), NODES["lvs-node2"]
    watch = Watch(director)
    try:
        stopped = time.monotonic()
        node("lvs-node2").check_output("systemctl stop nginx")
        out = watch.first(address, lambda w: w == 0, stopped, timeout=30)
        assert out is not None and out <= 3, out
        results = [completion(client).stdout for _attempt in range(10)]
        assert all(r.endswith("\n200") for r in results), results
    finally:
        node("lvs-node2").check_output("systemctl start nginx")
        back = watch.first(address, lambda w: w == FULL, time.monotonic(), timeout=60)
        watch.stop()
    assert back is not None


def test_the_breaker_ejects_at_10_percent_and_readmits_half_open_then_full():
    director, address = master(), NODES["lvs-node1"]
    watch = Watch(director)
    load = Load(rate=8, seconds=75)
    try:
        set_fault("lvs-node1", {"share": 0.1, "status": 503})
        faulted = time.monotonic()
        ejected = watch.first(address, lambda w: w == 0, faulted, timeout=30)
        assert ejected is not None and ejected <= 15, ejected  # one window (10 s) and a check
    finally:
        set_fault("lvs-node1", {})
    lifted = time.monotonic()
    half_open = watch.first(address, lambda w: w == HALF_OPEN, lifted, timeout=60)
    full = watch.first(address, lambda w: w == FULL, lifted, timeout=90)
    watch.stop()
    result = load.result()
    assert half_open is not None and full is not None and half_open < full, watch.seen(address, lifted)
    # The other node stayed at full weight throughout.
    assert set(watch.seen(NODES["lvs-node2"], lifted)) == {FULL}
    log = ssh(director, "cat /var/log/llmops-vllm/breaker.log")
    changes = [json.loads(line) for line in log.splitlines() if '"lvs-node1"' in line and '"to"' in line]
    assert [c["to"] for c in changes][-3:] == ["open", "half_open", "closed"], changes
    # Only the injected faults failed; nothing else did.
    assert set(result["statuses"]) <= {"200", "503"}, result


def test_the_breaker_leaves_a_node_at_2_percent_in():
    director, address = master(), NODES["lvs-node1"]
    watch = Watch(director)
    load = Load(rate=8, seconds=30)
    try:
        set_fault("lvs-node1", {"share": 0.02, "status": 503})
        start = time.monotonic()
        load.result()
    finally:
        set_fault("lvs-node1", {})
        watch.stop()
    assert set(watch.seen(address, start)) == {FULL}


def test_all_nodes_failing_do_not_empty_the_pool():
    director = master()
    watch = Watch(director)
    load = Load(rate=8, seconds=40)
    try:
        for name in NODES:
            set_fault(name, {"share": 1.0, "status": 503})
        start = time.monotonic()
        load.result()
        samples = [sample for stamp, sample in list(watch.samples) if stamp >= start + 15]
    finally:
        for name in NODES:
            set_fault(name, {})
        watch.stop()
    # One node may be ejected; the floor (1) keeps the other serving.
    assert samples and all(max(sample.values()) > 0 for sample in samples), samples[-5:]
    assert wait_for(full_weight_everywhere, timeout=120, step=2)


def test_a_failover_moves_the_vip_within_3_s_and_a_stream_survives(client):
    old = master()
    new = [d for d in DIRECTORS if d != old][0]
    # A long streaming completion through the VIP, in flight while the master's keepalived stops.
    stream = subprocess.Popen(["podman", "exec", "lvs-client", "curl", "-sS", "-N", "--max-time", "300", "--cacert",
                               CERTS + "/ca.crt", "--cert", CERTS + "/molecule-client.crt", "--key",
                               CERTS + "/molecule-client.key", "-H", "Content-Type: application/json", "-d",
                               json.dumps({"model": "tiny-llama", "prompt": "failover", "max_tokens": 400,
                                           "stream": True, "ignore_eos": True}),
                               "https://%s:8000/v1/completions" % VIP], stdout=subprocess.PIPE, text=True)
    time.sleep(3)
    assert stream.poll() is None, "the stream ended before the failover"
    try:
        stopped = time.monotonic()
        ssh(old, "systemctl stop keepalived")
        assert wait_for(lambda: "inet %s/32" % VIP in ssh(new, "ip -4 address show dev eth0"), timeout=10, step=0.2)
        moved = time.monotonic() - stopped
        out, _err = stream.communicate(timeout=300)
    finally:
        ssh(old, "systemctl start keepalived")
    assert moved <= 3, moved
    assert stream.returncode == 0 and out.rstrip().endswith("data: [DONE]"), out[-500:]
    chunks = [line for line in out.splitlines() if line.startswith("data: {")]
    assert len(chunks) >= 400
    assert wait_for(full_weight_everywhere, timeout=60, step=2)


def test_a_rolling_upgrade_under_load_fails_no_request():
    with open(os.path.join(SCENARIO, "molecule.yml")) as f:
        config = yaml.safe_load(os.path.expandvars(f.read()))
    instances = config["provisioner"]["inventory"]["group_vars"]["vllm_nodes"]["vllm_instances"]
    for instance in instances:
        instance["max_num_seqs"] = 6  # an engine-argument change: every instance restarts
    load = Load(rate=20, seconds=900)
    started = time.monotonic()
    output = play(os.path.join(PROJECT, "playbooks", "rolling_upgrade.yml"), "-e",
                  json.dumps({"vllm_instances": instances}))
    upgrade = time.monotonic() - started
    result = load.stop()
    print("rolling upgrade: %.0f s, %d requests at %.1f/s, failures %s" % (
        upgrade, result["requests"], result["rate"], result["failures"]))
    assert "changed=" in output
    assert result["failures"] == [] and result["rate"] >= 18, result
    for name in NODES:
        unit = node(name).file("/etc/systemd/system/vllm-tiny.service").content_string
        assert "--max-num-seqs 6" in unit or "--max-num-seqs=6" in unit
        assert not node(name).file("/var/lib/llmops-vllm/edge/draining").exists
    assert full_weight_everywhere()
