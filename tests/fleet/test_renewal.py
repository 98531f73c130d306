"""Certificates over a year, on the whole fleet: the fleet CA is rolled over (playbooks/ca_rollover.yml) in its three
stages, each a pki-only run under a steady load through the VIP from a client that reads its trust bundle and
certificate anew for each request, as docs/edge.md asks of applications. No request may fail. Each request is
GET /v1/models on a new TLS 1.3 connection with the client's certificate, which the edge answers itself: everything
a certificate change can break, without the inference that would take the CPU this machine's emulated directors and
the pki runs need (at 12 completions/s stage issue took 9 minutes, against about 3).

- add (3 requests/s): every host trusts both CAs; a client with a certificate of the new CA works from here on.
- issue (12 requests/s): every certificate of every host is issued anew from the new CA, and every client
  certificate a daemon presents is revoked (key_compromise) in the same run. Every key of a revoked certificate is
  new, and every daemon uses its new files: the servers (each edge, the log sink) serve the new serials, and the
  clients (keepalived's checks and the breaker on the directors, Prometheus and its blackbox exporter's TLS probes)
  keep reaching the edges, which refuse their old serials from the run's end, and the probes see the new
  certificates served. Filebeat's sink does not check a CRL: Filebeat restarted after its new certificate and ships
  again. A client with a certificate of the old CA still works.
- retire (3 requests/s): the old CA leaves every bundle; its certificates are refused, the new CA's work on.

Add and retire run under a lighter load than issue, the run that changes every file. The tests run in this order,
each on the state the one before left.

They run with the fleet's deadline tests (marker `alone`), after test_lvs.py: under a steady load, a director that
lost its checks would show as failed requests within seconds. Their load leaves more of IPVS's closing entries on one
node than the other (they count in wlc's choice for two minutes), which test_lvs.py's check that ten requests reach
both nodes would trip on.
"""

import datetime
import json
import pathlib
import re
import shlex
import subprocess
import sys
import time

import pytest
from conftest import CA_PASSPHRASE, MONITORING, NODES, PROJECT, get_host, play, wait_for

sys.path.insert(0, str(PROJECT / "lab"))
sys.path.insert(0, str(PROJECT / "scripts"))
from fleet import fast_run  # noqa: E402
from lvs_probe import (CA, CA_BUNDLE, CERT, DIRECTORS, KEY, PKI, VIP, ReloadingLoad,  # noqa: E402
                       full_weight_everywhere, ssh)

pytestmark = pytest.mark.alone

PKI_DIR = "/etc/llmops-vllm/pki"
# The certificates of each host, and the client certificate its daemon presents (revoked by the run).
CERTIFICATES = dict([(name, ["server", "filebeat"]) for name in NODES] + [(MONITORING, ["server", "prometheus"])]
                    + [(name, ["lb-health-checker"]) for name in DIRECTORS])
IN_USE = dict([(name, "filebeat") for name in NODES] + [(MONITORING, "prometheus")]
              + [(name, "lb-health-checker") for name in DIRECTORS])
SINK_PORT = 6379
NODES_LIST = sorted(NODES)
# The lab CA's files on this machine.
LAB_PKI = pathlib.Path(PKI)


def on(host, command):
    """A shell command's output on a lab host (the directors over ssh)."""
    return ssh(host, command) if host in DIRECTORS else get_host(host).check_output(command)


def serial(host, name):
    return on(host, "openssl x509 -noout -serial -in %s/%s.crt" % (PKI_DIR, name)).strip().split("=")[1]


def public_key(host, name):
    return on(host, "openssl pkey -pubout -in %s/%s.key" % (PKI_DIR, name)).strip()


def address(host):
    return get_host(host).check_output("ip -4 -o route get 1.1.1.1 | sed -E 's/.* src ([0-9.]+).*/\\1/'").strip()


def served_serial(host, port):
    """The serial of the certificate a server serves, from this machine with the lab client's certificate."""
    hello = subprocess.run(["openssl", "s_client", "-connect", "%s:%d" % (address(host), port), "-tls1_3",
                            "-CAfile", CA, "-cert", CERT, "-key", KEY], input="", capture_output=True, text=True,
                           timeout=30, check=False).stdout
    return subprocess.run(["openssl", "x509", "-noout", "-serial"], input=hello, capture_output=True, text=True,
                          check=True).stdout.strip().split("=")[1]


