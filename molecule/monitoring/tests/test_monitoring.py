"""Verify the monitoring role against real daemons: Prometheus and Alertmanager on mon-prometheus scrape a real vLLM
CPU instance through its node's TLS edge with the Prometheus client certificate.

The tests run in file order: targets up, traffic, series and recording rules, the name guard, the dashboards'
panels, log shipping (audit lines, the sink down under load, a killed engine's lines tagged), then the alert (the
instance stopped, then started again).
"""

import json
import os
import pathlib
import re
import shlex
import time

import pytest
import testinfra
import yaml
from conftest import wait_for

RULES = "/etc/prometheus/rules"
# The alert pack's promtool cases (tests/unit/roles/monitoring): their input series must be real names too.
ALERT_PACK_TESTS = pathlib.Path(os.environ["MOLECULE_PROJECT_DIRECTORY"], "tests/unit/roles/monitoring",
                                "alert_pack.test.yml")
DASHBOARDS = "/var/lib/llmops-vllm/dashboards"
PKI = "/etc/llmops-vllm/pki"
# The names the installed vLLM exports (its `vllm:` series and its HTTP instrumentator's), and the fleet's own.
CHECKED = re.compile(r"\b(vllm:[a-z0-9_:]+|http_request[a-z0-9_]*|llmops_edge_[a-z0-9_]+|node_[a-z0-9_]+)\b")
# Not here: no GPU (dcgm-exporter, the GPU facts' textfile), no LVS director (the breaker's textfile).
ABSENT_HERE = re.compile(r"^(DCGM_|llmops_gpu_|llmops_breaker_)")


def get_host(name):
    return testinfra.get_host("podman://" + name)


@pytest.fixture(scope="module")
def prom():
    return get_host("mon-prometheus")


@pytest.fixture(scope="module")
def node():
    return get_host("mon-node")


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


def test_the_configuration_passes_promtool_with_its_files(prom):
    # Not --syntax-only (as the role's validate): the client certificate, key and CA exist and load.
    prom.check_output("promtool check config /etc/prometheus/prometheus.yml")
    prom.check_output("promtool check rules %s/*.yml" % RULES)
    prom.check_output("amtool check-config /etc/prometheus/alertmanager.yml")


def test_every_target_is_up_through_the_edges_mtls(prom):
    def all_up():
        targets = api(prom, "http://127.0.0.1:9090/api/v1/targets")["data"]["activeTargets"]
        jobs = dict((t["labels"]["job"], t) for t in targets)
        return set(jobs) >= {"vllm", "llmops_edge", "node", "prometheus", "alertmanager"} and \
            all(t["health"] == "up" for t in targets)
    assert wait_for(all_up, timeout=120, step=3), api(prom, "http://127.0.0.1:9090/api/v1/targets")
    vllm = [t for t in api(prom, "http://127.0.0.1:9090/api/v1/targets")["data"]["activeTargets"]
            if t["labels"]["job"] == "vllm"]
    assert len(vllm) == 1
    assert vllm[0]["scrapeUrl"].startswith("https://") and vllm[0]["scrapeUrl"].endswith("/instances/tiny/metrics")
    assert vllm[0]["labels"]["instance"] == "mon-node/tiny"
    assert vllm[0]["labels"]["model"] == "tiny-llama"


def test_a_scrape_without_the_client_certificate_is_refused(prom, node):
    url = [t["scrapeUrl"] for t in api(prom, "http://127.0.0.1:9090/api/v1/targets")["data"]["activeTargets"]
           if t["labels"]["job"] == "vllm"][0]
    script = ("import ssl, sys, urllib.request; c = ssl.create_default_context(cafile=sys.argv[2]); "
              "c.check_hostname = False\n"
              "try:\n urllib.request.urlopen(sys.argv[1], context=c, timeout=10); print('open')\n"
              "except Exception as e:\n print(type(e).__name__, getattr(e, 'code', ''))")
    out = prom.check_output("python3 -c %s %s %s/ca.crt" % (shlex.quote(script), shlex.quote(url), PKI))
    assert out != "open", out


