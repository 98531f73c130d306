"""Verify the PKI and the TLS edge in front of a real vLLM CPU instance, from a client container.

The tests run in file order; the last ones re-run the play (secrets under -vvv, certificate rotation under load,
fault injection on and off).
"""

import datetime
import json
import os
import re
import subprocess
import time

import pytest
import testinfra
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from conftest import wait_for
from cryptography.x509.oid import NameOID

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
EPHEMERAL = os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]
SCENARIO = os.environ["MOLECULE_SCENARIO_DIRECTORY"]
PKI = os.path.join(EPHEMERAL, "pki")
VIP = "10.254.0.100"
PROMPT = "audit-canary-7f3a: this prompt must never reach a log"
CERTS = "/etc/edge-test"  # on the client
# Request ids the tests sent, each expected once in the audit log.
SENT = []
# The edge's counters (the edge plan's stats_path); like /health, reads of them are not audited (the default).
STATS_PATH = "/edge/metrics"
# Probes, neither audited (the default) nor counted: the LB's, the breaker's, and Prometheus' scrapes of an instance.
PROBE = re.compile(r"(/health|%s|/instances/[a-z0-9-]+/metrics)$" % re.escape(STATS_PATH))
CLASSES = ("1xx", "2xx", "3xx", "4xx", "5xx", "none")
FAULT_BODY = {"error": {"message": "fault injected by the edge (edge_fault_injection)", "type": "fault_injection",
                        "code": 503}}


def scenario_vars(group):
    with open(os.path.join(SCENARIO, "molecule.yml")) as f:
        config = yaml.safe_load(os.path.expandvars(f.read()))
    return config["provisioner"]["inventory"]["group_vars"][group]


API_KEY = scenario_vars("vllm_nodes")["edge_api_keys"][0]["key"]


def get_host(name):
    # podman exec directly: many short commands, without a module run each.
    return testinfra.get_host("podman://" + name)


@pytest.fixture(scope="module")
def node():
    return get_host("edge-node")


@pytest.fixture(scope="module")
def node_ip(node):
    return node.check_output("ip -4 -o route get 1.1.1.1 | sed -E 's/.* src ([0-9.]+).*/\\1/'")


def _key_and_name(cn):
    key = ec.generate_private_key(ec.SECP256R1())
    return key, x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn),
                           x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "applications")])


def _pem(obj):
    if isinstance(obj, x509.Certificate):
        return obj.public_bytes(serialization.Encoding.PEM).decode()
    return obj.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _issue(cn, issuer_cert, issuer_key, not_before, not_after):
    key, name = _key_and_name(cn)
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer_cert.subject if issuer_cert else name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(not_before).not_valid_after(not_after)
               .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
    return builder.sign(issuer_key or key, hashes.SHA256()), key


@pytest.fixture(scope="module")
def client():
    """The client container, holding the lab client's files, an expired one of the fleet CA and one of another CA."""
    host = get_host("edge-client")
    now = datetime.datetime.now(datetime.timezone.utc)
    with open(os.path.join(PKI, "ca.crt"), "rb") as f:
        ca_cert = x509.load_pem_x509_certificate(f.read())
    ca_key = serialization.load_pem_private_key(ca_key_pem().encode(), None)
    expired = _issue("molecule-client", ca_cert, ca_key, now - datetime.timedelta(days=3),
                     now - datetime.timedelta(days=1))
    other_ca, other_key = _issue("another CA", None, None, now - datetime.timedelta(days=1),
                                 now + datetime.timedelta(days=30))
    foreign = _issue("molecule-client", other_ca, other_key, now - datetime.timedelta(days=1),
                     now + datetime.timedelta(days=30))
    files = {}
    for name in ("ca.crt", "molecule-client.crt", "molecule-client.key", "molecule-limited.crt",
                 "molecule-limited.key"):
        with open(os.path.join(PKI, "clients", name)) as f:
            files[name] = f.read()
    for name, (cert, key) in {"expired": expired, "foreign": foreign}.items():
        files[name + ".crt"], files[name + ".key"] = _pem(cert), _pem(key)
    host.check_output("mkdir -p %s", CERTS)
    for name, content in files.items():
        subprocess.run(["podman", "exec", "-i", "edge-client", "sh", "-c", "cat > %s/%s" % (CERTS, name)],
                       input=content, text=True, check=True)
    return host