def epoch(stamp):
    """Seconds since the epoch of an RFC 3339 UTC time (Prometheus' nanoseconds and Filebeat's milliseconds)."""
    whole, fraction = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(?:Z|[+]00:00)$", stamp).groups()
    start = datetime.datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    return start.timestamp() + float(fraction or 0)


def prometheus_targets():
    """Prometheus' active targets on the monitoring host."""
    script = ("import urllib.request; "
              "print(urllib.request.urlopen('http://127.0.0.1:9090/api/v1/targets', timeout=10).read().decode())")
    return json.loads(on(MONITORING, "python3 -c \"%s\"" % script))["data"]["activeTargets"]


def edge_targets_scraped_since(moment):
    """Whether every target behind an edge (mTLS) was scraped after moment, successfully."""
    targets = [t for t in prometheus_targets() if t["scrapeUrl"].startswith("https://")]
    return bool(targets) and all(t["health"] == "up" and epoch(t["lastScrape"]) > moment for t in targets)


def prometheus_query(expr):
    script = ("import sys, urllib.parse, urllib.request; print(urllib.request.urlopen("
              "'http://127.0.0.1:9090/api/v1/query?query=' + urllib.parse.quote(sys.argv[1]), timeout=10)"
              ".read().decode())")
    return json.loads(on(MONITORING, "python3 -c %s %s" % (shlex.quote(script), shlex.quote(expr))))["data"]["result"]


def probes_serve_the_new_files_since(moment, fingerprints):
    """Whether every TLS probe (the blackbox exporter, Prometheus' new client certificate) passed after moment and
    saw one of the new certificates, which the pki role's textfile lists too (the served-certificate alert's rule)."""
    targets = [t for t in prometheus_targets() if t["labels"]["job"] == "tls"]
    rows = prometheus_query('probe_ssl_last_chain_info{job="tls"} and on (instance) (probe_success{job="tls"} == 1)')
    return (bool(targets) and all(t["health"] == "up" and epoch(t["lastScrape"]) > moment for t in targets)
            and len(rows) == len(targets) and {r["metric"]["fingerprint_sha256"] for r in rows} <= fingerprints
            and not prometheus_query('probe_ssl_last_chain_info{job="tls"} unless on (fingerprint_sha256) '
                                     'llmops_certificate_info'))


def fingerprint(host, name):
    out = on(host, "openssl x509 -noout -fingerprint -sha256 -in %s/%s.crt" % (PKI_DIR, name))
    return out.strip().split("=", 1)[1].replace(":", "").lower()


def breaker_reads_since(director, moment):
    """Whether the director's breaker read every edge's counters (mTLS) in a round after moment."""
    textfile = "/var/lib/prometheus/node-exporter/llmops_breaker.prom"
    written = float(ssh(director, "stat -c %%Y %s" % textfile))
    lines = [line for line in ssh(director, "cat %s" % textfile).splitlines()
             if line.startswith("llmops_breaker_source_up{")]
    return written > moment and len(lines) == len(NODES) and all(line.endswith(" 1") for line in lines)


def filebeat_started(node):
    """When the node's Filebeat last started (epoch seconds)."""
    return float(on(node, "date -d \"$(systemctl show -p ActiveEnterTimestamp --value filebeat.service)\" +%s"))


def sink_has_lines_since(node, moment):
    """Whether the sink holds an audit line the node's Filebeat shipped after moment."""
    redis = ("redis-cli --tls --cacert {d}/ca.crt --cert {d}/prometheus.crt --key {d}/prometheus.key -h {a} -p {p} "
             "--raw lrange llmops-vllm -400 -1").format(d=PKI_DIR, a=address(MONITORING), p=SINK_PORT)
    for line in on(MONITORING, redis).splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("llmops", {}).get("node") == node and epoch(event["@timestamp"]) > moment:
                return True
    return False


