"""Serving benchmark: a vLLM instance launched by vllm_server against a bare `vllm serve`, side by side.

One lab container (bench/lab, from the lab's node image: make node-image) runs both, from the same venv
and model with the same engine arguments:

  pinned  the instance site.yml deploys: placement puts it on CPU 1 (CPU 0 is reserved for housekeeping),
          with CPUAffinity, VLLM_CPU_OMP_THREADS_BIND and the role's environment;
  bare    `vllm serve` with the instance's own arguments and vLLM's defaults for everything the role
          decides (no affinity, VLLM_CPU_OMP_THREADS_BIND=auto), as a transient systemd unit.

Rounds alternate the arms, quiet, with a CPU hog on CPU 0, and quiet again with the instance given both
CPUs (no reserved CPU: equal CPUs for both arms); the idle arm is stopped (SIGSTOP)
meanwhile. The load generator runs in the container on CPU 0 (the housekeeping core) in every run. It
prints each arm's throughput and p50/p99 latency, and the ratios pinned / bare.

  .venv/bin/python bench/serving_bench.py [--rounds 5] [--requests 200] [--concurrency 4] [--keep]
"""

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
INVENTORY = os.path.join(HERE, "lab")
HOST = "bench-node"
NETWORK = "llmops-bench"
PINNED = {"unit": "vllm-pinned.service", "port": 8101}
BARE = {"unit": "bare-vllm.service", "port": 8102}
HOG_CPU = "0"
OFFLINE_ENV = ["HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1", "VLLM_NO_USAGE_STATS=1", "DO_NOT_TRACK=1"]

# The load generator, piped into the node's python3.
with open(os.path.join(HERE, "loadgen.py")) as _f:
    LOADGEN = _f.read()
BODY = {"prompt": "The lab benchmark says", "max_tokens": 16, "temperature": 0, "ignore_eos": True}

HOG = "x = 0\nwhile True: x += 1"


def run(*args, check=True, capture=True, **kwargs):
    return subprocess.run(args, check=check, text=True, capture_output=capture, **kwargs)


def in_node(*args, check=True, capture=True, **kwargs):
    return run("podman", "exec", *kwargs.pop("podman_args", []), HOST, *args, check=check, capture=capture, **kwargs)


def log(message):
    print("bench: %s" % message, file=sys.stderr, flush=True)


def deploy(extra_vars=None):
    log("lab container %s (lab/lab.py up)" % HOST)
    run(sys.executable, os.path.join(REPO, "lab", "lab.py"), "up", "--inventory", INVENTORY, capture=False)
    log("site.yml %s: install vLLM and start the pinned instance (minutes on first run)" % (extra_vars or ""))
    playbook = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    result = run(playbook, os.path.join(REPO, "site.yml"), "-i", INVENTORY, "-e", json.dumps(extra_vars or {}),
                 check=False)
    if result.returncode:
        sys.exit("bench: site.yml failed:\n" + result.stdout[-4000:] + result.stderr[-2000:])


def bare_argv():
    """The pinned instance's own ExecStart, on the bare arm's port."""
    exec_start = in_node("systemctl", "show", "-p", "ExecStart", "--value", PINNED["unit"]).stdout
    argv = shlex.split(exec_start.split("argv[]=", 1)[1].split(" ;", 1)[0])
    argv[argv.index("--port") + 1] = str(BARE["port"])
    return argv


def start_bare(argv):
    if in_node("systemctl", "is-active", BARE["unit"], check=False).stdout.strip() == "active":
        return
    in_node("systemctl", "reset-failed", BARE["unit"], check=False)
    env = [a for e in OFFLINE_ENV for a in ("--setenv", e)]
    in_node("systemd-run", "--unit", BARE["unit"], "--property", "KillMode=mixed", *env, *argv)


def served_model(port):
    models = in_node("python3", "-c", "import json,urllib.request;print(json.load(urllib.request.urlopen("
                     "'http://127.0.0.1:%d/v1/models'))['data'][0]['id'])" % port, check=False)
    return models.stdout.strip() if models.returncode == 0 else None


def wait_ready(arm, timeout=600):
    deadline = time.time() + timeout
    while time.time() < deadline:
        model = served_model(arm["port"])
        if model and measure(arm, model, 4, 2)["errors"] == 0:
            return model
        time.sleep(3)
    journal = in_node("journalctl", "-u", arm["unit"], "-n", "40", "--no-pager", check=False).stdout
    sys.exit("bench: %s is not ready after %d s:\n%s" % (arm["unit"], timeout, journal))


def measure(arm, model, requests, concurrency):
    body = json.dumps(dict(BODY, model=model))
    out = in_node("taskset", "-c", HOG_CPU, "python3", "-", "http", "127.0.0.1", str(arm["port"]), "/v1/completions",
                  str(requests), str(concurrency), body, "-", "16", input=LOADGEN, podman_args=["-i"]).stdout
    return json.loads(out)


# A unit's processes (the lab's cgroups do no CPU accounting and have no freezer): print the CPU seconds
# they used so far, after sending them a signal if one is named.
UNIT_PROCESSES = r"""
import os, signal, sys
unit, sig = sys.argv[1], sys.argv[2]
ticks, total = os.sysconf("SC_CLK_TCK"), 0
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        if "/" + unit not in open("/proc/%s/cgroup" % pid).read():
            continue
        fields = open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()
        if sig != "-":
            os.kill(int(pid), getattr(signal, sig))
    except OSError:
        continue
    total += int(fields[11]) + int(fields[12])
print(total / ticks)
"""


