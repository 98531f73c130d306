#!/usr/bin/env bash
# Install what `make lab` and `make test` need on a fresh Debian 12 / Ubuntu 24.04 host (as root):
# system packages when missing, then the Python venv from the pinned requirement files. The venv lives in the
# shared cache (lab/cache.sh), one per requirements key, and .venv links to it: a new clone reuses it.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
# shellcheck source=lab/cache.sh
. lab/cache.sh
cache_dir=$(llmops_cache_dir)

packages=(ca-certificates curl git make python3 python3-venv podman runc debootstrap iptables qemu-user-static binfmt-support
  shellcheck qemu-system-x86 qemu-utils e2fsprogs openssh-client openssl nftables age)
missing=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "bootstrap: missing packages ${missing[*]}; run as root or install them first" >&2
    exit 1
  fi
  echo "bootstrap: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The venv is made once per content of the requirement files (and Python), then shared.
venv=$cache_dir/venv-$({ cat requirements/*.txt; python3 --version; } | sha256sum | cut -c1-12)
if [[ ! -f $venv/.complete ]]; then
  mkdir -p "$cache_dir"
  take_lock venv
  if [[ ! -f $venv/.complete ]]; then
    echo "bootstrap: creating $venv from requirements/"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q -r requirements/test.txt -c requirements/constraints.txt
    touch "$venv/.complete"
    prune_entries "$cache_dir" 'venv-*' 2
  fi
fi
link_clone .venv "$venv"

# promtool, for the alert pack's tests (tests/unit/roles/monitoring): the binary alone, out of the distribution's
# prometheus package, into the venv (installing the package would start a Prometheus on this machine).
if [[ ! -x $venv/bin/promtool ]]; then
  take_lock promtool
  if [[ ! -x $venv/bin/promtool ]]; then
    tmp=$(mktemp -d)
    (cd "$tmp" && { apt-get download prometheus >/dev/null 2>&1 || { apt-get update -qq && apt-get download prometheus >/dev/null; }; })
    dpkg-deb --fsys-tarfile "$tmp"/prometheus_*.deb | tar -xO ./usr/bin/promtool >"$tmp/promtool"
    install -m 0755 "$tmp/promtool" "$venv/bin/promtool"
    rm -rf "$tmp"
  fi
fi

# Podman's settings for the lab: lab/containers.conf and, on a host with hybrid cgroups (v1 controllers beside a
# cgroup2 tree at /sys/fs/cgroup/unified), that tree in every container. systemd inside then learns at once that a
# unit's last process is gone; without it, stopping a unit that outlives its main process by a moment (vLLM's
# multiprocessing resource tracker) waits the whole TimeoutStopSec and fails with 'timeout'.
mkdir -p .cache
if [[ $(stat -fc %T /sys/fs/cgroup/unified 2>/dev/null) == cgroup2fs ]]; then
  sed '/^\[containers\]$/a volumes = ["/sys/fs/cgroup/unified:/sys/fs/cgroup/unified:rw"]' lab/containers.conf
else
  cat lab/containers.conf
fi >.cache/containers.conf.tmp
mv .cache/containers.conf.tmp .cache/containers.conf
