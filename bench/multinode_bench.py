"""Multi-node benchmark: a PP=2 instance across two lab hosts against the same model on one host, side by side.

The two lab hosts of molecule/multinode (mn-head, mn-rank; `molecule converge -s multinode`), from the lab's node
image, run both arms from the same venv and model with the same engine arguments:

  span  the scenario's instance `pp`: pipeline parallelism 2, one stage on each host (CPU 0 of each), vLLM's
        launcher under the rank guard, gloo over the lab network between the two containers;
  solo  the same `vllm serve` on mn-head alone (CPU 0, no pipeline parallelism), as a transient systemd unit.

The lab's two hosts are containers on one machine: their CPU 0 is the same core. So the span arm has no more
compute than the solo arm, and the ratio is what the split itself costs: the stage hand-off over TCP (gloo) and
the scheduling of two stages, not what a second machine would add. The scenario's TP=2 instance is stopped
meanwhile. Rounds alternate the arms and which goes first, the idle arm frozen (SIGSTOP on both hosts); the load
generator runs on mn-head's CPU 1 against each arm's loopback port. Prints each arm's median throughput and
p50/p99, and the median of the per-round ratios span / solo with their range.

  .venv/bin/python bench/multinode_bench.py [--rounds 5] [--requests 100] [--concurrency 4] [--keep]
"""

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

from serving_bench import UNIT_PROCESSES, percentile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
HEAD, RANK = "mn-head", "mn-rank"
SPAN = {"unit": "vllm-pp.service", "port": 8101, "hosts": (HEAD, RANK)}
SOLO = {"unit": "solo-vllm.service", "port": 8103, "hosts": (HEAD,)}
LOAD_CPU = "1"
SPAN_FLAGS = ("--pipeline-parallel-size", "--distributed-executor-backend", "--nnodes", "--node-rank",
              "--master-addr", "--master-port")
with open(os.path.join(HERE, "loadgen.py")) as _f:
    LOADGEN = _f.read()
BODY = {"prompt": "The lab benchmark says", "max_tokens": 16, "temperature": 0, "ignore_eos": True}


def run(*args, check=True, **kwargs):
    return subprocess.run(args, check=check, text=True, capture_output=True, **kwargs)


def on(host, *args, check=True, **kwargs):
    return run("podman", "exec", *kwargs.pop("podman_args", []), host, *args, check=check, **kwargs)


def log(message):
    print("bench: %s" % message, file=sys.stderr, flush=True)


