#!/usr/bin/env bash
# Remove what make lab and make test cache outside the clone (lab/cache.sh), this clone's links to it, and the
# lab images: the next run builds everything again, as on a new machine. The lab must be down.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=lab/cache.sh
. "$repo/lab/cache.sh"
cache_dir=$(llmops_cache_dir)
export CONTAINERS_CONF=$repo/.cache/containers.conf

if command -v podman >/dev/null; then
  if [[ -n $(podman ps -aq --filter label=llmops.lab=1) ]]; then
    echo "clean-cache: the lab is up; run make lab-down first" >&2
    exit 1
  fi
  podman images --format '{{.Repository}}:{{.Tag}}' |
    grep -E '^localhost/llmops-lab(-node)?:' | xargs -r podman rmi --force >/dev/null
fi
# A running director VM's disk is an overlay on the cached image.
if pgrep -f "qemu-system-x86_64 -name " >/dev/null; then
  echo "clean-cache: director VMs are running; run make lab-down (or lab/director_vm/vm.py down --all) first" >&2
  exit 1
fi
# The arm64 tree may hold mount points of an interrupted test: never cross into another file system.
rm -rf --one-file-system "$cache_dir"
rm -rf "$repo/.cache/wheelhouse" "$repo/.cache/models" "$repo/.cache/model-venv" "$repo/.cache/sources" \
  "$repo/.cache/director-vm-image"
echo "clean-cache: removed $cache_dir and the lab images"
