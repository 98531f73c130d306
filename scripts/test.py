"""make test: every test gate, two at a time, then what failed and a table of times.

Usage: test.py [GATE ...]   (default: all; `molecule` means every scenario, `molecule/<name>` one of them)

The set-up steps run first, one after the other (the venv, the lab images, the wheelhouse, the model), and beside
them, one at a time, the gates that need no lab image (lint, sanity, unit, aarch64) until the set-up ends. The gates
then run on LLMOPS_TEST_JOBS lanes (default 2), longest first by the previous run's times: most of a gate's time
is spent waiting on containers, on vLLM starting or on the disk, so a second lane fills the CPUs that the first
leaves idle. The ALONE gates run last, each by itself.
Every gate runs even if another failed; its output goes to .cache/test-logs/<gate>.log. The end of the output
is the time of every step, gate and integration test file beside the previous run's (.cache/test-logs/times.md;
every run in the shared cache's test-times.tsv), then the lines that say what failed, so that a short tail of a
CI log still tells why, and the last line: `make test: N passed, M failed`.
"""

import os
import pathlib
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET

REPO = pathlib.Path(__file__).resolve().parents[1]
LOGS = REPO / ".cache" / "test-logs"
XDG_CACHE = pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache")
HISTORY = pathlib.Path(os.environ.get("LLMOPS_CACHE_DIR") or XDG_CACHE / "llmops.vllm") / "test-times.tsv"

SETUP = ["bootstrap", "image", "wheelhouse", "model", "node-image", "director-image", "filebeat"]
LINT = ["yamllint", "ruff", "ansible-lint", "argument-specs"]
COMMANDS = {
    "yamllint": ["yamllint", "--strict", "."],
    "ruff": ["ruff", "check", "."],
    "ansible-lint": ["ansible-lint", "--offline"],
    "argument-specs": ["python", "scripts/check_argument_specs.py"],
    "sanity": ["scripts/sanity.sh"],
    "unit": ["pytest", "-q", "tests/unit"],
    "aarch64": ["pytest", "-q", "-p", "no:cacheprovider", "tests/aarch64"],
    "integration": ["pytest", "-q", "-p", "no:cacheprovider", "--junitxml", str(LOGS / "integration.xml"),
                    "tests/integration"],
    # The one fleet (scripts/fleet.py): brought up once (create, check, converge, idempotence), then every fleet
    # verifier (tests/fleet) on a lane; those with deadlines of seconds last, alone, and then the lab is removed.
    "fleet": ["bash", "-c", "python scripts/fleet.py up && python scripts/fleet.py verify -m 'not alone' "
              "--junitxml %s" % (LOGS / "fleet.xml")],
    "fleet-alone": ["bash", "-c", "python scripts/fleet.py verify -m alone --junitxml %s; rc=$?; "
                    "python scripts/fleet.py down || rc=1; exit $rc" % (LOGS / "fleet-alone.xml")],
}
# A gate whose own gate failed does not run its tests, only what cleans up after both.
AFTER = {"fleet-alone": ("fleet", ["python", "scripts/fleet.py", "down"])}
# Gates that start lab containers, and so need the set-up.
LAB_GATES = ("integration", "molecule", "fleet", "fleet-alone")
# Gates that run by themselves, after the others: the LVS checks have deadlines of seconds (ejection, failover),
# and the two emulated directors need a CPU each. Beside another gate on 2 CPUs both ran 2 to 3 times longer
# (CI at 291cddd: the LVS scenario unfinished after 80 minutes, 38 alone).
ALONE = ("fleet-alone",)
# Seconds assumed for a gate that has no previous run (measured on a 2-CPU machine), to order the first one.
GUESS = {"fleet": 2400, "fleet-alone": 600, "molecule/install": 1000, "molecule/serving": 600,
         "molecule/multinode": 480, "molecule": 300, "integration": 400, "aarch64": 200, "sanity": 140}


def scenarios():
    return sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))


def gates_of(args):
    """The gates asked for, in their declared order; `molecule` is every scenario."""
    every = (LINT + ["sanity", "unit", "aarch64", "integration"] + ["molecule/" + s for s in scenarios()]
             + ["fleet", "fleet-alone"])
    if not args:
        return every
    wanted = set()
    for arg in args:
        matched = [g for g in every if g == arg or g.startswith(arg + "/")]
        if not matched:
            sys.exit("test.py: unknown gate %s (known: %s)" % (arg, " ".join(every)))
        wanted.update(matched)
    return [g for g in every if g in wanted]


def command(gate):
    if gate.startswith("molecule/"):
        return ["molecule", "test", "--scenario-name", gate.split("/", 1)[1]]
    return COMMANDS[gate]


def log_path(gate):
    return LOGS / (gate.replace("/", "-") + ".log")


def duration(seconds):
    seconds = int(round(seconds))
    return "%d min %02d s" % divmod(seconds, 60) if seconds >= 60 else "%d s" % seconds


def stopwatch(seconds):
    return "%02d:%02d" % divmod(int(seconds), 60)


def say(message):
    print("%s %s" % (time.strftime("%H:%M:%S"), message), flush=True)


