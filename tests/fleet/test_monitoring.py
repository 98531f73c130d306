"""Verify the monitoring role against the lab's real daemons: Prometheus and Alertmanager on lab-mon1 scrape both
nodes' vLLM CPU instances through their TLS edges with the Prometheus client certificate; Filebeat on the nodes
ships to the Redis log sink on lab-mon1.

The tests run in file order: the vLLM targets up, the TLS probes (every endpoint serves its host's certificate file;
the master director holds no probe connection open; NODE's fingerprint changed in its textfile makes the served-
certificate alert pending), traffic, series and recording rules, the name guard, the dashboards' panels (the
directors' breaker panel included), log shipping through NODE (audit lines, the sink down under load, a killed
engine's lines tagged), then the alert (NODE's instance stopped). The lab-wide checks (every job's instances, the
directors' series, both nodes' audit lines) are test_observability.py's.

What they change, and how they put it back:
- NODE's pki textfile: its fingerprint put back in a finally, and the alert gone before the test ends;
- the sink down for 30 s: Redis started again in a finally; the test then waits until every node's Filebeat has
  shipped a new audit line;
- a dead engine: systemd restarts NODE's instance (restarted by hand if it does not); the test waits until it
  serves, NODE's /health answers 200 and every director has it back at full weight;
- the alert: NODE's instance stopped, then started again in a finally, with the same wait.
"""

import datetime
import json
import re
import shlex
import time

import pytest
import yaml
from conftest import MONITORING, NODES, PROJECT, VIP, get_host, lvs_probe, wait_for

NODE = "lab-node1"  # the node the log and alert tests use
RULES = "/etc/prometheus/rules"
# The alert pack's promtool cases (tests/unit/roles/monitoring): their input series must be real names too.
ALERT_PACK_TESTS = PROJECT / "tests" / "unit" / "roles" / "monitoring" / "alert_pack.test.yml"
DASHBOARDS = "/var/lib/llmops-vllm/dashboards"
PKI = "/etc/llmops-vllm/pki"
# The names the installed vLLM exports (its `vllm:` series and its HTTP instrumentator's), the fleet's own, the
# directors' breaker's and the blackbox exporter's.
CHECKED = re.compile(r"\b(vllm:[a-z0-9_:]+|http_request[a-z0-9_]*|llmops_edge_[a-z0-9_]+|llmops_breaker_[a-z0-9_]+"
                     r"|node_[a-z0-9_]+|probe_[a-z0-9_]+|llmops_certificate_[a-z0-9_]+|llmops_crl_[a-z0-9_]+)\b")
# Not in the lab: no GPU (dcgm-exporter, the GPU facts' textfile).
ABSENT_HERE = re.compile(r"^(DCGM_|llmops_gpu_)")
ADDRESS = "ip -4 -o route get 1.1.1.1 | sed -E 's/.* src ([0-9.]+).*/\\1/'"


@pytest.fixture(scope="module")
def prom():
    return get_host(MONITORING)


@pytest.fixture(scope="module")
def node():
    return get_host(NODE)


def api(prom, path, **params):
    """GET Prometheus' (9090) or Alertmanager's (9093) HTTP API on the monitoring host."""
    script = ("import json, sys, urllib.parse, urllib.request; "
              "p = dict(a.split('=', 1) for a in sys.argv[2:]); "
              "u = sys.argv[1] + ('?' + urllib.parse.urlencode(p) if p else ''); "
              "print(urllib.request.urlopen(u, timeout=10).read().decode())")
    args = " ".join(shlex.quote("%s=%s" % (k, v)) for k, v in params.items())
    return json.loads(prom.check_output("python3 -c %s %s %s" % (shlex.quote(script), shlex.quote(path), args)))


def query(prom, expr):
    return api(prom, "http://127.0.0.1:9090/api/v1/query", query=expr)["data"]["result"]


def vllm_targets(prom):
    return [t for t in api(prom, "http://127.0.0.1:9090/api/v1/targets")["data"]["activeTargets"]
            if t["labels"]["job"] == "vllm"]