def ca_key_pem():
    """The CA key on the controller, decrypted when the rotation test vault-encrypted it."""
    path = os.path.join(PKI, "ca.key")
    with open(path) as f:
        text = f.read()
    if text.startswith("$ANSIBLE_VAULT"):
        text = subprocess.run(["ansible-vault", "view", "--vault-password-file", VAULT_PASSWORD, path],
                              check=True, capture_output=True, text=True).stdout
    return text


def secret_forms(pem):
    """What would betray a private key in text: its PEM's first line and its private value in decimal and hex.
    (The rest of an EC key's PEM encodes its public key, which may be printed.)"""
    key = serialization.load_pem_private_key(pem.encode(), None)
    value = key.private_numbers().private_value
    first = [line for line in pem.splitlines() if line and "PRIVATE KEY" not in line][0]
    return [first, str(value), "%x" % value]


def curl(client, url, cert="molecule-client", key=API_KEY, body=None, method=None):
    """(status, headers, body) of one request from the client container; status 0 when no HTTP answer came."""
    args = ["curl", "-sS", "-i", "--max-time", "60", "--cacert", CERTS + "/ca.crt", "-w", "\n%{http_code}"]
    if cert:
        args += ["--cert", "%s/%s.crt" % (CERTS, cert), "--key", "%s/%s.key" % (CERTS, cert)]
    if key:
        args += ["-H", "Authorization: Bearer " + key]
    if body is not None:
        args += ["-H", "Content-Type: application/json", "--data-binary", json.dumps(body)]
    if method:
        args += ["-X", method]
    result = client.run(" ".join("'%s'" % a.replace("'", "'\\''") for a in args + [url]))
    out, _newline, status = result.stdout.rpartition("\n")
    head, _blank, text = out.partition("\r\n\r\n")
    headers = dict(line.split(": ", 1) for line in head.split("\r\n")[1:] if ": " in line)
    headers = {k.lower(): v for k, v in headers.items()}
    if headers.get("x-request-id") and not PROBE.search(url):  # probes: not audited (default)
        SENT.append(headers["x-request-id"])
    return int(status or 0), headers, text if result.rc == 0 else result.stderr


def completion_body(model="tiny-llama", tokens=4):
    return {"model": model, "prompt": PROMPT, "max_tokens": tokens}


def test_keys_live_on_their_hosts_with_mode_0600(node):
    key = node.file("/etc/llmops-vllm/pki/server.key")
    assert key.user == "root" and key.mode == 0o600
    assert node.file("/etc/llmops-vllm/pki/server.crt").mode == 0o644
    assert os.stat(os.path.join(PKI, "ca.key")).st_mode & 0o777 == 0o600
    assert os.stat(os.path.join(PKI, "clients", "molecule-client.key")).st_mode & 0o777 == 0o600


def test_the_ca_key_never_leaves_the_controller(node):
    ca_forms = secret_forms(ca_key_pem())
    # The node's only private key is its own, and its journal (modules log their arguments) holds no trace.
    keys = node.run("grep -rlE '^-----BEGIN [A-Z ]*PRIVATE KEY-----' /etc /root /home /tmp /var/tmp /var/lib /var/log "
                    "/run").stdout.split()
    assert keys == ["/etc/llmops-vllm/pki/server.key"], keys
    journal = node.check_output("journalctl -o cat --no-pager")
    assert not [form for form in ca_forms if form in journal]
    assert not [form for form in ca_forms if form in node.file(keys[0]).content_string]
    assert node.run("ls /etc/llmops-vllm/pki").stdout.split() == ["ca.crl", "ca.crt", "server.crt", "server.key"]


def test_the_server_certificate_names_the_node_and_the_vip(node, node_ip):
    text = node.check_output("openssl x509 -noout -text -in /etc/llmops-vllm/pki/server.crt")
    assert "DNS:edge-node" in text and "IP Address:%s" % node_ip in text and "IP Address:%s" % VIP in text
    assert "Subject: O = llmops.vllm, OU = vllm-edge, CN = edge-node" in text
    assert "TLS Web Server Authentication" in text


def test_client_certificates_have_meaningful_subjects():
    with open(os.path.join(PKI, "clients", "molecule-client.crt"), "rb") as f:
        cert = x509.load_pem_x509_certificate(f.read())
    assert cert.subject.rfc4514_string() == "CN=molecule-client,OU=applications,O=llmops.vllm"
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]


