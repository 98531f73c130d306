"""Fault switch benchmark: a game day's fault set and lifted on one lab node by playbooks/edge_fault.yml, against
site.yml limited to that node and the edge's configure and run tags (how the lvs scenario did it before).

Each arm sets edge_fault_injection {share: 1.0, status: 503} on the node, checks through the node's own edge that a
completion gets the injected 503, lifts the fault and checks that one gets a 200 again. Rounds alternate which arm
goes first; the figure is the median of the per-round ratios game day / site.yml of the set-and-lift seconds, with
its spread. It needs the lab (make lab) and leaves it as it found it.

  make lab && .venv/bin/python bench/fault_bench.py [--rounds 5] [--node lab-node1]
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lab"))
from lvs_probe import NODES, curl, play  # noqa: E402

FAULT = {"share": 1.0, "status": 503}
ARMS = {
    "game day": lambda node, fault: play("playbooks/edge_fault.yml", "--limit", node,
                                         "-e", json.dumps({"edge_fault_injection": fault})),
    "site.yml": lambda node, fault: play("site.yml", "--limit", node, "--tags", "edge_configure,edge_run",
                                         "-e", json.dumps({"edge_fault_injection": fault})),
}


def status(node):
    """The status of a completion through the node's own edge (nginx has reloaded once a new connection sees it)."""
    body = json.dumps({"model": "tiny-llama", "prompt": "fault", "max_tokens": 2})
    return curl("-o", "/dev/null", "-w", "%{http_code}", "-H", "Content-Type: application/json", "-d", body,
                "https://%s:8000/v1/completions" % NODES[node]).stdout


def until(node, expected, timeout=30):
    deadline = time.monotonic() + timeout
    while status(node) != expected:
        if time.monotonic() > deadline:
            sys.exit("bench: %s never answered %s" % (node, expected))
        time.sleep(0.2)


def set_and_lift(arm, node):
    """Seconds to set the fault, see it, lift it and see it gone."""
    start = time.perf_counter()
    ARMS[arm](node, FAULT)
    until(node, "503")
    ARMS[arm](node, {})
    until(node, "200")
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--node", default=sorted(NODES)[0], choices=sorted(NODES))
    args = parser.parse_args()
    until(args.node, "200")
    times = {arm: [] for arm in ARMS}
    for rnd in range(args.rounds):
        for arm in list(ARMS) if rnd % 2 == 0 else list(ARMS)[::-1]:
            times[arm].append(set_and_lift(arm, args.node))
            print("bench: round %d %-8s %5.1f s" % (rnd + 1, arm, times[arm][-1]), file=sys.stderr, flush=True)
    print("\nA fault set and lifted on %s (each checked through its edge), %d rounds per arm\n"
          % (args.node, args.rounds))
    print("| arm | seconds (median of rounds) | min | max |")
    print("| --- | --- | --- | --- |")
    for arm, values in times.items():
        print("| %s | %.1f | %.1f | %.1f |" % (arm, statistics.median(values), min(values), max(values)))
    ratios = [g / s for g, s in zip(times["game day"], times["site.yml"])]
    print("\nseconds, game day / site.yml, median of the per-round ratios: **%.2f** (rounds %.2f to %.2f)"
          % (statistics.median(ratios), min(ratios), max(ratios)))


if __name__ == "__main__":
    main()