def test_the_configuration_passes_promtool_with_its_files(prom):
    # Not --syntax-only (as the role's validate): the client certificate, key and CA exist and load.
    prom.check_output("promtool check config /etc/prometheus/prometheus.yml")
    prom.check_output("promtool check rules %s/*.yml" % RULES)
    prom.check_output("amtool check-config /etc/prometheus/alertmanager.yml")
    # A receiver's secrets: Alertmanager's user only.
    config = prom.file("/etc/prometheus/alertmanager.yml")
    assert (config.user, config.group, config.mode) == ("root", "prometheus", 0o640)
    assert prom.run("runuser -u nobody -- cat /etc/prometheus/alertmanager.yml").rc != 0


def test_every_target_is_up_through_the_edges_mtls(prom):
    def all_up():
        targets = api(prom, "http://127.0.0.1:9090/api/v1/targets")["data"]["activeTargets"]
        jobs = dict((t["labels"]["job"], t) for t in targets)
        return set(jobs) >= {"vllm", "llmops_edge", "node", "prometheus", "alertmanager", "tls"} and \
            all(t["health"] == "up" for t in targets)
    assert wait_for(all_up, timeout=120, step=3), api(prom, "http://127.0.0.1:9090/api/v1/targets")
    vllm = vllm_targets(prom)
    assert len(vllm) == len(NODES)  # one instance per node
    assert sorted(t["labels"]["instance"] for t in vllm) == sorted("%s/tiny" % name for name in NODES)
    for target in vllm:
        assert target["scrapeUrl"].startswith("https://") and target["scrapeUrl"].endswith("/instances/tiny/metrics")
        assert target["labels"]["model"] == "tiny-llama"


def test_a_scrape_without_the_client_certificate_is_refused(prom):
    script = ("import ssl, sys, urllib.request; c = ssl.create_default_context(cafile=sys.argv[2]); "
              "c.check_hostname = False\n"
              "try:\n urllib.request.urlopen(sys.argv[1], context=c, timeout=10); print('open')\n"
              "except Exception as e:\n print(type(e).__name__, getattr(e, 'code', ''))")
    for url in [t["scrapeUrl"] for t in vllm_targets(prom)]:
        out = prom.check_output("python3 -c %s %s %s/ca.crt" % (shlex.quote(script), shlex.quote(url), PKI))
        assert out != "open", (url, out)


# The TLS probes: what the served-certificate alerts watch.

TEXTFILE = "/var/lib/prometheus/node-exporter/llmops_pki.prom"
NOT_ON_DISK = 'probe_ssl_last_chain_info{job="tls"} unless on (fingerprint_sha256) llmops_certificate_info'


def fingerprint(host, path="%s/server.crt" % PKI):
    """A certificate file's SHA-256 fingerprint as the blackbox exporter prints a served one."""
    out = host.check_output("openssl x509 -noout -fingerprint -sha256 -in %s" % path)
    return out.split("=", 1)[1].replace(":", "").lower()


def tls_targets(prom):
    return json.loads(prom.file("/etc/prometheus/file_sd/llmops-tls.json").content_string)


def test_every_tls_endpoint_serves_the_certificate_on_its_disk(prom):
    targets = tls_targets(prom)
    servers = dict((t["targets"][0], t["labels"]["server"]) for t in targets)
    assert sorted(servers.values()).count("edge") == len(NODES) and "vip" in servers.values(), servers
    assert [e for e, server in servers.items() if server == "log_sink"] == ["%s:6379" % prom.check_output(ADDRESS)]

    def probed():
        rows = query(prom, 'probe_success{job="tls"} == 1')
        return len(rows) == len(targets) and not query(prom, NOT_ON_DISK)
    assert wait_for(probed, timeout=120, step=3), (query(prom, 'probe_success{job="tls"}'), query(prom, NOT_ON_DISK))
    served = dict((r["metric"]["instance"], r["metric"]["fingerprint_sha256"])
                  for r in query(prom, 'probe_ssl_last_chain_info{job="tls"}'))
    files = dict((name, fingerprint(get_host(name))) for name in list(NODES) + [MONITORING])
    for target in targets:
        endpoint, labels = target["targets"][0], target["labels"]
        expected = list(files.values()) if labels["server"] == "vip" else [files[labels["node"]]]
        assert served[endpoint] in expected, (endpoint, labels)