def test_traffic_through_the_edge(prom):
    """Twelve completions through the edge with the Prometheus certificate (no API keys are configured here)."""
    assert len(send(prom, 12, 0, "hello")) == 12


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
    # The pki role's certificate dates, through node exporter's textfile collector.
    'llmops_certificate_not_after_timestamp_seconds{node="mon-node", certificate="server"} > time() + 86400 * 300',
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
    series, against the names of a real scrape of this vLLM, not a list."""
    scraped = set(api(prom, "http://127.0.0.1:9090/api/v1/label/__name__/values")["data"])
    assert "vllm:kv_cache_usage_perc" in scraped and "vllm:gpu_cache_usage_perc" not in scraped
    queries = list(_rule_exprs(prom)) + [expr for _uid, _title, expr in _dashboard_queries(prom)]
    used = set().union(*(_names(expr) for expr in queries))
    assert "vllm:num_requests_running" in used and "vllm:e2e_request_latency_seconds_bucket" in used
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
    """Variables as Grafana's All (.+); the GPU and breaker panels have no source here (no GPU, no director)."""
    empty, checked = [], 0
    for uid, title, expr in _dashboard_queries(prom):
        if ABSENT_HERE.search(expr) or re.search(r"\b(nv_gpu_utilization|DCGM_\w+|llmops_breaker_\w+)\b", expr):
            continue
        checked += 1
        concrete = re.sub(r"\$(model|node|instance)\b", ".+", expr)
        # 90 s: a scrape that times out (two busy lanes on 2 CPUs) leaves an instant gauge stale until the next one.
        if not wait_for(lambda expr=concrete: query(prom, expr), timeout=90, step=3):
            empty.append("%s / %s: %s" % (uid, title, expr))
    assert checked >= 15
    assert not empty, empty


# Log shipping: Filebeat on the node, the Redis log sink on the monitoring host.
AUDIT_FIELDS = {"time", "msec", "request_id", "remote_addr", "tls", "client_subject", "client_serial", "client_verify",
                "api_key", "model", "method", "path", "status", "request_bytes", "response_bytes", "request_time",
                "upstream_time", "upstream", "instance", "prompt_tokens", "completion_tokens", "fault"}
CANARY = "filebeat-canary-51c9: this prompt must never reach the log sink"
# Sends completions through the edge: argv url, ca, cert, key, count, seconds between two, prompt; prints each
# answer's X-Request-Id.
SENDER = """import json, ssl, sys, time, urllib.request
c = ssl.create_default_context(cafile=sys.argv[2])
c.check_hostname = False
c.load_cert_chain(sys.argv[3], sys.argv[4])
body = json.dumps({'model': 'tiny-llama', 'prompt': sys.argv[7], 'max_tokens': 1}).encode()
for i in range(int(sys.argv[5])):
    r = urllib.request.Request(sys.argv[1] + '/v1/completions', body, {'Content-Type': 'application/json'})
    with urllib.request.urlopen(r, context=c, timeout=60) as answer:
        print(answer.headers['X-Request-Id'], flush=True)
    time.sleep(float(sys.argv[6]))
"""


def edge_url(prom):
    return [t["scrapeUrl"] for t in api(prom, "http://127.0.0.1:9090/api/v1/targets")["data"]["activeTargets"]
            if t["labels"]["job"] == "vllm"][0].split("/instances/")[0]


def send(prom, count, pause, prompt, background=None):
    command = "python3 -c %s %s %s/ca.crt %s/prometheus.crt %s/prometheus.key %d %s %s" % (
        shlex.quote(SENDER), shlex.quote(edge_url(prom)), PKI, PKI, PKI, count, pause, shlex.quote(prompt))
    if background:
        prom.check_output("nohup sh -c %s >%s 2>&1 &" % (shlex.quote(command), background))
        return None
    return prom.check_output(command).split()


