"""The lab's LVS front door seen from this machine (the client): the directors' IPVS weights, a steady load at the
VIP, completions with the lab client's certificate. Used by the fleet verifiers (tests/fleet) and bench/lvs_bench.py.

Needs the lab up (make lab). Everything is read from inventories/lab.
"""

import json
import os
import queue
import re
import socket
import subprocess
import sys
import threading
import time

import yaml

PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INVENTORY = os.path.join(PROJECT, "inventories", "lab")
PKI = os.path.join(PROJECT, ".cache", "pki", "lab")
# Every CA the fleet trusts (during a CA rollover, two), as the application clients get them.
CA_BUNDLE = os.path.join(PKI, "clients", "ca.crt")
CA, CERT, KEY = (os.path.join(PKI, "ca.crt"), os.path.join(PKI, "clients", "lab-client.crt"),
                 os.path.join(PKI, "clients", "lab-client.key"))


def _load(*path):
    with open(os.path.join(INVENTORY, *path)) as f:
        return yaml.safe_load(f)


_GROUPS = _load("hosts.yml")["all"]["children"]
NODES = {name: hv["lab_ip"] for name, hv in _GROUPS["vllm_nodes"]["hosts"].items()}
DIRECTORS = {name: hv["lab_ip"] for name, hv in _GROUPS["lvs_directors"]["hosts"].items()}
VIP = _load("group_vars", "all", "service.yml")["vllm_service_vips"][0]
# The passphrase of the lab CA's keys (a production inventory takes its own from the vault).
CA_PASSPHRASE = _load("group_vars", "all", "pki.yml")["pki_ca_privatekey_passphrase"]
SSH_KEY = os.path.join(PROJECT, ".cache", "director-vms", "id_ed25519")
SSH = ["ssh", "-i", SSH_KEY, "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o",
       "LogLevel=ERROR", "-o", "BatchMode=yes"]
FULL = 100
sys.path.insert(0, os.path.join(PROJECT, "plugins", "module_utils"))
from _ipvs import filter_services, parse_listing  # noqa: E402
from _lvs import BREAKER_DEFAULTS  # noqa: E402  (the role's own defaults, not a copy)

BREAKER = dict(BREAKER_DEFAULTS, **_load("group_vars", "lvs_directors.yml").get("lvs_director_breaker", {}))
HALF_OPEN = BREAKER["half_open_weight"]
_HEX_ADDRESS = re.compile(r"\b([0-9A-F]{8}):([0-9A-F]{4})\b")
# The clients' common start: their arguments, and a TLS 1.3 context with the lab client's certificate.
_CLIENT = r"""
import http.client, json, os, ssl, sys, threading, time
ca, cert, key, host, pace, seconds, stop = sys.argv[1:8]
ctx = ssl.create_default_context(cafile=ca)
ctx.minimum_version = ssl.TLSVersion.TLSv1_3
ctx.load_cert_chain(cert, key)
"""
# A context from the files as they are now (ReloadingLoad).
RELOAD = r"""
def fresh():
    context = ssl.create_default_context(cafile=ca)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.load_cert_chain(cert, key)
    return context
"""
# The client: requests to the VIP, a new TLS 1.3 connection with the lab client's certificate for each, at a
# steady rate, for SECONDS or until STOP exists; every answer that is not a 200 completion counts as a failure.
# Prints a JSON summary at the end.
LOAD = _CLIENT + r"""
rate, seconds = float(pace), float(seconds)
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
while time.time() - start < seconds and not os.path.exists(stop):
    thread = threading.Thread(target=one)
    thread.start()
    threads.append(thread)
    time.sleep(max(0.0, start + len(threads) / rate - time.time()))
for thread in threads:
    thread.join()
print(json.dumps({"requests": done[0], "failures": failures, "statuses": statuses,
                  "rate": done[0] / (time.time() - start)}))
"""

# One HTTP/1.1 keep-alive connection to the VIP (TLS 1.3, the lab client's certificate), a completion every INTERVAL
# seconds on the same socket, for SECONDS or until STOP exists; it never reconnects. Prints a JSON summary: the
# requests answered, each failure with its time and error (the first ends it), and the connection's local port.
KEEP_ALIVE = _CLIENT + r"""
interval, seconds = float(pace), float(seconds)
body = json.dumps({"model": "tiny-llama", "prompt": "keep-alive", "max_tokens": 2, "ignore_eos": True})
conn = http.client.HTTPSConnection(host, 8000, context=ctx, timeout=30)
conn.connect()
conn.auto_open = 0
port, done, failures, start = conn.sock.getsockname()[1], 0, [], time.time()
while time.time() - start < seconds and not os.path.exists(stop):
    sent = time.time()
    try:
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read()
        if response.status != 200 or json.loads(data)["usage"]["completion_tokens"] != 2:
            failures.append([round(sent, 2), "HTTP %d" % response.status])
        if response.will_close:
            failures.append([round(sent, 2), "the edge closed the connection"])
            break
    except Exception as e:
        failures.append([round(sent, 2), "%s: %s" % (type(e).__name__, e)])
        break
    done += 1
    time.sleep(max(0.0, sent + interval - time.time()))
print(json.dumps({"requests": done, "failures": failures, "port": port,
                  "seconds": round(time.time() - start, 1)}))
"""


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
    return listing_weights(ssh(director, "ipvsadm -Ln --exact -t %s:8000" % VIP), VIP, 8000)


