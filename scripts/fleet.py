"""The one fleet that make test's fleet verifiers run against: the lab, brought up once per run.

Usage: fleet.py up | verify [PYTEST ARGS] | down

up:   refuses a lab someone else brought up (make lab: run make lab-down first; an earlier make test's lab, and on a
      CI machine, CI=true, any lab, is a killed run's and is removed), then create (lab/lab.py up), prepare (an apt
      index on every host, which the check-mode run predicts from), check (site.yml --check on the fresh hosts),
      converge (site.yml, as make lab), idempotence (site.yml again: changed=0 and failed=0 on every host) and the
      lab's summary. Each step's time goes to .cache/test-logs/fleet-steps.tsv (make test's table shows them).
      All three run under Mitogen's linear strategy (fast_run): on the emulated directors a module run is about
      3 s of Python start-up and imports, which Mitogen's interpreter, kept for the whole run, pays once (the
      idempotence run on an idle lab: 205 s against 370). Only the directors' ssh goes through Mitogen; the lab's
      own connection to the containers is Ansible's. Ansible's own ssh to the directors is what make lab, the AWX
      jobs and the verifiers' playbook runs (the rolling upgrade's drain, the revocation) use.
verify: the fleet verifiers (pytest tests/fleet, with PYTEST ARGS) against the lab that is up, whoever brought it up.
down: removes the lab (lab/lab.py down) and checks that nothing of it is left.

The verifiers themselves are tests/fleet/ (pytest), against whatever lab is up: `make lab`, then
`make fleet-verify` (all of them) or `.venv/bin/pytest tests/fleet/test_edge.py` (one).
"""

import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import threading
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
INVENTORY = REPO / "inventories" / "lab"
LOGS = REPO / ".cache" / "test-logs"
STEPS = LOGS / "fleet-steps.tsv"
OWNER = "make-test"
LAB = [sys.executable, str(REPO / "lab" / "lab.py")]
RECAP = re.compile(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
sys.path.insert(0, str(REPO / "lab"))
import lvs_probe  # noqa: E402  (the lab's hosts and the directors' ssh, read from inventories/lab)


def say(message):
    print("%s fleet: %s" % (time.strftime("%H:%M:%S"), message), flush=True)


def lab_env(**extra):
    """This environment with the lab's Ansible settings and the venv first on PATH, plus extra."""
    return dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
                PATH="%s:%s" % (REPO / ".venv" / "bin", os.environ["PATH"]), **extra)


