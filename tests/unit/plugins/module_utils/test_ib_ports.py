# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fabric ports from the real ibstat and sysfs captures, and the port checks."""

from __future__ import annotations

from ansible_collections.gpufleet.serving.plugins.module_utils._ib_ports import (
    ib_port_problems,
    parse_ibstat,
    parse_sysfs_listing,
    port_from_sysfs,
)
from gpu_captures import read, replace_once

IBSTAT_DOWN = "ib/ibstat_CX7_mlx5_10_Down_Polling_redacted.txt"
SYSFS_EDR = "ib/sysfs_infiniband_ports_state_rate_physstate_EDR.txt"


def test_ibstat_capture_down_polling_port():
    assert parse_ibstat(read(IBSTAT_DOWN)) == [
        {"device": "mlx5_10", "port": 1, "state": "Down", "physical_state": "Polling", "rate_gbps": 10,
         "link_layer": "InfiniBand"}]


def test_ibstat_with_tabs_as_the_tool_prints_them():
    text = read(IBSTAT_DOWN).replace("        ", "\t\t").replace("    ", "\t")
    assert parse_ibstat(text)[0]["physical_state"] == "Polling"


def test_down_port_is_named_with_both_states():
    problems = ib_port_problems(parse_ibstat(read(IBSTAT_DOWN)), expected_count=1, min_rate_gbps=400)
    assert [(p["check"], p["found"], p["expected"]) for p in problems] == [
        ("ib_port_state", "Down/Polling", "Active/LinkUp")]
    assert "mlx5_10/1 is Down/Polling" in problems[0]["message"]


def test_active_port_at_a_lower_rate_is_degraded():
    text = replace_once(replace_once(replace_once(read(IBSTAT_DOWN), "State: Down", "State: Active"),
                                     "Physical state: Polling", "Physical state: LinkUp"), "Rate: 10", "Rate: 200")
    problems = ib_port_problems(parse_ibstat(text), expected_count=1, min_rate_gbps=400)
    assert [(p["check"], p["found"], p["expected"]) for p in problems] == [("ib_port_rate", 200, ">= 400 Gb/s")]
    assert ib_port_problems(parse_ibstat(text), expected_count=1, min_rate_gbps=200) == []


def test_sysfs_capture_maps_onto_ibstat_words():
    ports = parse_sysfs_listing(read(SYSFS_EDR))
    assert ports == [
        {"device": "mlx5_0", "port": 1, "state": "Active", "physical_state": "LinkUp", "rate_gbps": 100, "link_layer": None},
        {"device": "mlx5_1", "port": 1, "state": "Active", "physical_state": "LinkUp", "rate_gbps": 100, "link_layer": None},
    ]
    assert ib_port_problems(ports, expected_count=2, min_rate_gbps=100, link_layer="InfiniBand") == []


def test_too_few_ports_names_those_found():
    ports = parse_sysfs_listing(read(SYSFS_EDR))
    problems = ib_port_problems(ports, expected_count=8, min_rate_gbps=100)
    assert [(p["check"], p["found"], p["expected"]) for p in problems] == [("ib_port_count", 2, 8)]
    assert "mlx5_0/1, mlx5_1/1" in problems[0]["message"]


def test_ethernet_front_end_ports_are_not_fabric_ports():
    fabric = port_from_sysfs("mlx5_0", 1, {"state": "4: ACTIVE", "phys_state": "5: LinkUp",
                                           "rate": "400 Gb/sec (4X NDR)", "link_layer": "InfiniBand"})
    front = port_from_sysfs("mlx5_8", 1, {"state": "1: DOWN", "phys_state": "3: Disabled",
                                          "rate": "25 Gb/sec (1X EDR)", "link_layer": "Ethernet"})
    assert ib_port_problems([fabric, front], expected_count=1, min_rate_gbps=400, link_layer="InfiniBand") == []
    named = ib_port_problems([fabric, front], min_rate_gbps=400, devices=["mlx5_0", "mlx5_9"])
    assert [(p["check"], p["found"]) for p in named] == [("ib_port_count", "mlx5_9")]
    assert front["state"] == "Down" and front["rate_gbps"] == 25
