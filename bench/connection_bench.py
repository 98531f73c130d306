"""Connection benchmark: the lab's pipelined podman connection against containers.podman.podman, side by side.

Both arms run the same real play on the same container: lab/node-image/provision.yml (the vllm_install role and
the model copy, about 60 tasks) on a container of the provisioned node image, where it finds everything done and
changes nothing, as a molecule idempotence step or a second `make lab` does. Rounds alternate which arm goes
first; the figures are the medians of the per-round ratios pipelined / plain, with their spread, of the play's
seconds and of the whole machine's CPU time while it ran (from /proc/stat: the connection's own processes, podman's
conmon and runc included, are not children of ansible-playbook).

  make node-image && .venv/bin/python bench/connection_bench.py [--rounds 7]
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

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
IMAGE = "localhost/llmops-lab-node:latest"
NAME = "llmops-bench-connection"
ARMS = {"plain": "containers.podman.podman", "pipelined": "podman_pipelined"}


def run(*args, check=True, **kwargs):
    return subprocess.run(args, check=check, text=True, capture_output=True, **kwargs)


def busy_seconds():
    """CPU time the whole machine has spent busy since boot."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait


def play(inventory_dir, arm):
    """Seconds and CPU-seconds of one run of the play over the arm's connection, and its task count."""
    playbook = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    start, cpu = time.perf_counter(), busy_seconds()
    result = run(playbook, "-i", os.path.join(inventory_dir, arm + ".json"),
                 os.path.join(REPO, "lab", "node-image", "provision.yml"), check=False, env=env, cwd=REPO)
    seconds, cpu = time.perf_counter() - start, busy_seconds() - cpu
    recap = re.search(r"^%s\s+: ok=(\d+)\s+changed=(\d+)" % NAME, result.stdout, re.M)
    if result.returncode or not recap or recap.group(2) != "0":
        sys.exit("bench: the %s run failed or changed something:\n%s" % (arm, result.stdout[-3000:] + result.stderr))
    return seconds, cpu, int(recap.group(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    os.environ.setdefault("CONTAINERS_CONF", os.path.join(REPO, ".cache", "containers.conf"))
    run("podman", "rm", "--force", NAME, check=False)
    run("podman", "run", "--detach", "--name", NAME, "--network", "none", "--systemd=always",
        "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096", IMAGE, "/sbin/init")
    times = {arm: [] for arm in ARMS}
    cpus = {arm: [] for arm in ARMS}
    try:
        with tempfile.TemporaryDirectory() as inventory_dir:
            for arm, connection in ARMS.items():
                with open(os.path.join(inventory_dir, arm + ".json"), "w") as f:
                    json.dump({"all": {"hosts": {NAME: {"ansible_connection": connection,
                                                        "ansible_python_interpreter": "/usr/bin/python3"}}}}, f)
            play(inventory_dir, "plain")  # warm the page cache and the container
            for rnd in range(args.rounds):
                for arm in ("plain", "pipelined") if rnd % 2 == 0 else ("pipelined", "plain"):
                    seconds, cpu, tasks = play(inventory_dir, arm)
                    times[arm].append(seconds)
                    cpus[arm].append(cpu)
                    print("bench: round %d %-9s %5.1f s, %5.1f CPU-s (%d tasks ok)"
                          % (rnd + 1, arm, seconds, cpu, tasks), file=sys.stderr, flush=True)
    finally:
        run("podman", "rm", "--force", "--time", "2", NAME, check=False)
    print("\nprovision.yml on a provisioned node (%d tasks ok, nothing to change), %d rounds per arm\n"
          % (tasks, args.rounds))
    print("| arm | connection | seconds (median of rounds) | CPU-seconds (median of rounds) |")
    print("| --- | --- | --- | --- |")
    for arm, connection in ARMS.items():
        print("| %s | %s | %.1f | %.1f |"
              % (arm, connection, statistics.median(times[arm]), statistics.median(cpus[arm])))
    for what, values in (("seconds", times), ("CPU-seconds", cpus)):
        ratios = [p / q for p, q in zip(values["pipelined"], values["plain"])]
        print("\n%s, pipelined / plain, median of the per-round ratios: **%.2f** (rounds %.2f to %.2f)"
              % (what, statistics.median(ratios), min(ratios), max(ratios)))


if __name__ == "__main__":
    main()