def run(argv, capture=False):
    """Run argv in the repository with the lab's Ansible settings; its output streams (or is returned)."""
    env = lab_env()
    if not capture:
        return subprocess.run(argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, check=False).returncode, ""
    result = subprocess.run(argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, check=False, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return result.returncode, result.stdout


def fast_run():
    """The settings of a site.yml run under Mitogen's linear strategy (the venv's ansible_mitogen)."""
    spec = importlib.util.find_spec("ansible_mitogen")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("fleet: ansible_mitogen is not in this Python (%s): run make bootstrap." % sys.executable)
    strategies = pathlib.Path(list(spec.submodule_search_locations)[0]) / "plugins" / "strategy"
    # Mitogen's ssh reads host key checking from Ansible's setting, not from the lab's ssh arguments. Its connect
    # timeout (Ansible's `timeout`, 10 s) covers the whole bootstrap, its Python started in the emulated director
    # included: beside the other lane and the serving nodes that took over 10 s (CI at 93e66ce: both directors
    # unreachable in the idempotence run), so these runs give it 120 s.
    return {"ANSIBLE_STRATEGY_PLUGINS": str(strategies), "ANSIBLE_STRATEGY": "mitogen_linear",
            "ANSIBLE_HOST_KEY_CHECKING": "False", "ANSIBLE_TIMEOUT": "120"}


def site(*args):
    """ansible-playbook site.yml on the lab under Mitogen's strategy: (rc, output); the output is also printed as it
    comes."""
    env = lab_env(**fast_run())
    lines = []
    with subprocess.Popen(["ansible-playbook", "site.yml", "-i", str(INVENTORY), *args], cwd=REPO, env=env,
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace") as process:
        for line in process.stdout:
            print(line, end="", flush=True)
            lines.append(line)
    return process.returncode, "".join(lines)


def owners():
    rc, output = run(LAB + ["owners"], capture=True)
    if rc:
        sys.exit("fleet: lab.py owners failed:\n" + output)
    return json.loads(output)


def prepare():
    """An apt index on every lab host (the images hold none): check mode predicts the package tasks from it."""
    errors = []

    def update(host):
        if host in lvs_probe.DIRECTORS:
            argv = lvs_probe.SSH + ["root@" + lvs_probe.DIRECTORS[host], "apt-get update -qq"]
        else:
            argv = ["podman", "exec", host, "apt-get", "update", "-qq"]
        result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=600)
        if result.returncode:
            errors.append("%s: %s" % (host, result.stderr[-500:]))

    hosts = sorted(set(lvs_probe.NODES) | set(lvs_probe.DIRECTORS) | {"lab-mon1"})
    threads = [threading.Thread(target=update, args=(host,)) for host in hosts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return "\n".join(errors)


def idempotent(output):
    """The hosts of a site.yml recap that changed or failed something: '' when none did."""
    recaps = RECAP.findall(output)
    if not recaps:
        return "no play recap in the output"
    bad = ["%s changed=%s unreachable=%s failed=%s" % (host, changed, unreachable, failed)
           for host, _ok, changed, unreachable, failed in recaps if (changed, unreachable, failed) != ("0", "0", "0")]
    return "; ".join(bad)


def up():
    found = owners()
    # A lab of an earlier make test (one a killed run left) is removed; so is any lab on a CI machine.
    if set(found.values()) - {OWNER} and os.environ.get("CI", "").lower() != "true":
        sys.exit("fleet: a lab is up on this machine (%s: container, owner): make test brings up its own. "
                 "Run make lab-down first, or run the verifiers against it: make fleet-verify." % json.dumps(found))
    if found:
        say("a lab of an earlier run is up (%s): removing it" % json.dumps(found))
        if down(check=False):
            sys.exit(1)
    LOGS.mkdir(parents=True, exist_ok=True)
    STEPS.write_text("")

    def step(name, action):
        say("%s ..." % name)
        start = time.monotonic()
        error = action()
        seconds = time.monotonic() - start
        with STEPS.open("a") as steps:
            steps.write("%s\t%s\t%.0f\n" % (name, "FAILED" if error else "passed", seconds))
        say("%s: %s in %.0f s" % (name, "FAILED" if error else "passed", seconds))
        if error:
            sys.exit("fleet: %s failed: %s" % (name, error))

    step("create", lambda: "lab.py up failed" if run(LAB + ["up", "--owner", OWNER])[0] else "")
    step("prepare", prepare)
    step("check", lambda: "site.yml --check failed" if site("--check")[0] else "")
    step("converge", lambda: "site.yml failed" if site()[0] else "")

    def idempotence():
        rc, output = site()
        return "site.yml failed" if rc else idempotent(output)

    step("idempotence", idempotence)
    step("summary", lambda: "lab.py summary failed" if run(LAB + ["summary"])[0] else "")
    return 0


def down(check=True):
    """Remove the lab; with check, fail when anything of it is left. Returns an exit code."""
    found = owners()
    if check and os.environ.get("CI", "").lower() != "true" and set(found.values()) - {OWNER}:
        sys.exit("fleet: the lab on this machine was not brought up by make test (%s: container, owner); it is left "
                 "as it is. Run make lab-down to remove it." % json.dumps(found))
    if run(LAB + ["down"])[0]:
        return 1
    if not check:
        return 0
    left = subprocess.run(
        ["bash", "-c", "podman ps -aq --filter label=llmops.lab=1; podman network exists llmops-lab && echo network; "
         "pgrep -af 'qemu-system-x86_64 -name lab-l[b]' || true; ls -d %s/.cache/director-vms/lab-lb* 2>/dev/null "
         "|| true" % REPO], capture_output=True, text=True, check=False).stdout.strip()
    if left:
        print("fleet: make lab-down left: %s" % left, file=sys.stderr)
        return 1
    say("the lab is gone")
    return 0


def verify(args):
    if not owners():
        sys.exit("fleet: no lab is up on this machine: run make lab (or scripts/fleet.py up) first.")
    return run(["pytest", "-p", "no:cacheprovider", "-v", "-s", "--durations=0", str(REPO / "tests" / "fleet"),
                *args])[0]


def main():
    if sys.argv[1:] == ["up"]:
        return up()
    if sys.argv[1:2] == ["verify"]:
        return verify(sys.argv[2:])
    if sys.argv[1:] == ["down"]:
        return down()
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main())
