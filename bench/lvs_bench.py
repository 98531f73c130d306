"""LVS front door benchmark: ejection, breaker and failover times, VIP against direct serving, rolling upgrade.

Measures the lab's front door (make lab: two director VMs with keepalived, IPVS and the breaker, two vLLM nodes behind
their TLS edges) from this machine, the client, with lab/lvs_probe.py's helpers:

  ejection    nginx stopped on lab-node2: seconds until its weight is 0 on the master director (sampled every 0.2 s)
  breaker     10 % of 503 injected at lab-node1's edge under 10 req/s through the VIP: seconds from the first 503 the
              client saw, and from the fault play's end, to the node's weight 0 on the master
  failover    keepalived stopped on the master: seconds until the VIP is on the backup, both ends driven over ssh
              sessions opened beforehand (one ssh round trip is included; it is measured and printed beside it);
              rounds alternate the directors (nopreempt: the old master comes back as the backup)
  throughput  closed-loop completions (bench/loadgen.py, run here) through the VIP against straight to both nodes'
              edges with the same total concurrency; rounds alternate which arm goes first
  upgrade     (only with --upgrade: it restarts every instance) playbooks/rolling_upgrade.yml under 20 req/s with
              every instance's max_num_seqs toggled: wall time per node and failed requests, against a floor taken
              on lab-node1 by hand: drain, restart to ready, re-admit

Each measurement leaves the fleet as it found it, on failure too: both nodes at full weight on both directors, no
fault, keepalived running on both. Figures are the median and the worst of the rounds; the directors are emulated
(QEMU TCG), so the absolute times are not production figures.

  make lab && .venv/bin/python bench/lvs_bench.py [--rounds 5] [--only ejection,breaker,failover,throughput]
      [--upgrade] [--requests 200] [--concurrency 8] [--tokens 16] [--json PATH]
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import yaml

from serving_bench import log, percentile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "lab"))
from lvs_probe import (  # noqa: E402
    BREAKER, CA, CERT, DIRECTORS, FULL, INVENTORY, KEY, NODES, VIP, Load, Watch, full_weight_everywhere, master,
    measure_failover, play, set_fault, ssh, weights)

MEASUREMENTS = ("ejection", "breaker", "failover", "throughput", "upgrade")
NODE1, NODE2 = list(NODES)[:2]
ARMS = ("vip", "direct")
FAULT = {"share": 0.1, "status": 503}
DRAIN_FILE = "/var/lib/llmops-vllm/edge/draining"
LOADGEN = os.path.join(HERE, "loadgen.py")
SETTLE = 120
WINDOW, COOLDOWN = BREAKER["window"], BREAKER["cooldown"]
# Full weight again after the breaker opened: the cool-down (doubled if it re-opens) and a clean window.
BREAKER_SETTLE = COOLDOWN * 4 + WINDOW * 2 + 60
READY = "until [ \"$(curl -s -o /dev/null -w '%%{http_code}' http://127.0.0.1:%d/health)\" = 200 ]; do sleep 0.2; done"
EMULATED = ("The directors are QEMU VMs under software emulation (TCG, no KVM) on the development machine, so the "
            "absolute times are not production figures: read them as upper bounds and compare the rows.")
TIMES = ["| measurement | median | worst | rounds |", "| --- | --- | --- | --- |"]


# The fleet

def until(predicate, timeout, step=1.0):
    """Seconds until predicate() holds (an ssh or podman error counts as not yet), or None after timeout."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            if predicate():
                return time.monotonic() - start
        except (AssertionError, OSError, subprocess.SubprocessError):
            pass
        time.sleep(step)
    return None


def fleet():
    """Each director's weights, for messages."""
    try:
        return {d: weights(d) for d in DIRECTORS}
    except (AssertionError, OSError, subprocess.SubprocessError) as e:
        return repr(e)


def settle(timeout=SETTLE):
    """Seconds until both nodes are at full weight on every director; RuntimeError after timeout."""
    waited = until(full_weight_everywhere, timeout)
    if waited is None:
        raise RuntimeError("the fleet is not back at full weight after %d s: %s" % (timeout, fleet()))
    return waited


def check_lab():
    try:
        master()
        full = full_weight_everywhere()
    except (AssertionError, OSError, subprocess.SubprocessError) as e:
        sys.exit("bench: the lab is not up, or no single director holds the VIP (make lab): %r" % e)
    if not full:
        sys.exit("bench: not every node is at full weight on every director: %s" % fleet())


