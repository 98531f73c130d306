#!/usr/bin/env bash
# Install what `make lab` and `make test` need on a fresh Debian 12 / Ubuntu 24.04 host (as root):
# system packages when missing, then the Python venv at .venv from the pinned requirement files.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(ca-certificates curl git make python3 python3-venv podman runc debootstrap iptables qemu-user-static binfmt-support shellcheck)
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

# The venv is rebuilt only when the requirement files change.
stamp=.venv/.requirements.sha256
want=$(cat requirements/*.txt | sha256sum | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
  echo "bootstrap: creating .venv from requirements/"
  rm -rf .venv
  python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -r requirements/test.txt -c requirements/constraints.txt
  echo "$want" >"$stamp"
fi