def rollover(stage, rate, **extra):
    """One stage of playbooks/ca_rollover.yml on the lab under a load at RATE that follows the rollover: (its
    output, the load's summary after 15 s more of it). Its output is kept in the test logs."""
    load = ReloadingLoad(rate=rate, seconds=1200)
    try:
        time.sleep(3)
        output = play("playbooks/ca_rollover.yml", "-e", json.dumps(dict(extra, ca_rollover_stage=stage)),
                      env=fast_run())
        (PROJECT / ".cache" / "test-logs").mkdir(parents=True, exist_ok=True)
        (PROJECT / ".cache" / "test-logs" / ("ca-rollover-%s.log" % stage)).write_text(output)
        # Health checks, breaker rounds and scrapes after the last reload, under the same load.
        time.sleep(15)
    finally:
        result = load.stop()
    print("CA rollover, stage %s under load: %d requests at %.1f/s, failures %s"
          % (stage, result["requests"], result["rate"], result["failures"]))
    assert result["failures"] == [] and result["rate"] >= rate * 0.8, result
    return output


def cas_trusted(host):
    """How many CA certificates the host's trust bundle holds."""
    return int(on(host, "grep -c 'BEGIN CERTIFICATE' %s/ca.crt" % PKI_DIR))


def issuer(host, name):
    return on(host, "openssl x509 -noout -issuer -nameopt RFC2253 -in %s/%s.crt" % (PKI_DIR, name)).strip()


def status_with(certificate, key):
    """The HTTP status of one completion through the VIP with this client certificate (0: no answer)."""
    body = json.dumps({"model": "tiny-llama", "prompt": "ca", "max_tokens": 2, "ignore_eos": True})
    result = subprocess.run(["curl", "-sS", "--noproxy", "*", "--max-time", "60", "--cacert", CA_BUNDLE, "--cert",
                             str(certificate), "--key", str(key), "-o", "/dev/null", "-w", "%{http_code}",
                             "-H", "Content-Type: application/json", "-d", body,
                             "https://%s:8000/v1/completions" % VIP],
                            capture_output=True, text=True, check=False)
    return int(result.stdout or 0)


@pytest.fixture(scope="module")
def clients(tmp_path_factory):
    """The lab client's certificate and key of the old CA (copied before stage issue replaces them), and one of the
    new CA (signed after stage add)."""
    return {"directory": tmp_path_factory.mktemp("ca-rollover")}


def new_ca_client(directory):
    """A client certificate of the next CA (stage add made it), signed here with its key: as an application that
    got one before stage issue would hold."""
    key, csr, crt = (directory / "next-client.key", directory / "next-client.csr", directory / "next-client.crt")
    subprocess.run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", str(key), "-subj", "/O=llmops.vllm/OU=applications/CN=next-client", "-out", str(csr)],
                   check=True, capture_output=True)
    extensions = directory / "client.ext"
    extensions.write_text("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                          "extendedKeyUsage=clientAuth\n")
    subprocess.run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(LAB_PKI / "ca-next.crt"), "-CAkey",
                    str(LAB_PKI / "ca-next.key"), "-passin", "pass:%s" % CA_PASSPHRASE, "-CAcreateserial",
                    "-CAserial", str(directory / "next.srl"), "-days", "2", "-extfile", str(extensions),
                    "-out", str(crt)], check=True, capture_output=True)
    return crt, key


def test_stage_add_makes_every_host_trust_the_new_ca_under_load(clients):
    old = clients["directory"] / "old-client.crt", clients["directory"] / "old-client.key"
    for copy, source in zip(old, (CERT, KEY)):
        copy.write_bytes(pathlib.Path(source).read_bytes())
    clients["old"], clients["old_issuer"] = old, issuer(NODES_LIST[0], "server")
    rollover("add", rate=3)
    assert all(cas_trusted(host) == 2 for host in CERTIFICATES)
    clients["new"] = new_ca_client(clients["directory"])
    assert status_with(*clients["new"]) == 200 and status_with(*clients["old"]) == 200


