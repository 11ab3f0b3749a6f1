# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters for the interconnect role (logic in plugins/plugin_utils/_interconnect_replica.py)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.serving.plugins.plugin_utils._interconnect_replica import (
    mpirun_command,
    replica_blockers,
    replica_order,
)


def interconnect_replica(rendezvous, peers, own):
    try:
        return replica_order(rendezvous, peers or [], own)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def interconnect_replica_blockers(replica, own_host, play_hosts, hostvars):
    nodes = []
    for host in play_hosts:
        host_vars = hostvars[host]
        passed = host_vars.get("interconnect_gate_passed")
        nodes.append({"host": host, "address": host_vars.get("interconnect_node_address"),
                      "healthy": None if passed is None else bool(passed)})
    return replica_blockers(replica, own_host, nodes)


def interconnect_mpirun_command(replica, gpus_per_node, environment, mpirun, program, min_bytes, max_bytes):
    return mpirun_command(replica, int(gpus_per_node), dict(environment or {}), mpirun, program, min_bytes, max_bytes)


class FilterModule:
    def filters(self):
        return {
            "interconnect_replica": interconnect_replica,
            "interconnect_replica_blockers": interconnect_replica_blockers,
            "interconnect_mpirun_command": interconnect_mpirun_command,
        }
