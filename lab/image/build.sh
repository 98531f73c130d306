#!/usr/bin/env bash
# Build the lab base image (Debian bookworm + systemd) with debootstrap: no registry needed.
# The tag is a hash of this recipe, so the image is rebuilt only when the recipe changes.
# Prints the image reference on stdout.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=${LAB_IMAGE_REPO:-localhost/llmops-lab}
mirror=${LAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
tag=$(cat "$here/build.sh" "$here/packages.txt" "$here/cgroup-empty.sh" | sha256sum | cut -c1-12)
image="$repo:$tag"

if podman image exists "$image"; then
  echo "$image"
  exit 0
fi

rootfs=$(mktemp -d /var/tmp/llmops-lab-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT

echo "building $image with debootstrap (about a minute)" >&2
debootstrap --variant=minbase --include="$(paste -sd, "$here/packages.txt")" \
  bookworm "$rootfs" "$mirror" >&2

# Units that have no job in a container.
for unit in getty.target console-getty.service systemd-udevd.service \
  systemd-udev-trigger.service systemd-modules-load.service sys-kernel-debug.mount \
  systemd-remount-fs.service; do
  ln -sf /dev/null "$rootfs/etc/systemd/system/$unit"
done
: >"$rootfs/etc/machine-id"
# systemd here hears when a service's cgroup empties (see cgroup-empty.sh): without it, on a cgroup v1 host, a vLLM
# restart waited a minute in final-sigkill about every second time.
install -m 0755 "$here/cgroup-empty.sh" "$rootfs/usr/local/sbin/llmops-lab-cgroup-empty"
cat >"$rootfs/etc/systemd/system/llmops-lab-cgroup-empty.service" <<'UNIT'
[Unit]
Description=Report emptied service cgroups to systemd (lab container on a cgroup v1 host)
ConditionPathIsDirectory=/sys/fs/cgroup/systemd

[Service]
ExecStart=/usr/local/sbin/llmops-lab-cgroup-empty
Restart=on-failure

[Install]
WantedBy=multi-user.target
UNIT
mkdir -p "$rootfs/etc/systemd/system/multi-user.target.wants"
ln -sf ../llmops-lab-cgroup-empty.service "$rootfs/etc/systemd/system/multi-user.target.wants/"
# A throwaway test container needs no fsync of every file dpkg unpacks, nor translated package lists (as the
# Debian images of container registries): apt installs in the lab wait on the disk far less.
echo force-unsafe-io >"$rootfs/etc/dpkg/dpkg.cfg.d/llmops-lab-unsafe-io"
echo 'Acquire::Languages "none";' >"$rootfs/etc/apt/apt.conf.d/llmops-lab-no-languages"
# No package index in the image, and an old timestamp so apt's cache_valid_time refreshes it.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
touch -d 2000-01-01 "$rootfs/var/lib/apt/lists"

tar -C "$rootfs" -c . | podman import \
  --change 'CMD ["/sbin/init"]' \
  --change 'STOPSIGNAL SIGRTMIN+3' \
  --change 'ENV container=podman' \
  - "$image" >&2
podman tag "$image" "$repo:latest"
# Older recipes' images are no longer used.
podman images --format '{{.Repository}}:{{.Tag}}' --filter "reference=$repo" |
  grep -vxF -e "$image" -e "$repo:latest" | xargs -r podman rmi >&2 || true
echo "$image"
