#!/usr/bin/env bash
# Build the lab's LVS director VM image once per recipe into the shared cache (lab/cache.sh): Debian bookworm with
# its own kernel (this machine's kernel has no IPVS; the VM's has), keepalived and ipvsadm, booted by QEMU straight
# from the kernel and initrd kept beside the disk image (no boot loader). The clone's .cache/director-vm-image links
# to the entry: base.img (raw ext4, read-only; each VM runs from its own qcow2 overlay), vmlinuz, initrd.img.
# Each VM is configured at boot from its kernel command line (guest-config.sh): see vm.py. Prints the entry's path.
# Needs debootstrap, e2fsprogs (mkfs.ext4 -d) and, to run the VMs, qemu-system-x86 and qemu-utils.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$(dirname "$here")")
# shellcheck source=lab/cache.sh
. "$repo/lab/cache.sh"
cache_dir=$(llmops_cache_dir)
mirror=${LAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
dest=$cache_dir/director-vm/bookworm-$(recipe_key "$here/build.sh" "$here/packages.txt" "$here/guest-config.sh" \
  "$here/zip_bytecode.py")

mkdir -p "$(dirname "$dest")"
take_lock director-vm  # one build at a time; a concurrent one may have finished while this one waited

if [[ ! -f $dest/.complete ]]; then
  for tool in debootstrap mkfs.ext4; do
    command -v "$tool" >/dev/null || { echo "director-vm: $tool is missing (make bootstrap)" >&2; exit 1; }
  done
  echo "director-vm: building $dest (debootstrap and an ext4 image, about 5 minutes)" >&2
  tmp=$(mktemp -d "$dest.tmp.XXXXXX")
  tree=$tmp/tree
  trap 'mountpoint -q "$tree/proc" && umount "$tree/proc"; rm -rf "$tmp"' EXIT
  debootstrap --variant=minbase --include="$(paste -sd, "$here/packages.txt")" bookworm "$tree" "$mirror" >&2

  # The initramfs only has to find an ext4 root on a virtio disk: a short list of modules boots much faster
  # under software emulation than the default "most" (and no resume device to wait for).
  printf '%s\n' virtio_pci virtio_blk virtio_net ext4 >>"$tree/etc/initramfs-tools/modules"
  printf '%s\n' MODULES=list RESUME=none >"$tree/etc/initramfs-tools/conf.d/llmops-director-vm"
  mount -t proc proc "$tree/proc"
  chroot "$tree" update-initramfs -u -k all >&2
  umount "$tree/proc"

  # Per-VM configuration from the kernel command line, before the network and sshd.
  install -m 0755 "$here/guest-config.sh" "$tree/usr/local/sbin/llmops-vm-config"
  cat >"$tree/etc/systemd/system/llmops-vm-config.service" <<'EOF'
[Unit]
Description=Configure this lab director VM from the kernel command line (llmops.*)
DefaultDependencies=no
After=local-fs.target systemd-remount-fs.service
Before=network-pre.target ssh.service sysinit.target
Wants=network-pre.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/llmops-vm-config

[Install]
WantedBy=sysinit.target
EOF
  mkdir -p "$tree/etc/systemd/system/sysinit.target.wants"
  ln -sf /etc/systemd/system/llmops-vm-config.service "$tree/etc/systemd/system/sysinit.target.wants/"

  # Root logs in over ssh with the lab's key only; each VM makes its own host key at first boot.
  rm -f "$tree"/etc/ssh/ssh_host_*
  cat >"$tree/etc/ssh/sshd_config.d/llmops-director-vm.conf" <<'EOF'
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
EOF
  chroot "$tree" passwd --quiet --lock root

  # Boot fast: no timers or units a short-lived lab VM has no use for, no getty on the (absent) VGA console
  # (the serial console keeps its getty, for looking at a VM with a password set by hand), no first-boot wizard.
  for unit in apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer e2scrub_reap.service \
    fstrim.timer man-db.timer systemd-timesyncd.service systemd-firstboot.service getty@tty1.service; do
    ln -sf /dev/null "$tree/etc/systemd/system/$unit"
  done
  # Nor drivers for the emulated PC's floppy and speaker, which udev would load at every boot.
  printf 'blacklist %s\n' floppy pcspkr >"$tree/etc/modprobe.d/llmops-director-vm.conf"
  echo '/dev/vda / ext4 rw,noatime 0 0' >"$tree/etc/fstab"
  echo director >"$tree/etc/hostname"
  rm -f "$tree/etc/resolv.conf"
  : >"$tree/etc/machine-id"
  # As the lab's container image: no fsync of every file dpkg unpacks, no translations, no package index (an old
  # timestamp so that apt's cache_valid_time refreshes it).
  echo force-unsafe-io >"$tree/etc/dpkg/dpkg.cfg.d/llmops-lab-unsafe-io"
  echo 'Acquire::Languages "none";' >"$tree/etc/apt/apt.conf.d/llmops-lab-no-languages"
  rm -rf "$tree"/var/cache/apt/archives/*.deb "$tree"/var/cache/apt/*.bin "$tree"/var/lib/apt/lists/*
  touch -d 2000-01-01 "$tree/var/lib/apt/lists"

  # Ansible's module payloads are zip files, whose imports Python compiles again at every task: the VM's python3
  # keeps their bytecode (zip_bytecode.py; not under -S or -I, as the breaker runs).
  site=$tree$(chroot "$tree" python3 -c 'import site; print(site.getsitepackages()[0])')
  mkdir -p "$site"
  install -m 0644 "$here/zip_bytecode.py" "$site/llmops_lab_zip_bytecode.py"
  echo 'import llmops_lab_zip_bytecode; llmops_lab_zip_bytecode.install()' >"$site/llmops-lab-zip-bytecode.pth"

  # The kernel and initrd boot the VM from outside the image.
  kernel=$(basename "$(ls "$tree"/boot/vmlinuz-*)")
  cp "$tree/boot/$kernel" "$tmp/vmlinuz"
  cp "$tree/boot/initrd.img-${kernel#vmlinuz-}" "$tmp/initrd.img"
  echo "${kernel#vmlinuz-}" >"$tmp/kernel-version"

  # The filesystem: the tree plus 1.5 GiB for what Ansible installs; a sparse file. Inode tables and journal
  # written now, so that the guest's ext4lazyinit does not fill each VM's overlay with zeros.
  size_mib=$(($(du -sm "$tree" | cut -f1) + 1536))
  truncate -s "${size_mib}M" "$tmp/base.img"
  mkfs.ext4 -q -F -L director -d "$tree" -E lazy_itable_init=0,lazy_journal_init=0 "$tmp/base.img"
  chmod 0444 "$tmp/base.img"
  rm -rf "$tree"
  basename "$dest" >"$tmp/.complete"
  rm -rf "$dest" && mv "$tmp" "$dest"
  chmod 0755 "$dest"
  # Images of older recipes: the newest two are kept for clones of other commits.
  prune_entries "$(dirname "$dest")" 'bookworm-*' 2
fi

link_clone .cache/director-vm-image "$dest"
echo "$dest"
