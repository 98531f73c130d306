"""Model decryption benchmark: the per-GiB cost of weights encrypted at rest (issue 17), before the role exists.

One file of random bytes (1 GiB by default) on disk, in clear and encrypted two ways; each round decrypts (or copies)
it into a RAM-backed directory (/dev/shm), as a unit would into its private tmpfs at start. Arms, in an order that
alternates by round:
  copy     the clear file copied into RAM (the baseline: what a RAM mount of clear weights costs)
  age      Debian's age (X25519 recipient, ChaCha20-Poly1305 STREAM), `age -d -i <identity>`
  aes-gcm  AES-256-GCM from pyca/cryptography (OpenSSL), in 64 MiB chunks each with its own nonce
The figures are each arm's median seconds per GiB and the median of the per-round ratios against copy, with their
spread. The files stay in the page cache after the first round, so the disk is not measured.

  apt-get install age && .venv/bin/python bench/model_decrypt_bench.py [--gib 1] [--rounds 5]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

CHUNK = 64 << 20


def write_random(path, size):
    with open(path, "wb") as f:
        for _chunk in range(size // CHUNK):
            f.write(os.urandom(CHUNK))


def gcm_encrypt(key, source, target):
    aead = AESGCM(key)
    with open(source, "rb") as src, open(target, "wb") as dst:
        index = 0
        while True:
            chunk = src.read(CHUNK)
            if not chunk:
                break
            nonce = os.urandom(12)
            dst.write(nonce + aead.encrypt(nonce, chunk, index.to_bytes(8, "big")))
            index += 1


def gcm_decrypt(key, source, target):
    aead = AESGCM(key)
    with open(source, "rb") as src, open(target, "wb") as dst:
        index = 0
        while True:
            block = src.read(12 + CHUNK + 16)
            if not block:
                break
            dst.write(aead.decrypt(block[:12], block[12:], index.to_bytes(8, "big")))
            index += 1


def timed(action):
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if not shutil.which("age") or not shutil.which("age-keygen"):
        sys.exit("model_decrypt_bench: needs age (apt-get install age)")
    size = args.gib << 30
    with tempfile.TemporaryDirectory(dir="/var/tmp") as disk, tempfile.TemporaryDirectory(dir="/dev/shm") as ram:
        clear, identity = os.path.join(disk, "model.bin"), os.path.join(disk, "identity.txt")
        write_random(clear, size)
        subprocess.run(["age-keygen", "-o", identity], check=True, capture_output=True)
        recipient = subprocess.run(["age-keygen", "-y", identity], check=True, capture_output=True,
                                   text=True).stdout.strip()
        subprocess.run(["age", "-r", recipient, "-o", clear + ".age", clear], check=True)
        key = AESGCM.generate_key(bit_length=256)
        gcm_encrypt(key, clear, clear + ".gcm")
        target = os.path.join(ram, "model.bin")
        arms = {
            "copy": lambda: shutil.copyfile(clear, target),
            "age": lambda: subprocess.run(["age", "-d", "-i", identity, "-o", target, clear + ".age"], check=True),
            "aes-gcm": lambda: gcm_decrypt(key, clear + ".gcm", target),
        }
        seconds = {arm: [] for arm in arms}
        for rnd in range(args.rounds):
            order = list(arms) if rnd % 2 == 0 else list(arms)[::-1]
            for arm in order:
                seconds[arm].append(timed(arms[arm]) / args.gib)
                if arm != "copy":  # the plaintext is whole
                    with open(target, "rb") as a, open(clear, "rb") as b:
                        assert a.read(1 << 20) == b.read(1 << 20)
                os.unlink(target)
            print("bench: round %d %s" % (rnd + 1, ", ".join(
                "%s %.2f s" % (arm, seconds[arm][-1]) for arm in arms)), file=sys.stderr, flush=True)
    print("\n%d GiB decrypted (or copied) from the page cache into /dev/shm, %d rounds, arms interleaved\n"
          % (args.gib, args.rounds))
    print("| arm | s per GiB (median, range) | ratio to copy (median of per-round ratios, range) |")
    print("| --- | --- | --- |")
    for arm in arms:
        ratios = [a / b for a, b in zip(seconds[arm], seconds["copy"])]
        print("| %s | %.2f (%.2f to %.2f) | %.1f (%.1f to %.1f) |" % (
            arm, statistics.median(seconds[arm]), min(seconds[arm]), max(seconds[arm]),
            statistics.median(ratios), min(ratios), max(ratios)))


if __name__ == "__main__":
    main()
