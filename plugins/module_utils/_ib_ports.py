# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""InfiniBand/RoCE port state from ``ibstat`` or sysfs, and the checks on it (private).

Every port becomes ``{"device", "port", "state", "physical_state", "rate_gbps", "link_layer"}``
in ibstat's words (``Active``, ``LinkUp``); sysfs's ``4: ACTIVE`` is mapped onto them, so both
sources are judged by the same rules. A value a source does not give is ``None``.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.serving.plugins.module_utils._input_problem import input_problem

_CA_RE = re.compile(r"^CA '([^']+)'\s*$")
_PORT_RE = re.compile(r"^Port (\d+):\s*$")
_FIELD_RE = re.compile(r"^([A-Za-z ]+):\s*(.*?)\s*$")
_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)")
# /sys/class/infiniband/<dev>/ports/<n>/<file>:<content>, as `grep "" .../{state,rate,phys_state}` prints it.
_SYSFS_LINE_RE = re.compile(r"/sys/class/infiniband/([^/]+)/ports/(\d+)/(state|rate|phys_state|link_layer):(.*)$")

# sysfs state names (include/rdma/ib_verbs.h ib_port_state) in ibstat's spelling.
_SYSFS_STATES = {"DOWN": "Down", "INIT": "Initializing", "ARMED": "Armed", "ACTIVE": "Active", "ACTIVE_DEFER": "Active"}

HEALTHY_STATE = "Active"
HEALTHY_PHYSICAL_STATE = "LinkUp"


def _rate(text):
    match = _RATE_RE.match(text or "")
    if not match:
        return None
    value = float(match.group(1))
    return int(value) if value.is_integer() else value


def parse_ibstat(text):
    """Ports of every CA in ``ibstat`` output (tabs or spaces)."""
    ports, device, port = [], None, None
    for raw in text.splitlines():
        line = raw.strip()
        ca = _CA_RE.match(line)
        if ca:
            device, port = ca.group(1), None
            continue
        number = _PORT_RE.match(line)
        if number and device:
            port = {"device": device, "port": int(number.group(1)), "state": None, "physical_state": None,
                    "rate_gbps": None, "link_layer": None}
            ports.append(port)
            continue
        field = _FIELD_RE.match(line)
        if not (field and port):
            continue
        key, value = field.group(1), field.group(2)
        if key == "State":
            port["state"] = value
        elif key == "Physical state":
            port["physical_state"] = value
        elif key == "Rate":
            port["rate_gbps"] = _rate(value)
        elif key == "Link layer":
            port["link_layer"] = value
    return ports


def port_from_sysfs(device, port, files):
    """One port from the contents of its sysfs files (``state``, ``phys_state``, ``rate``, ``link_layer``)."""

    def named(name):
        # "4: ACTIVE" -> "ACTIVE"; "5: LinkUp" -> "LinkUp"
        value = (files.get(name) or "").strip()
        return value.split(":", 1)[1].strip() if ":" in value else (value or None)

    state = named("state")
    return {
        "device": device,
        "port": int(port),
        "state": _SYSFS_STATES.get(state, state.title() if state else None),
        "physical_state": named("phys_state"),
        "rate_gbps": _rate(files.get("rate")),
        "link_layer": (files.get("link_layer") or "").strip() or None,
    }


def parse_sysfs_listing(text):
    """Ports from ``grep "" /sys/class/infiniband/*/ports/*/{state,rate,phys_state}`` output."""
    found = {}
    for line in text.splitlines():
        match = _SYSFS_LINE_RE.search(line)
        if match:
            found.setdefault((match.group(1), int(match.group(2))), {})[match.group(3)] = match.group(4)
    return [port_from_sysfs(device, number, files) for (device, number), files in sorted(found.items())]


def port_name(port):
    return "%s/%s" % (port["device"], port["port"])


def ib_port_problems(ports, expected_count=None, min_rate_gbps=None, link_layer=None, devices=None):
    """Problems of the ports that carry the fabric.

    ``devices`` (names) or else ``link_layer`` choose those ports: a node's Ethernet front-end NICs
    are not judged against the compute fabric's rate.
    """
    chosen = select_ports(ports, link_layer, devices)
    problems = []
    if expected_count is not None and len(chosen) < expected_count:
        problems.append(input_problem(
            "ib_port_count", len(chosen), expected_count,
            "%d fabric port(s) found (%s), the hardware profile expects %d"
            % (len(chosen), ", ".join(port_name(p) for p in chosen) or "none", expected_count)))
    if devices:
        missing = sorted(set(devices) - {p["device"] for p in chosen})
        if missing:
            problems.append(input_problem("ib_port_count", ", ".join(missing), "present",
                                          "IB device(s) %s not found" % ", ".join(missing)))
    for port in chosen:
        state = "%s/%s" % (port["state"], port["physical_state"])
        if port["state"] != HEALTHY_STATE or port["physical_state"] != HEALTHY_PHYSICAL_STATE:
            problems.append(input_problem(
                "ib_port_state", state, "%s/%s" % (HEALTHY_STATE, HEALTHY_PHYSICAL_STATE),
                "port %s is %s (a cable, a switch port or the subnet manager)" % (port_name(port), state)))
        elif min_rate_gbps is not None and (port["rate_gbps"] is None or port["rate_gbps"] < min_rate_gbps):
            problems.append(input_problem(
                "ib_port_rate", port["rate_gbps"], ">= %s Gb/s" % min_rate_gbps,
                "port %s links at %s Gb/s, below the %s Gb/s the hardware profile needs (a degraded cable or "
                "a lane down)" % (port_name(port), port["rate_gbps"], min_rate_gbps)))
    return problems


def select_ports(ports, link_layer=None, devices=None):
    if devices:
        return [p for p in ports if p["device"] in devices]
    if link_layer:
        # A source without the link layer (sysfs listing without that file) keeps the port.
        return [p for p in ports if p["link_layer"] in (None, link_layer)]
    return list(ports)