def sink_events(prom):
    """Every event in the sink's list, read over TLS with the Prometheus client certificate."""
    address = prom.check_output("ip -4 -o route get 1.1.1.1 | sed -E 's/.* src ([0-9.]+).*/\\1/'")
    out = prom.check_output(
        "redis-cli --tls --cacert %s/ca.crt --cert %s/prometheus.crt --key %s/prometheus.key -h %s -p 6379 "
        "--raw lrange llmops-vllm 0 -1" % (PKI, PKI, PKI, address))
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def audit_events(prom, ids):
    return [e for e in sink_events(prom)
            if e.get("llmops", {}).get("log") == "edge_audit" and e.get("request_id") in ids]


def test_audit_lines_reach_the_sink_whole_and_without_prompt_text(prom):
    ids = set(send(prom, 5, 0, CANARY))
    assert len(ids) == 5
    assert wait_for(lambda: len(audit_events(prom, ids)) == 5, timeout=60, step=2), len(audit_events(prom, ids))
    for event in audit_events(prom, ids):
        assert set(event) >= AUDIT_FIELDS, AUDIT_FIELDS - set(event)
        assert event["path"] == "/v1/completions" and event["status"] == 200 and event["model"] == "tiny-llama"
        assert "OU=prometheus" in event["client_subject"]
        assert event["llmops"]["node"] == "mon-node"
    assert not [e for e in sink_events(prom) if "filebeat-canary-51c9" in json.dumps(e)]


def test_no_line_is_lost_while_the_sink_is_down_for_30_s(prom):
    """180 requests, one every 0.22 s or so (about 40 s); the sink stops 5 s in and starts 30 s later. Every request's
    audit line must arrive; at-least-once delivery may repeat some."""
    send(prom, 180, 0.2, "sink outage", background="/tmp/outage-ids")
    time.sleep(5)
    prom.check_output("systemctl stop redis-server.service")
    time.sleep(30)
    prom.check_output("systemctl start redis-server.service")
    assert wait_for(lambda: prom.run("pgrep -f 'sink [o]utage'").rc != 0, timeout=180, step=2)
    ids = set(prom.check_output("cat /tmp/outage-ids").split())
    assert len(ids) == 180, prom.check_output("tail -5 /tmp/outage-ids")
    assert wait_for(lambda: set(e["request_id"] for e in audit_events(prom, ids)) == ids, timeout=120, step=3)
    events = audit_events(prom, ids)
    print("sink down 30 s under load: %d requests, %d audit lines delivered, %d distinct, %d repeated" % (
        len(ids), len(events), len(set(e["request_id"] for e in events)), len(events) - len(ids)))


def test_a_dead_engines_lines_are_shipped_tagged(node, prom):
    """vLLM's engine core killed (a real failure): what the API server logs about it, in vllm-tiny.service's journal,
    reaches the sink tagged engine_died. systemd restarts the unit; the next test stops it."""
    main = int(node.check_output("systemctl show -P MainPID vllm-tiny.service"))
    children = node.check_output("ps -o pid= --ppid %d" % main).split()
    assert children
    node.check_output("kill -9 %s" % " ".join(children))

    def shipped():
        return [e for e in sink_events(prom) if e.get("llmops", {}).get("log") == "vllm_journal"
                and "engine_died" in (e.get("llmops", {}).get("signatures") or [])]
    assert wait_for(shipped, timeout=90, step=3)
    event = shipped()[0]
    assert event["systemd"]["unit"] == "vllm-tiny.service" and event["llmops"]["node"] == "mon-node"
    print("engine died; shipped tagged: %s" % event["message"][:200])


def test_an_instance_down_alert_reaches_alertmanager(prom, node):
    node.check_output("systemctl stop vllm-tiny.service")
    try:
        def fired():
            alerts = api(prom, "http://127.0.0.1:9093/api/v2/alerts")
            return [a for a in alerts if a["labels"].get("alertname") == "VllmInstanceDown"]
        started = time.monotonic()
        assert wait_for(fired, timeout=120, step=3)
        print("VllmInstanceDown in Alertmanager %.0f s after the stop" % (time.monotonic() - started))
        alert = fired()[0]
        assert alert["labels"]["instance"] == "mon-node/tiny" and alert["labels"]["severity"] == "critical"
        assert "diagnose.yml" in alert["annotations"]["runbook"]
    finally:
        node.check_output("systemctl start vllm-tiny.service")
