"""The lab's observability, as make lab deploys it: Prometheus on lab-mon1 scrapes both vLLM nodes through their
edges, node exporter on every host including the director VMs (their IPVS table and the breaker's state), and the
Redis log sink holds both nodes' audit lines. Runs before test_lvs.py's faults, on the fleet as converge left it."""

import json
import shlex
import urllib.parse

import testinfra
from conftest import wait_for

NODES = ("lab-node1", "lab-node2")
DIRECTORS = ("lab-lb1", "lab-lb2")
PKI = "/etc/llmops-vllm/pki"
QUERY = ("import json, sys, urllib.parse, urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9090/api/v1/'"
         " + sys.argv[1], timeout=10).read().decode())")


# GET /v1/models from lab-mon1 through a node's edge (argv: the node), with the Prometheus client certificate;
# prints the edge's X-Request-Id.
MODELS = ("import ssl, sys, urllib.request; c = ssl.create_default_context(cafile='%s/ca.crt'); "
          "c.check_hostname = False; c.load_cert_chain('%s/prometheus.crt', '%s/prometheus.key'); "
          "r = urllib.request.urlopen('https://%%s:8000/v1/models' %% sys.argv[1], context=c, timeout=30); "
          "r.read(); print(r.headers['X-Request-Id'])" % (PKI, PKI, PKI))


def mon():
    return testinfra.get_host("podman://lab-mon1")


def prometheus(path):
    return json.loads(mon().check_output("python3 -c %s %s" % (shlex.quote(QUERY), shlex.quote(path))))["data"]


def query(expr):
    return prometheus("query?query=" + urllib.parse.quote(expr))["result"]


def test_every_target_of_the_lab_is_up():
    def up():
        targets = prometheus("targets")["activeTargets"]
        return targets and all(t["health"] == "up" for t in targets)
    assert wait_for(up, timeout=120, step=3), [
        (t["labels"]["job"], t["labels"]["instance"], t["lastError"]) for t in prometheus("targets")["activeTargets"]
        if t["health"] != "up"]
    jobs = {}
    for target in prometheus("targets")["activeTargets"]:
        jobs.setdefault(target["labels"]["job"], set()).add(target["labels"]["instance"])
    assert jobs["vllm"] == {"%s/tiny" % n for n in NODES}
    assert jobs["llmops_edge"] == set(NODES)
    assert jobs["node"] == set(NODES) | set(DIRECTORS) | {"lab-mon1"}


def test_the_directors_ipvs_and_breaker_state_reach_prometheus():
    """The dashboards' breaker panel and the ejection alert read these: the breaker's node label is the real server."""
    def breaker():
        rows = query('llmops_breaker_state{state="closed"} == 1')
        return {(r["metric"]["instance"], r["metric"]["node"]) for r in rows}
    assert wait_for(lambda: breaker() == {(d, n) for d in DIRECTORS for n in NODES}, timeout=60, step=3), breaker()
    assert query("node_ipvs_backend_weight > 0")


def test_both_nodes_audit_lines_are_in_the_log_sink():
    """A request through each node's edge (the models list, with the Prometheus certificate: audited as any
    client's; Prometheus' own scrapes are probes, not audited) reaches the sink as that node's audit line."""
    address = mon().check_output("ip -4 -o route get 1.1.1.1 | sed -E 's/.* src ([0-9.]+).*/\\1/'")
    sent = {}
    for node in NODES:
        node_address = testinfra.get_host("podman://" + node).check_output(
            "ip -4 -o route get 1.1.1.1 | sed -E 's/.* src ([0-9.]+).*/\\1/'")
        sent[mon().check_output("python3 -c %s %s" % (shlex.quote(MODELS), node_address))] = node

    def audited():
        out = mon().check_output(
            "redis-cli --tls --cacert %s/ca.crt --cert %s/prometheus.crt --key %s/prometheus.key -h %s --raw "
            "lrange llmops-vllm 0 -1" % (PKI, PKI, PKI, address))
        events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        return dict((e["request_id"], e["llmops"]["node"]) for e in events
                    if e.get("llmops", {}).get("log") == "edge_audit" and e.get("request_id") in sent)
    assert wait_for(lambda: audited() == sent, timeout=90, step=3), (sent, audited())
