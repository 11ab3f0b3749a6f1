# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Routes, links and pings as iproute2/iputils print them, and the rendezvous port over real sockets."""

from __future__ import annotations

import socket
import threading

from ansible_collections.gpufleet.serving.plugins.module_utils._network_path import (
    interface_of_address,
    parse_links,
    parse_route_get,
    path_problems,
    ping_outcome,
    ping_payload,
    reach_port,
    wait_for_workers,
)

# Captured on a Debian 12 host (iproute2 6.1, iputils 20221126), addresses as they were.
ROUTE_VIA_GATEWAY = '[{"dst":"8.8.8.8","gateway":"192.0.2.1","dev":"eth0","prefsrc":"192.0.2.2","flags":[],"uid":0,"cache":[]}]'
ROUTE_LOCAL = '[{"type":"local","dst":"127.0.0.1","dev":"lo","prefsrc":"127.0.0.1","flags":[],"uid":0,"cache":["local"]}]'
ADDR_SHOW = (
    '[{"ifindex":1,"ifname":"lo","flags":["LOOPBACK","UP","LOWER_UP"],"mtu":65536,"operstate":"UNKNOWN",'
    '"addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8,"scope":"host","label":"lo"}]},'
    '{"ifindex":4,"ifname":"eth0","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":1400,"operstate":"UP",'
    '"addr_info":[{"family":"inet","local":"192.0.2.2","prefixlen":24,"broadcast":"192.0.2.255","scope":"global","label":"eth0"},'
    '{"family":"inet6","local":"fd00::2","prefixlen":64,"scope":"global","nodad":true}]}]'
)
PING_TOO_BIG = ("PING 192.0.2.1 (192.0.2.1) 1500(1528) bytes of data.\n\n--- 192.0.2.1 ping statistics ---\n"
                "1 packets transmitted, 0 received, +1 errors, 100% packet loss, time 0ms\n\n",
                "ping: local error: message too long, mtu=1400\n")
PING_LOST = ("PING 127.0.0.1 (127.0.0.1) 70000(70028) bytes of data.\n\n--- 127.0.0.1 ping statistics ---\n"
             "1 packets transmitted, 0 received, 100% packet loss, time 0ms\n\n", "")


def peer(**overrides):
    entry = {"address": "10.0.0.2", "interface": "eth1", "source": "10.0.0.1", "local": False, "interface_mtu": 9000,
             "reachable": True, "reachable_said": "", "mtu_ok": True, "mtu_said": ""}
    entry.update(overrides)
    return entry


def test_route_and_links():
    assert parse_route_get(ROUTE_VIA_GATEWAY) == {"dev": "eth0", "source": "192.0.2.2", "gateway": "192.0.2.1", "local": False}
    assert parse_route_get(ROUTE_LOCAL)["local"] is True
    links = parse_links(ADDR_SHOW)
    assert links["eth0"] == {"mtu": 1400, "operstate": "UP", "addresses": ["192.0.2.2", "fd00::2"]}
    assert interface_of_address(links, "192.0.2.2") == "eth0"
    assert interface_of_address(links, "10.9.9.9") is None


def test_ping_outcomes_in_the_tools_words():
    assert ping_outcome(1, *PING_TOO_BIG) == ("too_big", "ping: local error: message too long, mtu=1400 "
                                                         "--- 192.0.2.1 ping statistics --- "
                                                         "1 packets transmitted, 0 received, +1 errors, 100% packet loss, time 0ms")
    assert ping_outcome(1, *PING_LOST)[0] == "lost"
    assert ping_outcome(0, "1 packets transmitted, 1 received", "")[0] == "ok"
    assert ping_payload(9000) == 8972


def test_clean_path_has_no_problem():
    assert path_problems([peer()], mtu=9000, socket_ifname="eth1") == []


def test_each_path_fault_is_named():
    cases = {
        "peer_route": peer(local=True, interface="lo"),
        "peer_interface": peer(interface="eth0"),
        "link_mtu": peer(interface_mtu=1500, mtu_ok=False),
        "peer_unreachable": peer(reachable=False, reachable_said="100% packet loss"),
        "path_mtu": peer(mtu_ok=False, mtu_said="100% packet loss"),
    }
    for check, entry in cases.items():
        found = [p["check"] for p in path_problems([entry], mtu=9000, socket_ifname="eth1")]
        assert check in found, (check, found)
    mtu = path_problems([peer(interface_mtu=1500, mtu_ok=False)], mtu=9000)
    assert [(p["check"], p["found"], p["expected"]) for p in mtu] == [("link_mtu", 1500, 9000), ("path_mtu", "no reply", "9000-byte packets pass")]


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_head_sees_every_worker_connect():
    port = free_port()
    errors = []
    worker = threading.Thread(target=lambda: errors.append(reach_port("127.0.0.1", port, 5)))
    worker.start()
    arrived, error, in_use = wait_for_workers("127.0.0.1", port, ["127.0.0.1"], 5)
    worker.join()
    assert (arrived, error, in_use, errors) == ({"127.0.0.1"}, None, False, [None])


def test_head_reports_the_workers_that_never_came():
    assert wait_for_workers("127.0.0.1", free_port(), ["10.0.0.9"], 0.3) == (set(), None, False)


def test_port_held_by_a_running_engine():
    with socket.socket() as engine:
        engine.bind(("127.0.0.1", 0))
        engine.listen(1)
        arrived, error, in_use = wait_for_workers("127.0.0.1", engine.getsockname()[1], ["127.0.0.1"], 1)
    assert "cannot listen on 127.0.0.1:" in error and "Address already in use" in error and in_use is True


def test_worker_gives_up_with_the_last_error():
    assert reach_port("127.0.0.1", free_port(), 0.5) == "connection refused after 0.5 s"