def run(gate, argv):
    """Run one gate with its output in its log; returns (passed, seconds)."""
    start = time.monotonic()
    with open(log_path(gate), "w") as log, subprocess.Popen(
            argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            errors="replace", text=True, env=dict(os.environ, PYTHONUNBUFFERED="1")) as process:
        for line in process.stdout:  # each line with the time since the gate started: where the time went
            log.write("[%s] %s" % (stopwatch(time.monotonic() - start), line))
    return process.returncode == 0, time.monotonic() - start


def setup(rows, after_bootstrap=None):
    """The set-up steps, in order; the name of the one that failed, or None. after_bootstrap is called once the
    venv is there."""
    start = time.monotonic()
    for step in SETUP:
        passed, seconds = run("setup/" + step, ["make", "--no-print-directory", step])
        rows["setup/" + step] = ("passed" if passed else "FAILED", seconds)
        say("=== setup/%s: %s in %s" % (step, "passed" if passed else "FAILED", duration(seconds)))
        if not passed:
            rows["setup"] = ("FAILED", time.monotonic() - start)
            return "setup/" + step
        if step == "bootstrap" and after_bootstrap:
            after_bootstrap()
    rows["setup"] = ("passed", time.monotonic() - start)
    say("=== setup: passed in %s" % duration(rows["setup"][1]))
    return None


