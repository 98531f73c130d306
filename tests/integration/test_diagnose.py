"""llmops.vllm.vllm_diagnose and playbooks/diagnose.yml against a real journal: the runbook's two error lines, written
by a unit into a lab container's journal, are found with their fixes, and a unit with nothing wrong has no finding."""

import json

from conftest import ansible_playbook_file, podman, wheelhouse_of_0_32_0, write_inventory

PLAY = """
- name: Diagnose the vLLM units
  hosts: all
  gather_facts: false
  tasks:
    - name: Read the units' journal
      llmops.vllm.vllm_diagnose:
        units: [vllm-tiny.service, vllm-quiet.service]
        since: -1h
      register: diagnosis
    - name: Keep the result on the controller
      ansible.builtin.copy:
        content: "{{ diagnosis | to_json }}"
        dest: "{{ result_file }}"
        mode: "0600"
      delegate_to: localhost
      check_mode: false
"""
LINES = ["INFO 12-03 10:00:00 [api_server.py:1] Started server process",
         "WARNING 12-03 10:00:01 [scheduler.py:412] OOM detected, retrying with reduced batch size",
         "ERROR 12-03 10:02:17 [core.py:710] RuntimeError: CUDA error 700: an illegal memory access was encountered"]


def journal_lines(host, unit, lines):
    """Run a unit named UNIT in HOST that prints LINES, and wait until the journal holds them."""
    script = "; ".join("echo '%s'" % line for line in lines)
    podman("exec", host, "systemd-run", "--unit", unit, "--service-type=oneshot", "--wait", "sh", "-c", script)
    podman("exec", host, "journalctl", "--sync")


def test_the_runbook_lines_are_found_with_their_fixes(lab_host, tmp_path):
    journal_lines(lab_host, "vllm-tiny", LINES)
    journal_lines(lab_host, "vllm-quiet", LINES[:1])
    (tmp_path / "play.yml").write_text(PLAY)
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": {lab_host: {
        "ansible_connection": "podman_pipelined", "ansible_python_interpreter": "/usr/bin/python3"}}}}))
    for check in ([], ["--check"]):
        result_file = tmp_path / ("result-check.json" if check else "result.json")
        run = ansible_playbook_file(str(tmp_path / "play.yml"), inventory, *check,
                                    "-e", json.dumps({"result_file": str(result_file)}))
        assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
        diagnosis = json.loads(result_file.read_text())
        assert diagnosis["changed"] is False
        assert diagnosis["lines_scanned"] >= 4  # the units' lines, and systemd's own about them
        assert [(f["unit"], f["signature"], f["count"], f["sample"]) for f in diagnosis["findings"]] == [
            ("vllm-tiny.service", "oom", 1, LINES[1]),
            ("vllm-tiny.service", "cuda_illegal_memory_access", 1, LINES[2])]
        oom, cuda = diagnosis["findings"]
        assert "max_num_seqs" in oom["fix"]
        assert "lspci -vvv" in cuda["fix"] and "bandwidthTest" in cuda["fix"] and "driver" in cuda["fix"]
        assert cuda["first"] >= oom["first"] > 0


def test_the_diagnose_playbook_reports_the_seed_lines_of_the_units_the_node_summary_names(lab_host, tmp_path):
    """The instance tiny's unit (vllm-tiny.service, from llmops_node) holds the seed's two lines; the playbook prints
    each with its remediation and the host's context, writes the JSON report, and changes nothing on the host."""
    journal_lines(lab_host, "vllm-tiny", LINES)
    inventory = write_inventory(
        tmp_path,
        lab_host,
        "vllm_install_source: wheelhouse\nvllm_install_wheelhouse_dir: %s\npki_dir: %s\n"
        "edge_listen_addresses: [10.0.0.5]\nvllm_instances:\n  - {name: tiny, model: /usr, port: 8101, device: cpu}\n"
        % (wheelhouse_of_0_32_0(tmp_path), tmp_path / "pki"),
    )
    reports = tmp_path / "reports"

    run = ansible_playbook_file("playbooks/diagnose.yml", inventory, "-e", "diagnose_report_dir=%s" % reports)
    output = " ".join((run.stdout + run.stderr).split())

    assert run.returncode == 0, output[-6000:]
    oom = 'vllm-tiny.service: the engine ran out of GPU memory (and retried with a smaller batch) (1 line, e.g. "%s").'
    assert oom % LINES[1] + " Fix: lower the instance" in output
    assert "On this host: memory per NUMA node: node 0 " in output
    assert 'vllm-tiny.service: a kernel touched memory it does not own (CUDA error 700) (1 line, e.g. "%s"). ' \
        "Fix: check that the driver supports the CUDA" % LINES[2] in output
    assert "lspci -vvv" in output and "bandwidthTest" in output
    assert "On this host: no NVIDIA GPU readable" in output and "degraded PCIe links: none" in output
    report = json.loads((reports / ("%s.json" % lab_host)).read_text())
    assert [f["signature"] for f in report["findings"]] == ["oom", "cuda_illegal_memory_access"]
    assert report["context"]["degraded_pcie"] == []
    # Reads only: no PKI on the controller, nothing of the collection on the host.
    assert not (tmp_path / "pki").exists()
    assert podman("exec", lab_host, "test", "-e", "/etc/llmops-vllm", check=False).returncode == 1
