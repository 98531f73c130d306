"""The lab base image (lab/image): systemd in a lab container hears when a stopped service's cgroup has emptied.

On a cgroup v1 host the release agent that tells systemd so is the host's. A service whose last process outlives its
main process (vLLM's multiprocessing resource tracker) then waited in final-sigkill for the whole TimeoutStopSec, and
the stop ended with result 'timeout'. The image's llmops-lab-cgroup-empty service reports the emptied cgroup
instead. On a cgroup v2 host the kernel tells systemd itself, and the service does not start.
"""

import time

from conftest import podman

HELPER_ROUND = 1.5  # seconds: the helper reads every service's cgroup every 0.5 s

# The main process exits on SIGTERM; its child lives on until systemd kills it (KillMode=mixed, as vLLM's units).
SERVICE = ["--quiet", "--property", "KillMode=mixed", "--property", "TimeoutStopSec=20",
           "bash", "-c", "sleep infinity & wait"]


def test_a_service_whose_child_outlives_its_main_process_stops_without_a_timeout(lab_host):
    helper = podman("exec", lab_host, "systemctl", "show", "-p", "ActiveState", "--value",
                    "llmops-lab-cgroup-empty.service").stdout.strip()
    # The unit's own condition: the name=systemd hierarchy of cgroup v1.
    v1 = podman("exec", lab_host, "test", "-d", "/sys/fs/cgroup/systemd", check=False).returncode == 0
    assert helper == ("active" if v1 else "inactive"), helper
    # Without the helper, about two stops in three waited out the timeout here (systemd notices the child's death
    # only when it wins a race), so three in a row make a missing helper show.
    for round_ in range(3):
        unit = "lab-image-stop-%d.service" % round_
        podman("exec", lab_host, "systemd-run", "--unit", unit, *SERVICE)
        time.sleep(HELPER_ROUND)  # the helper reports a cgroup it saw holding processes
        podman("exec", lab_host, "systemctl", "stop", unit)
        podman("exec", lab_host, "journalctl", "--sync")
        journal = podman("exec", lab_host, "journalctl", "--no-pager", "-o", "cat", "-u", unit).stdout
        assert "Deactivated successfully" in journal and "still around" not in journal, (round_, journal)