def test_the_vip_probes_close_their_connections_where_the_director_sees_it(prom):
    """A direct-routing director sees only the client's packets: a probe connection that the edge ends stays
    ESTABLISHED in its table for the whole TCP timeout (15 min), and wlc counts it as 256 connections, so new clients
    all go to the other node. The edge probe keeps the connection alive and closes it itself."""
    director, address = lvs_probe.master(), prom.check_output(ADDRESS)
    timeout = int(lvs_probe.ssh(director, "ipvsadm -L --timeout").split(":")[1].split()[0])

    def probes():
        rows = [line.split() for line in lvs_probe.ssh(director, "ipvsadm -Lnc").splitlines()[2:]]
        return [(state, timeout - int(expire[:2]) * 60 - int(expire[3:]))
                for _tcp, expire, state, source, vip, _real in rows
                if source.startswith(address + ":") and vip.startswith(VIP + ":")]
    assert wait_for(probes, timeout=60, step=1), "no probe of the VIP went through"
    stale = [(state, idle) for state, idle in probes() if state == "ESTABLISHED" and idle > 30]
    assert not stale, "idle probe connections on %s: %s" % (director, stale)


def test_a_served_certificate_that_no_file_holds_makes_its_alert_pending(prom, node):
    """As if NODE's certificate had been renewed on disk and nginx kept the old one: the rule sees it at once."""
    served = fingerprint(node)
    endpoints = [t["targets"][0] for t in tls_targets(prom) if t["labels"].get("node") == NODE]

    def pending():
        rows = query(prom, 'ALERTS{alertname="LlmopsServedCertificateNotOnDisk"}')
        return set(r["metric"]["instance"] for r in rows if r["metric"]["alertstate"] == "pending")

    def swap(old, new):
        node.check_output("sed -i 's/fingerprint_sha256=\"%s\"/fingerprint_sha256=\"%s\"/' %s" % (old, new, TEXTFILE))
    swap(served, "0" * 64)
    try:
        assert wait_for(lambda: set(endpoints) <= pending(), timeout=90, step=3), (endpoints, pending())
        rows = query(prom, NOT_ON_DISK)
        assert {r["metric"]["fingerprint_sha256"] for r in rows} == {served}, rows
    finally:
        swap("0" * 64, served)
    assert wait_for(lambda: not pending(), timeout=90, step=3), pending()


def test_traffic_through_the_edge(prom):
    """Twelve completions through each node's edge with the Prometheus certificate (no API keys in the lab)."""
    for name in NODES:
        assert len(send(prom, 12, 0, "hello", node=name)) == 12


@pytest.mark.parametrize("expr", [
    'vllm:num_requests_running{job="vllm"}',
    'vllm:request_success_total{finished_reason="length"}',
    "vllm_batch_size_current",
    "vllm_pending_requests",
    "llmops:kv_cache_usage:ratio",
    "llmops:e2e_request_latency_seconds:p99_5m",
    "llmops:requests:rate5m > 0",
    'llmops_edge_responses_total{class="2xx"} > 0',
    'node_systemd_unit_state{name="vllm-tiny.service", state="active"} == 1',
    # The pki role's certificate dates, through node exporter's textfile collector: valid, and not yet due for renewal
    # (the lab's certificates last 3 days, renewed within the last 1: inventories/lab/group_vars/all/pki.yml).
    'llmops_certificate_not_after_timestamp_seconds{node="%s", certificate="server"} > time() + 86400 * 1' % NODE,
])
def test_vllm_series_and_the_recording_rules_return_data(prom, expr):
    assert wait_for(lambda: query(prom, expr), timeout=60, step=3), expr


def _names(text):
    return set(m.group(1) for m in CHECKED.finditer(text))


def _rule_exprs(prom):
    for path in prom.check_output("ls %s/*.yml" % RULES).split():
        for group in yaml.safe_load(prom.file(path).content_string)["groups"]:
            for rule in group["rules"]:
                yield rule["expr"]


