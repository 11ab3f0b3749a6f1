#!/usr/bin/python
# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: interconnect_probe
short_description: Read-only check of a GPU node's fabric ports, IMEX domain, network path and collective bandwidth
version_added: 0.2.0
description:
  - Checks what multi-GPU and multi-node serving depend on before a model is loaded, and
    returns V(healthy) with a list of problems. Each problem names the check, what was
    found and what was expected.
  - "Fabric ports: C(ibstat), or C(/sys/class/infiniband/*/ports/*) when C(ibstat) is not
    installed: each port's state, physical state and rate."
  - "IMEX (GB300): C(nvidia-imex-ctl -N): the domain state, each node's status and the
    connectivity between every pair of nodes."
  - "Network path to the other nodes of a replica: the interface that carries the route to
    each peer and to the rendezvous address (the one NCCL and Gloo must use), its MTU, a
    ping, a ping of the full MTU with don't-fragment set, and optionally the rendezvous TCP
    port (the head listens, the workers connect, within one task)."
  - "Collective: runs a benchmark in nccl-tests/rccl-tests format (C(all_reduce_perf) and
    friends, directly or through C(mpirun)/C(srun), or the sandbox's gloo all-reduce) and
    reads the bus bandwidth at the largest size, the average, and the out-of-bounds count."
  - A tool that is missing or fails is a problem quoting the tool's own words; a check
    whose data is missing is never counted as passed.
author:
  - gpufleet.serving contributors (@gpufleet)
