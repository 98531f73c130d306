"""Bring the local lab up or down: one systemd container per host of inventories/lab.

Usage: lab.py up [--owner NAME]|down|summary|owners [--inventory DIR] | lab.py ask [HOST] [PROMPT]
The container settings come from the inventory's lab_* variables; podman must use
.cache/containers.conf, which make bootstrap writes from lab/containers.conf (the Makefile exports CONTAINERS_CONF).
"""

import argparse
import json
import os
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
LABEL = "llmops.lab=1"
# Who brought the lab up: make lab (the default) or a test, which may then remove a lab of its own that a killed run
# left behind, and only that.
OWNER = "llmops.lab.owner"
sys.path.insert(0, os.path.join(HERE, "director_vm"))
import vm  # noqa: E402  (lab/director_vm/vm.py: the lab's LVS directors are QEMU VMs)


def run(*args, check=True, capture=False):
    return subprocess.run(args, check=check, text=True, capture_output=capture)


def podman(*args, check=True, capture=False):
    return run("podman", *args, check=check, capture=capture)


def load_inventory(inventory):
    ansible_inventory = os.path.join(os.path.dirname(sys.executable), "ansible-inventory")
    out = run(ansible_inventory, "-i", inventory, "--list", capture=True).stdout
    data = json.loads(out)
    hostvars = data.get("_meta", {}).get("hostvars", {})
    # Each host's groups (ansible-inventory --list keeps them apart from the variables).
    for group, members in data.items():
        for host in (members.get("hosts") or []) if isinstance(members, dict) and group != "_meta" else []:
            hostvars.setdefault(host, {}).setdefault("lab_groups", []).append(group)
    hosts = sorted(hostvars)
    if not hosts:
        sys.exit("lab: inventory %s has no hosts" % inventory)
    return hosts, hostvars


def exists(kind, name):
    return podman(kind, "exists", name, check=False).returncode == 0


def up(hosts, hostvars, owner="make-lab"):
    common = hostvars[hosts[0]]
    network = common["lab_network"]
    owned = ["--label", LABEL, "--label", "%s=%s" % (OWNER, owner)]
    if not exists("network", network):
        podman("network", "create", "--subnet", common["lab_subnet"], *owned, network, capture=True)
    for host in containers(hosts, hostvars):
        hv = hostvars[host]
        if exists("container", host):
            podman("start", host, capture=True)
            continue
        args = [
            "run",
            "--detach",
            "--name",
            host,
            "--hostname",
            host,
            *owned,
            "--network",
            network,
            "--ip",
            hv["lab_ip"],
            "--systemd=always",
            "--shm-size",
            hv["lab_shm_size"],
            "--cap-add",
            "NET_ADMIN",
        ]
        for ulimit in hv["lab_ulimits"]:
            args += ["--ulimit", ulimit]
        # A container cannot set its own sysctls: the ones the roles persist are set here, and the roles find them.
        for name, value in sorted((hv.get("lab_sysctls") or {}).items()):
            args += ["--sysctl", "%s=%s" % (name, value)]
        podman(*args, hv["lab_image"], "/sbin/init", capture=True)
    start_vms([host for host in hosts if is_vm(hostvars[host])], hostvars)
    for host in containers(hosts, hostvars):
        wait_for_systemd(host)
        ssh_stand_in(host)


def ssh_stand_in(host):
    """Something that answers on port 22, where a real host runs sshd: the firewall role checks after a change that
    the controller can still connect there (the containers have no sshd; Ansible reaches them through podman)."""
    if podman("exec", host, "systemctl", "is-active", "--quiet", "lab-ssh-stand-in", check=False).returncode:
        podman("exec", host, "systemd-run", "--unit=lab-ssh-stand-in", "--property=Restart=always", "/usr/bin/python3",
               "-m", "http.server", "--bind", "0.0.0.0", "22", capture=True)


def owners():
    """The owner of each container of a lab on this machine, up or not: {container: owner}."""
    template = "{{.Names}} {{index .Labels \"%s\"}}" % OWNER
    listing = podman("ps", "-a", "--filter", "label=" + LABEL, "--format", template, capture=True).stdout
    return dict((line.split() + ["unknown"])[:2] for line in listing.splitlines() if line.strip())


def is_vm(hv):
    return hv.get("lab_kind") == "vm"


def containers(hosts, hostvars):
    return [host for host in hosts if not is_vm(hostvars[host])]


