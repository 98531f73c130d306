"""Verify capacity against a real vLLM CPU instance behind its TLS edge: the benchmark and its comparison, then the
batch-size tuner (it converges, keeps its value on the node and leaves the instance serving with it; a failure
forced mid-tuning puts the instance back as it was). They run as AWX jobs (ansible-runner, the awx_job fixture),
except the forced failure, which needs the job's process at hand.

The tests run in file order: the tuner's failure test starts from the value the first tuning kept.
"""

import json
import os
import shlex
import shutil
import subprocess
import time

import pytest
import testinfra

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
PKI = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "pki", "clients")
UNIT = "/etc/systemd/system/vllm-tiny.service"
FACT = "/etc/ansible/facts.d/vllm_tuning.fact"
DRAIN = "/var/lib/llmops-vllm/edge/draining"


@pytest.fixture(scope="module")
def node():
    return testinfra.get_host("podman://cap-node")


def playbook(awx_job, name, extravars, check=False):
    """playbooks/<name> as an AWX job; it must succeed. A failure shows the edge's error log too (a 502's cause)."""
    job = awx_job("playbooks/" + name, extravars, cmdline="--check" if check else "")
    if job.status != "successful" or job.rc != 0:
        edge = testinfra.get_host("podman://cap-node").run("tail -n 40 /var/log/nginx/error.log").stdout
        raise AssertionError("%s failed:\n%s\nThe edge's error log:\n%s" % (name, job.stdout[-6000:], edge))
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


# playbooks/benchmark.yml from this machine through the node's edge (the benchmark client's mTLS). A lenient SLO
# (10 s, not the seed's 200 ms): beside another lane's load the P99 of both levels passed 200 ms, and latency is the
# benchmarks' business, not a test's (the SLO arithmetic has its unit tests).
BENCHMARK = {"benchmark_concurrency": [1, 4], "benchmark_duration_s": 5, "benchmark_max_tokens": 16,
             "benchmark_fail_on_errors": True, "benchmark_slo_p99_s": 10}


def test_the_benchmark_measures_the_instance_through_its_edge(tmp_path, node, awx_job):
    """A real streaming load at the real vLLM (check mode first: no load, no report), the report and the comparison."""
    settings = dict(BENCHMARK, benchmark_report_dir=str(tmp_path / "reports"))
    playbook(awx_job, "benchmark.yml", settings, check=True)
    assert not (tmp_path / "reports").exists()
    before = node.file("/var/log/llmops-vllm/edge-audit.log").content_string.count('"path":"/v1/completions"')

    job = playbook(awx_job, "benchmark.yml", settings)
    output = " ".join(job.stdout.split())
    (run,) = (tmp_path / "reports").iterdir()
    results = json.loads((run / "results.json").read_text())
    assert results["version"] == 1 and results["shape"]["max_tokens"] == 16
    by_clients = {r["concurrency"]: r for r in results["results"]}
    assert sorted(by_clients) == [1, 4]
    for clients, result in by_clients.items():
        assert result["model"] == "tiny-llama" and result["via"] == "edge" and result["nodes"] == ["cap-node"]
        assert result["url"].startswith("https://") and result["url"].endswith(":8000/v1/completions")
        assert result["errors"] == 0 and result["succeeded"] >= clients and result["throughput_rps"] > 0
        assert result["completion_tokens"] == 16 * result["succeeded"]  # ignore_eos: exactly the shape's tokens
        assert 0 < result["ttft_ms"]["p50"] <= result["e2e_ms"]["p50"] and result["itl_ms"]["p99"] > 0
        assert result["slo_p99_ms"] == 10000.0 and result["over_slo_share"] is not None
    # The load went through the edge: audited like any client's.
    sent = sum(r["requests"] for r in by_clients.values())
    after = node.file("/var/log/llmops-vllm/edge-audit.log").content_string.count('"path":"/v1/completions"')
    assert after - before == sent
    report = (run / "report.md").read_text()
    assert "| tiny-llama | cap-node | 4 |" in report and "## What this fleet holds" in report
    # The cost of the level it holds, priced as the lab-cpu kind: 12,000 + 2,452.8 (350 W) + 6,000 a year.
    (priced,) = results["tco"]["results"]
    assert results["tco"]["node_kinds"]["lab-cpu"]["total"] == pytest.approx(20452.8)
    held = max((r for r in by_clients.values() if r["slo_met"]), key=lambda r: r["throughput_rps"])
    assert priced["precision"] == "float32" and priced["throughput_rps"] == held["throughput_rps"]
    assert priced["qps_per_10k"] == pytest.approx(held["throughput_rps"] / 2.04528)
    assert "| lab-cpu | tiny-llama | float32 |" in report and "The fleet: 20453 CNY a year" in report
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
# trials instead of stopping at the memory limit. A lenient SLO: the lab's 2 CPUs are slow, and the SLO guard has
# its unit tests.
TUNING = {"autotune_node": "cap-node", "autotune_instance": "tiny", "autotune_step": 8, "autotune_max_trials": 4,
          "autotune_concurrency": 32, "autotune_duration_s": 4, "autotune_slo_p99_s": 10,
          "benchmark_prompt_tokens": 100, "benchmark_max_tokens": 96}