def in_node(name, *args, check=True):
    result = subprocess.run(["podman", "exec", name, *args], capture_output=True, text=True, check=False,
                            timeout=1200)
    if check and result.returncode:
        raise RuntimeError("podman exec %s %s: %s" % (name, " ".join(args), result.stderr.strip()))
    return result.stdout


def since(stamp, start):
    return None if stamp is None or start is None else stamp - start


def secs(value):
    return "–" if value is None else "%.2f s" % value


# Measurements: each fills raw as it goes, so a failure still reports the rounds done.

def ejection(args, raw):
    """nginx stopped on NODE2: seconds until its weight is 0 on the master, then back at full weight."""
    address, watch = NODES[NODE2], Watch(master())
    try:
        for rnd in range(args.rounds):
            settle()
            stopped = time.monotonic()
            in_node(NODE2, "systemctl", "stop", "nginx")
            try:
                out = watch.first(address, lambda w: w == 0, stopped, timeout=30)
            finally:
                started = time.monotonic()
                in_node(NODE2, "systemctl", "start", "nginx")
            back = watch.first(address, lambda w: w == FULL, started, timeout=SETTLE)
            raw["rounds"].append({"out_s": out, "back_s": back})
            log("ejection round %d: weight 0 after %s, full weight %s after nginx started"
                % (rnd + 1, secs(out), secs(back)))
    finally:
        watch.stop()
        in_node(NODE2, "systemctl", "start", "nginx", check=False)
        settle()


def breaker_round(watch, address):
    """One ejection by the breaker under a load at the VIP; the fault is lifted before it returns."""
    offset = time.time() - time.monotonic()
    load = Load(rate=10, seconds=900)
    try:
        start = time.monotonic()
        set_fault([NODE1], FAULT)
        played = time.monotonic()
        out = watch.first(address, lambda w: w == 0, start, timeout=WINDOW + 30)
        summary = load.stop()
    finally:
        if load.process.poll() is None:
            load.process.kill()
            load.process.wait()
        set_fault([NODE1], {})
    first_503 = min((stamp for stamp, status in summary["failures"] if status == "503"), default=None)
    ejected = None if out is None else start + out
    return {"reaction_s": since(ejected, None if first_503 is None else first_503 - offset),
            "after_play_s": since(ejected, played), "play_s": played - start, "requests": summary["requests"],
            "statuses": summary["statuses"]}


def breaker(args, raw):
    """10 % of 503 at NODE1's edge: seconds from the first 503 a client saw to the node's weight 0 on the master."""
    address, watch = NODES[NODE1], Watch(master())
    try:
        for rnd in range(args.rounds):
            settle(BREAKER_SETTLE)
            result = breaker_round(watch, address)
            result["back_s"] = settle(BREAKER_SETTLE)
            raw["rounds"].append(result)
            log("breaker round %d: weight 0 %s after the first 503, %s after the fault play's end (the play took "
                "%.0f s); full weight %s after the lift" % (
                    rnd + 1, secs(result["reaction_s"]), secs(result["after_play_s"]), result["play_s"],
                    secs(result["back_s"])))
    finally:
        watch.stop()
        settle(BREAKER_SETTLE)


def failover_round():
    """Stop keepalived on the master: seconds until the backup holds the VIP, and the ssh round trip."""
    result = measure_failover()
    result.update(back_s=settle(), master_after=master())
    return result


def failover(args, raw):
    """keepalived stopped on the master, rounds alternating the directors."""
    try:
        for rnd in range(args.rounds):
            settle()
            result = failover_round()
            raw["rounds"].append(result)
            log("failover round %d: %s -> %s, VIP moved after %s (ssh round trip %s); %s restarted as backup, full "
                "weight after %s, master now %s" % (rnd + 1, result["from"], result["to"], secs(result["failover_s"]),
                                                    secs(result["ssh_round_trip_s"]), result["from"],
                                                    secs(result["back_s"]), result["master_after"]))
    finally:
        for director in DIRECTORS:
            ssh(director, "systemctl start keepalived", check=False)
        settle()


