# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The IMEX domain from the real two-node capture, and variants of it."""

from __future__ import annotations

from ansible_collections.gpufleet.serving.plugins.module_utils._imex_status import imex_problems, parse_imex_nodes
from gpu_captures import read, replace_once

TWO_NODES = "imex/nvidia-imex-ctl_-N_2node_GH200_TRIMMED.txt"


def test_two_node_capture_is_up_ready_and_connected():
    status = parse_imex_nodes(read(TWO_NODES))
    assert status == {
        "domain_state": "UP",
        "nodes": [{"index": 0, "address": "10.136.206.47", "hostname": None, "status": "READY", "version": None},
                  {"index": 1, "address": "10.136.206.48", "hostname": None, "status": "READY", "version": None}],
        "connectivity": {"0": {"0": "C", "1": "C"}, "1": {"0": "C", "1": "C"}},
    }
    assert imex_problems(status, expected_nodes=2) == []


def test_version_column_and_hostnames_of_newer_daemons():
    text = replace_once(read(TWO_NODES), "Node #1   - 10.136.206.48   - READY",
                        "Node #1   - 10.136.206.48 (tray-2) - READY                - Version: 580.95.05")
    assert parse_imex_nodes(text)["nodes"][1] == {"index": 1, "address": "10.136.206.48", "hostname": "tray-2",
                                                  "status": "READY", "version": "580.95.05"}


def test_a_node_not_ready_and_its_lost_connections():
    text = replace_once(read(TWO_NODES), "10.136.206.48   - READY", "10.136.206.48   - UNAVAILABLE")
    text = replace_once(text, "       0        C  C", "       0        C  N")
    text = replace_once(text, "       1        C  C", "       1        N  C")
    text = replace_once(text, "Domain State: UP", "Domain State: DEGRADED")
    problems = imex_problems(parse_imex_nodes(text), expected_nodes=2)
    assert [(p["check"], p["found"]) for p in problems] == [
        ("imex_domain_state", "DEGRADED"),
        ("imex_node_status", "UNAVAILABLE"),
        ("imex_connectivity", "0->1: N, 1->0: N"),
    ]
    assert "IMEX node #1 (10.136.206.48) is UNAVAILABLE" in problems[1]["message"]


def test_domain_smaller_than_the_replica():
    problems = imex_problems(parse_imex_nodes(read(TWO_NODES)), expected_nodes=4)
    assert [(p["check"], p["found"], p["expected"]) for p in problems] == [("imex_node_count", 2, ">= 4")]
    # A rack-wide domain is larger than the replica: fine.
    assert imex_problems(parse_imex_nodes(read(TWO_NODES)), expected_nodes=1) == []


def test_only_the_replicas_own_nodes_are_judged():
    text = replace_once(read(TWO_NODES), "10.136.206.48   - READY", "10.136.206.48   - UNAVAILABLE")
    text = replace_once(text, "       0        C  C", "       0        C  N")
    status = parse_imex_nodes(text)
    assert imex_problems(status, expected_nodes=1, replica=["10.136.206.47"])[1:] == []
    other = imex_problems(status, expected_nodes=2, replica=["10.136.206.47", "10.136.206.48", "10.136.206.49"])
    assert [(p["check"], p["found"]) for p in other][:2] == [("imex_node_count", "missing 10.136.206.49"),
                                                             ("imex_node_status", "UNAVAILABLE")]


def test_output_without_a_domain_line_is_not_up():
    problems = imex_problems(parse_imex_nodes("Failed to connect to IMEX daemon: Connection refused\n"))
    assert [p["check"] for p in problems] == ["imex_domain_state"]