options:
  check_ib_ports:
    description: Read the fabric ports.
    type: bool
    default: false
  expected_ib_ports:
    description: Fewest fabric ports (of O(ib_link_layer) or O(ib_devices)) the node must have.
    type: int
  min_ib_rate_gbps:
    description: Lowest rate in Gb/s each fabric port must link at.
    type: float
  ib_link_layer:
    description:
      - Only ports of this link layer are fabric ports (V(InfiniBand), or V(Ethernet) for RoCE),
        so that a node's front-end Ethernet NICs are not judged against the fabric's rate.
    type: str
  ib_devices:
    description: Exactly these devices (for example C(mlx5_0)) are the fabric ports; overrides O(ib_link_layer).
    type: list
    elements: str
  check_imex:
    description: Read the IMEX domain with C(nvidia-imex-ctl -N).
    type: bool
    default: false
  expected_imex_nodes:
    description: Number of nodes the IMEX domain must list, all READY and connected.
    type: int
  peers:
    description: Addresses of the other nodes of the replica, checked for route, MTU and reachability.
    type: list
    elements: str
    default: []
  rendezvous_address:
    description:
      - Address of the replica's head node (the engine's master address). The interface that
        carries it (on the head, the interface that holds it) is returned as
        RV(network.socket_ifname), the value for C(NCCL_SOCKET_IFNAME) and C(GLOO_SOCKET_IFNAME).
    type: str
  socket_ifname:
    description: The interface NCCL/Gloo are configured to use; a route by another one is a problem.
    type: str
  mtu:
    description: MTU of the fabric network; a smaller interface MTU or a path that drops full-size packets is a problem.
    type: int
  rendezvous_port:
    description: TCP port of the rendezvous (vLLM's C(--master-port), default 29501).
    type: int
    default: 29501
  rendezvous_role:
    description:
      - V(head) listens on O(rendezvous_address):O(rendezvous_port) until every address in
        O(rendezvous_workers) has connected; V(worker) connects to it. Run both in one task
        so that they overlap. V(none) skips it (the engine may hold the port).
    type: str
    choices: [none, head, worker]
    default: none
  rendezvous_workers:
    description: Addresses the workers connect from (the head's side of the rendezvous check).
    type: list
    elements: str
    default: []
  rendezvous_timeout:
    description: Seconds the rendezvous check waits.
    type: int
    default: 30
  collective_command:
    description:
      - The collective benchmark to run, as an argument list (for example
        C([all_reduce_perf, -b, 8, -e, 16G, -f, 2, -g, 8, -c, 1])). Not run when empty.
    type: list
    elements: str
    default: []
  collective_test:
    description: Name of the benchmark, reported as RV(collective.test); default the program's name.
    type: str
  collective_environment:
    description: Environment for the benchmark (for example C(NCCL_SOCKET_IFNAME)); not for secrets.
    type: dict
    default: {}
  collective_scope:
    description: V(intra-node) or V(multi-node), used in messages.
    type: str
    choices: [intra-node, multi-node]
    default: intra-node
  collective_timeout:
    description: Seconds the benchmark may run before it is stopped and reported as failed.
    type: int
    default: 900
  min_busbw_gbps:
    description: Lowest bus bandwidth in GB/s at the largest message size.
    type: float
  expected_ranks:
    description: Number of ranks the benchmark must report.
    type: int
  fail_on_unhealthy:
    description: Fail the task when any problem is found; the result still carries every fact.
    type: bool
    default: false
  command_timeout:
    description: Seconds each read-only tool may run (through C(timeout) where present); V(0) for no limit.
    type: int
    default: 60
notes:
  - "Problem checks: V(ib_ports_unreadable), V(ib_port_count), V(ib_port_state), V(ib_port_rate),
    V(imex_unreadable), V(imex_domain_state), V(imex_node_count), V(imex_node_status),
    V(imex_connectivity), V(network_unreadable), V(socket_interface), V(peer_route),
    V(peer_interface), V(link_mtu), V(peer_unreachable), V(path_mtu), V(rendezvous_port),
    V(collective_failed), V(collective_wrong), V(collective_ranks) and V(collective_busbw)."
  - The collective benchmark loads the GPUs for as long as it runs; run it before the engine
    starts, not next to a serving engine.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: The module changes nothing on the host; it runs in check mode and never reports a change.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Fabric ports and intra-node all-reduce of a B300 node
  gpufleet.serving.interconnect_probe:
    check_ib_ports: true
    expected_ib_ports: 8
    min_ib_rate_gbps: 400
    ib_link_layer: InfiniBand
    collective_command: [all_reduce_perf, -b, "8", -e, 16G, -f, "2", -g, "8", -c, "1"]
    min_busbw_gbps: 700
    fail_on_unhealthy: true

- name: The path between two GB300 trays of one replica, and the interface for NCCL/Gloo
  gpufleet.serving.interconnect_probe:
    check_imex: true
    expected_imex_nodes: 2
    peers: ["{{ other_tray_address }}"]
    rendezvous_address: "{{ head_address }}"
    mtu: 9000
  register: path

- name: Hand the interface to the engine
  ansible.builtin.set_fact:
    nccl_socket_ifname: "{{ path.network.socket_ifname }}"
"""

RETURN = r"""
changed:
  description: Always V(false).
  returned: always
  type: bool
healthy:
  description: V(true) when every requested check ran and passed.
  returned: always
  type: bool
problems:
  description: One entry per failed check.
  returned: always
  type: list
  elements: dict
  contains:
    check:
      description: Which check failed (see the notes).
      type: str
      sample: ib_port_state
    found:
      description: What was measured or read.
      type: raw
      sample: Down/Polling
    expected:
      description: What the check requires.
      type: raw
      sample: Active/LinkUp
    message:
      description: A sentence saying what is wrong, quoting the tool where it said something.
      type: str
    text:
      description: C([check] message (found ...; expected ...)), the line the roles print.
      type: str
ib_ports:
  description: One entry per port.
  returned: always
  type: list
  elements: dict
  contains:
    device:
      description: Device name.
      type: str
      sample: mlx5_0
    port:
      description: Port number.
      type: int
      sample: 1
    state:
      description: Logical state in C(ibstat)'s words (C(Active), C(Down), C(Initializing), C(Armed)).
      type: str
    physical_state:
      description: Physical state (C(LinkUp), C(Polling), C(Disabled)).
      type: str
    rate_gbps:
      description: Link rate in Gb/s.
      type: float
      sample: 800
    link_layer:
      description: C(InfiniBand) or C(Ethernet); V(null) when the source does not say.
      type: str
    source:
      description: C(ibstat) or C(sysfs).
      type: str
    fabric:
      description: Whether the port is a fabric port (of O(ib_link_layer), or in O(ib_devices)), judged by the checks.
      type: bool
imex:
  description: The IMEX domain; V(null) when not checked or not readable.
  returned: always
  type: dict
  contains:
    domain_state:
      description: C(UP) when healthy.
      type: str
    nodes:
      description: Per node C(index), C(address), C(hostname) (with C(-H)), C(status) (C(READY) when healthy) and C(version).
      type: list
      elements: dict
    connectivity:
      description: Source node index to target node index to the table's letter (C(C) is connected).
      type: dict
network:
  description: The path to the other nodes; V(null) when no peer or rendezvous address was given.
  returned: always
  type: dict
  contains:
    socket_ifname:
      description: The interface for C(NCCL_SOCKET_IFNAME)/C(GLOO_SOCKET_IFNAME) (the configured one, else the derived one).
      type: str
      sample: eth1
    derived_ifname:
      description: The interface that carries the rendezvous address.
      type: str
    source_address:
      description: This node's address on the path to the rendezvous address (the rendezvous address itself on the head).
      type: str
    mtu:
      description: MTU of RV(network.socket_ifname).
      type: int
    peers:
      description: Per peer C(address), C(interface), C(source), C(local), C(interface_mtu), C(reachable), C(mtu_ok) and the ping's words.
      type: list
      elements: dict
    rendezvous:
      description: The rendezvous port check (C(role), C(address), C(port), and C(arrived)/C(missing) or C(reached)/C(error)).
      type: dict
collective:
  description: The benchmark's figures; V(null) when none was run.
  returned: always
  type: dict
  contains:
    test:
      description: The benchmark (C(all_reduce_perf), C(all_gather_perf), C(gloo_all_reduce), ...).
      type: str
    tool:
      description: C(nccl-tests) or C(rccl-tests) (the format's family).
      type: str
    library_version:
      description: C(NCCL version ...) or C(RCCL version ...) as printed.
      type: str
    ranks:
      description: Ranks listed in C(# Using devices).
      type: int
    hosts:
      description: Hosts the ranks ran on.
      type: list
      elements: str
    max_bytes:
      description: Largest message size measured.
      type: int
    busbw_gbps_at_max:
      description: Bus bandwidth in GB/s at RV(collective.max_bytes), the lower of out-of-place and in-place.
      type: float
    avg_busbw_gbps:
      description: The tool's C(Avg bus bandwidth).
      type: float
    wrong:
      description: Out-of-bounds (wrong) values; V(null) when the run did not validate.
      type: int
    rows:
      description: Number of result rows.
      type: int
    errors:
      description: The tool's and the launcher's failure lines, as printed.
      type: list
      elements: str
    rc:
      description: Exit status of the benchmark.
      type: int
commands:
  description: Commands that were run, with their exit codes.
  returned: always
  type: list
  elements: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.serving.plugins.module_utils._interconnect_probe import probe, summary_message

_SYSFS_IB = "/sys/class/infiniband"
_TOOL_DIRS = ["/usr/sbin", "/sbin", "/usr/local/bin", "/opt/rocm/bin"]


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def sysfs_ports():
    ports = []
    for device in sorted(os.listdir(_SYSFS_IB)) if os.path.isdir(_SYSFS_IB) else []:
        base = os.path.join(_SYSFS_IB, device, "ports")
        for number in sorted(os.listdir(base)) if os.path.isdir(base) else []:
            files = {name: _read(os.path.join(base, number, name)) for name in ("state", "phys_state", "rate", "link_layer")}
            ports.append((device, int(number), files))
    return ports


def run_module(module):
    def which(name):
        return module.get_bin_path(name, opt_dirs=_TOOL_DIRS)

    def run(argv, environ):
        return module.run_command(argv, check_rc=False, environ_update=environ)

    result = probe(module.params, which, run, sysfs_ports)
    if module.params["fail_on_unhealthy"] and not result["healthy"]:
        module.fail_json(msg=summary_message(result["problems"]), **result)
    module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            check_ib_ports=dict(type="bool", default=False),
            expected_ib_ports=dict(type="int"),
            min_ib_rate_gbps=dict(type="float"),
            ib_link_layer=dict(type="str"),
            ib_devices=dict(type="list", elements="str"),
            check_imex=dict(type="bool", default=False),
            expected_imex_nodes=dict(type="int"),
            peers=dict(type="list", elements="str", default=[]),
            rendezvous_address=dict(type="str"),
            socket_ifname=dict(type="str"),
            mtu=dict(type="int"),
            rendezvous_port=dict(type="int", default=29501),
            rendezvous_role=dict(type="str", default="none", choices=["none", "head", "worker"]),
            rendezvous_workers=dict(type="list", elements="str", default=[]),
            rendezvous_timeout=dict(type="int", default=30),
            collective_command=dict(type="list", elements="str", default=[]),
            collective_test=dict(type="str"),
            collective_environment=dict(type="dict", default={}),
            collective_scope=dict(type="str", default="intra-node", choices=["intra-node", "multi-node"]),
            collective_timeout=dict(type="int", default=900),
            min_busbw_gbps=dict(type="float"),
            expected_ranks=dict(type="int"),
            fail_on_unhealthy=dict(type="bool", default=False),
            command_timeout=dict(type="int", default=60),
        ),
        required_if=[("rendezvous_role", "head", ("rendezvous_address",)),
                     ("rendezvous_role", "worker", ("rendezvous_address",))],
        supports_check_mode=True,
    )
    run_module(module)


if __name__ == "__main__":
    main()
