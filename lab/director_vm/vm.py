"""The lab's LVS directors as small QEMU VMs on a podman network: this machine's kernel has no IPVS, Debian's has.

Usage:
  vm.py up NAME --ip ADDRESS/PREFIX --network PODMAN_NETWORK [--memory MIB] [--cpus N] [--key PUBKEY_FILE]
                [--dns A,B] [--timeout S]
  vm.py stop NAME...        power the VM off; its disk (and what Ansible did to it) stays for the next up
  vm.py down NAME...|--all  power off and remove the VM, its tap device and its disk
  vm.py status [--json]
  vm.py ssh NAME [-- COMMAND...]
  vm.py key                 print the lab's private key (Ansible: ansible_ssh_private_key_file)

Each VM boots Debian bookworm's kernel under software emulation (-accel tcg; KVM hangs on the development
machines) from the image lab/director_vm/build.sh caches, through its own qcow2 overlay. A tap device joins the
podman network's bridge, so the VM sits on the containers' L2 segment, and this machine (the bridge's gateway)
reaches it over ssh as root with the lab's key, made once per clone. The VM configures itself at boot from its
kernel command line (guest-config.sh). State: .cache/director-vms/NAME/ (disk.qcow2, console.log, qemu.pid,
qmp.sock, vm.json). Run as root; podman must use .cache/containers.conf (the Makefile exports CONTAINERS_CONF).
DIRECTOR_VM_APPEND adds kernel parameters (for a verbose console: 'loglevel=7 systemd.show_status=1');
DIRECTOR_VM_CPU sets QEMU's CPU model (default qemu64, see CPU_MODEL).
"""

import argparse
import base64
import contextlib
import fcntl
import hashlib
import ipaddress
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
STATE = os.path.join(REPO, ".cache", "director-vms")
KEY = os.path.join(STATE, "id_ed25519")
BUILD = os.path.join(HERE, "build.sh")
SSH_OPTIONS = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
               "-o", "BatchMode=yes", "-o", "ConnectTimeout=5"]
BOOT_TIMEOUT = 180
NAT_COMMENT = "llmops-director-vm:%s"
# Software emulation. The development machines' /dev/kvm (nested, no vmx flag) runs a guest far too slowly: the
# bzImage's decompressor gave no kernel line in 150 s, and an uncompressed kernel stopped on an emulation failure
# (cmpxchg16b) 16 s into its boot. A director's working set of translated code is about 250 MiB (Ansible's
# Python): a 64 MiB cache was flushed 303 times in an hour and the director role's second run took 6 min 22 s;
# with 512 MiB, 2 flushes and 5 min 06 s, for about 1 GiB resident.
ACCEL = "tcg,tb-size=512"
# An x86-64 baseline CPU: with -cpu max the guest's glibc, OpenSSL and Python take AVX2/SHA paths that QEMU 7.2's
# TCG emulates in slow helpers (bench/director_cpu_bench.py: the director play and the boot, qemu64 against max).
CPU_MODEL = "qemu64"


class VMError(Exception):
    pass


def run(*args, check=True, capture=True, **kwargs):
    result = subprocess.run(args, check=False, text=True, capture_output=capture, **kwargs)
    if check and result.returncode != 0:
        output = (result.stderr or result.stdout or "").strip()
        raise VMError("%s failed (%d): %s" % (" ".join(args), result.returncode, output))
    return result


def state_dir(name):
    return os.path.join(STATE, name)


def tap_name(name):
    """The VM's tap device: tap-NAME, or a hashed form when that is too long for an interface name (15)."""
    tap = "tap-" + name
    if len(tap) <= 15 and all(c.isalnum() or c in "-_." for c in name):
        return tap
    return "tap-%s-%s" % ("".join(c for c in name if c.isalnum())[:5], hashlib.sha1(name.encode()).hexdigest()[:5])


def mac_address(name):
    """A stable MAC in QEMU's range, derived from the VM's name."""
    digest = hashlib.sha1(name.encode()).digest()
    return "52:54:00:%02x:%02x:%02x" % (digest[0], digest[1], digest[2])