def test_the_tuner_keeps_a_value_on_the_node_and_leaves_the_instance_serving_with_it(tmp_path, node, awx_job):
    settings = dict(TUNING, autotune_report_dir=str(tmp_path / "reports"))
    unit_before = node.file(UNIT).content_string
    output = playbook(awx_job, "autotune.yml", settings, check=True).stdout
    assert "check mode: no trial runs" in output
    assert node.file(UNIT).content_string == unit_before and not node.file(FACT).exists
    assert not (tmp_path / "reports").exists()

    job = playbook(awx_job, "autotune.yml", settings)
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
    assert "Written to: cap-node:%s" % FACT in report
    assert (run / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "trial 1: max_num_seqs 8: ok" in output
    assert job.summary[-1] == "Reports: %s" % run, job.summary
    assert any(line.startswith("  cap-node: ") and "task(s)" in line for line in job.summary), job.summary

    # site.yml keeps the tuned value: its serving stage changes nothing.
    converge = playbook(awx_job, "site.yml", {"llmops_only_stages": ["vllm_server"]})
    assert converge.stats["changed"] == {}, converge.stdout[-3000:]
    assert max_num_seqs(node) == chosen


def test_a_failure_mid_tuning_puts_the_instance_back_as_it_was(tmp_path, node):
    kept = max_num_seqs(node)
    fact_before = node.file(FACT).content_string
    settings = dict(TUNING, autotune_start=kept + 8, autotune_report_dir=str(tmp_path / "reports"))
    key = os.path.join(PKI, "benchmark.key")
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    tuner = subprocess.Popen(["ansible-playbook", "-i", INVENTORY,
                              os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "playbooks", "autotune.yml"),
                              "-e", json.dumps(settings)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, env=env)
    try:
        # The first trial restarts the instance with the candidate; the load's key goes away meanwhile.
        deadline = time.monotonic() + 300
        while max_num_seqs(node) != kept + 8:
            assert tuner.poll() is None and time.monotonic() < deadline, "the trial never started"
            time.sleep(1)
        shutil.move(key, key + ".away")
        output = tuner.communicate(timeout=600)[0]
    finally:
        if os.path.exists(key + ".away"):
            shutil.move(key + ".away", key)
    assert tuner.returncode != 0, output[-4000:]
    flat = " ".join(output.split())
    assert "autotune: host cap-node, instance tiny: Drive the load at the canary through its edge failed" in flat
    assert "The instance was put back as it was (max_num_seqs %d) and serves" % kept in flat
    assert max_num_seqs(node) == kept and completes(node) and not node.file(DRAIN).exists
    assert node.file(FACT).content_string == fact_before
    (run,) = (tmp_path / "reports").iterdir()
    assert "**The tuning failed**" in (run / "report.md").read_text()
