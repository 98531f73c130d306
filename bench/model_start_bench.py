"""Sealed-model benchmark: an instance's start with its model sealed at rest against the same model in clear.

Part 1, start: one lab container (from the lab's node image: make node-image) starts vLLM on the tiny model,
side by side, in an order that alternates by round:
  clear   `vllm serve <model>`, as a unit of vllm_server runs it for a model in clear;
  sealed  the unit's ExecStart for a sealed model: roles/vllm_server/files/vllm-model-open decrypts the sealed
          copy (age) into a RAM-backed directory, checks every SHA-256, then execs the same `vllm serve`.
The time is from the launch to the first completed request. systemd's own part of a sealed start (decrypting the
credential, mounting the tmpfs) is not in it: milliseconds.

Part 2, per GiB: on this machine, a 1 GiB model file (random bytes) sealed with age; each round opens it with
vllm-model-open into /dev/shm (decryption and checksum) against copying the clear file there.

Each part prints its arms' medians and the median of the per-round ratios sealed / clear, with their spread.

  apt-get install age && .venv/bin/python bench/model_start_bench.py [--rounds 5] [--gib 1]
"""

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "collections"))

from ansible_collections.llmops.vllm.plugins.module_utils._sealing import (  # noqa: E402
    MANIFEST, manifest_text, seal_plan, stored_name)

OPENER = os.path.join(REPO, "roles", "vllm_server", "files", "vllm-model-open")
MODEL = os.path.join(REPO, ".cache", "models", "tiny-llama")
NODE = "bench-seal"
VENV = "/opt/vllm/current/venv"
SERVE = ["--host", "127.0.0.1", "--port", "8101", "--served-model-name", "tiny", "--dtype", "float32",
         "--max-model-len", "512", "--max-num-seqs", "8", "--kv-cache-memory-bytes", "67108864", "--enforce-eager"]
READY = ("import json, time, urllib.request\n"
         "body = json.dumps({'model': 'tiny', 'prompt': 'ready', 'max_tokens': 1}).encode()\n"
         "while True:\n"
         "    try:\n"
         "        urllib.request.urlopen(urllib.request.Request('http://127.0.0.1:8101/v1/completions', body,"
         " {'Content-Type': 'application/json'}), timeout=30).read()\n"
         "        break\n"
         "    except Exception:\n"
         "        time.sleep(0.2)\n")


def log(message):
    print(message, file=sys.stderr, flush=True)


def seal(src, dest, identity_file):
    recipient = subprocess.run(["age-keygen", "-y", identity_file], capture_output=True, text=True,
                               check=True).stdout.strip()
    plan = seal_plan(src, recipient)
    os.makedirs(dest, exist_ok=True)
    for path in plan["encrypt"]:
        subprocess.run(["age", "-e", "-r", recipient, "-o", os.path.join(dest, stored_name(path, False)),
                        os.path.join(src, path)], check=True)
    for path in plan["copy"]:
        shutil.copyfile(os.path.join(src, path), os.path.join(dest, path))
    with open(os.path.join(dest, MANIFEST), "w") as f:
        f.write(manifest_text(plan["manifest"]))


def summary(name, seconds, unit):
    return "%s %.2f %s (%.2f to %.2f)" % (name, statistics.median(seconds), unit, min(seconds), max(seconds))


def ratios(sealed, clear):
    paired = [s / c for s, c in zip(sealed, clear)]
    return "%.2f (%.2f to %.2f)" % (statistics.median(paired), min(paired), max(paired))


def podman(*args, check=True):
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=check)


