"""Verify capacity against the lab's real vLLM CPU instances (a KV cache of 6 MiB: 48 blocks of 128 tokens, so that
memory pressure and preemption really happen): the benchmark through the service VIP over both nodes and its
comparison, then the batch-size tuner on one canary, lab-node2 (it converges, keeps its value on the node and leaves
the instance serving with it; a failure forced mid-tuning puts the instance back as it was). They run as AWX jobs
(ansible-runner, the awx_job fixture), except the forced failure, which needs the job's process at hand.

The tests run in file order: the tuner's failure test starts from the value the first tuning kept.

What changes in the fleet, and how it is put back: the benchmark changes nothing. The tuner drains lab-node2 while it
tunes (its own always: puts it back), restarts its instance with each candidate and leaves the value it chose as the
local fact vllm_tuning, which the serving role then reads. The forced failure takes the lab client's key away for a
moment (put back in a finally). At the end of the module (the fixture canary, also when a test failed) the fact and
any drain file go, a partial site.yml (the vllm_server stage, limited to lab-node2) runs the instance with the
inventory's max_num_seqs 8 again, and the test waits until it serves and every director has it at full weight.
"""

import json
import os
import shlex
import subprocess
import sys
import time

import pytest
from conftest import INVENTORY, NODES, PKI, PROJECT, get_host, lvs_probe, play, wait_for

CANARY = "lab-node2"
UNIT = "/etc/systemd/system/vllm-tiny.service"
FACT = "/etc/ansible/facts.d/vllm_tuning.fact"
DRAIN = "/var/lib/llmops-vllm/edge/draining"
AUDIT = "/var/log/llmops-vllm/edge-audit.log"
INVENTORY_MAX_NUM_SEQS = 8


def playbook(awx_job, name, extravars, cmdline="", nodes=tuple(NODES)):
    """playbooks/<name> as an AWX job; it must succeed. A failure shows the nodes' edge error logs too (a 502's
    cause)."""
    job = awx_job("playbooks/" + name, extravars, cmdline=cmdline)
    if job.status != "successful" or job.rc != 0:
        edges = "\n".join("%s:\n%s" % (n, get_host(n).run("tail -n 40 /var/log/nginx/error.log").stdout)
                          for n in nodes)
        raise AssertionError("%s failed:\n%s\nThe edges' error logs:\n%s" % (name, job.stdout[-6000:], edges))
    return job


def completes(node):
    """A completion from the instance on its loopback (the unit's own address)."""
    script = ("import json, urllib.request; body = json.dumps({'model': 'tiny-llama', 'prompt': 'ready', "
              "'max_tokens': 1}).encode(); r = urllib.request.urlopen(urllib.request.Request("
              "'http://127.0.0.1:8101/v1/completions', body, {'Content-Type': 'application/json'}), timeout=30); "
              "print(len(json.load(r)['choices']))")
    return node.run("python3 -c %s" % shlex.quote(script)).stdout.strip() == "1"


def max_num_seqs(node):
    words = node.file(UNIT).content_string.split()
    return int(words[words.index("--max-num-seqs") + 1])


def audited_completions():
    """{node: how many completions its edge has audited}."""
    return {name: int(get_host(name).run("grep -c '\"path\":\"/v1/completions\"' %s" % AUDIT).stdout.strip() or 0)
            for name in NODES}


@pytest.fixture(scope="module")
def canary():
    """The tuner's node; at the end of the module, back to the inventory's setting, serving and in the pool."""
    node = get_host(CANARY)
    yield node
    node.run("rm -f %s %s" % (FACT, DRAIN))
    play("playbooks/site.yml", "--limit", CANARY, "-e", json.dumps({"llmops_only_stages": ["vllm_server"]}))
    assert max_num_seqs(node) == INVENTORY_MAX_NUM_SEQS and not node.file(FACT).exists
    assert wait_for(lambda: completes(node), timeout=600, step=5)
    assert wait_for(lvs_probe.full_weight_everywhere, timeout=120, step=5)


# playbooks/benchmark.yml from this machine through the service VIP, over both nodes (the benchmark client's mTLS,
# the lab's lab-client). A lenient SLO (10 s, not the seed's 200 ms): beside another lane's load the P99 of both
# levels passed 200 ms, and latency is the benchmarks' business, not a test's (the SLO arithmetic has its unit tests).
BENCHMARK = {"benchmark_concurrency": [1, 4], "benchmark_duration_s": 5, "benchmark_max_tokens": 16,
             "benchmark_fail_on_errors": True, "benchmark_slo_p99_s": 10}