def lab_key():
    """The lab's ssh key pair (made once per clone); returns the private key's path."""
    os.makedirs(STATE, exist_ok=True)
    with open(os.path.join(STATE, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(KEY):
            run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "llmops-lab-directors", "-f", KEY)
    return KEY


def image():
    """The cached director image entry (built when its recipe changed)."""
    result = subprocess.run([BUILD], check=False, text=True, stdout=subprocess.PIPE)  # progress on stderr
    if result.returncode != 0:
        raise VMError("%s failed (%d)" % (BUILD, result.returncode))
    return result.stdout.strip().splitlines()[-1]


def podman_network(network):
    """The podman network's bridge, subnet and gateway."""
    out = run("podman", "network", "inspect", network).stdout
    info = json.loads(out)[0]
    subnet = info["subnets"][0]
    return info["network_interface"], ipaddress.ip_network(subnet["subnet"]), ipaddress.ip_address(subnet["gateway"])


def link_exists(dev):
    return os.path.exists("/sys/class/net/%s" % dev)


def ensure_bridge(bridge, subnet, gateway):
    """The network's bridge, as podman makes it when its first container starts (podman reuses ours).
    Returns whether it had to be made."""
    if link_exists(bridge):
        return False
    run("ip", "link", "add", bridge, "type", "bridge")
    run("ip", "addr", "add", "%s/%d" % (gateway, subnet.prefixlen), "dev", bridge)
    run("ip", "link", "set", bridge, "up")
    return True


def nat_rules(name, ip, subnet):
    """iptables rules that let the VM reach beyond the lab network (apt), as podman's for its containers.

    Multicast stays as sent, as podman's rules leave it: the bridge hands the directors' frames to iptables
    (bridge-nf-call-iptables), and a masqueraded IPVS sync message reaches the other director from the gateway's
    address, which its firewall drops (the backup then knows no connection, and a failover resets them all)."""
    comment = ["-m", "comment", "--comment", NAT_COMMENT % name]
    return [
        ["-t", "nat", "POSTROUTING", "-s", str(ip), "!", "-d", str(subnet), "-m", "addrtype", "!", "--dst-type",
         "MULTICAST", *comment, "-j", "MASQUERADE"],
        ["-t", "filter", "FORWARD", "-s", str(ip), *comment, "-j", "ACCEPT"],
        ["-t", "filter", "FORWARD", "-d", str(ip), *comment, "-j", "ACCEPT"],
    ]


def _iptables(action, name, ip, subnet):
    wanted = nat_rules(name, ip, subnet)
    for table, chain in sorted(set((rule[1], rule[2]) for rule in wanted)):
        # Every rule whose comment names the VM, as iptables lists it: also those of an earlier version of this file.
        for line in run("iptables", "-t", table, "-S", chain).stdout.splitlines():
            spec = shlex.split(line)[2:]
            if NAT_COMMENT % name in spec:
                run("iptables", "-t", table, "-D", chain, *spec)
    for rule in wanted if action == "add" else []:
        run("iptables", "-t", rule[1], "-I", rule[2], *rule[3:])


def load(name):
    path = os.path.join(state_dir(name), "vm.json")
    if not os.path.exists(path):
        return None
    with open(path) as handle:
        return json.load(handle)


def pid_of(name):
    """The VM's qemu process id, or None when it does not run."""
    try:
        with open(os.path.join(state_dir(name), "qemu.pid")) as handle:
            pid = int(handle.read().strip())
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            if state_dir(name).encode() not in handle.read():
                return None
        return pid
    except (OSError, ValueError):
        return None


def rss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def ssh_command(ip, *command):
    return ["ssh", "-i", lab_key(), *SSH_OPTIONS, "root@%s" % ip, *command]


def console_tail(name, lines=40):
    try:
        with open(os.path.join(state_dir(name), "console.log"), errors="replace") as handle:
            tail = "".join(handle.readlines()[-lines:]).strip()
    except OSError:
        tail = ""
    return tail or ("(nothing yet: the VM boots quietly; DIRECTOR_VM_APPEND='loglevel=7 systemd.show_status=1'"
                    " shows more)")


def wait_for_ssh(name, ip, timeout=BOOT_TIMEOUT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pid_of(name) is None:
            raise VMError("VM %s stopped while booting; its console:\n%s" % (name, console_tail(name)))
        try:
            with socket.create_connection((str(ip), 22), timeout=2):
                pass
        except OSError:
            time.sleep(1)
            continue
        if run(*ssh_command(ip, "true"), check=False).returncode == 0:
            return
        time.sleep(1)
    raise VMError("VM %s gave no ssh login on %s within %d s; its console:\n%s"
                  % (name, ip, timeout, console_tail(name)))


def up(name, ip, network, memory=768, key=None, dns=None, timeout=BOOT_TIMEOUT, cpus=1):
    """Start the VM NAME (made on first use, its disk kept from an earlier run) and wait for its ssh login.
    Returns the seconds from launch to login, or None when it was running already."""
    interface = ipaddress.ip_interface(ip)
    bridge, subnet, gateway = podman_network(network)
    if interface.ip not in subnet:
        raise VMError("%s is not in %s's subnet %s" % (ip, network, subnet))
    if pid_of(name):
        wait_for_ssh(name, interface.ip, timeout)
        return None
    entry = image()
    state = state_dir(name)
    os.makedirs(state, exist_ok=True)
    disk = os.path.join(state, "disk.qcow2")
    previous = load(name) or {}
    if previous.get("image") and previous["image"] != entry and os.path.exists(disk):
        if os.path.exists(os.path.join(previous["image"], "base.img")):
            entry = previous["image"]  # its disk lives on that image: keep it until the VM is removed
        else:
            raise VMError("VM %s's image %s is gone; remove the VM (down) first" % (name, previous["image"]))
    if not os.path.exists(disk):
        run("qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", os.path.join(entry, "base.img"), disk)
    authorized = key or (lab_key() + ".pub")
    with open(authorized, "rb") as handle:
        ssh_key = base64.b64encode(handle.read()).decode()
    if dns is None:
        dns = ",".join(host_nameservers()) or str(gateway)
    tap = tap_name(name)
    made_bridge = ensure_bridge(bridge, subnet, gateway) or previous.get("made_bridge", False)
    if link_exists(tap):
        run("ip", "link", "del", tap)
    run("ip", "tuntap", "add", "dev", tap, "mode", "tap")
    run("ip", "link", "set", tap, "master", bridge)
    run("ip", "link", "set", tap, "up")
    if shutil.which("iptables"):
        with open("/proc/sys/net/ipv4/ip_forward", "w") as forward:
            forward.write("1")
        _iptables("add", name, interface.ip, subnet)
    config = {"name": name, "ip": str(interface), "network": network, "bridge": bridge, "tap": tap,
              "mac": mac_address(name), "memory": memory, "cpus": cpus, "image": entry, "made_bridge": made_bridge,
              "subnet": str(subnet)}
    with open(os.path.join(state, "vm.json"), "w") as handle:
        json.dump(config, handle, indent=2)
    cmdline = ["root=/dev/vda", "rw", "console=ttyS0", "quiet", "net.ifnames=0", "fsck.mode=skip",
               "mitigations=off", "llmops.hostname=" + name, "llmops.ip=" + str(interface),
               "llmops.gw=" + str(gateway), "llmops.ssh_key=" + ssh_key]
    if dns:
        cmdline.append("llmops.dns=" + dns)
    cmdline += os.environ.get("DIRECTOR_VM_APPEND", "").split()
    console = os.path.join(state, "console.log")
    if os.path.exists(console):
        os.replace(console, console + ".1")
    started = time.monotonic()
    run("qemu-system-x86_64", "-name", name, "-machine", "pc", "-accel", ACCEL,
        "-cpu", os.environ.get("DIRECTOR_VM_CPU", CPU_MODEL), "-smp", str(cpus),
        "-m", str(memory), "-nodefaults", "-no-user-config", "-display", "none", "-vga", "none",
        "-kernel", os.path.join(entry, "vmlinuz"), "-initrd", os.path.join(entry, "initrd.img"),
        "-append", " ".join(cmdline),
        "-drive", "file=%s,if=virtio,format=qcow2,discard=unmap" % disk,
        "-netdev", "tap,id=net0,ifname=%s,script=no,downscript=no" % tap,
        "-device", "virtio-net-pci,netdev=net0,mac=%s,romfile=" % config["mac"],
        "-device", "virtio-rng-pci",
        "-serial", "file:" + console, "-monitor", "none",
        "-qmp", "unix:%s,server=on,wait=off" % os.path.join(state, "qmp.sock"),
        "-daemonize", "-pidfile", os.path.join(state, "qemu.pid"))
    wait_for_ssh(name, interface.ip, timeout)
    return time.monotonic() - started


def host_nameservers():
    """This machine's DNS servers that a VM can reach through NAT (not loopback ones)."""
    servers = []
    try:
        with open("/etc/resolv.conf") as handle:
            for line in handle:
                fields = line.split()
                if len(fields) >= 2 and fields[0] == "nameserver":
                    address = ipaddress.ip_address(fields[1])
                    if address.version == 4 and not address.is_loopback:
                        servers.append(str(address))
    except (OSError, ValueError):
        pass
    return servers[:3]


def qmp(name, command):
    """Send one QMP command to the VM's qemu."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(os.path.join(state_dir(name), "qmp.sock"))
        reader = sock.makefile("r")
        reader.readline()  # greeting
        for message in ({"execute": "qmp_capabilities"}, {"execute": command}):
            sock.sendall(json.dumps(message).encode() + b"\n")
            while True:
                reply = json.loads(reader.readline())
                if "return" in reply or "error" in reply:
                    break


def stop(name, timeout=60):
    """Power the VM off (ACPI, then SIGTERM, then SIGKILL) and remove its tap device and NAT rules."""
    pid = pid_of(name)
    if pid:
        with contextlib.suppress(OSError, ValueError):
            qmp(name, "system_powerdown")
        deadline = time.monotonic() + timeout
        while pid_of(name) and time.monotonic() < deadline:
            time.sleep(0.5)
        for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            if not pid_of(name):
                break
            os.kill(pid, sig)
            deadline = time.monotonic() + wait
            while pid_of(name) and time.monotonic() < deadline:
                time.sleep(0.2)
    config = load(name)
    if config:
        if link_exists(config["tap"]):
            run("ip", "link", "del", config["tap"])
        if shutil.which("iptables"):
            _iptables("delete", name, ipaddress.ip_interface(config["ip"]).ip, config["subnet"])


def down(name):
    """Stop the VM and remove it: its disk, its state, and the bridge when this script made it and it is idle."""
    config = load(name)
    stop(name)
    if config and config.get("made_bridge"):
        bridge = config["bridge"]
        if link_exists(bridge) and not os.listdir("/sys/class/net/%s/brif" % bridge):
            run("ip", "link", "del", bridge, check=False)
    shutil.rmtree(state_dir(name), ignore_errors=True)


def names():
    if not os.path.isdir(STATE):
        return []
    return sorted(entry for entry in os.listdir(STATE) if os.path.exists(os.path.join(STATE, entry, "vm.json")))


def status():
    """Every VM of this clone: its configuration, pid and resident memory."""
    rows = []
    for name in names():
        config = load(name)
        pid = pid_of(name)
        config.update(running=bool(pid), pid=pid, rss_mib=(rss_kib(pid) or 0) // 1024 if pid else None)
        rows.append(config)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    sub = parser.add_subparsers(dest="action", required=True)
    p_up = sub.add_parser("up", help="start a VM (made on first use) and wait for its ssh login")
    p_up.add_argument("name")
    p_up.add_argument("--ip", required=True, help="ADDRESS/PREFIX on the podman network")
    p_up.add_argument("--network", required=True, help="the podman network whose bridge the VM joins")
    p_up.add_argument("--memory", type=int, default=768, help="MiB (default 768)")
    p_up.add_argument("--cpus", type=int, default=1, help="virtual CPUs (default 1)")
    p_up.add_argument("--key", help="public key file for root (default: the lab's key)")
    p_up.add_argument("--dns", help="comma-separated DNS servers (default: this machine's)")
    p_up.add_argument("--timeout", type=int, default=BOOT_TIMEOUT, help="seconds to wait for ssh")
    p_stop = sub.add_parser("stop", help="power VMs off, keeping their disks")
    p_stop.add_argument("names", nargs="+")
    p_down = sub.add_parser("down", help="power VMs off and remove them")
    p_down.add_argument("names", nargs="*")
    p_down.add_argument("--all", action="store_true")
    p_status = sub.add_parser("status", help="list this clone's VMs")
    p_status.add_argument("--json", action="store_true")
    p_ssh = sub.add_parser("ssh", help="ssh into a VM as root")
    p_ssh.add_argument("name")
    p_ssh.add_argument("command", nargs=argparse.REMAINDER)
    sub.add_parser("key", help="print the lab's private key path")
    args = parser.parse_args()
    try:
        if args.action == "up":
            seconds = up(args.name, args.ip, args.network, args.memory, args.key, args.dns, args.timeout, args.cpus)
            address = args.ip.split("/")[0]
            if seconds is None:
                print("%s: running already, ssh root@%s answers" % (args.name, address))
            else:
                print("%s: ssh root@%s answers (%.0f s after launch)" % (args.name, address, seconds))
        elif args.action == "stop":
            for name in args.names:
                stop(name)
        elif args.action == "down":
            for name in names() if args.all else args.names:
                down(name)
        elif args.action == "status":
            rows = status()
            if args.json:
                print(json.dumps(rows, indent=2))
            for row in [] if args.json else rows:
                print("%-12s %-18s %-8s %-16s %s" % (row["name"], row["ip"], "running" if row["running"] else "stopped",
                                                     row["tap"], "%d MiB" % row["rss_mib"] if row["running"] else ""))
        elif args.action == "ssh":
            config = load(args.name)
            if not config:
                raise VMError("no VM %s" % args.name)
            command = args.command[1:] if args.command[:1] == ["--"] else args.command
            os.execvp("ssh", ssh_command(ipaddress.ip_interface(config["ip"]).ip, *command))
        elif args.action == "key":
            print(lab_key())
    except VMError as error:
        sys.exit("director-vm: %s" % error)


if __name__ == "__main__":
    main()
