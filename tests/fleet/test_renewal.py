"""Certificates over time, on the whole fleet: one pki-only run renews every certificate of every host and revokes
(key_compromise) every client certificate a daemon presents, under a steady load through the VIP.

No request may fail, every key of a revoked certificate is new, and every daemon uses its new files: the servers
(each edge, the log sink) serve the new serials, and the clients (keepalived's checks and the breaker on the
directors, Prometheus and its blackbox exporter's TLS probes) keep reaching the edges, which refuse their old serials
from the run's end, and the probes see the new certificates served. Filebeat's sink does not check a CRL: Filebeat
restarted after its new certificate and ships again.

It runs with the fleet's deadline tests (marker `alone`), after test_lvs.py: under a steady load, a director that
lost its checks would show as failed requests within seconds. Its load leaves more of IPVS's closing entries on one
node than the other (they count in wlc's choice for two minutes), which test_lvs.py's check that ten requests reach
both nodes would trip on.
"""

import datetime
import json
import re
import shlex
import subprocess
import sys
import time

import pytest
from conftest import MONITORING, NODES, PROJECT, get_host, play, wait_for

sys.path.insert(0, str(PROJECT / "lab"))
sys.path.insert(0, str(PROJECT / "scripts"))
from fleet import fast_run  # noqa: E402
from lvs_probe import CA, CERT, DIRECTORS, KEY, Load, full_weight_everywhere, ssh  # noqa: E402

pytestmark = pytest.mark.alone

PKI_DIR = "/etc/llmops-vllm/pki"
# The certificates of each host, and the client certificate its daemon presents (revoked by the run).
CERTIFICATES = dict([(name, ["server", "filebeat"]) for name in NODES] + [(MONITORING, ["server", "prometheus"])]
                    + [(name, ["lb-health-checker"]) for name in DIRECTORS])
IN_USE = dict([(name, "filebeat") for name in NODES] + [(MONITORING, "prometheus")]
              + [(name, "lb-health-checker") for name in DIRECTORS])
SINK_PORT = 6379


def on(host, command):
    """A shell command's output on a lab host (the directors over ssh)."""
    return ssh(host, command) if host in DIRECTORS else get_host(host).check_output(command)


def serial(host, name):
    return on(host, "openssl x509 -noout -serial -in %s/%s.crt" % (PKI_DIR, name)).strip().split("=")[1]


def public_key(host, name):
    return on(host, "openssl pkey -pubout -in %s/%s.key" % (PKI_DIR, name)).strip()


def days_left(host, name):
    end = on(host, "openssl x509 -noout -enddate -in %s/%s.crt" % (PKI_DIR, name)).strip().split("=")[1]
    ends = datetime.datetime.strptime(end, "%b %d %H:%M:%S %Y %Z").replace(tzinfo=datetime.timezone.utc)
    return (ends - datetime.datetime.now(datetime.timezone.utc)).days


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


def test_renewing_every_certificate_and_revoking_those_in_use_under_load_fails_no_request():
    before = {(host, name): (serial(host, name), public_key(host, name))
              for host, names in CERTIFICATES.items() for name in names}
    # Every certificate within the renewal window; the new ones last longer than any of today's.
    window = max(days_left(host, name) for host, name in before) + 1
    revoked = [{"serial": before[(host, name)][0], "reason": "key_compromise"} for host, name in IN_USE.items()]
    load = Load(rate=12, seconds=1200)
    try:
        time.sleep(3)
        output = play("playbooks/site.yml", "-e", json.dumps({
            "llmops_only_stages": ["pki"], "pki_renew_before_days": window,
            "pki_certificate_validity_days": window + 1, "pki_revoked": revoked}), env=fast_run())
        (PROJECT / ".cache" / "test-logs").mkdir(parents=True, exist_ok=True)
        (PROJECT / ".cache" / "test-logs" / "certificates-renewal.log").write_text(output)
        ended = time.time()
        # Health checks, breaker rounds and scrapes after the last reload, under the same load.
        time.sleep(15)
    finally:
        result = load.stop()
    print("renewal of every certificate under load: %d requests at %.1f/s, failures %s"
          % (result["requests"], result["rate"], result["failures"]))
    assert result["failures"] == [] and result["rate"] >= 10, result
    # Every certificate is new; a revoked one for a new key.
    for (host, name), (old_serial, old_key) in before.items():
        assert serial(host, name) != old_serial, (host, name)
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