def cpu_seconds(arm, signal_name="-"):
    """CPU seconds the arm's processes used so far; SIGSTOP/SIGCONT freeze and thaw the idle arm."""
    return float(in_node("python3", "-c", UNIT_PROCESSES, arm["unit"], signal_name).stdout)


def hog(on):
    if on:
        in_node("taskset", "-c", HOG_CPU, "python3", "-c", HOG, "noisy-neighbour", podman_args=["-d"])
    else:
        in_node("pkill", "-f", "noisy-neighbour", check=False)


def allowed_cpus(arm):
    pid = in_node("systemctl", "show", "-p", "MainPID", "--value", arm["unit"]).stdout.strip()
    status = in_node("cat", "/proc/%s/status" % pid).stdout
    return next(line.split(":", 1)[1].strip() for line in status.splitlines() if line.startswith("Cpus_allowed_list"))


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100.0 * (len(ordered) - 1))))]


def measure_rounds(results, condition, args):
    """Rounds of both arms, alternating which goes first; the idle arm is frozen meanwhile."""
    arms = {"pinned": PINNED, "bare": BARE}
    models = {name: wait_ready(arm) for name, arm in arms.items()}
    log("%s: pinned runs on CPUs %s, bare on %s" % (condition, allowed_cpus(PINNED), allowed_cpus(BARE)))
    for rnd in range(args.rounds):
        for name in ("pinned", "bare") if rnd % 2 == 0 else ("bare", "pinned"):
            other = arms["bare" if name == "pinned" else "pinned"]
            freeze, thaw = ("SIGSTOP", "SIGCONT") if args.freeze_idle else ("-", "-")
            idle_before = cpu_seconds(other, freeze)
            measure(arms[name], models[name], 8, args.concurrency)  # warm the connections
            t0 = time.perf_counter()
            result = measure(arms[name], models[name], args.requests, args.concurrency)
            idle = (cpu_seconds(other, thaw) - idle_before) / (time.perf_counter() - t0)
            entry = results.setdefault((condition, name), {"rps": [], "lat": [], "errors": 0, "idle": []})
            entry["rps"].append(len(result["latencies_ms"]) / result["wall_s"])
            entry["lat"] += result["latencies_ms"]
            entry["errors"] += result["errors"]
            entry["idle"].append(idle)
            log("%-22s round %d %-6s %6.1f req/s" % (condition, rnd + 1, name, entry["rps"][-1]))


def bench(args):
    results = {}
    deploy()
    start_bare(bare_argv())
    measure_rounds(results, "quiet", args)
    hog(True)
    measure_rounds(results, "hog on CPU %s" % HOG_CPU, args)
    hog(False)
    if args.whole_host:
        # The same instance given both CPUs (no reserved core): equal CPUs, so only the pinning differs.
        deploy({"vllm_reserved_cpus": ""})
        measure_rounds(results, "quiet, no reserved CPU", args)
    return results


def report(results, args):
    print("\nvLLM serving, tiny model, %d requests x %d rounds per arm, concurrency %d, 16 tokens each\n"
          % (args.requests, args.rounds, args.concurrency))
    print("| condition | arm | req/s (median of rounds) | p50 ms | p99 ms | errors | idle arm's CPU (max) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    conditions = list(dict.fromkeys(condition for condition, _arm in results))
    for condition in conditions:
        for name in ("bare", "pinned"):
            e = results[(condition, name)]
            idle = "%.1f %%" % (100 * max(e["idle"]))
            print("| %s | %s | %.1f | %.1f | %.1f | %d | %s |" % (
                condition, name, statistics.median(e["rps"]), percentile(e["lat"], 50), percentile(e["lat"], 99),
                e["errors"], idle))
    print("\n| condition | throughput pinned / bare | p50 pinned / bare | p99 pinned / bare |")
    print("| --- | --- | --- | --- |")
    for condition in conditions:
        p, b = results[(condition, "pinned")], results[(condition, "bare")]
        print("| %s | %.2f | %.2f | %.2f |" % (
            condition, statistics.median(p["rps"]) / statistics.median(b["rps"]),
            percentile(p["lat"], 50) / percentile(b["lat"], 50), percentile(p["lat"], 99) / percentile(b["lat"], 99)))
    print("\n(throughput > 1 and latency < 1 favour the pinned instance)")


def teardown():
    run("podman", "rm", "--force", "--time", "5", HOST, check=False)
    run("podman", "network", "rm", NETWORK, check=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--no-freeze-idle", dest="freeze_idle", action="store_false",
                        help="do not stop the idle arm (SIGSTOP) while the other is measured")
    parser.add_argument("--no-whole-host", dest="whole_host", action="store_false",
                        help="skip the last condition: the instance on both CPUs, quiet")
    parser.add_argument("--keep", action="store_true", help="leave the container running for the next run")
    args = parser.parse_args()
    os.environ.setdefault("CONTAINERS_CONF", os.path.join(REPO, ".cache", "containers.conf"))
    os.environ.setdefault("ANSIBLE_CONFIG", os.path.join(REPO, "ansible.cfg"))
    try:
        report(bench(args), args)
    finally:
        if run("podman", "container", "exists", HOST, check=False).returncode == 0:
            hog(False)
        if not args.keep:
            teardown()


if __name__ == "__main__":
    main()
