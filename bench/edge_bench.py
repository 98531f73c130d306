"""Edge benchmark: the TLS edge (TLS 1.3 + mTLS, keep-alive) against direct loopback vLLM, side by side.

One lab container (bench/lab, from the lab's node image: make node-image) runs what site.yml deploys: the pki and
edge roles in front of one vLLM instance (CPU 1; CPU 0 is the housekeeping core, where nginx and the load
generator run). Both arms hit the same instance with the same load, from the same load generator in the node:

  direct  http://127.0.0.1:8101, vLLM's own port
  edge    https://<node>:8000 with the bench client's certificate: TLS 1.3, mTLS, Lua routing by model, audit log

Rounds alternate which arm goes first. Two loads: 16-token completions, and /tokenize (no generation, so the edge's
own cost is most of what differs). It prints each arm's throughput and p50/p99 latency, the throughput ratio
edge / direct and the latency overhead edge - direct.

  .venv/bin/python bench/edge_bench.py [--rounds 7] [--requests 300] [--concurrency 4] [--keep]
"""

import argparse
import json
import os
import statistics
import sys

from serving_bench import BODY, HOG_CPU, HOST, LOADGEN, deploy, in_node, log, percentile, run, teardown

CERTS = "/root/bench-certs"
DIRECT = {"scheme": "http", "port": 8101}
EDGE = {"scheme": "https", "port": 8000}
LOADS = {
    "completions": ("/v1/completions", BODY),
    "tokenize": ("/tokenize", {"prompt": "The lab benchmark says something longer, to be tokenized."}),
}


def node_ip():
    return in_node("hostname", "-I").stdout.split()[0]


def install_client_certificate():
    """The bench client's certificate, from the controller's pki_dir into the node (the load generator's host)."""
    pki = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".cache", "pki", "bench")
    in_node("mkdir", "-p", CERTS)
    for name in ("ca.crt", "clients/bench-client.crt", "clients/bench-client.key"):
        run("podman", "cp", os.path.join(pki, name), "%s:%s/%s" % (HOST, CERTS, os.path.basename(name)))


def measure(arm, load, requests, concurrency, address):
    path, body = LOADS[load]
    body = json.dumps(dict(body, model="tiny-llama"))
    host = "127.0.0.1" if arm is DIRECT else address
    tokens = "16" if load == "completions" else "0"
    out = in_node("taskset", "-c", HOG_CPU, "python3", "-", arm["scheme"], host, str(arm["port"]), path,
                  str(requests), str(concurrency), body, CERTS, tokens, input=LOADGEN, podman_args=["-i"]).stdout
    return json.loads(out)


def bench(args):
    deploy()
    install_client_certificate()
    address = node_ip()
    arms = {"direct": DIRECT, "edge": EDGE}
    results = {}
    for load in LOADS:
        for name, arm in arms.items():  # warm both paths and check them
            warm = measure(arm, load, 16, args.concurrency, address)
            if warm["errors"]:
                sys.exit("bench: %s %s failed: %s" % (name, load, warm))
        for rnd in range(args.rounds):
            for name in ("direct", "edge") if rnd % 2 == 0 else ("edge", "direct"):
                result = measure(arms[name], load, args.requests, args.concurrency, address)
                entry = results.setdefault((load, name), {"rps": [], "lat": [], "errors": 0})
                entry["rps"].append(len(result["latencies_ms"]) / result["wall_s"])
                entry["lat"] += result["latencies_ms"]
                entry["errors"] += result["errors"]
                log("%-12s round %d %-6s %7.1f req/s" % (load, rnd + 1, name, entry["rps"][-1]))
    audit = in_node("wc", "-l", "/var/log/llmops-vllm/edge-audit.log").stdout.split()[0]
    log("audit log: %s lines" % audit)
    return results


def report(results, args):
    print("\nvLLM behind the edge vs direct, tiny model, %d requests x %d rounds per arm, concurrency %d, keep-alive\n"
          % (args.requests, args.rounds, args.concurrency))
    print("| load | arm | req/s (median of rounds) | p50 ms | p99 ms | errors |")
    print("| --- | --- | --- | --- | --- | --- |")
    for load in LOADS:
        for name in ("direct", "edge"):
            e = results[(load, name)]
            row = (load, name, statistics.median(e["rps"]), percentile(e["lat"], 50), percentile(e["lat"], 99),
                   e["errors"])
            print("| %s | %s | %.1f | %.3f | %.3f | %d |" % row)
    print("\n| load | throughput edge / direct | p50 overhead (edge - direct) | p99 overhead |")
    print("| --- | --- | --- | --- |")
    for load in LOADS:
        d, e = results[(load, "direct")], results[(load, "edge")]
        print("| %s | %.3f | %+.3f ms | %+.3f ms |" % (
            load, statistics.median(e["rps"]) / statistics.median(d["rps"]),
            percentile(e["lat"], 50) - percentile(d["lat"], 50), percentile(e["lat"], 99) - percentile(d["lat"], 99)))
    print("\n(goal: throughput ratio >= 0.97 and p50 overhead <= 1 ms)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--keep", action="store_true", help="leave the container running for the next run")
    args = parser.parse_args()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.environ.setdefault("CONTAINERS_CONF", os.path.join(repo, ".cache", "containers.conf"))
    os.environ.setdefault("ANSIBLE_CONFIG", os.path.join(repo, "ansible.cfg"))
    try:
        report(bench(args), args)
    finally:
        if not args.keep:
            teardown()


if __name__ == "__main__":
    main()
