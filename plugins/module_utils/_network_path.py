# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The network path between the nodes of one replica, and the checks on it (private).

The failures this catches are the commonest of multi-node serving: NCCL/Gloo picking loopback or
the wrong NIC (the interface is derived here from the route to the rendezvous address and handed
to the engine), a link whose MTU is smaller than the fabric's (large frames vanish while ping
works), and a rendezvous port a firewall drops.
"""

from __future__ import annotations

import errno
import json
import socket
import time

from ansible_collections.gpufleet.serving.plugins.module_utils._input_problem import input_problem

IP_HEADERS = 28  # IPv4 (20) + ICMP (8): `ping -s` counts only the payload


def parse_route_get(text):
    """``ip -j route get ADDR`` -> ``{"dev", "source", "gateway", "local"}``."""
    routes = json.loads(text or "[]")
    if not routes:
        return {"dev": None, "source": None, "gateway": None, "local": False}
    route = routes[0]
    return {"dev": route.get("dev"), "source": route.get("prefsrc"), "gateway": route.get("gateway"),
            "local": route.get("type") == "local" or route.get("dev") == "lo"}


def parse_links(text):
    """``ip -j addr show`` -> ``{ifname: {"mtu", "operstate", "addresses"}}``."""
    links = {}
    for link in json.loads(text or "[]"):
        links[link["ifname"]] = {
            "mtu": link.get("mtu"),
            "operstate": link.get("operstate"),
            "addresses": [a.get("local") for a in link.get("addr_info", []) if a.get("local")],
        }
    return links


def interface_of_address(links, address):
    for name, link in links.items():
        if address in link["addresses"]:
            return name
    return None


def ping_payload(mtu):
    return mtu - IP_HEADERS


def ping_outcome(rc, stdout, stderr):
    """``ok``, ``too_big`` (the local stack refused the size) or ``lost``, with the tool's words."""
    said = " ".join((stderr or "").split() + (stdout or "").strip().splitlines()[-2:]).strip()
    if rc == 0:
        return "ok", said
    text = "%s %s" % (stdout, stderr)
    if "message too long" in text or "Frag needed" in text:
        return "too_big", said
    return "lost", said


def path_problems(peers, mtu=None, socket_ifname=None):
    """Problems of the per-peer results the probe gathered.

    ``peers``: ``[{"address", "interface", "local", "interface_mtu", "reachable", "reachable_said",
    "mtu_ok", "mtu_said"}]``.
    """
    problems = []
    for peer in peers:
        where = "to %s" % peer["address"]
        if peer["local"]:
            problems.append(input_problem(
                "peer_route", "loopback (%s)" % peer["interface"], "a fabric interface",
                "the route %s stays on this host: the address is this node's own, so NCCL/Gloo would fall "
                "back to loopback" % where))
            continue
        if socket_ifname and peer["interface"] != socket_ifname:
            problems.append(input_problem(
                "peer_interface", peer["interface"], socket_ifname,
                "the route %s leaves by %s, not by %s, which NCCL/Gloo will use" % (where, peer["interface"], socket_ifname)))
        if mtu and (peer["interface_mtu"] or 0) < mtu:
            problems.append(input_problem(
                "link_mtu", peer["interface_mtu"], mtu,
                "%s (the route %s) has MTU %s, the fabric's is %s" % (peer["interface"], where, peer["interface_mtu"], mtu)))
        if not peer["reachable"]:
            problems.append(input_problem("peer_unreachable", peer["reachable_said"] or "no reply", "a reply",
                                          "no ping reply from %s over %s" % (peer["address"], peer["interface"])))
        elif mtu and not peer["mtu_ok"]:
            problems.append(input_problem(
                "path_mtu", peer["mtu_said"] or "no reply", "%s-byte packets pass" % mtu,
                "%s-byte packets with don't-fragment do not reach %s while small ones do: a link on the path "
                "has a smaller MTU" % (mtu, peer["address"])))
    return problems


def wait_for_workers(address, port, workers, timeout, clock=time.monotonic):
    """Listen on the rendezvous port until every worker address has connected once.

    Returns ``(arrived, error, in_use)``: ``error`` is a bind failure in the OS's words, and
    ``in_use`` says it was because a process already listens there (a running engine on a redeploy),
    in which case the workers' connections test the path to that listener instead.
    """
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    arrived = set()
    try:
        listener.bind((address, port))
    except OSError as exc:
        listener.close()
        return arrived, "cannot listen on %s:%s: %s" % (address, port, exc.strerror or exc), exc.errno == errno.EADDRINUSE
    listener.listen(16)
    deadline = clock() + timeout
    try:
        while set(workers) - arrived and clock() < deadline:
            listener.settimeout(max(0.05, min(1.0, deadline - clock())))
            try:
                conn, (peer, _port) = listener.accept()
            except socket.timeout:
                continue
            arrived.add(peer)
            conn.close()
    finally:
        listener.close()
    return arrived, None, False


def reach_port(address, port, timeout, source=None, clock=time.monotonic, sleep=time.sleep):
    """Connect to the head's rendezvous port until it answers or ``timeout`` passes.

    A refused connection is retried (the head may not listen yet); what remains at the deadline
    is returned in the OS's words, ``None`` on success.
    """
    deadline = clock() + timeout
    last = "no attempt"
    while True:
        remaining = deadline - clock()
        if remaining <= 0:
            return "%s after %s s" % (last, timeout)
        try:
            conn = socket.create_connection((address, port), timeout=max(0.2, min(3.0, remaining)),
                                            source_address=(source, 0) if source else None)
            conn.close()
            return None
        except socket.timeout:
            last = "timed out (a firewall drops the packets)"
        except OSError as exc:
            if exc.errno == errno.ECONNREFUSED:
                last = "connection refused"
            elif exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
                last = "%s (a firewall rejects, or no route)" % exc.strerror
            else:
                last = exc.strerror or str(exc)
            sleep(0.2)
