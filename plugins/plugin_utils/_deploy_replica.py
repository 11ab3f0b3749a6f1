# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The replica a host belongs to, derived from the inventory (controller-side, private).

The inventory names replicas (``deploy_replica`` on a host or group); rank, head and peers are
derived, never typed per host: the hosts of a replica sorted by name, rank 0 first. A host with no
``deploy_replica`` is a replica of its own.
"""

from __future__ import annotations


def replica_layout(own_host, hosts, port):
    """``hosts``: ``[{"host", "replica", "address"}]`` for every inventory host (replica None: alone).

    Returns the replica's name, hosts and addresses in rank order, this host's rank and address, the
    head's host and address, the other nodes' addresses, the size and the rendezvous port.
    """
    by_host = {entry["host"]: entry for entry in hosts}
    if own_host not in by_host:
        raise ValueError("host %s is not in the inventory's host list" % own_host)
    own = by_host[own_host]
    name = own["replica"] if own["replica"] not in (None, "") else own_host
    if own["replica"] in (None, ""):
        members = [own]
    else:
        members = sorted((entry for entry in hosts if entry["replica"] == own["replica"]), key=lambda entry: entry["host"])
    missing = [entry["host"] for entry in members if not entry["address"]]
    if missing:
        raise ValueError("replica %s: no address for %s (set deploy_fabric_address or ansible_host)" % (name, ", ".join(missing)))
    addresses = [entry["address"] for entry in members]
    duplicates = sorted({address for address in addresses if addresses.count(address) > 1})
    if duplicates:
        raise ValueError("replica %s: address %s is given to more than one host" % (name, ", ".join(duplicates)))
    try:
        port = int(port)
    except (TypeError, ValueError):
        raise ValueError("replica %s: rendezvous port %r is not a number" % (name, port)) from None
    if not 1 <= port <= 65535:
        raise ValueError("replica %s: rendezvous port %d is outside 1..65535" % (name, port))
    rank = [entry["host"] for entry in members].index(own_host)
    return {
        "name": name,
        "hosts": [entry["host"] for entry in members],
        "addresses": addresses,
        "size": len(members),
        "rank": rank,
        "address": addresses[rank],
        "head_host": members[0]["host"],
        "head_address": addresses[0],
        "is_head": rank == 0,
        "peer_addresses": [address for index, address in enumerate(addresses) if index != rank],
        "port": port,
    }
