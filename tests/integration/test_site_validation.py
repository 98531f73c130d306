"""site.yml refuses a wrongly typed role variable before it touches any host."""

from conftest import REPO, ansible_playbook, ansible_playbook_file, podman, write_inventory


def test_wrong_type_fails_before_any_host_changes(lab_host, tmp_path):
    inventory = write_inventory(tmp_path, lab_host, "baseline_apt_cache_valid_time: one hour\n")

    result = ansible_playbook(inventory)
    output = result.stdout + result.stderr

    assert result.returncode != 0, output
    assert "host %s" % lab_host in output
    assert "role llmops.vllm.baseline" in output
    assert "baseline_apt_cache_valid_time" in output
    assert "Fix these variables in the inventory" in output
    # No facts were gathered and no role task ran.
    assert "Gathering Facts" not in output
    assert "TASK [llmops.vllm.baseline" not in output
    # The host is as it was.
    assert podman("exec", lab_host, "test", "-e", "/etc/ansible/facts.d/llmops.fact", check=False).returncode == 1
    assert podman("exec", lab_host, "dpkg", "-s", "numactl", check=False).returncode == 1


def test_wrong_element_type_names_the_variable(lab_host, tmp_path):
    inventory = write_inventory(tmp_path, lab_host, "baseline_extra_packages:\n  name: htop\n")

    result = ansible_playbook(inventory)
    output = result.stdout + result.stderr

    assert result.returncode != 0, output
    assert "baseline_extra_packages" in output
    assert "Gathering Facts" not in output


def test_example_inventory_passes_validation():
    """The shipped example inventory is valid; validate.yml needs no connection to its hosts."""
    result = ansible_playbook_file("playbooks/validate.yml", REPO / "inventories" / "example")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "gpu-node01" in result.stdout and "failed=0" in result.stdout
