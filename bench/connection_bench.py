"""Connection benchmark: the lab's pipelined podman connection against containers.podman.podman, side by side.

Both arms run the same real play on the same container: lab/node-image/provision.yml (the vllm_install role and
the model copy, about 60 tasks) on a container of the provisioned node image, where it finds everything done and
changes nothing, as a molecule idempotence step or a second `make lab` does. Rounds alternate which arm goes
first; the figure is the median of the per-round ratios pipelined / plain, with their spread.

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


def play(inventory_dir, arm):
    """Seconds of one run of the play over the arm's connection, and its task count."""
    playbook = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    start = time.perf_counter()
    result = run(playbook, "-i", os.path.join(inventory_dir, arm + ".json"),
                 os.path.join(REPO, "lab", "node-image", "provision.yml"), check=False, env=env, cwd=REPO)
    seconds = time.perf_counter() - start
    recap = re.search(r"^%s\s+: ok=(\d+)\s+changed=(\d+)" % NAME, result.stdout, re.M)
    if result.returncode or not recap or recap.group(2) != "0":
        sys.exit("bench: the %s run failed or changed something:\n%s" % (arm, result.stdout[-3000:] + result.stderr))
    return seconds, int(recap.group(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    os.environ.setdefault("CONTAINERS_CONF", os.path.join(REPO, ".cache", "containers.conf"))
    run("podman", "rm", "--force", NAME, check=False)
    run("podman", "run", "--detach", "--name", NAME, "--network", "none", "--systemd=always",
        "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096", IMAGE, "/sbin/init")
    times = {arm: [] for arm in ARMS}
    try:
        with tempfile.TemporaryDirectory() as inventory_dir:
            for arm, connection in ARMS.items():
                with open(os.path.join(inventory_dir, arm + ".json"), "w") as f:
                    json.dump({"all": {"hosts": {NAME: {"ansible_connection": connection,
                                                        "ansible_python_interpreter": "/usr/bin/python3"}}}}, f)
            play(inventory_dir, "plain")  # warm the page cache and the container
            for rnd in range(args.rounds):
                for arm in ("plain", "pipelined") if rnd % 2 == 0 else ("pipelined", "plain"):
                    seconds, tasks = play(inventory_dir, arm)
                    times[arm].append(seconds)
                    print("bench: round %d %-9s %5.1f s (%d tasks ok)" % (rnd + 1, arm, seconds, tasks),
                          file=sys.stderr, flush=True)
    finally:
        run("podman", "rm", "--force", "--time", "2", NAME, check=False)
    ratios = [p / q for p, q in zip(times["pipelined"], times["plain"])]
    print("\nprovision.yml on a provisioned node (%d tasks ok, nothing to change), %d rounds per arm\n"
          % (tasks, args.rounds))
    print("| arm | connection | seconds (median of rounds) |")
    print("| --- | --- | --- |")
    for arm, connection in ARMS.items():
        print("| %s | %s | %.1f |" % (arm, connection, statistics.median(times[arm])))
    print("\npipelined / plain, median of the per-round ratios: **%.2f** (rounds %.2f to %.2f)"
          % (statistics.median(ratios), min(ratios), max(ratios)))


if __name__ == "__main__":
    main()