def ip_vs_weights(table, vip, port):
    """{real server address: weight} of vip:port in the lines of /proc/net/ip_vs: ipvsadm -Ln's text with hexadecimal
    IPv4 addresses, read with the collection's own parser once they are dotted."""
    text = _HEX_ADDRESS.sub(lambda m: "%s:%d" % (socket.inet_ntoa(bytes.fromhex(m.group(1))), int(m.group(2), 16)),
                            "\n".join(table))
    return listing_weights(text, vip, port)


def listing_weights(text, vip, port):
    """{real server address: weight} of TCP vip:port in ipvsadm -Ln's text (the collection's own parser)."""
    services = filter_services(parse_listing(text)["services"], address=vip, port=port, protocol="tcp")
    return {rs["address"]: rs["weight"] for service in services for rs in service["real_servers"]}


class Watch:
    """Samples a director's weights every 0.2 s over one ssh session, each line stamped with this machine's clock;
    it returns once the first sample is in.

    The loop runs on bash's builtins only (mapfile of /proc/net/ip_vs, read -t as the sleep): on an emulated
    director, an ipvsadm and an awk five times a second took CPU from keepalived's checks it was timing."""

    SCRIPT = "exec bash -c 'exec 3<> <(:); while mapfile -t t < /proc/net/ip_vs; do IFS=\"|\"; echo \"${t[*]}\"; " \
             "unset IFS; read -t 0.2 -u 3; done'"

    def __init__(self, director):
        self.samples = []
        self.process = subprocess.Popen(SSH + ["root@" + DIRECTORS[director], self.SCRIPT], stdout=subprocess.PIPE,
                                        text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        # The ssh session to an emulated director takes seconds to open: a sample taken only after an event would
        # time the connection, not the event.
        deadline = time.monotonic() + 60
        while not self.samples:
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.stop()
                raise RuntimeError("no weights from %s within 60 s" % director)
            time.sleep(0.05)

    def _read(self):
        for line in self.process.stdout:
            self.samples.append((time.monotonic(), ip_vs_weights(line.rstrip("\n").split("|"), VIP, 8000)))

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


class Load:
    """A steady load at the VIP from this machine, in the background; .result() waits for its summary."""

    # Every load started, so that a test that failed before stopping its own can have it stopped (stop_all).
    started = []

    # The client's script, its stop file's name, and the CA certificates it trusts.
    SCRIPT, STOP, TRUST = LOAD, "lvs-stop-load", CA

    def __init__(self, rate, seconds):
        self.stop_file = os.path.join(PROJECT, ".cache", self.STOP)
        if os.path.exists(self.stop_file):
            os.unlink(self.stop_file)
        self.process = subprocess.Popen([sys.executable, "-c", self.SCRIPT, self.TRUST, CERT, KEY, VIP, str(rate),
                                         str(seconds), self.stop_file], stdout=subprocess.PIPE, text=True)
        Load.started.append(self)

    @classmethod
    def stop_all(cls):
        """Stop the loads still running (a running one holds the verifier's output open: pytest would wait)."""
        for load in cls.started:
            if load.process.poll() is None:
                load.stop()
        cls.started = []

    def stop(self):
        open(self.stop_file, "w").close()
        return self.result()

    def result(self):
        out, _err = self.process.communicate(timeout=1200)
        return json.loads(out)


class ReloadingLoad(Load):
    """Load as an application that follows the fleet's CA rollover does: each request reads the trust bundle of
    every CA the fleet trusts (the application clients' ca.crt) and the client's certificate and key anew. Each is
    GET /v1/models, which the edge answers itself: a new TLS 1.3 connection with a client certificate through the
    VIP, all that a certificate change can break, without the inference that makes up most of a completion's CPU
    time on this machine."""

    SCRIPT = (LOAD.replace("context=ctx", "context=fresh()").replace("def one():", RELOAD + "def one():")
              .replace('conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})',
                       'conn.request("GET", "/v1/models")')
              .replace('json.loads(data)["usage"]["completion_tokens"] == 2',
                       '"tiny-llama" in [m["id"] for m in json.loads(data)["data"]]'))
    STOP, TRUST = "lvs-stop-reloading-load", CA_BUNDLE


class KeepAlive(Load):
    """One keep-alive connection to the VIP with a request every `interval` seconds, in the background (KEEP_ALIVE);
    .stop() ends it and returns its summary."""

    SCRIPT, STOP = KEEP_ALIVE, "lvs-stop-keep-alive"

    def __init__(self, interval, seconds):
        super().__init__(interval, seconds)


def curl(*args, timeout=300):
    return subprocess.run(["curl", "-sS", "--noproxy", "*", "--max-time", str(timeout), "--cacert", CA, "--cert", CERT,
                           "--key", KEY, *args], capture_output=True, text=True, check=False)


def completion(stream=False, tokens=2):
    body = json.dumps({"model": "tiny-llama", "prompt": "lvs", "max_tokens": tokens, "stream": stream,
                       "ignore_eos": True})
    result = curl("-H", "Content-Type: application/json", "-d", body, "-w", "\n%{http_code}",
                  "https://%s:8000/v1/completions" % VIP)
    return result.stdout


def full_weight_everywhere():
    return all(weights(d) == {a: FULL for a in NODES.values()} for d in DIRECTORS)


def client_address():
    """This machine's address on the lab's network (the podman bridge's gateway)."""
    return subprocess.run(["podman", "network", "inspect", "llmops-lab", "--format",
                           "{{range .Subnets}}{{.Gateway}}{{end}}"], capture_output=True, text=True,
                          check=True).stdout.strip()


def play(playbook, *args):
    """Run a playbook of this repository on the lab's inventory; its output, or RuntimeError with its tail."""
    command = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    result = subprocess.run([command, "-i", INVENTORY, os.path.join(PROJECT, playbook), *args], capture_output=True,
                            text=True, check=False, cwd=PROJECT,
                            env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
                                     ANSIBLE_CONFIG=os.path.join(PROJECT, "ansible.cfg")))
    if result.returncode:
        # Each failed task, wherever it was, then the tail before profile_tasks' recap (the play recap).
        output = result.stdout.split("TASKS RECAP")[0] + result.stderr
        raise RuntimeError("%s failed:\n%s\n...\n%s" % (playbook, "\n".join(failed_tasks(output)), output[-4000:]))
    return result.stdout


