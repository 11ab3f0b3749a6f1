# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Replica order and the nodes that hold a replica back."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.serving.plugins.plugin_utils._interconnect_replica import (
    mpirun_command,
    replica_blockers,
    replica_order,
)


def test_every_node_computes_the_same_ranks():
    head = replica_order("10.0.0.9", ["10.0.0.2", "10.0.0.3"], "10.0.0.9")
    worker = replica_order("10.0.0.9", ["10.0.0.9", "10.0.0.3"], "10.0.0.2")
    assert head["addresses"] == worker["addresses"] == ["10.0.0.9", "10.0.0.2", "10.0.0.3"]
    assert (head["rank"], head["is_head"], worker["rank"], worker["is_head"], worker["world_size"]) == (0, True, 1, False, 3)


def test_missing_addresses_are_refused():
    with pytest.raises(ValueError, match="rendezvous"):
        replica_order("", ["10.0.0.2"], "10.0.0.1")
    with pytest.raises(ValueError, match="own fabric address"):
        replica_order("10.0.0.1", ["10.0.0.2"], "")


def test_blockers_name_failed_unfinished_and_absent_nodes():
    replica = replica_order("10.0.0.1", ["10.0.0.2", "10.0.0.3", "10.0.0.4"], "10.0.0.1")
    nodes = [{"host": "tray-1", "address": "10.0.0.1", "healthy": False},
             {"host": "tray-2", "address": "10.0.0.2", "healthy": False},
             {"host": "tray-3", "address": "10.0.0.3", "healthy": False},
             {"host": "other", "address": None, "healthy": True}]
    assert replica_blockers(replica, "tray-1", nodes) == [
        "tray-2 (10.0.0.2): failed its checks",
        "tray-3 (10.0.0.3): failed its checks",
        "10.0.0.4: no host of this run has this address (a --limit, another batch, or it failed earlier)",
    ]


def test_a_healthy_replica_has_no_blocker():
    replica = replica_order("10.0.0.1", ["10.0.0.2"], "10.0.0.2")
    nodes = [{"host": "tray-1", "address": "10.0.0.1", "healthy": True},
             {"host": "tray-2", "address": "10.0.0.2", "healthy": True}]
    assert replica_blockers(replica, "tray-2", nodes) == []


def test_mpirun_command_spreads_one_rank_per_gpu_over_the_replica():
    replica = replica_order("10.0.0.1", ["10.0.0.2"], "10.0.0.1")
    argv = mpirun_command(replica, 4, {"NCCL_SOCKET_IFNAME": "eth1", "NCCL_MNNVL_ENABLE": "1"}, "mpirun",
                          "/opt/nccl-tests/all_reduce_perf", "8", "16G")
    assert argv == ["mpirun", "--allow-run-as-root", "--tag-output", "-np", "8", "-H", "10.0.0.1:4,10.0.0.2:4",
                    "--mca", "btl_tcp_if_include", "eth1", "--mca", "oob_tcp_if_include", "eth1",
                    "-x", "NCCL_MNNVL_ENABLE=1", "-x", "NCCL_SOCKET_IFNAME=eth1",
                    "/opt/nccl-tests/all_reduce_perf", "-b", "8", "-e", "16G", "-f", "2", "-g", "1", "-c", "1"]