def start_part(rounds, work):
    env = dict(os.environ, CONTAINERS_CONF=os.environ.get("CONTAINERS_CONF",
                                                          os.path.join(REPO, ".cache", "containers.conf")))
    os.environ.update(env)
    podman("rm", "-f", NODE, check=False)
    podman("run", "-d", "--name", NODE, "--shm-size=1g", "--ulimit", "nofile=1024:1024", "--ulimit",
           "nproc=4096:4096", "localhost/llmops-lab-node:latest", "/sbin/init")
    try:
        podman("exec", NODE, "age", "--version")  # the node image holds it, as vllm_server installs it
        identity = os.path.join(work, "key.txt")
        subprocess.run(["age-keygen", "-o", identity], capture_output=True, check=True)
        seal(MODEL, os.path.join(work, "sealed"), identity)
        podman("cp", os.path.join(work, "sealed"), NODE + ":/var/lib/vllm/models/tiny-llama.sealed")
        podman("exec", NODE, "mkdir", "-p", "/run/creds")
        podman("cp", identity, NODE + ":/run/creds/model-key")
        podman("cp", OPENER, NODE + ":/usr/local/bin/vllm-model-open")
        clear = [VENV + "/bin/vllm", "serve", "/var/lib/vllm/models/tiny-llama"] + SERVE
        plain = "/dev/shm/bench/model"
        sealed = ["env", "CREDENTIALS_DIRECTORY=/run/creds", "python3", "/usr/local/bin/vllm-model-open",
                  "--instance", "bench", "--key", "bench", "--sealed", "/var/lib/vllm/models/tiny-llama.sealed",
                  "--into", plain, "--", VENV + "/bin/vllm", "serve", plain] + SERVE
        times = {"clear": [], "sealed": []}
        for index in range(rounds):
            for arm in (("clear", "sealed") if index % 2 == 0 else ("sealed", "clear")):
                command = clear if arm == "clear" else sealed
                podman("exec", NODE, "rm", "-rf", "/dev/shm/bench")
                began = time.monotonic()
                # Detached, its output to a file: with no one to write to, a detached vllm serve died at once.
                podman("exec", "--detach", NODE, "sh", "-c", shlex.join(command) + " >/tmp/bench-arm.log 2>&1")
                podman("exec", NODE, "timeout", "600", "python3", "-c", READY)
                times[arm].append(time.monotonic() - began)
                podman("exec", NODE, "pkill", "-f", "vllm serve", check=False)
                # [v] and [V]: the patterns do not match this shell's own command line.
                podman("exec", NODE, "sh", "-c",
                       "while pgrep -f '[v]llm serve|[V]LLM::' >/dev/null; do sleep 0.2; done")
                log("start: round %d %s %.1f s" % (index + 1, arm, times[arm][-1]))
        return times
    finally:
        podman("rm", "-f", NODE, check=False)


def gib_part(rounds, gib, work):
    src = os.path.join(work, "big")
    os.makedirs(src)
    with open(os.path.join(src, "config.json"), "w") as f:
        json.dump({"max_position_embeddings": 2048}, f)
    with open(os.path.join(src, "model.safetensors"), "wb") as f:
        for _chunk in range(gib * 16):
            f.write(os.urandom(64 << 20))
    identity = os.path.join(work, "big-key.txt")
    subprocess.run(["age-keygen", "-o", identity], capture_output=True, check=True)
    seal(src, os.path.join(work, "big-sealed"), identity)
    creds = os.path.join(work, "creds")
    os.makedirs(creds)
    shutil.copyfile(identity, os.path.join(creds, "model-key"))
    target = tempfile.mkdtemp(dir="/dev/shm")
    times = {"clear": [], "sealed": []}
    try:
        for index in range(rounds):
            for arm in (("clear", "sealed") if index % 2 == 0 else ("sealed", "clear")):
                shutil.rmtree(os.path.join(target, "model"), ignore_errors=True)
                began = time.monotonic()
                if arm == "clear":
                    shutil.copytree(src, os.path.join(target, "model"))
                else:
                    subprocess.run([sys.executable, OPENER, "--instance", "bench", "--key", "bench", "--sealed",
                                    os.path.join(work, "big-sealed"), "--into", os.path.join(target, "model"), "--",
                                    "/bin/true"], env=dict(os.environ, CREDENTIALS_DIRECTORY=creds), check=True,
                                   stdout=subprocess.DEVNULL)
                times[arm].append((time.monotonic() - began) / gib)
                log("per GiB: round %d %s %.2f s" % (index + 1, arm, times[arm][-1]))
    finally:
        shutil.rmtree(target, ignore_errors=True)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--gib", type=int, default=1)
    parser.add_argument("--skip-start", action="store_true", help="only the per-GiB part")
    args = parser.parse_args()
    work = tempfile.mkdtemp(dir="/var/tmp", prefix="model-start-bench.")
    try:
        start = None if args.skip_start else start_part(args.rounds, work)
        per_gib = gib_part(args.rounds, args.gib, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if start:
        print("start to first completion, tiny model, %d rounds:" % args.rounds)
        print("  " + summary("clear", start["clear"], "s") + "; " + summary("sealed", start["sealed"], "s"))
        print("  sealed / clear, median of per-round ratios: " + ratios(start["sealed"], start["clear"]))
    print("%d GiB into /dev/shm, %d rounds:" % (args.gib, args.rounds))
    print("  " + summary("copy", per_gib["clear"], "s/GiB") + "; " + summary("open", per_gib["sealed"], "s/GiB"))
    print("  open / copy, median of per-round ratios: " + ratios(per_gib["sealed"], per_gib["clear"]))


if __name__ == "__main__":
    main()