def test_the_node_is_an_lvs_direct_routing_real_server(node):
    """The VIP on lo (a boot unit), and ARP for it left to the directors, persisted in sysctl.d."""
    assert "inet %s/32 scope global lo" % VIP in node.check_output("ip -4 address show dev lo")
    unit = node.service("llmops-vllm-vips")
    assert unit.is_enabled and unit.is_running
    persisted = node.file("/etc/sysctl.d/60-llmops-vllm-lvs-dr.conf").content_string
    for setting in ("net.ipv4.conf.all.arp_ignore=1", "net.ipv4.conf.all.arp_announce=2",
                    "net.ipv4.conf.all.rp_filter=2"):
        name, value = setting.split("=")
        assert setting in persisted.replace(" ", "")
        assert node.check_output("sysctl -n %s", name) == value


def test_the_edge_listens_on_the_node_and_the_vip_and_vllm_on_loopback_only(node, node_ip, client):
    assert node.service("nginx").is_running and node.service("nginx").is_enabled
    assert node.socket("tcp://%s:8000" % node_ip).is_listening
    assert node.socket("tcp://%s:8000" % VIP).is_listening
    assert node.socket("tcp://127.0.0.1:8101").is_listening
    assert not node.socket("tcp://0.0.0.0:8101").is_listening
    # From the client, vLLM's own port does not answer.
    direct = client.run("curl -sS --max-time 5 http://%s:8101/health", node_ip)
    assert direct.rc != 0 and "Failed to connect" in direct.stderr, direct


def test_tls_1_2_is_refused(client, node_ip):
    tls12 = client.run("openssl s_client -connect %s:8000 -tls1_2 -CAfile %s/ca.crt -cert %s/molecule-client.crt "
                       "-key %s/molecule-client.key </dev/null", node_ip, CERTS, CERTS, CERTS)
    assert tls12.rc != 0 and "alert protocol version" in tls12.stderr + tls12.stdout
    tls13 = client.run("openssl s_client -connect %s:8000 -tls1_3 -CAfile %s/ca.crt -cert %s/molecule-client.crt "
                       "-key %s/molecule-client.key </dev/null", node_ip, CERTS, CERTS, CERTS)
    assert "New, TLSv1.3, Cipher is" in tls13.stdout and "Verify return code: 0 (ok)" in tls13.stdout, tls13


@pytest.mark.parametrize("cert", [None, "foreign", "expired"], ids=["no-certificate", "other-ca", "expired"])
def test_a_bad_or_missing_client_certificate_is_refused(client, node_ip, cert):
    status, headers, body = curl(client, "https://%s:8000/v1/completions" % node_ip, cert=cert,
                                 body=completion_body())
    assert status == 400, body
    assert "client certificate" in body and "choices" not in body
    assert re.match(r"^[0-9a-f]{32}$", headers["x-request-id"])


def test_a_valid_certificate_gets_a_completion(client, node_ip):
    status, headers, body = curl(client, "https://%s:8000/v1/completions" % node_ip, body=completion_body())
    assert status == 200, body
    answer = json.loads(body)
    assert answer["model"] == "tiny-llama" and answer["choices"][0]["text"]
    # vLLM takes the edge's request id as its own.
    assert answer["id"] == "cmpl-" + headers["x-request-id"]


def test_chat_by_path_and_the_node_catalogue(client, node_ip):
    chat = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 4, "model": "tiny-llama"}
    status, _headers, body = curl(client, "https://%s:8000/instances/tiny/v1/chat/completions" % node_ip, body=chat)
    assert status == 200 and json.loads(body)["choices"][0]["message"]["role"] == "assistant", body
    status, _headers, body = curl(client, "https://%s:8000/v1/models" % node_ip)
    assert status == 200 and [m["id"] for m in json.loads(body)["data"]] == ["tiny-llama"]
    # A request without a model goes to the node's only model; an unknown one is not served.
    status, _headers, body = curl(client, "https://%s:8000/v1/completions" % node_ip,
                                  body={"prompt": PROMPT, "max_tokens": 2})
    assert status == 200, body
    # vLLM's other endpoints, by model and by path; its admin ones are not exposed.
    for path in ("/tokenize", "/instances/tiny/tokenize"):
        status, _headers, body = curl(client, "https://%s:8000%s" % (node_ip, path),
                                      body={"model": "tiny-llama", "prompt": PROMPT})
        assert status == 200 and json.loads(body)["tokens"], body
    assert curl(client, "https://%s:8000/server_info" % node_ip)[0] == 404
    assert curl(client, "https://%s:8000/instances/tiny/server_info" % node_ip)[0] == 404
    status, _headers, body = curl(client, "https://%s:8000/v1/completions" % node_ip, body=completion_body("gpt-17"))
    assert status == 404 and "tiny-llama" in body and "gpt-17" not in body