def test_the_benchmark_measures_the_fleet_through_its_vip(tmp_path, awx_job):
    """A real streaming load at the real vLLMs (check mode first: no load, no report), the report and the
    comparison."""
    settings = dict(BENCHMARK, benchmark_report_dir=str(tmp_path / "reports"))
    playbook(awx_job, "benchmark.yml", settings, cmdline="--check")
    assert not (tmp_path / "reports").exists()
    before = audited_completions()

    job = playbook(awx_job, "benchmark.yml", settings)
    output = " ".join(job.stdout.split())
    (run,) = (tmp_path / "reports").iterdir()
    results = json.loads((run / "results.json").read_text())
    assert results["version"] == 1 and results["shape"]["max_tokens"] == 16
    by_clients = {r["concurrency"]: r for r in results["results"]}
    assert sorted(by_clients) == [1, 4]
    for clients, result in by_clients.items():
        assert result["model"] == "tiny-llama" and result["via"] == "vip" and result["nodes"] == sorted(NODES)
        assert result["url"] == "https://%s:8000/v1/completions" % lvs_probe.VIP
        assert result["errors"] == 0 and result["succeeded"] >= clients and result["throughput_rps"] > 0
        assert result["completion_tokens"] == 16 * result["succeeded"]  # ignore_eos: exactly the shape's tokens
        assert 0 < result["ttft_ms"]["p50"] <= result["e2e_ms"]["p50"] and result["itl_ms"]["p99"] > 0
        assert result["slo_p99_ms"] == 10000.0 and result["over_slo_share"] is not None
    # The load went through the edges: audited like any client's, and the VIP spread it over both nodes (each of
    # the 4 clients keeps its own connection).
    sent = sum(r["requests"] for r in by_clients.values())
    after = audited_completions()
    served = {name: after[name] - before[name] for name in NODES}
    assert sum(served.values()) == sent and all(served.values()), (served, sent)
    report = (run / "report.md").read_text()
    assert "| tiny-llama | vip | 4 |" in report and "## What this fleet holds" in report
    # The cost of the level it holds, priced as the lab-cpu kind: 12,000 + 2,452.8 (350 W) + 6,000 a year a node;
    # through the VIP each of the 2 nodes holds half of the target's requests/s, and the fleet has 2 of them.
    (priced,) = results["tco"]["results"]
    assert results["tco"]["node_kinds"]["lab-cpu"]["total"] == pytest.approx(20452.8)
    held = max((r for r in by_clients.values() if r["slo_met"]), key=lambda r: r["throughput_rps"])
    assert priced["precision"] == "float32" and priced["throughput_rps"] == pytest.approx(held["throughput_rps"] / 2)
    assert priced["qps_per_10k"] == pytest.approx(held["throughput_rps"] / 2 / 2.04528)
    assert "| lab-cpu | tiny-llama | float32 |" in report and "The fleet: 40906 CNY a year" in report
    assert "Results: %s/results.json and report.md" % run in output
    assert job.stats["artifact_data"]["llmops_reports"] == [str(run)] and job.summary[-1] == "Reports: %s" % run

    both = {"before": str(run / "results.json"), "after": str(run / "results.json")}
    compared = " ".join(playbook(awx_job, "benchmark_compare.yml", both).stdout.split())
    assert "| tiny-llama | %s | 4 |" % by_clients[4]["url"] in (run / "compare.md").read_text()
    assert "| 1.00 |" in compared


# The tuner: from the instance's 8, steps of 8, 32 distinct-prompt clients for 4 s a trial. A prompt of 100 words is
# 116 tokens, so a request takes a second KV cache block of 128 after about 12 generated tokens, and ends with 212
# (116 + 96): two blocks, of the 47 usable. 16 sequences need 32 at most (68 %, under the limit), 24 need 48, one
# more than there are, so vLLM preempts. The early crossing matters: with 64-word prompts (75 tokens) the second
# block came after 53 tokens, which a trial on busy CPUs did not always reach in 4 s, and the tuner ran out of
# trials instead of stopping at the memory limit. A lenient SLO: the lab's CPUs are slow, and the SLO guard has
# its unit tests.
TUNING = {"autotune_node": CANARY, "autotune_instance": "tiny", "autotune_step": 8, "autotune_max_trials": 4,
          "autotune_concurrency": 32, "autotune_duration_s": 4, "autotune_slo_p99_s": 10,
          "benchmark_prompt_tokens": 100, "benchmark_max_tokens": 96}


