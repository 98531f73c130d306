"""Batch-tuning benchmark: playbooks/autotune.yml's tuner against an exhaustive grid over the same candidates.

One lab container (bench/lab, from the lab's node image: make node-image) serves the tiny model with a KV cache of
6 MiB, as the lab's vLLM nodes have. Each round runs both arms on that same instance, the order alternating:

  tuner   one playbooks/autotune.yml run: from max_num_seqs 8 in steps of 8, the policy decides when to stop;
  grid    one autotune.yml run per candidate (4, 8, ..., 36, with autotune_max_trials 1): every value measured the
          same way (a restart through the serving role, 32 clients with distinct prompts for --seconds through the
          edge).

Per round: the trials each used, the throughput of the value the tuner kept against the grid's best under the same
rules (within the SLO, the KV cache under the 70 % limit), and against the grid's best within the SLO alone (what
the memory headroom costs), and whether the kept value broke the SLO. The figures are the medians of the per-round
ratios with their spread. Goal (issue 16): at least 95 % of the grid's best in at most a third of its trials.

  make node-image && .venv/bin/python bench/autotune_bench.py [--rounds 2] [--seconds 4] [--keep]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
INVENTORY = os.path.join(HERE, "lab")
HOST = "bench-node"
NETWORK = "llmops-bench"
GRID = list(range(4, 37, 4))
SLO_S = 10.0
MEMORY_LIMIT = 0.7
INSTANCE = {"name": "pinned", "model": "/var/lib/vllm/models/tiny-llama",
            "model_src": os.path.join(REPO, ".cache", "models", "tiny-llama"), "served_model_name": "tiny-llama",
            "port": 8101, "device": "cpu", "dtype": "float32", "max_model_len": 256, "max_num_seqs": 8,
            "kv_cache_memory_bytes": 6291456, "extra_args": ["--enforce-eager"]}


def log(message):
    print("bench: %s" % message, file=sys.stderr, flush=True)


def playbook(name, *extra):
    command = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", INVENTORY,
               os.path.join(REPO, name)]
    for item in extra:
        command += ["-e", json.dumps(item)]
    result = subprocess.run(command, text=True, capture_output=True, check=False)
    if result.returncode:
        sys.exit("bench: %s failed:\n%s%s" % (name, result.stdout[-4000:], result.stderr[-2000:]))


def tune(workdir, seconds, **settings):
    """One autotune.yml run; its trials.json."""
    reports = tempfile.mkdtemp(dir=workdir)
    playbook("playbooks/autotune.yml", {"vllm_instances": [INSTANCE]}, dict({
        "autotune_node": HOST, "autotune_instance": "pinned", "autotune_step": 8, "autotune_concurrency": 32,
        "autotune_duration_s": seconds, "autotune_slo_p99_s": SLO_S, "autotune_drain": False,
        "benchmark_client": "bench-client", "benchmark_max_tokens": 96, "autotune_report_dir": reports}, **settings))
    (run,) = os.listdir(reports)
    with open(os.path.join(reports, run, "trials.json")) as f:
        return json.load(f)


def tuner_arm(workdir, seconds):
    result = tune(workdir, seconds, autotune_start=8, autotune_max_trials=9)
    kept = [t for t in result["trials"] if t["value"] == result["chosen"] and not t["verdict"]]
    best = max(t["throughput_rps"] for t in kept) if kept else 0.0
    slo_broken = any(t["p99_s"] is None or t["p99_s"] > SLO_S for t in kept)
    return {"trials": len(result["trials"]), "chosen": result["chosen"], "rps": best, "slo_broken": slo_broken,
            "values": [t["value"] for t in result["trials"]]}


def grid_arm(workdir, seconds):
    measured = []
    for value in GRID:
        (trial,) = tune(workdir, seconds, autotune_start=value, autotune_max_trials=1,
                        autotune_memory_limit=1.0)["trials"]
        measured.append(trial)
        log("grid: max_num_seqs %d: %s, %s req/s, P99 %s s, KV peak %s" % (
            value, trial["status"], trial["throughput_rps"], trial["p99_s"], trial["memory_ratio"]))
    within = [t for t in measured if t["status"] == "ok" and t["p99_s"] is not None and t["p99_s"] <= SLO_S]
    # The same rules as the tuner's (the KV cache under its 70 % limit), and the SLO alone.
    same = max((t for t in within if t["memory_ratio"] is not None and t["memory_ratio"] < MEMORY_LIMIT),
               key=lambda t: t["throughput_rps"])
    slo_only = max(within, key=lambda t: t["throughput_rps"])
    return {"trials": len(measured), "chosen": same["value"], "rps": same["throughput_rps"],
            "slo_only": (slo_only["value"], slo_only["throughput_rps"]), "slo_broken": False, "values": GRID}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=4)
    parser.add_argument("--keep", action="store_true", help="leave the container running for the next run")
    args = parser.parse_args()
    os.environ.setdefault("CONTAINERS_CONF", os.path.join(REPO, ".cache", "containers.conf"))
    os.environ.setdefault("ANSIBLE_CONFIG", os.path.join(REPO, "ansible.cfg"))
    rounds = []
    try:
        log("lab container %s (lab/lab.py up) and site.yml" % HOST)
        subprocess.run([sys.executable, os.path.join(REPO, "lab", "lab.py"), "up", "--inventory", INVENTORY],
                       check=True)
        playbook("site.yml", {"vllm_instances": [INSTANCE]})
        with tempfile.TemporaryDirectory() as workdir:
            for number in range(args.rounds):
                arms = {}
                for arm in (("tuner", "grid") if number % 2 == 0 else ("grid", "tuner")):
                    arms[arm] = (tuner_arm if arm == "tuner" else grid_arm)(workdir, args.seconds)
                    log("round %d %s: %s" % (number + 1, arm, arms[arm]))
                rounds.append(arms)
    finally:
        if not args.keep:
            subprocess.run(["podman", "rm", "--force", "--time", "5", HOST], check=False)
            subprocess.run(["podman", "network", "rm", NETWORK], check=False)
    throughput = [r["tuner"]["rps"] / r["grid"]["rps"] for r in rounds]
    unguarded = [r["tuner"]["rps"] / r["grid"]["slo_only"][1] for r in rounds]
    trials = [r["tuner"]["trials"] / float(r["grid"]["trials"]) for r in rounds]
    print("\n%d rounds, arms alternating, %g s of 32 clients per trial, SLO P99 %g s, memory limit %.0f %%\n" % (
        args.rounds, args.seconds, SLO_S, MEMORY_LIMIT * 100))
    print("| round | tuner: values tried | kept | req/s | grid, same rules: best | req/s | grid, SLO only: best "
          "| req/s | tuner / grid (same rules) | trials |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for number, r in enumerate(rounds):
        print("| %d | %s | %d | %.1f | %d | %.1f | %d | %.1f | %.2f | %d / %d |" % (
            number + 1, ", ".join(str(v) for v in r["tuner"]["values"]), r["tuner"]["chosen"], r["tuner"]["rps"],
            r["grid"]["chosen"], r["grid"]["rps"], r["grid"]["slo_only"][0], r["grid"]["slo_only"][1],
            throughput[number], r["tuner"]["trials"], r["grid"]["trials"]))
    print("\ntuner / grid best, same rules: median %.2f (%.2f to %.2f); against the grid's best within the SLO alone: "
          "median %.2f (%.2f to %.2f); trials: median %.2f (%.2f to %.2f); a kept value over the SLO: %s" % (
              statistics.median(throughput), min(throughput), max(throughput), statistics.median(unguarded),
              min(unguarded), max(unguarded), statistics.median(trials), min(trials), max(trials),
              "yes" if any(r["tuner"]["slo_broken"] for r in rounds) else "none"))


if __name__ == "__main__":
    main()