def run_arm(arm, requests, concurrency, body, certs, tokens):
    """One closed-loop run: one loadgen at the VIP, or one per node's edge sharing requests and concurrency."""
    hosts = [VIP] if arm == "vip" else list(NODES.values())
    procs = [subprocess.Popen([sys.executable, LOADGEN, "https", host, "8000", "/v1/completions",
                               str(requests // len(hosts)), str(max(1, concurrency // len(hosts))), body, certs,
                               str(tokens)], stdout=subprocess.PIPE, text=True) for host in hosts]
    try:
        outs = [json.loads(proc.communicate(timeout=1800)[0]) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    latencies = [ms for out in outs for ms in out["latencies_ms"]]
    if not latencies:
        raise RuntimeError("%s: no request answered: %s" % (arm, [out["errors"] for out in outs]))
    wall = max(out["wall_s"] for out in outs)
    return {"rps": len(latencies) / wall, "p50_ms": percentile(latencies, 50), "p99_ms": percentile(latencies, 99),
            "errors": sum(out["errors"] for out in outs), "wall_s": wall, "latencies_ms": latencies}


def throughput(args, raw):
    """Completions through the VIP against straight to both edges, the arms alternating which goes first."""
    body = json.dumps({"model": "tiny-llama", "prompt": "bench", "max_tokens": args.tokens, "ignore_eos": True})
    with tempfile.TemporaryDirectory() as certs:
        for name, target in (("ca.crt", CA), ("bench-client.crt", CERT), ("bench-client.key", KEY)):
            os.symlink(target, os.path.join(certs, name))
        for arm in ARMS:
            warm = run_arm(arm, 16, args.concurrency, body, certs, args.tokens)
            if warm["errors"]:
                raise RuntimeError("the %s arm failed %d of 16 warm-up requests" % (arm, warm["errors"]))
        for rnd in range(args.rounds):
            for arm in ARMS if rnd % 2 == 0 else ARMS[::-1]:
                result = run_arm(arm, args.requests, args.concurrency, body, certs, args.tokens)
                raw["rounds"].append(dict(result, round=rnd + 1, arm=arm))
                log("throughput round %d %-6s %6.1f req/s, p50 %.1f ms, p99 %.1f ms, %d errors"
                    % (rnd + 1, arm, result["rps"], result["p50_ms"], result["p99_ms"], result["errors"]))


def lab_instances():
    """The lab's vllm_instances, model_src resolved as the inventory would."""
    with open(os.path.join(INVENTORY, "group_vars", "vllm_nodes.yml")) as f:
        instances = yaml.safe_load(f)["vllm_instances"]
    for instance in instances:
        instance["model_src"] = instance["model_src"].replace("{{ inventory_dir }}", INVENTORY)
    return instances


def toggle_max_num_seqs(instances):
    """Each instance's max_num_seqs set to 6, or back to the inventory's value where NODE1 runs 6 now."""
    for instance in instances:
        unit = in_node(NODE1, "cat", "/etc/systemd/system/vllm-%s.service" % instance["name"])
        running = re.search(r"--max-num-seqs[ =](\d+)", unit)
        if not running or int(running.group(1)) != 6:
            instance["max_num_seqs"] = 6
    return instances


def slowest(watches, address, weight, start, timeout):
    """Seconds from start until every director's watch shows the weight, or None."""
    times = [watch.first(address, lambda w: w == weight, start, timeout) for watch in watches]
    return None if None in times else max(times)


def upgrade_floor(instance):
    """What one node's upgrade cannot go below, taken on NODE1 by hand: drain, restart to ready, re-admit."""
    address, watches = NODES[NODE1], [Watch(d) for d in DIRECTORS]
    try:
        start = time.monotonic()
        in_node(NODE1, "touch", DRAIN_FILE)
        drain = slowest(watches, address, 0, start, 60)
        start = time.monotonic()
        in_node(NODE1, "systemctl", "restart", "vllm-%s" % instance["name"])
        in_node(NODE1, "timeout", "900", "sh", "-c", READY % instance["port"])
        ready = time.monotonic() - start
        start = time.monotonic()
        in_node(NODE1, "rm", "-f", DRAIN_FILE)
        readmit = slowest(watches, address, FULL, start, SETTLE)
    finally:
        in_node(NODE1, "rm", "-f", DRAIN_FILE, check=False)
        for watch in watches:
            watch.stop()
    return {"drain_s": drain, "ready_s": ready, "readmit_s": readmit}


def upgrade(args, raw):
    """playbooks/rolling_upgrade.yml under 20 req/s against the floor; every instance restarts."""
    instances = toggle_max_num_seqs(lab_instances())
    raw["max_num_seqs"] = [instance["max_num_seqs"] for instance in instances]
    try:
        raw["floor"] = upgrade_floor(instances[0])
        log("upgrade floor on %s: drain %s, restart to ready %s, re-admit %s"
            % (NODE1, secs(raw["floor"]["drain_s"]), secs(raw["floor"]["ready_s"]), secs(raw["floor"]["readmit_s"])))
        settle()
        load = Load(rate=20, seconds=1800)
        try:
            start = time.monotonic()
            play("playbooks/rolling_upgrade.yml", "-e", json.dumps({"vllm_instances": instances}))
            raw["wall_s"] = time.monotonic() - start
        finally:
            for name in NODES:
                in_node(name, "rm", "-f", DRAIN_FILE, check=False)
            summary = load.stop()
        raw.update(nodes=len(NODES), requests=summary["requests"], failures=summary["failures"],
                   statuses=summary["statuses"], rate=summary["rate"])
        log("upgrade: %.0f s for %d nodes, %d of %d requests failed"
            % (raw["wall_s"], len(NODES), len(summary["failures"]), summary["requests"]))
    finally:
        settle()


MEASURE = {"ejection": ejection, "breaker": breaker, "failover": failover, "throughput": throughput,
           "upgrade": upgrade}


# The report

def time_row(label, values):
    got = [v for v in values if v is not None]
    missed = len(values) - len(got)
    rounds = "%d" % len(values) + (" (%d missed)" % missed if missed else "")
    median, worst = (statistics.median(got), max(got)) if got else (None, None)
    return "| %s | %s | %s | %s |" % (label, secs(median), secs(worst), rounds)


def column(rounds, key):
    return [r[key] for r in rounds]


def report_ejection(raw, _args):
    rounds = raw["rounds"]
    return ["### Ejection of a dead node", "",
            "`systemctl stop nginx` on %s; its weight on the master director, sampled every 0.2 s over ssh." % NODE2,
            "", *TIMES, time_row("weight 0 after nginx stopped", column(rounds, "out_s")),
            time_row("full weight after nginx started", column(rounds, "back_s"))]


def report_breaker(raw, _args):
    rounds = raw["rounds"]
    return ["### Breaker reaction", "",
            "10 %% of 503 injected at %s's edge (`playbooks/edge_fault.yml`) under 10 req/s through "
            "the VIP; breaker window %s s, min_requests %s, cool-down %s s." % (
                NODE1, WINDOW, BREAKER["min_requests"], COOLDOWN),
            "", *TIMES, time_row("weight 0 after the first 503 a client saw", column(rounds, "reaction_s")),
            time_row("weight 0 after the fault play's end", column(rounds, "after_play_s")),
            time_row("full weight after the fault was lifted", column(rounds, "back_s"))]


def report_failover(raw, _args):
    rounds = raw["rounds"]
    return ["### VRRP failover", "",
            "`systemctl stop keepalived` on the master until the VIP is on the backup's eth0 (polled every 0.05 s); "
            "both are driven over ssh sessions opened beforehand, so the figure includes one ssh round trip, "
            "measured on the same session just before. Rounds alternate the directors.",
            "", *TIMES, time_row("VIP on the backup (one ssh round trip included)", column(rounds, "failover_s")),
            time_row("ssh round trip to the master", column(rounds, "ssh_round_trip_s"))]


def spread(values, form="%.2f"):
    if not values:
        return "–"
    return (form + " (" + form + "–" + form + ")") % (statistics.median(values), min(values), max(values))


def report_throughput(raw, args):
    by_round = {}
    for r in raw["rounds"]:
        by_round.setdefault(r["round"], {})[r["arm"]] = r
    pairs = [arms for arms in by_round.values() if len(arms) == 2]
    lines = ["### VIP → edge → vLLM against straight to the edges", "",
             "Closed loop (bench/loadgen.py on this machine, keep-alive, TLS 1.3 + mTLS), %d completions of %d tokens "
             "per round: **vip** one load generator at the VIP with concurrency %d; **direct** one per node's edge "
             "with half the requests and concurrency each. Per arm, the median of the rounds:" % (
                 args.requests, args.tokens, args.concurrency),
             "", "| arm | req/s | p50 ms | p99 ms | errors | rounds |", "| --- | --- | --- | --- | --- | --- |"]
    for arm in ARMS:
        rounds = [r for r in raw["rounds"] if r["arm"] == arm]
        if rounds:
            lines.append("| %s | %.1f | %.1f | %.1f | %d | %d |" % (
                arm, statistics.median(column(rounds, "rps")), statistics.median(column(rounds, "p50_ms")),
                statistics.median(column(rounds, "p99_ms")), sum(column(rounds, "errors")), len(rounds)))
    ratios = {key: [p["vip"][key] / p["direct"][key] for p in pairs] for key in ("rps", "p50_ms", "p99_ms")}
    lines += ["", "| vip / direct, median of the per-round ratios (min–max) | throughput | p50 | p99 |",
              "| --- | --- | --- | --- |",
              "| over %d rounds | %s | %s | %s |" % (
                  len(pairs), spread(ratios["rps"]), spread(ratios["p50_ms"]), spread(ratios["p99_ms"])),
              "", "The director only forwards the client's packets (direct routing: the replies go straight from the "
              "node), but it is an emulated VM here, so its cost is reported as measured, not as a production figure."]
    return lines


def report_upgrade(raw, _args):
    floor = raw.get("floor", {})
    parts = [floor.get(key) for key in ("drain_s", "ready_s", "readmit_s")]
    total = None if None in parts else sum(parts)
    lines = ["### Rolling upgrade", "",
             "playbooks/rolling_upgrade.yml with max_num_seqs set to %s (every instance restarts) under 20 req/s "
             "through the VIP, one run; the play's wall time includes its validate, preflight and summary plays. The "
             "floor is taken on %s by hand: drain file until weight 0 on every director, `systemctl restart` until "
             "vLLM's /health answers 200, drain file removed until full weight on every director." % (
                 "/".join(map(str, raw.get("max_num_seqs", []))), NODE1),
             "", "| measurement | figure |", "| --- | --- |"]
    if floor:
        cell = " + ".join(secs(part) for part in parts) + ("" if total is None else " = **%s**" % secs(total))
        lines.append("| floor per node: drain + restart to ready + re-admit | %s |" % cell)
    if "wall_s" in raw:
        per_node = raw["wall_s"] / raw["nodes"]
        lines += ["| rolling upgrade, whole play (%d nodes) | %s |" % (raw["nodes"], secs(raw["wall_s"])),
                  "| rolling upgrade per node | **%s**%s |" % (
                      secs(per_node), "" if total is None else " (%.1f × the floor)" % (per_node / total)),
                  "| failed requests | **%d** of %d (%s) |" % (
                      len(raw["failures"]), raw["requests"], json.dumps(raw["statuses"]))]
    return lines


REPORT = {"ejection": report_ejection, "breaker": report_breaker, "failover": report_failover,
          "throughput": report_throughput, "upgrade": report_upgrade}


def command_line(args, selected):
    words = ["make lab && .venv/bin/python bench/lvs_bench.py", "--only", ",".join(selected), "--rounds",
             str(args.rounds)]
    if "throughput" in selected:
        words += ["--requests", str(args.requests), "--concurrency", str(args.concurrency), "--tokens",
                  str(args.tokens)]
    return " ".join(words)


def report(results, args, selected, minutes):
    lines = ["## LVS front door: ejection, breaker, failover, VIP against direct, rolling upgrade "
             "(`bench/lvs_bench.py`)", "", "```sh", command_line(args, selected), "```", "",
             "Run of %s, %.0f min. %s" % (time.strftime("%Y-%m-%d"), minutes, EMULATED)]
    for name, raw in results.items():
        lines += [""] + REPORT[name](raw, args)
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(MEASUREMENTS[:-1]),
                        help="comma-separated, of %s (default: all but upgrade)" % ", ".join(MEASUREMENTS))
    parser.add_argument("--upgrade", action="store_true", help="add the rolling upgrade (restarts every instance)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=200, help="throughput: completions per arm and round")
    parser.add_argument("--concurrency", type=int, default=8, help="throughput: concurrent clients per arm")
    parser.add_argument("--tokens", type=int, default=16, help="throughput: tokens per completion")
    parser.add_argument("--json", metavar="PATH", help="dump the raw results there")
    args = parser.parse_args()
    picked = set(args.only.split(",")) | ({"upgrade"} if args.upgrade else set())
    if picked - set(MEASUREMENTS) or args.rounds < 1:
        parser.error("--only takes %s; --rounds at least 1" % ", ".join(MEASUREMENTS))
    selected = [name for name in MEASUREMENTS if name in picked]
    os.environ.setdefault("CONTAINERS_CONF", os.path.join(REPO, ".cache", "containers.conf"))
    check_lab()
    results, start = {}, time.monotonic()
    try:
        for name in selected:
            log("%s (%s)" % (name, MEASURE[name].__doc__.splitlines()[0]))
            results[name] = {"rounds": []}
            MEASURE[name](args, results[name])
    finally:
        if results:
            print("\n" + report(results, args, selected, (time.monotonic() - start) / 60), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"command": command_line(args, selected), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
