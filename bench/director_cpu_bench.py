"""Director CPU-model benchmark: the emulated director VM with QEMU's x86-64 baseline CPU (qemu64) against -cpu max.

Under TCG, -cpu max offers AVX2, AVX-512 and SHA instructions, and the guest's glibc, OpenSSL and Python take them;
QEMU 7.2 emulates them in helpers, slower than the baseline code they replace. Each round boots one VM per arm (the
order alternates), timing launch to ssh login, then runs bench/director_bench.py's play of the director role's kinds
of task twice (the first run does the work; the second, with nothing to change, is timed). The figures are the
medians of the per-round ratios qemu64 / max, with their spread.

  make director-image && .venv/bin/python bench/director_cpu_bench.py [--rounds 5]
"""

import argparse
import os
import statistics
import sys
import tempfile

from director_bench import NETWORK, VM, play, run, start, write_play

ARMS = {"qemu64": "10.89.98.22", "max": "10.89.98.23"}


def boot(name, address, cpu):
    """Seconds from launch to ssh login of a fresh VM NAME with CPU model CPU."""
    run(sys.executable, VM, "down", name, check=False)
    out = run(sys.executable, VM, "up", name, "--ip", address + "/24", "--network", NETWORK, "--memory", "640",
              env=dict(os.environ, DIRECTOR_VM_CPU=cpu)).stdout
    return float(out.split("(")[1].split()[0])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    key = start()
    names = {cpu: "llmops-bench-" + cpu for cpu in ARMS}
    boots, plays = {cpu: [] for cpu in ARMS}, {cpu: [] for cpu in ARMS}
    try:
        with tempfile.TemporaryDirectory() as workdir:
            write_play(workdir, {names[cpu]: address for cpu, address in ARMS.items()}, key)
            for rnd in range(args.rounds):
                for cpu in list(ARMS) if rnd % 2 == 0 else list(ARMS)[::-1]:
                    boots[cpu].append(boot(names[cpu], ARMS[cpu], cpu))
                    play(workdir, 1, first=True, host=names[cpu])
                    seconds, tasks = play(workdir, 1, host=names[cpu])
                    plays[cpu].append(seconds)
                    run(sys.executable, VM, "down", names[cpu], check=False)
                    print("bench: round %d %-6s boot %5.1f s, play %5.1f s (%d tasks ok)"
                          % (rnd + 1, cpu, boots[cpu][-1], seconds, tasks), file=sys.stderr, flush=True)
    finally:
        run(sys.executable, VM, "down", *names.values(), check=False)
        run("podman", "network", "rm", NETWORK, check=False)
    print("\nOne emulated director VM per arm and round, %d rounds, arms interleaved\n" % args.rounds)
    print("| arm | boot to ssh, s (median) | play of %d tasks, nothing to change, s (median) |" % tasks)
    print("| --- | --- | --- |")
    for cpu in ARMS:
        print("| -cpu %s | %.1f (%.1f to %.1f) | %.1f (%.1f to %.1f) |"
              % (cpu, statistics.median(boots[cpu]), min(boots[cpu]), max(boots[cpu]),
                 statistics.median(plays[cpu]), min(plays[cpu]), max(plays[cpu])))
    for label, series in (("boot", boots), ("play", plays)):
        ratios = [a / b for a, b in zip(series["qemu64"], series["max"])]
        print("\n%s seconds, qemu64 / max, median of the per-round ratios: **%.2f** (rounds %.2f to %.2f)"
              % (label, statistics.median(ratios), min(ratios), max(ratios)))


if __name__ == "__main__":
    main()