def start_vms(hosts, hostvars):
    """Boot the VM hosts side by side and wait for their ssh logins."""
    errors = []

    def start(host):
        hv = hostvars[host]
        try:
            prefix = hv["lab_subnet"].split("/")[1]
            vm.up(host, "%s/%s" % (hv["lab_ip"], prefix), hv["lab_network"], memory=int(hv.get("lab_memory", 768)))
        except vm.VMError as e:
            errors.append(str(e))

    threads = [threading.Thread(target=start, args=(host,)) for host in hosts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        sys.exit("lab: " + "\n".join(errors))


def wait_for_systemd(host, attempts=60):
    for _attempt in range(attempts):
        state = podman("exec", host, "systemctl", "is-system-running", check=False, capture=True).stdout.strip()
        if state in ("running", "degraded"):
            return
        run("sleep", "1")
    sys.exit("lab: systemd in %s did not come up (last state %r)" % (host, state))


def remove(*containers, attempts=5):
    """Stop, then podman rm --force each container by itself, retried for what is left. Under load a container can
    still be stopping when the first rm runs; and podman 4.3's rm stops at the first name it cannot find and still
    exits 0, so a list with one name already gone left the rest in place (CI, the fleet's removal in make test)."""
    left = list(containers)
    for attempt in range(1, attempts + 1):
        podman("stop", "--ignore", "--time", "5", *left, check=False, capture=True)
        errors = []
        for name in left:
            result = podman("rm", "--force", "--time", "5", name, check=False, capture=True)
            if result.returncode:
                errors.append("%s: exit %d %s" % (name, result.returncode, result.stderr.strip()))
        left = [name for name in left if exists("container", name)]
        if not left:
            return
        if attempt == attempts:
            states = podman("ps", "-a", "--format", "{{.Names}}: {{.State}}", *[
                arg for name in left for arg in ("--filter", "name=^%s$" % name)], check=False, capture=True)
            sys.exit("lab: podman rm failed for %s (%s); still there: %s"
                     % (" ".join(left), "; ".join(errors) or "it exited 0",
                        ", ".join(states.stdout.split("\n")).strip(", ")))
        podman("kill", *left, check=False, capture=True)
        run("sleep", str(2 * attempt))


def down(hosts, hostvars):
    for host in hosts:
        if is_vm(hostvars[host]) and host in vm.names():
            vm.down(host)
    remove(*[host for host in containers(hosts, hostvars) if exists("container", host)])
    # Also anything labelled as ours that the inventory no longer lists.
    leftovers = podman("ps", "-aq", "--filter", "label=" + LABEL, capture=True).stdout.split()
    if leftovers:
        remove(*leftovers)
    network = hostvars[hosts[0]]["lab_network"]
    if exists("network", network):
        podman("network", "rm", network, capture=True)


def local_fact(host, name, hv):
    """A JSON local fact the collection wrote on a lab host, or {}."""
    command = ["cat", "/etc/ansible/facts.d/%s.fact" % name]
    if is_vm(hv):
        fact = run(*vm.ssh_command(hv["lab_ip"], *command), check=False, capture=True)
    else:
        fact = podman("exec", host, *command, check=False, capture=True)
    return json.loads(fact.stdout) if fact.returncode == 0 else {}


def summary(hosts, hostvars, inventory=None):
    print("\nThe lab is up (containers and director VMs on this machine, podman network %s):\n"
          % hostvars[hosts[0]]["lab_network"])
    print("  %-12s %-14s %-16s %s" % ("host", "address", "groups", "deployed"))
    for host in hosts:
        record, vllm = local_fact(host, "llmops", hostvars[host]), local_fact(host, "vllm", hostvars[host])
        deployed = ["baseline"] if record else []
        if vllm:
            deployed.append("%s %s in %s" % (vllm["package"], vllm["version"], vllm["venv"]))
        groups = ",".join(record.get("groups", []))
        print("  %-12s %-14s %-16s %s" % (host, hostvars[host]["lab_ip"], groups, ", ".join(deployed) or "nothing yet"))
    for host in hosts:
        for instance in hostvars[host].get("vllm_instances") or []:
            print("  %s: vLLM instance %s serves %s on 127.0.0.1:%s" % (
                host, instance["name"], instance.get("served_model_name", instance["name"]), instance["port"]))
    for line in edge_commands(hosts, hostvars, inventory):
        print(line)
    for line in monitoring_lines(hosts, hostvars):
        print(line)
    print("\nAsk the model:    lab/lab.py ask lab-node1 'Hello, lab'  (inside the node, without the edge)")
    print("Reach a host:     podman exec -it lab-node1 bash;  lab/director_vm/vm.py ssh lab-lb1")
    print("Run a play:       .venv/bin/ansible-playbook site.yml -i inventories/lab")
    print("Topology report:  .venv/bin/ansible-playbook playbooks/facts.yml -i inventories/lab  (reports/topology/)")
    print("Remove the lab:   make lab-down\n")


def monitoring_lines(hosts, hostvars):
    """Where the monitoring hosts' Prometheus, Alertmanager, dashboards and log sink are."""
    lines = []
    for host in hosts:
        if "monitoring" in (hostvars[host].get("lab_groups") or []):
            address = hostvars[host]["lab_ip"]
            lines += ["\nMonitoring on %s:" % host,
                      "  Prometheus:   http://%s:9090  (targets: /targets, alerts: /alerts)" % address,
                      "  Alertmanager: http://%s:9093" % address,
                      "  Dashboards:   podman exec %s ls /var/lib/llmops-vllm/dashboards  (Grafana JSON)" % host]
        if "log_sinks" in (hostvars[host].get("lab_groups") or []):
            lines += ["  Log sink:     the nodes' audit and journal events, Redis (TLS) on %s:6379, list llmops-vllm:"
                      % hostvars[host]["lab_ip"],
                      "                podman exec %s redis-cli --tls --cacert /etc/llmops-vllm/pki/ca.crt --cert "
                      "/etc/llmops-vllm/pki/prometheus.crt --key /etc/llmops-vllm/pki/prometheus.key -h %s llen "
                      "llmops-vllm" % (host, hostvars[host]["lab_ip"])]
    return lines


def pki_dir(hostvars, inventory):
    """The lab's PKI directory on this machine (pki_dir of the inventory, relative to it)."""
    return os.path.abspath(hostvars["pki_dir"].replace("{{ inventory_dir }}", inventory))


def edge_commands(hosts, hostvars, inventory=None):
    """A ready-to-paste completion through each node's edge, with the lab client's certificate."""
    inventory = inventory or os.path.join(REPO, "inventories", "lab")
    lines = []
    for host in hosts:
        hv = hostvars[host]
        instances = hv.get("vllm_instances") or []
        clients = hv.get("pki_application_clients") or []
        if not instances or not clients or "pki_dir" not in hv:
            continue
        pki, client = pki_dir(hv, inventory), clients[0]["name"]
        body = json.dumps({"model": instances[0].get("served_model_name", instances[0]["name"]),
                           "prompt": "Hello, lab", "max_tokens": 16})
        curl = ("  curl --noproxy '*' --cacert %s/ca.crt --cert %s/clients/%s.crt --key %s/clients/%s.key "
                "https://%%s:%s/v1/completions -H 'Content-Type: application/json' -d '%s'"
                % (pki, pki, client, pki, client, hv.get("edge_port", 8000), body))
        if not lines:
            vips = hv.get("vllm_service_vips") or []
            if vips and any(is_vm(hostvars[h]) for h in hosts):
                lines.append("\nThrough the VIP (LVS direct routing to the nodes' edges; paste as is):")
                lines.append(curl % vips[0])
            lines.append("\nThrough each node's edge (TLS 1.3, client certificate %s; paste as is):" % client)
        lines.append(curl % hv["lab_ip"])
    return lines


ASK = """import json, sys, urllib.request
body = json.dumps({"model": sys.argv[2], "prompt": sys.argv[3], "max_tokens": 16}).encode()
request = urllib.request.Request(sys.argv[1], data=body, headers={"Content-Type": "application/json"})
print(json.load(urllib.request.urlopen(request, timeout=60))["choices"][0]["text"])
"""


def ask(hosts, hostvars, host=None, prompt=None):
    """A completion from the first vLLM instance of a lab host, from inside it (vLLM listens on loopback)."""
    host = host or hosts[0]
    instance = (hostvars[host].get("vllm_instances") or [None])[0]
    if not instance:
        sys.exit("%s runs no vLLM instance" % host)
    url = "http://127.0.0.1:%s/v1/completions" % instance["port"]
    model = instance.get("served_model_name", instance["name"])
    sys.exit(podman("exec", host, "python3", "-c", ASK, url, model, prompt or "Hello, lab", check=False).returncode)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("up", "down", "summary", "owners", "ask"))
    parser.add_argument("host", nargs="?", help="ask: the lab host (default: the first)")
    parser.add_argument("prompt", nargs="?", help="ask: the prompt")
    parser.add_argument("--inventory", default=os.path.join(REPO, "inventories", "lab"))
    parser.add_argument("--owner", default="make-lab", help="up: who brings the lab up (label %s)" % OWNER)
    args = parser.parse_args()
    if args.action == "owners":
        print(json.dumps(owners()))
        return
    hosts, hostvars = load_inventory(args.inventory)
    if args.action == "ask":
        ask(hosts, hostvars, args.host, args.prompt)
    elif args.action == "summary":
        summary(hosts, hostvars, args.inventory)
    elif args.action == "up":
        up(hosts, hostvars, args.owner)
    else:
        down(hosts, hostvars)


if __name__ == "__main__":
    main()