def test_every_rule_panel_and_test_series_uses_a_name_the_real_scrape_has(prom):
    """The class of bug where vLLM renamed a series (vllm:gpu_cache_usage_perc, vllm:num_preemptions without _total)
    and a rule or a panel went silent: every name in the rules' and the panels' queries, and in the alert pack's test
    series, against the names of a real scrape of this vLLM (and of the directors), not a list."""
    scraped = set(api(prom, "http://127.0.0.1:9090/api/v1/label/__name__/values")["data"])
    assert "vllm:kv_cache_usage_perc" in scraped and "vllm:gpu_cache_usage_perc" not in scraped
    queries = list(_rule_exprs(prom)) + [expr for _uid, _title, expr in _dashboard_queries(prom)]
    used = set().union(*(_names(expr) for expr in queries))
    assert "vllm:num_requests_running" in used and "vllm:e2e_request_latency_seconds_bucket" in used
    assert "llmops_breaker_state" in used
    missing = sorted(name for name in used if name not in scraped and not ABSENT_HERE.match(name))
    assert not missing, "used by a rule or a panel, but not exported: %s" % missing
    cases = yaml.safe_load(ALERT_PACK_TESTS.read_text())
    series = set(re.match(r"[^{]+", s["series"]).group(0) for t in cases["tests"] for s in t["input_series"])
    missing = sorted(name for name in series if _names(name) and name not in scraped)
    assert not missing, "alert pack test series that this vLLM does not export: %s" % missing


def _dashboard_queries(prom):
    for path in prom.check_output("ls %s/*.json" % DASHBOARDS).split():
        dashboard = json.loads(prom.file(path).content_string)
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                yield dashboard["uid"], panel["title"], target["expr"]


def test_every_dashboard_panel_returns_data(prom):
    """Variables as Grafana's All (.+); the GPU panels have no source in the lab (no GPU). The breaker's panel reads
    the directors' series."""
    empty, checked = [], set()
    for uid, title, expr in _dashboard_queries(prom):
        if ABSENT_HERE.search(expr) or re.search(r"\b(nv_gpu_utilization|DCGM_\w+)\b", expr):
            continue
        checked.add(expr)
        concrete = re.sub(r"\$(model|node|instance)\b", ".+", expr)
        # 90 s: a scrape that times out (two busy lanes on 2 CPUs) leaves an instant gauge stale until the next one.
        if not wait_for(lambda expr=concrete: query(prom, expr), timeout=90, step=3):
            empty.append("%s / %s: %s" % (uid, title, expr))
    assert len(checked) >= 16
    assert any("llmops_breaker_state" in expr for expr in checked)
    assert not empty, empty


# Log shipping: Filebeat on the nodes, the Redis log sink on the monitoring host.
AUDIT_FIELDS = {"time", "msec", "request_id", "remote_addr", "tls", "client_subject", "client_serial", "client_verify",
                "api_key", "model", "method", "path", "status", "request_bytes", "response_bytes", "request_time",
                "upstream_time", "upstream", "instance", "prompt_tokens", "completion_tokens", "fault"}
CANARY = "filebeat-canary-51c9: this prompt must never reach the log sink"
# Sends completions through the edge: argv url, ca, cert, key, count, seconds between two, prompt; prints each
# answer's X-Request-Id. It reads each answer whole, as a client does: one that hangs up after the headers leaves
# the edge without the usage, and the audit line without tokens (null, which Filebeat drops; CI at 4666b7b).
SENDER = """import json, ssl, sys, time, urllib.request
c = ssl.create_default_context(cafile=sys.argv[2])
c.check_hostname = False
c.load_cert_chain(sys.argv[3], sys.argv[4])
body = json.dumps({'model': 'tiny-llama', 'prompt': sys.argv[7], 'max_tokens': 1}).encode()
for i in range(int(sys.argv[5])):
    r = urllib.request.Request(sys.argv[1] + '/v1/completions', body, {'Content-Type': 'application/json'})
    with urllib.request.urlopen(r, context=c, timeout=60) as answer:
        answer.read()
        print(answer.headers['X-Request-Id'], flush=True)
    time.sleep(float(sys.argv[6]))
"""