def test_stage_issue_reissues_every_certificate_and_revokes_those_in_use_under_full_load(clients):
    before = {(host, name): (serial(host, name), public_key(host, name))
              for host, names in CERTIFICATES.items() for name in names}
    revoked = [{"serial": before[(host, name)][0], "reason": "key_compromise"} for host, name in IN_USE.items()]
    output = rollover("issue", rate=12, ca_rollover_retire_after=datetime.date.today().isoformat(),
                      pki_revoked=revoked)
    ended = time.time() - 15
    # Every certificate is new, and the new CA's; a revoked one for a new key.
    new_issuer = issuer(NODES_LIST[0], "server")
    assert new_issuer != clients["old_issuer"] and all(cas_trusted(host) == 2 for host in CERTIFICATES)
    for (host, name), (old_serial, old_key) in before.items():
        assert serial(host, name) != old_serial and issuer(host, name) == new_issuer, (host, name)
        assert (public_key(host, name) != old_key) == (IN_USE[host] == name), (host, name)
    # Only the pki stage and the consumers' pickups ran; the clients' handlers before nginx's.
    handlers = [line.split("[", 1)[1].split("]")[0] for line in output.splitlines()
                if line.startswith("RUNNING HANDLER [")]
    assert handlers.index("llmops.vllm.lvs_director : Reload keepalived") < handlers.index(
        "llmops.vllm.edge : Reload nginx"), handlers
    assert {"llmops.vllm.filebeat : Restart filebeat", "llmops.vllm.lvs_director : Reload llmops-breaker",
            "llmops.vllm.monitoring : Reload prometheus", "llmops.vllm.log_sink : Reload redis"} <= set(handlers)
    applied = output.split("PLAY [Apply the stages to the fleet]")[1].split("PLAY [Summarise the run]")[0]
    roles = {line.split("[llmops.vllm.")[1].split(" :")[0] for line in applied.splitlines()
             if line.startswith("TASK [llmops.vllm.")}
    assert roles == {"pki", "filebeat", "lvs_director", "monitoring", "log_sink", "edge"}, roles
    assert "TASK [llmops.vllm.edge : Write nginx.conf]" not in applied
    # The servers serve the new certificates.
    for host in list(NODES) + [MONITORING]:
        port = SINK_PORT if host == MONITORING else 8000
        assert served_serial(host, port) == serial(host, "server"), host
    # The clients present theirs: the edges refuse the old serials, yet the checks, the breaker and the scrapes pass.
    for node in NODES:
        crl = on(node, "openssl crl -noout -text -in %s/ca.crl" % PKI_DIR)
        assert all("Serial Number: %s" % entry["serial"] in crl for entry in revoked), crl
    assert full_weight_everywhere()
    for director in DIRECTORS:
        assert wait_for(lambda d=director: breaker_reads_since(d, ended), timeout=60, step=3), director
    assert wait_for(lambda: edge_targets_scraped_since(ended), timeout=60, step=3), prometheus_targets()
    # What the alerts watch is what is served: every probe (edges, VIP, Redis) sees a new certificate.
    served = {fingerprint(host, "server") for host in list(NODES) + [MONITORING]}
    assert wait_for(lambda: probes_serve_the_new_files_since(ended, served), timeout=60, step=3), \
        prometheus_query('probe_ssl_last_chain_info{job="tls"} or probe_success{job="tls"}')
    # Filebeat: restarted with its new certificate, and shipping again.
    for node in NODES:
        assert filebeat_started(node) >= float(on(node, "stat -c %%Y %s/filebeat.crt" % PKI_DIR)), node
        assert wait_for(lambda n=node: sink_has_lines_since(n, ended), timeout=90, step=5), node
    # Until stage retire, both CAs' clients work.
    assert status_with(*clients["new"]) == 200 and status_with(*clients["old"]) == 200


def test_stage_retire_refuses_the_old_ca_under_load(clients):
    rollover("retire", rate=3)
    assert all(cas_trusted(host) == 1 for host in CERTIFICATES)
    assert status_with(*clients["old"]) == 400 and status_with(*clients["new"]) == 200
    assert not (LAB_PKI / "ca-previous.key").exists() and list((LAB_PKI / "retired").glob("*/ca-previous.crt"))
    # The daemons that check the edges with the new bundle keep doing so.
    assert full_weight_everywhere()
    moment = time.time()
    for director in DIRECTORS:
        assert wait_for(lambda d=director: breaker_reads_since(d, moment), timeout=60, step=3), director
    assert wait_for(lambda: edge_targets_scraped_since(moment), timeout=60, step=3), prometheus_targets()