def test_the_tuner_keeps_a_value_on_the_node_and_leaves_the_instance_serving_with_it(tmp_path, canary, awx_job):
    node = canary
    settings = dict(TUNING, autotune_report_dir=str(tmp_path / "reports"))
    unit_before = node.file(UNIT).content_string
    assert max_num_seqs(node) == INVENTORY_MAX_NUM_SEQS, "the canary does not run with the inventory's setting"
    output = playbook(awx_job, "autotune.yml", settings, cmdline="--check", nodes=[CANARY]).stdout
    assert "check mode: no trial runs" in output
    assert node.file(UNIT).content_string == unit_before and not node.file(FACT).exists
    assert not (tmp_path / "reports").exists()

    job = playbook(awx_job, "autotune.yml", settings, nodes=[CANARY])
    output = job.stdout
    (run,) = (tmp_path / "reports").iterdir()
    tuning = json.loads((run / "trials.json").read_text())
    trials = tuning["trials"]
    assert [t["value"] for t in trials][:2] == [8, 16] and tuning["start"] == 8
    # Real measurements: the KV cache fills as the batch grows, and the last trial stopped the growth.
    assert all(t["status"] == "ok" and t["throughput_rps"] > 0 and t["rss_peak_bytes"] > 0 for t in trials), trials
    peaks = [t["memory_ratio"] for t in trials]
    assert peaks == sorted(peaks) and peaks[-1] >= 0.7 and peaks[0] < 0.7, trials
    assert tuning["reason"] == "memory_limit" and trials[-1]["verdict"] == "memory"
    assert trials[-1]["preemptions"] > 0 and trials[0]["preemptions"] == 0, trials
    chosen = tuning["chosen"]
    assert chosen == max((t for t in trials if not t["verdict"]), key=lambda t: t["throughput_rps"])["value"]
    # Kept on the node, where the serving role reads it; the instance runs and serves with it, back in the pool.
    fact = json.loads(node.file(FACT).content_string)["instances"]["tiny"]
    assert (fact["max_num_seqs"], fact["previous"]) == (chosen, 8) and len(fact["fingerprint"]) == 16
    assert max_num_seqs(node) == chosen and completes(node) and not node.file(DRAIN).exists
    report = (run / "report.md").read_text()
    assert "**Kept: %d** (stopped: the KV cache reached the memory limit)" % chosen in report
    assert "Written to: %s:%s" % (CANARY, FACT) in report
    assert (run / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "trial 1: max_num_seqs 8: ok" in output
    assert job.summary[-1] == "Reports: %s" % run, job.summary
    assert any(line.startswith("  %s: " % CANARY) and "task(s)" in line for line in job.summary), job.summary

    # site.yml keeps the tuned value: its serving stage changes nothing (on the canary: the other hosts are not
    # the tuner's).
    converge = playbook(awx_job, "site.yml", {"llmops_only_stages": ["vllm_server"]}, cmdline="--limit " + CANARY,
                        nodes=[CANARY])
    assert converge.stats["changed"] == {}, converge.stdout[-3000:]
    assert max_num_seqs(node) == chosen


def test_a_failure_mid_tuning_puts_the_instance_back_as_it_was(tmp_path, canary):
    node = canary
    kept = max_num_seqs(node)
    fact_before = node.file(FACT).content_string
    settings = dict(TUNING, autotune_start=kept + 8, autotune_report_dir=str(tmp_path / "reports"))
    key = PKI / "clients" / "lab-client.key"  # the lab's benchmark_client
    away = key.with_name(key.name + ".away")
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_CONFIG=str(PROJECT / "ansible.cfg"))
    tuner = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", INVENTORY,
                              str(PROJECT / "playbooks" / "autotune.yml"), "-e", json.dumps(settings)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                             cwd=PROJECT, env=env)
    try:
        # The first trial restarts the instance with the candidate; the load's key goes away meanwhile.
        deadline = time.monotonic() + 300
        while max_num_seqs(node) != kept + 8:
            assert tuner.poll() is None and time.monotonic() < deadline, "the trial never started"
            time.sleep(1)
        key.rename(away)
        output = tuner.communicate(timeout=600)[0]
    finally:
        if away.exists():
            away.rename(key)
        if tuner.poll() is None:  # the test failed with the tuner still running: the fixture puts the node back
            tuner.kill()
            tuner.wait()
    assert tuner.returncode != 0, output[-4000:]
    flat = " ".join(output.split())
    assert ("autotune: host %s, instance tiny: Drive the load at the canary through its edge failed" % CANARY) in flat
    assert "The instance was put back as it was (max_num_seqs %d) and serves" % kept in flat
    assert max_num_seqs(node) == kept and completes(node) and not node.file(DRAIN).exists
    assert node.file(FACT).content_string == fact_before
    (run,) = (tmp_path / "reports").iterdir()
    assert "**The tuning failed**" in (run / "report.md").read_text()
