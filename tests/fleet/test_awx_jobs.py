"""AWX's jobs against the converged lab, run the way AWX runs them (ansible-runner: a private data directory, no
terminal; the awx_job fixture): deploy, baseline, preflight, facts, diagnose and a model's seal for real; rolling
upgrade, revoke and a game day's fault in check mode; a job the playbook refuses. Each reads the runner's artifacts
(status, rc, job events) and the closing summary. The benchmark, its comparison and the tuner run as AWX jobs too
(test_capacity.py).

The jobs that run on fleet hosts are limited to one node, lab-node2 (with localhost where a play runs there): the
directors are emulated and slow, and none of these jobs is about them (the rolling upgrade's check mode leaves them
out: see its test). lab-node2, not lab-node1: test_edge.py's certificate rotation leaves lab-node1's certificate
metrics with its own renewal window, which a deploy with the inventory's settings rewrites. Nothing here changes the
fleet: the deploy, baseline, preflight and diagnose change nothing on a converged node, the check-mode jobs change
nothing by definition, the refused job stops before any host, and the seal writes only under the test's own temporary
directory.
"""

import json
import subprocess

from conftest import PROJECT

NODE = "lab-node2"
ON_THE_NODE = "--limit %s" % NODE


def _ok(job):
    assert job.status == "successful" and job.rc == 0, job.stdout[-6000:]
    assert not job.events_of("runner_on_failed") and not job.events_of("runner_on_unreachable")
    assert job.summary[0] == "JOB SUMMARY" and "Nothing refused or failed." in job.summary, job.summary


def test_the_deploy_job_changes_nothing_on_a_converged_node(awx_job):
    job = awx_job("site.yml", cmdline=ON_THE_NODE)
    _ok(job)
    stats = job.stats
    assert stats["changed"] == {} and stats["ok"][NODE] > 0 and stats["failures"] == {}, stats
    assert set(stats["ok"]) == {NODE}, stats  # the limit held: no other host was touched
    assert job.summary[1] == "Nothing changed.", job.summary
    # The run's own closing summary play (playbooks/summary.yml) and the recap come before it.
    assert job.stdout.index("PLAY RECAP") < job.stdout.index("JOB SUMMARY")


def test_the_baseline_job_changes_nothing_on_a_converged_node(awx_job):
    job = awx_job("playbooks/baseline.yml", cmdline=ON_THE_NODE)
    _ok(job)
    assert job.stats["changed"] == {} and job.summary[1] == "Nothing changed."


def test_the_preflight_job_reads_only(awx_job):
    job = awx_job("playbooks/preflight.yml", cmdline=ON_THE_NODE)
    _ok(job)
    assert job.stats["changed"] == {} and job.summary[1] == "Nothing changed."


def test_the_facts_job_keeps_its_reports_in_the_jobs_artifacts(awx_job):
    job = awx_job("playbooks/facts.yml", cmdline=ON_THE_NODE)
    _ok(job)
    reports = job.artifacts / "reports" / "topology"
    assert (reports / ("%s.md" % NODE)).read_text().startswith("#") and (reports / ("%s.svg" % NODE)).is_file()
    # Named as the job's artifacts (set_stats, which AWX keeps) and in the summary.
    assert job.stats["artifact_data"]["llmops_reports"] == [str(reports)]
    assert job.summary[-1] == "Reports: %s" % reports


def test_the_diagnose_job_writes_a_report_per_node(awx_job):
    job = awx_job("playbooks/diagnose.yml", {"diagnose_since": "-1h"}, cmdline=ON_THE_NODE)
    _ok(job)
    report = json.loads((job.artifacts / "reports" / "diagnose" / ("%s.json" % NODE)).read_text())
    assert report["host"] == NODE and report["lines_scanned"] > 0
    assert job.summary[-1] == "Reports: %s" % (job.artifacts / "reports" / "diagnose")


def test_the_rolling_upgrade_job_in_check_mode(awx_job):
    # With the directors: each is read, and in check mode (no drain file) nothing waits for weight 0.
    # test_lvs.py runs the upgrade for real, with the same stages (vLLM's, as an operator upgrades it).
    job = awx_job("playbooks/rolling_upgrade.yml", {"rolling_upgrade_drain_timeout": 10,
                                                    "llmops_only_stages": ["vllm_install", "vllm_server", "edge"]},
                  cmdline="--check " + ON_THE_NODE)
    _ok(job)
    # The node would leave the pool for its upgrade; the rest of it is as converged.
    assert job.summary[1:3] == ["What would change (check mode):", "  %s: 2 task(s): Drain the node (its "
                                "/health answers 503), Close the node's idle client connections" % NODE], job.summary


def test_the_revoke_job_in_check_mode_refuses_nothing_and_revokes_nothing(awx_job):
    # localhost: the play that checks what is named runs there.
    job = awx_job("playbooks/revoke.yml", {"revoke_name": "lab-revoked"}, cmdline="--check --limit %s,localhost" % NODE)
    _ok(job)
    assert job.summary[1] == "What would change (check mode):", job.summary
    changes = next(line for line in job.summary if line.startswith("  %s: " % NODE))
    assert "pki : Sign the CRLs with their CAs on the controller" in changes and "edge :" not in changes, job.summary


def test_a_refused_job_fails_and_says_why(awx_job):
    """A job whose input the playbook refuses: failed in the runner's status, the reason in the summary. It stops
    on localhost before any fleet host."""
    job = awx_job("playbooks/revoke.yml")
    assert job.status == "failed" and job.rc == 2
    (refused,) = job.events_of("runner_on_failed")
    assert refused["event_data"]["task"] == "Refuse a run that names no certificate, or more than one"
    assert job.summary[1:3] == ["Nothing changed.", "Refused or failed:"]
    assert job.summary[3].startswith("  localhost: Refuse a run that names no certificate, or more than one: "
                                     "revoke.yml: no certificate is named. Fix: pass exactly one of"), job.summary


def test_a_game_days_fault_in_check_mode(awx_job):
    job = awx_job("playbooks/edge_fault.yml", {"edge_fault_injection": {"share": 0.1, "status": 503}},
                  cmdline="--check " + ON_THE_NODE)
    _ok(job)
    assert job.summary[1] == "What would change (check mode):", job.summary
    assert job.summary[2].startswith("  %s: " % NODE) and "Write the fault injection" in job.summary[2], job.summary


def test_the_seal_job_seals_a_model_on_the_controller(awx_job, tmp_path):
    """With the key's public half only (sealing needs no secret): what a job template with a survey would pass."""
    keygen = subprocess.run(["age-keygen", "-o", str(tmp_path / "key")], capture_output=True, text=True, check=True)
    recipient = keygen.stderr.split("Public key: ")[1].strip()
    model = str(PROJECT / ".cache" / "models" / "tiny-llama")
    job = awx_job("playbooks/model_seal.yml", {"model_seal_src": model, "model_seal_dest": str(tmp_path / "sealed"),
                                               "model_seal_recipient": recipient})
    _ok(job)
    manifest = json.loads((tmp_path / "sealed" / "llmops-sealed.json").read_text())
    sealed = [f for f in manifest["files"] if f not in manifest["clear"]]
    assert sealed and manifest["recipient"] == recipient
    assert all((tmp_path / "sealed" / ("%s.age" % f)).is_file() for f in sealed)
    assert job.summary[1:3] == ["What changed:", "  localhost: 1 task(s): Seal %s" % model], job.summary