def edge_url(prom, node=NODE):
    """The edge of a node, as Prometheus scrapes it."""
    return [t["scrapeUrl"] for t in vllm_targets(prom)
            if t["labels"]["instance"] == "%s/tiny" % node][0].split("/instances/")[0]


def send(prom, count, pause, prompt, background=None, node=NODE):
    command = "python3 -c %s %s %s/ca.crt %s/prometheus.crt %s/prometheus.key %d %s %s" % (
        shlex.quote(SENDER), shlex.quote(edge_url(prom, node)), PKI, PKI, PKI, count, pause, shlex.quote(prompt))
    if background:
        prom.check_output("nohup sh -c %s >%s 2>&1 &" % (shlex.quote(command), background))
        return None
    return prom.check_output(command).split()


def sink(prom, command):
    """A redis-cli command to the sink, over TLS with the Prometheus client certificate, then a shell pipe."""
    return prom.check_output(
        "redis-cli --tls --cacert %s/ca.crt --cert %s/prometheus.crt --key %s/prometheus.key -h $(%s) -p 6379 "
        "--raw %s" % (PKI, PKI, PKI, ADDRESS, command))


def sink_events(prom, containing):
    """The events in the sink's list whose line contains a string (kept on the monitoring host: by now the list
    holds every verifier's traffic)."""
    out = sink(prom, "lrange llmops-vllm 0 -1 | grep -F -- %s || true" % shlex.quote(containing))
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def audit_events(prom, ids):
    return [e for e in sink_events(prom, '"edge_audit"')
            if e.get("llmops", {}).get("log") == "edge_audit" and e.get("request_id") in ids]


def test_audit_lines_reach_the_sink_whole_and_without_prompt_text(prom):
    ids = set(send(prom, 5, 0, CANARY))
    assert len(ids) == 5
    assert wait_for(lambda: len(audit_events(prom, ids)) == 5, timeout=60, step=2), len(audit_events(prom, ids))
    for event in audit_events(prom, ids):
        assert set(event) >= AUDIT_FIELDS, AUDIT_FIELDS - set(event)
        assert event["path"] == "/v1/completions" and event["status"] == 200 and event["model"] == "tiny-llama"
        assert event["completion_tokens"] == 1 and event["prompt_tokens"] > 0
        assert "OU=prometheus" in event["client_subject"]
        assert event["llmops"]["node"] == NODE
    assert sink(prom, "lrange llmops-vllm 0 -1 | grep -c filebeat-canary-51c9 || true") == "0"


def every_filebeat_ships(prom):
    """Whether a new audit line of each node reaches the sink: Filebeat ships again everywhere."""
    sent = {name: set(send(prom, 1, 0, "shipping again", node=name)) for name in NODES}
    return all(wait_for(lambda ids=ids: len(audit_events(prom, ids)) == 1, timeout=120, step=3)
               for ids in sent.values())


def test_no_line_is_lost_while_the_sink_is_down_for_30_s(prom):
    """180 requests, one every 0.22 s or so (about 40 s); the sink stops 5 s in and starts 30 s later. Every request's
    audit line must arrive; at-least-once delivery may repeat some."""
    send(prom, 180, 0.2, "sink outage", background="/tmp/outage-ids")
    time.sleep(5)
    prom.check_output("systemctl stop redis-server.service")
    try:
        time.sleep(30)
    finally:
        prom.check_output("systemctl start redis-server.service")
    assert wait_for(lambda: prom.run("pgrep -f 'sink [o]utage'").rc != 0, timeout=180, step=2)
    ids = set(prom.check_output("cat /tmp/outage-ids").split())
    assert len(ids) == 180, prom.check_output("tail -5 /tmp/outage-ids")
    assert wait_for(lambda: set(e["request_id"] for e in audit_events(prom, ids)) == ids, timeout=120, step=3)
    events = audit_events(prom, ids)
    print("sink down 30 s under load: %d requests, %d audit lines delivered, %d distinct, %d repeated" % (
        len(ids), len(events), len(set(e["request_id"] for e in events)), len(events) - len(ids)))
    # Put back: both nodes' Filebeat ship again (the other node's had nothing to send meanwhile).
    assert every_filebeat_ships(prom)


