#!/usr/bin/env bash
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# An arm64 Debian root filesystem that runs on an x86_64 host under qemu-user emulation.
#
#   arm64_rootfs.sh binfmt    install qemu-user-static, binfmt-support and debootstrap when missing,
#                             mount binfmt_misc and enable qemu-aarch64 (needs root)
#   arm64_rootfs.sh tarball   print the path of the cached root filesystem tarball; build it first
#                             (debootstrap, about 3 minutes) when the cache has none for this recipe
#
# The cache key is the sha256 of this file: any change to the recipe below builds a new tarball.
# The cache lives in $ARM64_CACHE_DIR, by default aarch64/ in the shared cache of lab/cache.sh (outside the clone).
set -euo pipefail

# --- recipe -------------------------------------------------------------------------------------
SUITE=bookworm
PACKAGES=python3,gcc,g++
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# -------------------------------------------------------------------------------------------------

script=$(readlink -f "${BASH_SOURCE[0]}")
repo=$(cd "$(dirname "$script")/../.." && pwd)
# shellcheck source=lab/cache.sh
. "$repo/lab/cache.sh"
cache_dir=$(llmops_cache_dir)
cache=${ARM64_CACHE_DIR:-$cache_dir/aarch64}
key=$(sha256sum "$script" | cut -c1-12)
tarball=$cache/rootfs-$SUITE-arm64-$key.tar.gz

die() { echo "arm64_rootfs.sh: $*" >&2; exit 1; }

binfmt() {
  [[ $(id -u) == 0 ]] || die "must run as root (apt-get, mount, update-binfmts, debootstrap)"
  local missing=() native=false
  [[ $(uname -m) == aarch64 ]] && native=true  # runs arm64 code without emulation
  if ! $native; then
    command -v qemu-aarch64-static >/dev/null || missing+=(qemu-user-static)
    command -v update-binfmts >/dev/null || missing+=(binfmt-support)
  fi
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  if ((${#missing[@]})); then
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; then
      apt-get update -q >/dev/null || true  # other, unreachable sources must not stop this
      apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null \
        || die "cannot install ${missing[*]}: check the Debian apt mirror in /etc/apt/sources.list*"
    fi
  fi
  $native && return 0
  if ! mountpoint -q /proc/sys/fs/binfmt_misc; then
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc \
      || die "cannot mount binfmt_misc on /proc/sys/fs/binfmt_misc (a container without CAP_SYS_ADMIN?)"
  fi
  [[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]] || update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
  [[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]] || update-binfmts --import qemu-aarch64 >/dev/null 2>&1 || true
  grep -qx enabled /proc/sys/fs/binfmt_misc/qemu-aarch64 2>/dev/null \
    || die "qemu-aarch64 is not registered in /proc/sys/fs/binfmt_misc: run update-binfmts --enable qemu-aarch64"
  # F (fix-binary): the kernel keeps the interpreter open, so it works inside a chroot without a copy.
  grep -q '^flags: .*F' /proc/sys/fs/binfmt_misc/qemu-aarch64 \
    || die "qemu-aarch64 is registered without the F flag: reinstall qemu-user-static from Debian"
}

# Unmount whatever is still mounted below $1, deepest first.
umount_below() {
  local dir
  dir=$(readlink -f "$1")
  awk -v d="$dir/" 'index($2 "/", d) == 1 { print $2 }' /proc/mounts | sort -r | while read -r mnt; do
    umount -l "$mnt" || true
  done
}

build_tarball() {
  mkdir -p "$cache"
  local work
  work=$(mktemp -d "$cache/.build-XXXXXX")
  # --one-file-system: never follow a mount that debootstrap may have left behind into the host.
  trap 'umount_below "'"$work"'"; rm -rf --one-file-system "'"$work"'"' EXIT
  if ! debootstrap --arch=arm64 --variant=minbase --include="$PACKAGES" "$SUITE" "$work/root" "$MIRROR" \
      >"$work/debootstrap.log" 2>&1; then
    tail -n 40 "$work/debootstrap.log" >&2
    die "debootstrap failed (full log above, last 40 lines)"
  fi
  umount_below "$work/root"
  # Inside a container debootstrap bind-mounts /dev and leaves the tree's /dev empty: add the basic nodes.
  local node
  for node in "null c 1 3" "zero c 1 5" "full c 1 7" "random c 1 8" "urandom c 1 9" "tty c 5 0"; do
    # shellcheck disable=SC2086  # split "name type major minor"
    set -- $node
    [[ -e $work/root/dev/$1 ]] || mknod -m 666 "$work/root/dev/$1" "$2" "$3" "$4"
  done
  rm -f "$work/root"/var/cache/apt/archives/*.deb
  tar -C "$work/root" --numeric-owner -czf "$work/rootfs.tar.gz" .
  mv "$work/rootfs.tar.gz" "$tarball"
  # Tarballs of older recipes are dead weight.
  find "$cache" -maxdepth 1 -name "rootfs-*-arm64-*.tar.gz" ! -name "$(basename "$tarball")" -delete
}

tarball() {
  [[ $(id -u) == 0 ]] || die "must run as root (debootstrap)"
  mkdir -p "$cache"
  exec 9>"$cache/.lock"
  flock 9  # one build at a time; a second caller waits and then finds the tarball
  [[ -s $tarball ]] || build_tarball
  echo "$tarball"
}

case ${1:-} in
  binfmt) binfmt ;;
  tarball) tarball ;;
  *) die "usage: $0 binfmt|tarball" ;;
esac