@pytest.mark.parametrize("key", ["wrong-key-but-long-enough-0123456789abcdef", None], ids=["wrong", "missing"])
def test_a_valid_certificate_with_a_bad_api_key_gets_401(client, node_ip, key):
    status, headers, body = curl(client, "https://%s:8000/v1/completions" % node_ip, key=key, body=completion_body())
    assert status == 401, body
    assert headers["www-authenticate"].startswith("Bearer") and "API key" in body


@pytest.mark.parametrize("path", ["/instances/tiny/metrics", "/metrics", STATS_PATH])
def test_metrics_without_a_certificate_are_refused(client, node_ip, path):
    status, _headers, body = curl(client, "https://%s:8000%s" % (node_ip, path), cert=None, key=None)
    assert status == 400 and "vllm:" not in body


def test_metrics_with_a_certificate_need_no_api_key(client, node_ip):
    status, _headers, body = curl(client, "https://%s:8000/instances/tiny/metrics" % node_ip, key=None)
    assert status == 200 and "vllm:num_requests_running" in body


def edge_counters(client, node_ip):
    """{series: value} of the edge's counters, read as the breaker does: the client certificate, no API key."""
    status, headers, body = curl(client, "https://%s:8000%s" % (node_ip, STATS_PATH), key=None)
    assert status == 200, body
    assert headers["content-type"].startswith("text/plain; version=0.0.4"), headers
    counters, families = {}, set()
    for line in body.splitlines():
        if line.startswith("# TYPE "):
            _hash, _type, name, kind = line.split()
            assert kind == "counter", line
            families.add(name)
        elif line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            assert re.match(r'^[a-z_]+(\{class="[0-9a-z]+"\})?$', series), line
            counters[series] = float(value)
    assert families == {"llmops_edge_responses_total", "llmops_edge_upstream_errors_total",
                        "llmops_edge_fault_injected_total"}, body
    # Every class from the first scrape on, zeros included.
    assert {'llmops_edge_responses_total{class="%s"}' % c for c in CLASSES} <= set(counters), body
    return counters


def counted(before, after):
    """What changed between two reads: {class or counter: increase}, without the unchanged ones."""
    def short(series):
        match = re.match(r'^llmops_edge_responses_total\{class="(.+)"\}$', series)
        return match.group(1) if match else series
    return {short(s): after[s] - before.get(s, 0) for s in after if after[s] != before.get(s, 0)}


def test_the_counters_count_answers_by_status_class(client, node_ip):
    before = edge_counters(client, node_ip)
    completions = "https://%s:8000/v1/completions" % node_ip
    for _attempt in range(3):
        assert curl(client, completions, body=completion_body())[0] == 200
    # A model the node does not serve, and a bad API key: 4xx.
    assert curl(client, completions, body=completion_body("gpt-17"))[0] == 404
    assert curl(client, completions, key="wrong-key-but-long-enough-0123456789abcdef", body=completion_body())[0] == 401
    # Paths outside the client-traffic locations are not counted.
    assert curl(client, "https://%s:8000/server_info" % node_ip)[0] == 404
    after = edge_counters(client, node_ip)
    # Reading the counters counts nothing itself.
    assert counted(before, after) == {"2xx": 3, "4xx": 2}


def test_health_probes_and_refused_requests_do_not_change_the_counters(client, node_ip):
    before = edge_counters(client, node_ip)
    for _attempt in range(3):
        assert curl(client, "https://%s:8000/health" % node_ip, key=None)[0] == 200
        assert curl(client, "https://%s:8000/instances/tiny/metrics" % node_ip, key=None)[0] == 200
        assert curl(client, "https://%s:8000/instances/tiny/health" % node_ip, key=None)[0] == 200
    assert curl(client, "https://%s:8000/v1/completions" % node_ip, cert=None, body=completion_body())[0] == 400
    assert edge_counters(client, node_ip) == before


def test_the_counters_survive_a_reload(client, node, node_ip):
    before = edge_counters(client, node_ip)
    assert before['llmops_edge_responses_total{class="2xx"}'] >= 3
    master = node.check_output("cat /run/nginx.pid")
    workers = set(node.check_output("pgrep -P %s", master).split())
    node.check_output("systemctl reload nginx")
    # Only new workers answer from here on (an old one would still see the zone it had).
    assert wait_for(lambda: not workers & set(node.check_output("pgrep -P %s", master).split()), timeout=60, step=1)
    assert node.check_output("cat /run/nginx.pid") == master
    assert edge_counters(client, node_ip) == before