def node_serves(name):
    """A completion through the node's own edge, and its /health, answer 200 (with the lab client's certificate)."""
    address = NODES[name]
    body = json.dumps({"model": "tiny-llama", "prompt": "back", "max_tokens": 1})
    completion = lvs_probe.curl("-o", "/dev/null", "-w", "%{http_code}", "-H", "Content-Type: application/json",
                                "-d", body, "https://%s:8000/v1/completions" % address, timeout=30)
    health = lvs_probe.curl("-o", "/dev/null", "-w", "%{http_code}", "https://%s:8000/health" % address, timeout=10)
    return completion.stdout == "200" and health.stdout == "200"


def wait_until_back(name):
    """The node's instance serves, its /health is 200, and every director has it at full weight again."""
    assert wait_for(lambda: node_serves(name), timeout=600, step=5), "%s does not serve again" % name
    assert wait_for(lvs_probe.full_weight_everywhere, timeout=120, step=3), {
        d: lvs_probe.weights(d) for d in lvs_probe.DIRECTORS}


def test_a_dead_engines_lines_are_shipped_tagged(node, prom):
    """vLLM's engine core killed (a real failure): what the API server logs about it, in vllm-tiny.service's journal,
    reaches the sink tagged engine_died. systemd restarts the unit; the test waits until the node serves again."""
    main = int(node.check_output("systemctl show -P MainPID vllm-tiny.service"))
    children = node.check_output("ps -o pid= --ppid %d" % main).split()
    assert children
    try:
        node.check_output("kill -9 %s" % " ".join(children))

        def shipped():
            return [e for e in sink_events(prom, "engine_died") if e.get("llmops", {}).get("log") == "vllm_journal"
                    and "engine_died" in (e.get("llmops", {}).get("signatures") or [])
                    and e.get("llmops", {}).get("node") == NODE]
        assert wait_for(shipped, timeout=90, step=3)
        event = shipped()[0]
        assert event["systemd"]["unit"] == "vllm-tiny.service" and event["llmops"]["node"] == NODE
        print("engine died; shipped tagged: %s" % event["message"][:200])
    finally:
        # The API server exits when its engine dies, and systemd starts the unit again; if it has not, restart it.
        restarted = wait_for(lambda: node.check_output("systemctl show -P MainPID vllm-tiny.service") not in (
            str(main), "0"), timeout=120, step=3)
        if not restarted:
            node.check_output("systemctl restart vllm-tiny.service")
        wait_until_back(NODE)
    assert restarted, "systemd did not restart vllm-tiny.service after its engine died"


def unix_time(stamp):
    """An RFC 3339 time of Alertmanager's (up to nanoseconds), as a Unix time."""
    return datetime.datetime.fromisoformat(re.sub(r"(\.\d{6})\d+", r"\1", stamp).replace("Z", "+00:00")).timestamp()


def test_an_instance_down_alert_reaches_alertmanager(prom, node):
    stopped = time.time()
    node.check_output("systemctl stop vllm-tiny.service")
    try:
        def fired():
            # This stop's alert, not one left from the dead engine's restart (the containers share this clock).
            alerts = api(prom, "http://127.0.0.1:9093/api/v2/alerts")
            return [a for a in alerts if a["labels"].get("alertname") == "VllmInstanceDown"
                    and a["labels"].get("instance") == "%s/tiny" % NODE
                    and unix_time(a["startsAt"]) >= stopped - 1]
        started = time.monotonic()
        assert wait_for(fired, timeout=120, step=3)
        print("VllmInstanceDown in Alertmanager %.0f s after the stop" % (time.monotonic() - started))
        alert = fired()[0]
        assert alert["labels"]["instance"] == "%s/tiny" % NODE and alert["labels"]["severity"] == "critical"
        assert "diagnose.yml" in alert["annotations"]["runbook"]
    finally:
        node.check_output("systemctl start vllm-tiny.service")
        wait_until_back(NODE)
