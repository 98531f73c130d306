#!/bin/sh
# Runs inside a lab director VM at every boot (llmops-vm-config.service, before the network and sshd): configures
# the VM from the kernel command line that lab/director_vm/vm.py passes, so that one image serves every VM.
#   llmops.hostname=NAME         hostname, /etc/hostname, /etc/hosts
#   llmops.ip=ADDRESS/PREFIX     eth0's address
#   llmops.gw=ADDRESS            default route
#   llmops.dns=A[,B]             /etc/resolv.conf
#   llmops.ssh_key=BASE64        /root/.ssh/authorized_keys (base64 of its lines)
# Also gives the VM its own ssh host key on first boot (the image holds none).
set -eu

hostname='' ip='' gw='' dns='' ssh_key=''
read -r cmdline </proc/cmdline
for arg in $cmdline; do
  case $arg in
    llmops.hostname=*) hostname=${arg#*=} ;;
    llmops.ip=*) ip=${arg#*=} ;;
    llmops.gw=*) gw=${arg#*=} ;;
    llmops.dns=*) dns=${arg#*=} ;;
    llmops.ssh_key=*) ssh_key=${arg#*=} ;;
  esac
done

if [ -n "$hostname" ]; then
  echo "$hostname" >/etc/hostname
  hostname "$hostname"
  {
    echo "127.0.0.1 localhost"
    if [ -n "$ip" ]; then echo "${ip%/*} $hostname"; else echo "127.0.1.1 $hostname"; fi
    echo "::1 localhost ip6-localhost ip6-loopback"
  } >/etc/hosts
fi

ip link set lo up
# The NIC's driver is in the initramfs; wait briefly in case it is still probing.
i=0
while [ ! -e /sys/class/net/eth0 ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
if [ -n "$ip" ]; then
  ip -4 addr flush dev eth0
  ip addr add "$ip" dev eth0
fi
ip link set eth0 up
if [ -n "$gw" ]; then
  ip route replace default via "$gw" dev eth0
fi

if [ -n "$dns" ]; then
  rm -f /etc/resolv.conf
  for server in $(echo "$dns" | tr , ' '); do echo "nameserver $server"; done >/etc/resolv.conf
fi

if [ -n "$ssh_key" ]; then
  install -d -m 0700 /root/.ssh
  echo "$ssh_key" | base64 -d >/root/.ssh/authorized_keys.tmp
  chmod 0600 /root/.ssh/authorized_keys.tmp
  mv /root/.ssh/authorized_keys.tmp /root/.ssh/authorized_keys
fi

if [ ! -s /etc/ssh/ssh_host_ed25519_key ]; then
  rm -f /etc/ssh/ssh_host_ed25519_key /etc/ssh/ssh_host_ed25519_key.pub
  ssh-keygen -q -t ed25519 -N '' -C "root@${hostname:-director}" -f /etc/ssh/ssh_host_ed25519_key
fi