def lanes(gates, rows, jobs, previous):
    """Run the gates on `jobs` workers, the longest (by the previous run) first; then each ALONE gate by itself."""
    shared = [g for g in gates if g not in ALONE]
    todo = queue.Queue()
    for gate in sorted(shared, key=lambda g: -previous.get(g, GUESS.get(g, GUESS.get(g.split("/")[0], 30)))):
        todo.put(gate)

    def worker():
        while True:
            try:
                gate = todo.get_nowait()
            except queue.Empty:
                return
            say("=== %s: started" % gate)
            first, cleanup = AFTER.get(gate, (None, None))
            if first in rows and rows[first][0] != "passed":
                run(gate, cleanup)
                with open(log_path(gate), "a") as log:  # for the digest: why this gate has no failure of its own
                    log.write("ERROR: not run: %s failed (only its clean-up ran)\n" % first)
                passed, seconds = False, 0.0
                say("=== %s: not run (%s failed)" % (gate, first))
            else:
                passed, seconds = run(gate, command(gate))
            rows[gate] = ("passed" if passed else "FAILED", seconds)
            say("=== %s: %s in %s" % (gate, "passed" if passed else "FAILED", duration(seconds)))

    threads = [threading.Thread(target=worker) for lane in range(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for gate in gates:
        if gate in ALONE:
            todo.put(gate)
            worker()


def failure_digest(path):
    """The lines of a log that say what failed: pytest's and Ansible's failure lines, without colour or frames."""
    lines, since_fatal = [], 99
    for line in path.read_text(errors="replace").splitlines():
        line = re.sub(r"\x1b\[[0-9;]*m|\x1b]8;;[^\x1b]*\x1b\\", "", line)  # colours and hyperlinks
        line = re.sub(r"^\[\d+:\d\d\] ", "", line)  # the stopwatch
        line = re.sub(r"^ *│ ?", "", line)
        since_fatal = 0 if re.search(r"fatal: \[", line) else since_fatal + 1
        message = since_fatal <= 8 and re.match(r" +msg: ", line)  # a YAML result's message, below its host
        failure = re.search(r"^(FAILED|ERROR)[: ]|^E  |fatal: \[|FAILED! =>|Executed: Failed"
                            r"|^[\w./-]+\.(py|ya?ml|sh|j2):[0-9]+|^ *--> |^[a-z]+(-[a-z]+)+(\[[\w-]+\])?: ",
                            line) and "RETRYING" not in line
        if message or failure:
            lines.append(line[:220])
    return lines[-14:]


def test_files(gate, junit):
    """Per test file of a pytest JUnit report: {gate/file: (result, seconds)}."""
    files = {}
    for case in ET.parse(junit).iter("testcase"):
        name = "%s/%s.py" % (gate, case.get("classname", "").split(".")[-1])
        spent, failed = files.get(name, (0.0, False))
        failed = failed or any(child.tag in ("failure", "error") for child in case)
        files[name] = (spent + float(case.get("time") or 0), failed)
    return {name: ("FAILED" if failed else "passed", spent) for name, (spent, failed) in sorted(files.items())}


def previous_times():
    """{row: seconds} of each row's newest run in the history."""
    times = {}
    if HISTORY.is_file():
        for line in HISTORY.read_text().splitlines():  # oldest first
            fields = line.split("\t")
            if len(fields) == 5:
                times[fields[2]] = float(fields[4])
    return times


def table(rows, order, parts, previous, total_key):
    lines = ["| step | result | time | previous run |", "| --- | --- | --- | --- |"]
    for name in order:
        result, seconds = rows[name]
        shown = "**%s**" % name if name == "total" else ("&nbsp;&nbsp;" + name if name in parts else name)
        key = total_key if name == "total" else name
        last = duration(previous[key]) if key in previous else ""
        lines.append("| %s | %s | %s | %s |" % (shown, result, duration(seconds), last))
    return "\n".join(lines) + "\n"


def record(rows, order, total_key):
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                          check=False).stdout.strip()
    run_id, label = "%.0f" % time.time(), "%s %s" % (time.strftime("%Y-%m-%d %H:%M"), head or "unknown")
    HISTORY.parent.mkdir(parents=True, exist_ok=True)
    with HISTORY.open("a") as history:
        for name in order:
            result, seconds = rows[name]
            key = total_key if name == "total" else name
            history.write("\t".join([run_id, label, key, result, "%.0f" % seconds]) + "\n")


def main():
    asked = gates = gates_of(sys.argv[1:])
    jobs = max(1, int(os.environ.get("LLMOPS_TEST_JOBS", "2")))
    os.environ["PATH"] = "%s:%s" % (REPO / ".venv" / "bin", os.environ["PATH"])
    LOGS.mkdir(parents=True, exist_ok=True)
    for old in list(LOGS.glob("*.log")) + list(LOGS.glob("*.xml")) + list(LOGS.glob("*-steps.tsv")):
        old.unlink()
    previous = previous_times()
    rows, start = {}, time.monotonic()
    counted, order, parts, logs = list(asked), [], set(), {}
    lab_gates = [g for g in gates if g.split("/")[0] in LAB_GATES]
    early, setting_up, handing_over = [], threading.Event(), threading.Lock()
    if lab_gates or not sys.argv[1:]:
        # While the set-up builds (cold: about 9 minutes of downloads and image builds that leave a CPU half
        # idle), the gates that need no lab image run one after the other beside it; what it has not started
        # when the set-up ends goes back to the lanes.
        quick = [g for g in gates if g not in lab_gates and g not in ALONE]

        def beside_setup():
            while True:
                with handing_over:
                    if not (quick and setting_up.is_set()):
                        return
                    gate = quick.pop(0)
                say("=== %s: started (beside the set-up)" % gate)
                passed, seconds = run(gate, command(gate))
                rows[gate] = ("passed" if passed else "FAILED", seconds)
                say("=== %s: %s in %s" % (gate, "passed" if passed else "FAILED", duration(seconds)))

        def start_early():
            setting_up.set()
            early.append(threading.Thread(target=beside_setup))
            early[0].start()

        broken = setup(rows, start_early if quick else None)
        with handing_over:
            setting_up.clear()
            # The gate it runs now, it finishes beside the lanes.
            gates = [g for g in gates if g in lab_gates or g in ALONE or g in quick] if early else gates
        counted.insert(0, "setup")
        order += ["setup"] + ["setup/" + step for step in SETUP if "setup/" + step in rows]
        parts.update(order[1:])
        logs["setup"] = log_path(broken or "setup/node-image")
        if broken:
            for gate in lab_gates:
                rows[gate] = ("FAILED", 0.0)  # they need what the set-up failed to make
                logs[gate] = log_path(broken)
            gates = [g for g in gates if g not in lab_gates]
    lanes(gates, rows, jobs, previous)
    for thread in early:
        thread.join()

    for gate in asked:
        order.append(gate)
        junit = LOGS / ("%s.xml" % gate)
        steps = LOGS / ("%s-steps.tsv" % gate)  # the fleet's set-up steps (scripts/fleet.py up)
        if steps.is_file():
            for line in steps.read_text().splitlines():
                step, result, seconds = line.split("\t")
                rows["%s/%s" % (gate, step)] = (result, float(seconds))
                order.append("%s/%s" % (gate, step))
                parts.add("%s/%s" % (gate, step))
        if junit.is_file():
            files = test_files(gate, junit)
            rows.update(files)
            order.extend(files)
            parts.update(files)
    failed = [name for name in counted if rows[name][0] == "FAILED"]
    rows["total"] = ("%d failed" % len(failed), time.monotonic() - start)
    order.append("total")

    # A run of some gates is compared with an earlier run of the same gates only.
    total_key = " ".join(["total"] + sys.argv[1:])
    text = table(rows, order, parts, previous, total_key)
    (LOGS / "times.md").write_text(text)
    print("\n" + text.replace("&nbsp;", " "), end="")
    record(rows, order, total_key)
    passed = [name for name in counted if name not in failed]
    print("(table: .cache/test-logs/times.md; every run: %s)" % HISTORY)
    # What failed comes after the table: a CI log's tail is often only its last 40 lines.
    for name in failed:
        path = logs.get(name, log_path(name))
        print("\n=== what failed in %s (whole log: %s)" % (name, path.relative_to(REPO)))
        print("\n".join(failure_digest(path)) if path.is_file() else "(no log)")
    if failed:
        print("disk: %.1f GiB free" % (shutil.disk_usage("/").free / 2 ** 30))
    print()
    print("passed gates: %s" % (" ".join(passed) or "none"))
    print("failed gates: %s" % (" ".join(failed) or "none"))
    print("time: %.0f s" % rows["total"][1])
    print("make test: %d passed, %d failed" % (len(passed), len(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
