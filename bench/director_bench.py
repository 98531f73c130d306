"""Director benchmark: Ansible tasks on an emulated director VM with the image's zip-bytecode cache, against without.

The lab's director VMs run under QEMU's software emulation, where a director's Ansible task costs seconds, and a
part of each is Python compiling Ansible's module_utils from the module's zip payload (lab/director_vm/
zip_bytecode.py keeps that bytecode). Both arms run the same play on the same VM: the kinds of module the
lvs_director role runs (facts, apt, template, copy, file, command, systemd_service), all finding their work done;
the off arm sets LLMOPS_LAB_ZIP_BYTECODE=0 for the modules. Rounds alternate which arm goes first; the figure is
the median of the per-round ratios cached / uncached of the play's seconds, with its spread.

  make director-image && .venv/bin/python bench/director_bench.py [--rounds 7]
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
VM = os.path.join(REPO, "lab", "director_vm", "vm.py")
NAME = "llmops-bench-director"
NETWORK, ADDRESS = "llmops-bench-director", "10.89.98.21"
PLAY = [{
    "name": "The director role's kinds of task, with nothing to change",
    "hosts": "all",
    "gather_facts": False,
    "environment": {"LLMOPS_LAB_ZIP_BYTECODE": "{{ zip_bytecode }}"},
    "tasks": [
        {"name": "Read the network facts", "ansible.builtin.setup": {"gather_subset": ["!all", "network"]}},
        {"name": "Install keepalived and ipvsadm", "ansible.builtin.apt": {"name": ["keepalived", "ipvsadm"]}},
        {"name": "Write a file", "ansible.builtin.copy": {"dest": "/etc/bench.conf", "content": "bench\n",
                                                          "mode": "0644"}},
        {"name": "Render a template", "ansible.builtin.template": {"src": "bench.j2", "dest": "/etc/bench.j2.conf",
                                                                   "mode": "0644"}},
        {"name": "Make a directory", "ansible.builtin.file": {"path": "/var/lib/bench", "state": "directory",
                                                              "mode": "0755"}},
        {"name": "Run a command", "ansible.builtin.command": {"cmd": "true"}, "changed_when": False},
        {"name": "Keep a service running", "ansible.builtin.systemd_service": {"name": "ssh", "state": "started"}},
    ],
}]


def run(*args, check=True, **kwargs):
    return subprocess.run(args, check=check, text=True, capture_output=True, **kwargs)


def start():
    """The lab's private key, after making the bench's podman network."""
    os.environ.setdefault("CONTAINERS_CONF", os.path.join(REPO, ".cache", "containers.conf"))
    run("podman", "network", "create", "--subnet", "10.89.98.0/24", NETWORK)
    return run(sys.executable, VM, "key").stdout.strip()


def write_play(workdir, hosts, key):
    """The play, its template and an inventory of HOSTS (name: address) in WORKDIR."""
    with open(os.path.join(workdir, "hosts.json"), "w") as f:
        json.dump({"all": {"hosts": {name: {
            "ansible_host": address, "ansible_user": "root", "ansible_ssh_private_key_file": key,
            "ansible_python_interpreter": "/usr/bin/python3",
            "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"}
            for name, address in hosts.items()}}}, f)
    with open(os.path.join(workdir, "play.json"), "w") as f:
        json.dump(PLAY, f)
    with open(os.path.join(workdir, "bench.j2"), "w") as f:
        f.write("{{ inventory_hostname }}\n")


def play(workdir, zip_bytecode, first=False, host=NAME):
    """Seconds of one run of the play on HOST, and its task count; exits when it failed, or changed something after
    the first run."""
    playbook = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    start = time.perf_counter()
    result = run(playbook, "-i", os.path.join(workdir, "hosts.json"), os.path.join(workdir, "play.json"),
                 "-l", host, "-e", "zip_bytecode=%d" % zip_bytecode, check=False, env=env, cwd=workdir)
    seconds = time.perf_counter() - start
    recap = re.search(r"^%s\s+: ok=(\d+)\s+changed=(\d+)" % host, result.stdout, re.M)
    if result.returncode or not recap or (recap.group(2) != "0" and not first):
        sys.exit("bench: a run failed or changed something:\n%s" % (result.stdout[-3000:] + result.stderr))
    return seconds, int(recap.group(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    key = start()
    times = {1: [], 0: []}
    try:
        run(sys.executable, VM, "up", NAME, "--ip", ADDRESS + "/24", "--network", NETWORK, "--memory", "640")
        with tempfile.TemporaryDirectory() as workdir:
            write_play(workdir, {NAME: ADDRESS}, key)
            play(workdir, 1, first=True)  # writes the files and fills the cache
            for rnd in range(args.rounds):
                for arm in (1, 0) if rnd % 2 == 0 else (0, 1):
                    seconds, tasks = play(workdir, arm)
                    times[arm].append(seconds)
                    print("bench: round %d %-8s %5.1f s (%d tasks ok)" % (rnd + 1, ("uncached", "cached")[arm],
                                                                          seconds, tasks), file=sys.stderr, flush=True)
    finally:
        run(sys.executable, VM, "down", NAME, check=False)
        run("podman", "network", "rm", NETWORK, check=False)
    print("\nA play of %d director tasks on one emulated director VM, nothing to change, %d rounds per arm\n"
          % (tasks, args.rounds))
    print("| arm | seconds (median of rounds) | min | max |")
    print("| --- | --- | --- | --- |")
    for arm, label in ((1, "cached"), (0, "uncached")):
        print("| %s | %.1f | %.1f | %.1f |" % (label, statistics.median(times[arm]), min(times[arm]), max(times[arm])))
    ratios = [p / q for p, q in zip(times[1], times[0])]
    print("\nseconds, cached / uncached, median of the per-round ratios: **%.2f** (rounds %.2f to %.2f)"
          % (statistics.median(ratios), min(ratios), max(ratios)))


if __name__ == "__main__":
    main()