def molecule(action):
    env = dict(os.environ, CONTAINERS_CONF=os.path.join(REPO, ".cache", "containers.conf"),
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    log("molecule %s -s multinode (minutes)" % action)
    result = subprocess.run([os.path.join(os.path.dirname(sys.executable), "molecule"), action, "-s", "multinode"],
                            cwd=REPO, env=env, text=True, capture_output=True, check=False)
    if result.returncode:
        sys.exit("bench: molecule %s failed:\n%s" % (action, (result.stdout + result.stderr)[-4000:]))


def solo_command():
    """The span head's own vLLM command (after the guard's --), without the span's flags, on the solo port."""
    unit = on(HEAD, "cat", "/etc/systemd/system/" + SPAN["unit"]).stdout
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    argv = shlex.split(exec_start.split("=", 1)[1])
    argv = argv[argv.index("--") + 1:]
    for flag in SPAN_FLAGS:
        if flag in argv:
            del argv[argv.index(flag):argv.index(flag) + 2]
    argv[argv.index("--port") + 1] = str(SOLO["port"])
    environment = on(HEAD, "systemctl", "show", "-p", "Environment", "--value", SPAN["unit"]).stdout.split()
    environment = [e for e in environment if not e.startswith(("VLLM_HOST_IP=", "GLOO_SOCKET_IFNAME="))]
    return argv, environment


def start_solo():
    if on(HEAD, "systemctl", "is-active", SOLO["unit"], check=False).stdout.strip() == "active":
        return
    argv, environment = solo_command()
    on(HEAD, "systemctl", "reset-failed", SOLO["unit"], check=False)
    env = [a for e in environment for a in ("--setenv", e)]
    on(HEAD, "systemd-run", "--unit", SOLO["unit"], "--uid", "vllm", "--property", "CPUAffinity=0",
       "--property", "KillMode=mixed", *env, *argv)


def measure(arm, requests, concurrency, model):
    body = json.dumps(dict(BODY, model=model))
    out = on(HEAD, "taskset", "-c", LOAD_CPU, "python3", "-", "http", "127.0.0.1", str(arm["port"]), "/v1/completions",
             str(requests), str(concurrency), body, "-", "16", input=LOADGEN, podman_args=["-i"]).stdout
    return json.loads(out)


def wait_ready(arm, model, timeout=900):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if measure(arm, 2, 1, model)["errors"] == 0:
                return
        except (subprocess.CalledProcessError, ValueError):
            pass
        time.sleep(5)
    sys.exit("bench: %s is not ready after %d s" % (arm["unit"], timeout))


def cpu_seconds(arm, signal_name="-"):
    return sum(float(on(h, "python3", "-c", UNIT_PROCESSES, arm["unit"], signal_name).stdout) for h in arm["hosts"])


def bench(args):
    arms = {"span": SPAN, "solo": SOLO}
    models = {"span": "tiny-pp", "solo": "tiny-pp"}
    for host in (HEAD, RANK):
        on(host, "systemctl", "stop", "vllm-tp.service", check=False)
    start_solo()
    for name, arm in arms.items():
        wait_ready(arm, models[name])
    rounds = []
    for rnd in range(args.rounds):
        result = {}
        for name in ("span", "solo") if rnd % 2 == 0 else ("solo", "span"):
            other = arms["solo" if name == "span" else "span"]
            idle_before = cpu_seconds(other, "SIGSTOP")
            measure(arms[name], 8, args.concurrency, models[name])  # warm the connections
            t0 = time.perf_counter()
            out = measure(arms[name], args.requests, args.concurrency, models[name])
            idle = (cpu_seconds(other, "SIGCONT") - idle_before) / (time.perf_counter() - t0)
            result[name] = {"rps": len(out["latencies_ms"]) / out["wall_s"], "lat": out["latencies_ms"],
                            "errors": out["errors"], "idle": idle}
            log("round %d %-4s %6.1f req/s, p50 %.0f ms" % (rnd + 1, name, result[name]["rps"],
                                                            percentile(out["latencies_ms"], 50)))
        rounds.append(result)
    return rounds


def report(rounds, args):
    print("\nPP=2 across two lab hosts (span) against one host (solo), tiny model, %d requests x %d rounds per arm, "
          "concurrency %d, 16 tokens each\n" % (args.requests, args.rounds, args.concurrency))
    print("| arm | req/s (median of rounds) | p50 ms | p99 ms | errors | idle arm's CPU (max) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in ("solo", "span"):
        lat = [x for r in rounds for x in r[name]["lat"]]
        print("| %s | %.1f | %.1f | %.1f | %d | %.1f %% |" % (
            name, statistics.median(r[name]["rps"] for r in rounds), percentile(lat, 50), percentile(lat, 99),
            sum(r[name]["errors"] for r in rounds), 100 * max(r[name]["idle"] for r in rounds)))
    print("\n| span / solo, per round | median | range |")
    print("| --- | --- | --- |")
    for label, read in (("throughput", lambda r: r["rps"]), ("p50", lambda r: percentile(r["lat"], 50)),
                        ("p99", lambda r: percentile(r["lat"], 99))):
        ratios = [read(r["span"]) / read(r["solo"]) for r in rounds]
        print("| %s | %.2f | %.2f-%.2f |" % (label, statistics.median(ratios), min(ratios), max(ratios)))
    print("\n(throughput < 1 and latency > 1: what spanning two hosts costs)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--keep", action="store_true", help="leave the scenario's hosts up")
    parser.add_argument("--no-converge", action="store_true", help="the hosts are up already")
    args = parser.parse_args()
    if not args.no_converge:
        molecule("converge")
    try:
        report(bench(args), args)
    finally:
        on(HEAD, "systemctl", "stop", SOLO["unit"], check=False)
        if not args.keep:
            molecule("destroy")


if __name__ == "__main__":
    main()
