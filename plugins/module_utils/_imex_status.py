# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The IMEX domain as ``nvidia-imex-ctl -N`` reports it, and the checks on it (private).

Multi-node NVLink (GB300 trays of one replica) exports GPU memory across trays through the IMEX
daemons. A tray whose daemon is not READY, or a pair of trays not connected (``C``), makes NCCL's
MNNVL init fail or hang once the model loads; here it is found before.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.serving.plugins.module_utils._input_problem import input_problem

# "Node #0   - 10.136.206.48   - READY" [+ "   - Version: 580.95.05"]; with -H the address is "IP (hostname)".
_NODE_RE = re.compile(r"^Node #\s*(\d+)\s+-\s+(\S+)(?:\s+\(([^)]*)\))?\s+-\s+(\S+)(?:\s+-\s+Version:\s*(\S+))?\s*$")
_MATRIX_HEAD_RE = re.compile(r"^Nodes From\\To\s+([\d\s]+)$")
_MATRIX_ROW_RE = re.compile(r"^(\d+)\s+(.+)$")
_DOMAIN_RE = re.compile(r"^Domain State:\s*(\S+)")

READY = "READY"
CONNECTED = "C"
DOMAIN_UP = "UP"


def parse_imex_nodes(text):
    """``{"domain_state", "nodes": [{"index", "address", "hostname", "status", "version"}], "connectivity"}``."""
    nodes, connectivity, columns, domain = [], {}, None, None
    for raw in text.splitlines():
        line = raw.strip()
        node = _NODE_RE.match(line)
        if node:
            nodes.append({"index": int(node.group(1)), "address": node.group(2), "hostname": node.group(3),
                          "status": node.group(4), "version": node.group(5)})
            continue
        head = _MATRIX_HEAD_RE.match(line)
        if head:
            columns = head.group(1).split()
            continue
        domain_state = _DOMAIN_RE.match(line)
        if domain_state:
            domain = domain_state.group(1)
            columns = None
            continue
        row = _MATRIX_ROW_RE.match(line) if columns else None
        if row:
            connectivity[row.group(1)] = dict(zip(columns, row.group(2).split()))
    return {"domain_state": domain, "nodes": nodes, "connectivity": connectivity}


def imex_problems(status, expected_nodes=None, replica=None):
    """Problems of the domain: state, size, each node's status, each pair's connection.

    An NVL72 domain usually spans the whole rack: ``expected_nodes`` is a minimum, and with
    ``replica`` (its nodes' addresses) only those nodes must be listed, READY and connected, so
    a tray of another replica does not fail this one.
    """
    problems = []
    if status["domain_state"] != DOMAIN_UP:
        problems.append(input_problem("imex_domain_state", status["domain_state"], DOMAIN_UP,
                                      "IMEX domain state is %s" % status["domain_state"]))
    if expected_nodes is not None and len(status["nodes"]) < expected_nodes:
        problems.append(input_problem(
            "imex_node_count", len(status["nodes"]), ">= %d" % expected_nodes,
            "the IMEX domain lists %d node(s), the replica needs %d (nodes_config.cfg must name every tray)"
            % (len(status["nodes"]), expected_nodes)))
    judged = status["nodes"]
    if replica:
        listed = {node["address"] for node in status["nodes"]}
        missing = [address for address in replica if address not in listed]
        if missing:
            problems.append(input_problem("imex_node_count", "missing %s" % ", ".join(missing), "every node of the replica",
                                          "the IMEX domain does not list %s (nodes_config.cfg must name every tray)"
                                          % ", ".join(missing)))
        judged = [node for node in status["nodes"] if node["address"] in replica]
    indexes = {str(node["index"]) for node in judged}
    for node in judged:
        if node["status"] != READY:
            problems.append(input_problem(
                "imex_node_status", node["status"], READY,
                "IMEX node #%d (%s) is %s" % (node["index"], node["address"], node["status"])))
    broken = ["%s->%s: %s" % (source, target, cell)
              for source, row in sorted(status["connectivity"].items()) if source in indexes
              for target, cell in sorted(row.items()) if target in indexes and cell != CONNECTED]
    if broken:
        problems.append(input_problem("imex_connectivity", ", ".join(broken), "C between every pair",
                                      "IMEX nodes not connected: %s" % ", ".join(broken)))
    elif status["nodes"] and not status["connectivity"]:
        problems.append(input_problem("imex_connectivity", "no connectivity table", "C between every pair",
                                      "nvidia-imex-ctl printed no connectivity table"))
    return problems
