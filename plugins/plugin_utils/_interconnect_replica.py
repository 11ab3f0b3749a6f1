# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The nodes of one replica as the interconnect role sees them (controller-side, private).

Every node of a replica must run a multi-node collective at the same moment, so it starts only
when every node of the replica passed its own checks in this run; otherwise the healthy nodes
would wait for a peer that never joins until the collective's timeout.
"""

from __future__ import annotations


def replica_order(rendezvous, peers, own):
    """The replica's addresses, the head (rank 0) first, then the others sorted: the same list on every node."""
    if not rendezvous:
        raise ValueError("a replica needs its rendezvous (head) address")
    if not own:
        raise ValueError("this node's own fabric address is empty")
    others = sorted({address for address in list(peers) + [own] if address and address != rendezvous})
    addresses = [rendezvous] + others
    return {"addresses": addresses, "rank": addresses.index(own), "world_size": len(addresses),
            "head": rendezvous, "is_head": own == rendezvous}


def replica_blockers(replica, own_host, nodes):
    """What keeps the replica from its collective, one line per node.

    ``nodes``: ``[{"host", "address", "healthy"}]`` for the hosts of this run that recorded a fabric
    address (``healthy``: whether its own checks passed).
    """
    by_address = {}
    for node in nodes:
        if node["address"]:
            by_address.setdefault(node["address"], node)
    blockers = []
    for address in replica["addresses"]:
        node = by_address.get(address)
        if node is None:
            blockers.append("%s: no host of this run has this address (a --limit, another batch, or it failed earlier)" % address)
        elif node["host"] != own_host and not node["healthy"]:
            blockers.append("%s (%s): %s" % (node["host"], address, "failed its checks"))
    return blockers


def mpirun_command(replica, gpus_per_node, environment, mpirun, program, min_bytes, max_bytes):
    """nccl-tests/rccl-tests across the replica through Open MPI, in the nccl-tests README's form.

    One process per GPU (``-g 1``), ``gpus_per_node`` slots on each node in replica order, every
    variable of ``environment`` exported to all ranks (``-x``), and MPI's own TCP traffic on the
    interface NCCL uses. Output is tagged per rank (``--tag-output``), which the parser strips.
    """
    ranks = replica["world_size"] * gpus_per_node
    argv = [mpirun, "--allow-run-as-root", "--tag-output", "-np", str(ranks),
            "-H", ",".join("%s:%d" % (address, gpus_per_node) for address in replica["addresses"])]
    ifname = environment.get("NCCL_SOCKET_IFNAME")
    if ifname:
        argv += ["--mca", "btl_tcp_if_include", ifname, "--mca", "oob_tcp_if_include", ifname]
    for name in sorted(environment):
        argv += ["-x", "%s=%s" % (name, environment[name])]
    return argv + [program, "-b", str(min_bytes), "-e", str(max_bytes), "-f", "2", "-g", "1", "-c", "1"]