def documented_fields():
    """The field names of docs/node-summary.md's tables (top level and instances)."""
    with open(os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "docs", "node-summary.md")) as f:
        text = f.read().split("## Fields", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(\w+)` \|", text, re.M))


def test_the_node_summary_says_what_the_node_serves(client, node, node_ip, tmp_path):
    """site.yml's preflight publishes llmops_node with every documented field, and each URL and file in it is real."""
    out = tmp_path / "nodes.json"
    cmd = ["ansible-playbook", "-i", INVENTORY, os.path.join(SCENARIO, "node_summary.yml"),
           "-e", "node_summary_file=%s" % out]
    if os.path.exists(VAULT_PASSWORD):
        cmd += ["--vault-password-file", VAULT_PASSWORD]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False,
                            env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0"))
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    summary = json.loads(out.read_text())["edge-node"]
    [instance] = summary["instances"]
    assert set(summary) | set(instance) == documented_fields()
    assert summary["host"] == "edge-node" and summary["address"] == node_ip and summary["port"] == 8000
    assert summary["endpoints"] == ["%s:8000" % node_ip] and summary["vips"] == [VIP]
    assert summary["vip_endpoints"] == ["%s:8000" % VIP] and summary["models"] == ["tiny-llama"]
    assert (instance["name"], instance["model"], instance["unit"]) == ("tiny", "tiny-llama", "vllm-tiny.service")
    assert instance["loopback_url"] == "http://127.0.0.1:8101" and instance["device"] == "cpu"
    assert instance["cpus"] == "1" and instance["gpus"] == [] and instance["numa_nodes"] == [0]
    # Each address in it answers as documented.
    status, _headers, body = curl(client, instance["metrics_url"], key=None)
    assert status == 200 and "vllm:num_requests_running" in body
    assert curl(client, summary["health_url"], key=None)[0] == 200
    fetch = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1] + '/v1/models').read().decode())"
    assert "tiny-llama" in node.check_output("python3 -c %s %s", fetch, instance["loopback_url"])
    status, _headers, body = curl(client, summary["stats_url"], key=None)
    assert status == 200 and 'llmops_edge_responses_total{class="5xx"}' in body
    for path in [summary["audit_log"]] + [summary["tls"][k] for k in ("certificate", "key", "ca")]:
        assert node.file(path).is_file, path
    assert "IP:%s" % VIP in summary["tls"]["subject_alt_names"]
    assert summary["drain_file"] == "/var/lib/llmops-vllm/edge/draining"


def test_a_rate_limited_client_gets_429_and_others_do_not(client, node_ip):
    models = "https://%s:8000/v1/models" % node_ip
    statuses = [curl(client, models, cert="molecule-limited")[0] for _attempt in range(4)]
    assert statuses[:2] == [200, 200] and statuses[2:] == [429, 429], statuses
    assert [curl(client, models)[0] for _attempt in range(4)] == [200] * 4


def test_health_follows_the_instances_and_the_drain_file(client, node, node_ip):
    health = "https://%s:8000/health" % node_ip
    assert curl(client, health, key=None)[0] == 200
    node.check_output("touch /var/lib/llmops-vllm/edge/draining")
    try:
        status, _headers, body = curl(client, health, key=None)
        assert status == 503 and json.loads(body)["status"] == "draining"
        # Draining turns the LB away; requests that still come are served.
        assert curl(client, "https://%s:8000/v1/completions" % node_ip, body=completion_body())[0] == 200
    finally:
        node.check_output("rm -f /var/lib/llmops-vllm/edge/draining")
    assert curl(client, health, key=None)[0] == 200
    node.check_output("systemctl stop vllm-tiny")
    try:
        status, _headers, body = curl(client, health, key=None)
        assert status == 503 and json.loads(body)["status"] == "unready", body
    finally:
        node.check_output("systemctl start vllm-tiny")
    assert wait_for(lambda: curl(client, "https://%s:8000/v1/completions" % node_ip,
                                 body=completion_body())[0] == 200, timeout=600)
    assert curl(client, health, key=None)[0] == 200


def audit_lines(node):
    return [json.loads(line) for line in node.file("/var/log/llmops-vllm/edge-audit.log").content_string.splitlines()]


def test_the_audit_log_has_one_json_line_per_request_and_no_prompt(node):
    lines = audit_lines(node)  # every line parses as JSON
    ids = [line["request_id"] for line in lines]
    for request_id in SENT:
        assert ids.count(request_id) == 1, request_id
    fields = {"time", "request_id", "client_subject", "client_serial", "model", "method", "path", "status",
              "request_bytes", "response_bytes", "upstream_time", "upstream", "instance", "prompt_tokens",
              "completion_tokens", "fault"}
    assert all(fields <= set(line) for line in lines)
    completions = [line for line in lines if line["path"] == "/v1/completions" and line["status"] == 200]
    assert completions
    for line in completions:
        assert line["client_subject"] == "CN=molecule-client,OU=applications,O=llmops.vllm"
        assert re.match(r"^[0-9A-F]+$", line["client_serial"]) and line["api_key"] == "molecule-app"
        assert line["model"] == "tiny-llama" and line["instance"] == "tiny" and line["upstream"] == "127.0.0.1:8101"
        assert line["completion_tokens"] in (2, 4) and line["prompt_tokens"] > 0
        assert line["request_bytes"] > 0 and line["response_bytes"] > 0 and line["upstream_time"] >= 0
        assert line["fault"] is False
    refused = [line for line in lines if line["status"] == 400]
    assert {line["client_verify"].split(":")[0] for line in refused} >= {"NONE", "FAILED"}
    limited = [line["status"] for line in lines if line["client_subject"].startswith("CN=molecule-limited")]
    assert limited.count(429) == 2, limited
    # Neither probes (the breaker's reads of the counters, Prometheus' scrapes) nor faults (none injected yet) are in
    # it (refused reads are).
    assert not [line for line in lines
                if (PROBE.search(line["path"]) and line["client_verify"] == "SUCCESS") or line["fault"] is not False]
    assert "audit-canary" not in node.file("/var/log/llmops-vllm/edge-audit.log").content_string
    assert node.run("grep -rl audit-canary /var/log").stdout == ""


def play(*args, playbook=None, passes=True):
    """Run converge.yml (or another playbook) with the vault password; returns its output."""
    cmd = ["ansible-playbook", "-i", INVENTORY, "--vault-password-file", VAULT_PASSWORD,
           playbook or os.path.join(SCENARIO, "converge.yml"), *args]
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    result = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    output = result.stdout + result.stderr
    assert (result.returncode == 0) == passes, output[-6000:]
    return output


VAULT_PASSWORD = os.path.join(EPHEMERAL, "vault-password")
# Renew now: the certificates (3 days) are within 3 days of their end; new ones last 10 days. Only the pki and edge
# stages apply, as an operator renews certificates (validate and preflight still cover every stage).
ROTATE = ["-e", json.dumps({"pki_renew_before_days": 3, "pki_certificate_validity_days": 10,
                            "llmops_only_stages": ["pki", "edge"]})]

# Requests in a loop during the rotation: a new TLS connection for each short one (so it meets the new
# certificate), and long streamed completions, one after the other, in flight when nginx reloads. The short ones
# are paced: back to back they kept both CPUs busy, and the -vvv play beside them took 12 minutes (2 paced).
LOOP = r"""
import http.client, json, os, ssl, sys, threading, time
ctx = ssl.create_default_context(cafile=sys.argv[2] + "/ca.crt")
ctx.load_cert_chain(sys.argv[2] + "/molecule-client.crt", sys.argv[2] + "/molecule-client.key")
host, key = sys.argv[1], sys.argv[3]
counts = {"ok": 0, "failed": 0, "streams": 0, "serials": []}
lock = threading.Lock()
def request(tokens, stream):
    conn = http.client.HTTPSConnection(host, 8000, context=ctx, timeout=120)
    body = {"model": "tiny-llama", "prompt": "rotation", "max_tokens": tokens, "ignore_eos": True, "stream": stream}
    conn.request("POST", "/v1/completions", json.dumps(body),
                 {"Content-Type": "application/json", "Authorization": "Bearer " + key})
    serial = conn.sock.getpeercert()["serialNumber"]
    response = conn.getresponse()
    data = response.read().decode()
    conn.close()
    ok = response.status == 200 and (data.rstrip().endswith("[DONE]") if stream else '"choices"' in data)
    return ok, serial
def worker(tokens, stream):
    while not os.path.exists("/tmp/stop-loop"):
        time.sleep(0 if stream else 0.25)
        try:
            ok, serial = request(tokens, stream)
        except Exception as e:
            ok, serial = False, repr(e)
        with lock:
            counts["ok" if ok else "failed"] += 1
            counts["streams"] += 1 if stream and ok else 0
            if serial not in counts["serials"]:
                counts["serials"].append(serial)
threads = [threading.Thread(target=worker, args=(2, False)) for _ in range(2)]
threads.append(threading.Thread(target=worker, args=(96, True)))
[t.start() for t in threads]
[t.join() for t in threads]
print(json.dumps(counts))
"""


def start_loop(client, node_ip):
    """Run LOOP on the client, with molecule-client's certificate, until stop_loop."""
    client.check_output("rm -f /tmp/stop-loop /tmp/loop.out")
    subprocess.run(["podman", "exec", "-i", "edge-client", "sh", "-c",
                    "cat > /tmp/loop.py && (python3 /tmp/loop.py %s %s %s > /tmp/loop.out 2>&1 &)"
                    % (node_ip, CERTS, API_KEY)], input=LOOP, text=True, check=True)


def stop_loop(client):
    """Stop LOOP and return its counts."""
    client.check_output("touch /tmp/stop-loop")
    assert wait_for(lambda: client.file("/tmp/loop.out").exists and client.file("/tmp/loop.out").content_string,
                    timeout=120, step=1)
    return json.loads(client.file("/tmp/loop.out").content_string)


def server_serial(node):
    return node.check_output("openssl x509 -noout -serial -in /etc/llmops-vllm/pki/server.crt").split("=")[1]


def test_rotation_under_load_fails_no_request_and_prints_no_secret(node, client, node_ip):
    # The CA key vault-encrypted from here on: renewal signs with it.
    with open(VAULT_PASSWORD, "w") as f:
        f.write("molecule-edge-vault\n")
    subprocess.run(["ansible-vault", "encrypt", "--vault-password-file", VAULT_PASSWORD, os.path.join(PKI, "ca.key")],
                   check=True, capture_output=True)
    secrets = {"API key": [API_KEY], "CA key": secret_forms(ca_key_pem()),
               "server key": secret_forms(node.file("/etc/llmops-vllm/pki/server.key").content_string)}
    old_serial, master = server_serial(node), node.check_output("cat /run/nginx.pid")
    start_loop(client, node_ip)
    try:
        time.sleep(3)
        output = play("-vvv", *ROTATE)
        time.sleep(3)
    finally:
        counts = stop_loop(client)
    assert counts["failed"] == 0 and counts["ok"] > 20 and counts["streams"] > 0, counts
    new_serial = server_serial(node)
    assert new_serial != old_serial
    # The client met both certificates, and nginx was reloaded, not restarted.
    assert len(counts["serials"]) == 2, counts
    assert node.check_output("cat /run/nginx.pid") == master
    assert "changed: [edge-node] => (item=/etc/llmops-vllm/pki/server.crt)" in output
    assert "RUNNING HANDLER [llmops.vllm.edge : Reload nginx]" in output
    secrets["new server key"] = secret_forms(node.file("/etc/llmops-vllm/pki/server.key").content_string)
    for what, forms in secrets.items():
        assert not [form for form in forms if form in output], "%s printed by -vvv" % what
    assert "PRIVATE KEY" not in output
    assert "ESTABLISH" in output  # it ran with -vvv


def test_a_check_run_after_the_rotation_changes_nothing():
    output = play("--check", *ROTATE)
    assert re.search(r"^edge-node\s+: ok=\d+\s+changed=0\s", output, re.M), output[-4000:]
    assert re.search(r"^edge-client\s+: ok=\d+\s+changed=0\s", output, re.M), output[-4000:]


# Fault injection for the game day: every completion (share 1.0) answered 503 by the edge itself.
# Set from the inventory by site.yml, and lifted by the game-day playbook that changes only the fault.
GAME_DAY = os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "playbooks", "edge_fault.yml")
FAULT = ["-e", json.dumps({"edge_fault_injection": {"share": 1.0, "status": 503}})]


def test_fault_injection_answers_the_model_api_until_it_is_removed(client, node, node_ip):
    completions = "https://%s:8000/v1/completions" % node_ip
    try:
        output = play(*ROTATE, *FAULT)
        assert "RUNNING HANDLER [llmops.vllm.edge : Reload nginx]" in output
        # The reload is done once a new connection gets the fault.
        assert wait_for(lambda: curl(client, completions, body=completion_body())[0] == 503, timeout=30, step=1)
        before = edge_counters(client, node_ip)
        faulted = []
        for url in [completions] * 3 + ["https://%s:8000/instances/tiny/v1/completions" % node_ip]:
            status, headers, body = curl(client, url, body=completion_body())
            assert status == 503 and json.loads(body) == FAULT_BODY, body
            assert headers["content-type"] == "application/json"
            faulted.append(headers["x-request-id"])
        # The edge's own answers and the probes are never faulted; the API key is still checked first.
        assert curl(client, "https://%s:8000/health" % node_ip, key=None)[0] == 200
        assert curl(client, "https://%s:8000/v1/models" % node_ip)[0] == 200
        assert curl(client, "https://%s:8000/instances/tiny/metrics" % node_ip, key=None)[0] == 200
        assert curl(client, completions, key=None, body=completion_body())[0] == 401
        after = edge_counters(client, node_ip)
        assert counted(before, after) == {"5xx": 4, "llmops_edge_fault_injected_total": 4, "2xx": 1, "4xx": 1}
        # Audited as usual, with the injected status.
        lines = {line["request_id"]: line for line in audit_lines(node)}
        for request_id in faulted:
            line = lines[request_id]
            assert line["status"] == 503 and line["fault"] is True and line["api_key"] == "molecule-app", line
            assert line["upstream"] == "" and line["model"] == "", line
    finally:
        # Lifted by the game-day playbook: a bad fault is refused first, then only the fault file changes.
        refused = " ".join(play("-e", json.dumps({"edge_fault_injection": {"share": 2}}), playbook=GAME_DAY,
                                passes=False).split())
        assert "host edge-node: edge: edge_fault_injection share must be a number above 0 and at most 1" in refused
        assert "TASK [llmops.vllm.edge : Write the fault injection]" not in refused
        output = play("-e", json.dumps({"edge_fault_injection": {}}), playbook=GAME_DAY)
    assert "RUNNING HANDLER [llmops.vllm.edge : Reload nginx]" in output
    assert re.search(r"^edge-node\s+: ok=\d+\s+changed=2\s", output, re.M), output[-3000:]
    assert node.file("/etc/nginx/llmops-vllm/fault.json").content_string == "null\n"
    # Off again: completions are served, and no fault is counted any more.
    assert wait_for(lambda: curl(client, completions, body=completion_body())[0] == 200, timeout=30, step=1)
    before = edge_counters(client, node_ip)
    assert curl(client, completions, body=completion_body())[0] == 200
    assert counted(before, edge_counters(client, node_ip)) == {"2xx": 1}


REVOKE = os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "playbooks", "revoke.yml")


def give_client(client, name, source):
    """Copy an application client's certificate and key from the controller to the client container as <name>."""
    for ext in ("crt", "key"):
        with open(os.path.join(PKI, "clients", "%s.%s" % (source, ext))) as f:
            subprocess.run(["podman", "exec", "-i", "edge-client", "sh", "-c", "cat > %s/%s.%s" % (CERTS, name, ext)],
                           input=f.read(), text=True, check=True)
    return client.check_output("openssl x509 -noout -serial -in %s/%s.crt", CERTS, name).split("=")[1]


def test_a_revoked_client_is_refused_from_its_next_request_and_others_see_no_failure(client, node, node_ip):
    completions = "https://%s:8000/v1/completions" % node_ip
    old_serial = give_client(client, "molecule-revoked", "molecule-revoked")
    assert curl(client, completions, cert="molecule-revoked", body=completion_body())[0] == 200
    # Naming nothing is refused before any host changes.
    refused = " ".join(play(playbook=REVOKE, passes=False).split())
    assert "revoke.yml: no certificate is named" in refused and "TASK [llmops.vllm.pki" not in refused
    start_loop(client, node_ip)
    try:
        time.sleep(2)
        output = play("-e", "revoke_name=molecule-revoked", "-e", "revoke_reason=key_compromise", playbook=REVOKE)
    finally:
        counts = stop_loop(client)
    assert "RUNNING HANDLER [llmops.vllm.edge : Reload nginx]" in output
    # Its next request is refused, at the handshake's certificate check, and audited as revoked.
    status, headers, body = curl(client, completions, cert="molecule-revoked", body=completion_body())
    assert status == 400 and "client certificate" in body and "choices" not in body, body
    line = [line for line in audit_lines(node) if line["request_id"] == headers["x-request-id"]][0]
    assert line["client_verify"] == "FAILED:certificate revoked" and line["client_serial"] == old_serial, line
    # The other client's loop, on new connections and through the reload, saw no failure.
    assert counts["failed"] == 0 and counts["ok"] > 5, counts
    # The CRL on the node lists the serial, with the reason; the client got a new certificate, which is served.
    crl = node.check_output("openssl crl -noout -text -in /etc/llmops-vllm/pki/ca.crl")
    assert "Serial Number: %s" % old_serial in crl and "Key Compromise" in crl, crl
    new_serial = give_client(client, "molecule-reissued", "molecule-revoked")
    assert new_serial != old_serial
    assert curl(client, completions, cert="molecule-reissued", body=completion_body())[0] == 200
    assert curl(client, completions, cert="molecule-revoked", body=completion_body())[0] == 400
