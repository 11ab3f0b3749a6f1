# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Replicas from the inventory: rank, head and peers derived, never typed per host."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.serving.plugins.plugin_utils._deploy_replica import replica_layout

FLEET = [
    {"host": "tray-2", "replica": "r1", "address": "10.0.0.22"},
    {"host": "tray-1", "replica": "r1", "address": "10.0.0.21"},
    {"host": "tray-3", "replica": "r2", "address": "10.0.0.23"},
    {"host": "tray-4", "replica": "r2", "address": "10.0.0.24"},
    {"host": "b300-1", "replica": None, "address": "10.0.0.11"},
]


def test_ranks_follow_the_host_names_and_the_head_is_rank_0_on_every_node():
    head = replica_layout("tray-1", FLEET, 29501)
    worker = replica_layout("tray-2", FLEET, "29501")
    assert (head["rank"], head["is_head"], head["peer_addresses"]) == (0, True, ["10.0.0.22"])
    assert (worker["rank"], worker["is_head"], worker["peer_addresses"], worker["address"]) == (1, False, ["10.0.0.21"], "10.0.0.22")
    for layout in (head, worker):
        assert (layout["name"], layout["hosts"], layout["head_address"], layout["size"], layout["port"]) == (
            "r1", ["tray-1", "tray-2"], "10.0.0.21", 2, 29501)
    assert replica_layout("tray-4", FLEET, 29501)["hosts"] == ["tray-3", "tray-4"]


def test_a_host_without_a_replica_is_its_own():
    alone = replica_layout("b300-1", FLEET, 29501)
    assert (alone["name"], alone["size"], alone["rank"], alone["peer_addresses"], alone["head_address"]) == (
        "b300-1", 1, 0, [], "10.0.0.11")


@pytest.mark.parametrize(("hosts", "port", "message"), [
    ([{"host": "a", "replica": "r", "address": "10.0.0.1"}, {"host": "b", "replica": "r", "address": "10.0.0.1"}], 29501,
     "replica r: address 10.0.0.1 is given to more than one host"),
    ([{"host": "a", "replica": "r", "address": "10.0.0.1"}, {"host": "b", "replica": "r", "address": ""}], 29501,
     "replica r: no address for b"),
    ([{"host": "a", "replica": "r", "address": "10.0.0.1"}], 70000, "replica r: rendezvous port 70000 is outside 1..65535"),
    ([{"host": "a", "replica": "r", "address": "10.0.0.1"}], "x", "replica r: rendezvous port 'x' is not a number"),
])
def test_inconsistent_inventories_are_refused_naming_the_replica(hosts, port, message):
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        replica_layout("a", hosts, port)