def failed_tasks(output):
    """Each failed task's TASK line, then its fatal: or failed: results (cut to 2000 characters each)."""
    task, found = None, []
    for line in output.splitlines():
        if line.startswith("TASK ["):
            task = line.rstrip(" *")
        elif line.startswith(("fatal: [", "failed: [")):
            if task not in found:
                found.append(task or "(no task)")
            found.append(line[:2000])
    return found


def set_fault(hosts, fault):
    """Set the fault injection of some nodes' edge with the game-day playbook (only the fault changes)."""
    play("playbooks/edge_fault.yml", "--limit", ",".join(hosts), "-e", json.dumps({"edge_fault_injection": fault}))


POLL_VIP = ("timeout 60 sh -c 'until ip -4 -o address show dev eth0 | grep -qF \"inet %s/32\"; do sleep 0.05; done; "
            "echo moved'" % VIP)
STOP_KEEPALIVED = "read go || exit 1; echo back; read go || exit 1; systemctl stop keepalived; echo stopped"


class Armed:
    """A script on a director over an ssh session opened beforehand (it prints 'ready' first): go() sends it a line
    for its `read`, and each line it prints is stamped with this machine's clock as it arrives."""

    def __init__(self, director, script):
        self.process = subprocess.Popen(SSH + ["root@" + DIRECTORS[director], "echo ready; " + script],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        if self.expect("ready", 60) is None:
            self.close()
            raise RuntimeError("no ssh session to %s" % director)

    def _read(self):
        for line in self.process.stdout:
            self.lines.put((time.monotonic(), line.strip()))

    def go(self):
        """The stamp of the line sent."""
        stamp = time.monotonic()
        self.process.stdin.write("go\n")
        self.process.stdin.flush()
        return stamp

    def expect(self, text, timeout):
        """The stamp of the next line printed, which must be text; None after timeout."""
        try:
            stamp, line = self.lines.get(timeout=timeout)
        except queue.Empty:
            return None
        if line != text:
            raise RuntimeError("expected %r from the director, got %r" % (text, line))
        return stamp

    def close(self):
        self.process.stdin.close()
        if self.process.poll() is None:
            self.process.terminate()
        self.process.wait(timeout=10)


def measure_failover():
    """Stop keepalived on the master over a session opened beforehand: the seconds until the backup holds the VIP
    (from the stop command's line leaving this machine to the backup's line arriving, so it includes about one ssh
    round trip, measured just before on the same session). keepalived is started again on the old master (it
    stays backup: no preemption)."""
    old = master()
    new = next(d for d in DIRECTORS if d != old)
    poller = stopper = None
    try:
        poller = Armed(new, POLL_VIP)
        stopper = Armed(old, STOP_KEEPALIVED)
        sent = stopper.go()
        round_trip = _since(stopper.expect("back", 30), sent)
        sent = stopper.go()
        moved = _since(poller.expect("moved", 60), sent)
        stopper.expect("stopped", 60)
    finally:
        for session in (poller, stopper):
            if session:
                session.close()
        ssh(old, "systemctl start keepalived")
    return {"from": old, "to": new, "failover_s": moved, "ssh_round_trip_s": round_trip}


def _since(stamp, start):
    return None if stamp is None or start is None else stamp - start
