"""lab/lvs_probe.py's reading of /proc/net/ip_vs (the fleet verifiers' watch of the directors' weights)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "lab"))

from lvs_probe import ip_vs_weights, listing_weights  # noqa: E402

# The kernel's format (net/netfilter/ipvs/ip_vs_ctl.c): two services, the lab's VIP 10.89.60.100:8000 first.
TABLE = """IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port Forward Weight ActiveConn InActConn
TCP  0A593C64:1F40 wlc
  -> 0A593C0C:1F40      Route   100    0          0
  -> 0A593C0B:1F40      Route   0      1          3
TCP  0A593C65:01BB wlc persistent 360 FFFFFFFF
  -> 0A593C0B:01BB      Route   50     0          0
""".splitlines()


def test_the_weights_of_one_service_by_dotted_address():
    assert ip_vs_weights(TABLE, "10.89.60.100", 8000) == {"10.89.60.12": 100, "10.89.60.11": 0}
    assert ip_vs_weights(TABLE, "10.89.60.101", 443) == {"10.89.60.11": 50}


def test_a_missing_service_has_no_weights():
    assert ip_vs_weights(TABLE, "10.89.60.100", 443) == {}
    assert ip_vs_weights([], "10.89.60.100", 8000) == {}


def test_ipvsadm_listing_of_one_service():
    listing = """Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  10.89.60.100:8000 wlc
  -> 10.89.60.11:8000             Route   50     2          7
  -> 10.89.60.12:8000             Route   100    0          1
"""
    assert listing_weights(listing, "10.89.60.100", 8000) == {"10.89.60.11": 50, "10.89.60.12": 100}


def test_a_failed_play_names_each_failed_task_and_its_message():
    from lvs_probe import failed_tasks

    output = """TASK [llmops.vllm.baseline : Preflight] ***
ok: [lab-node1]

TASK [llmops.vllm.lvs_director : Plan the director] ***
fatal: [lab-lb1]: FAILED! => {"msg": "lab-lb1: lvs_director: no VIP"}
fatal: [lab-lb2]: FAILED! => {"msg": "lab-lb2: lvs_director: no VIP"}

PLAY RECAP ***
"""
    assert failed_tasks(output) == [
        "TASK [llmops.vllm.lvs_director : Plan the director]",
        'fatal: [lab-lb1]: FAILED! => {"msg": "lab-lb1: lvs_director: no VIP"}',
        'fatal: [lab-lb2]: FAILED! => {"msg": "lab-lb2: lvs_director: no VIP"}',
    ]
    assert failed_tasks("ok: [x]\n") == []
