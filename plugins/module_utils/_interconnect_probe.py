# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Run the interconnect checks of one host and assemble the interconnect_probe result (private).

The host is reached only through injected callables, so this runs in tests without a fabric:

* ``which(name)`` -> absolute path or None;
* ``run(argv, environ)`` -> ``(rc, stdout, stderr)``; argv is a list, never a shell string;
* ``sysfs_ports()`` -> ``[(device, port, {file: content})]`` from /sys/class/infiniband.

Nothing here changes the host. The rendezvous check listens on, or connects to, a TCP port for a
few seconds and closes it again.
"""

from __future__ import annotations

import os

from ansible_collections.gpufleet.serving.plugins.module_utils._collective_perf import (
    collective_problems,
    parse_collective_output,
)
from ansible_collections.gpufleet.serving.plugins.module_utils._ib_ports import (
    ib_port_problems,
    parse_ibstat,
    port_from_sysfs,
    select_ports,
)
from ansible_collections.gpufleet.serving.plugins.module_utils._imex_status import imex_problems, parse_imex_nodes
from ansible_collections.gpufleet.serving.plugins.module_utils._input_problem import input_problem
from ansible_collections.gpufleet.serving.plugins.module_utils._network_path import (
    interface_of_address,
    parse_links,
    parse_route_get,
    path_problems,
    ping_outcome,
    ping_payload,
    reach_port,
    wait_for_workers,
)

_MAX_SAID = 600


def _said(stdout, stderr):
    """The tool's own words: stderr first, else the last lines of stdout."""
    text = (stderr or "").strip() or "\n".join((stdout or "").strip().splitlines()[-4:])
    text = " ".join(text.split())
    return text[:_MAX_SAID] + (" ..." if len(text) > _MAX_SAID else "")


class _Probe:
    def __init__(self, params, which, run, sysfs_ports):
        self.params = params
        self.which = which
        self.run_fn = run
        self.sysfs_ports = sysfs_ports
        self.problems = []
        self.commands = []
        # Looked up even when the read-only tools run unlimited: the collective keeps its own limit.
        self.timeout_bin = which("timeout")

    def run(self, argv, timeout=None, environ=None):
        timeout = timeout or self.params.get("command_timeout")
        full = list(argv)
        if timeout and self.timeout_bin:
            full = [self.timeout_bin, "-k", "5", str(timeout)] + full
        rc, stdout, stderr = self.run_fn(full, environ or {})
        self.commands.append({"argv": list(argv), "rc": rc})
        if timeout and self.timeout_bin and rc in (124, 137):
            stderr = ((stderr or "") + "\ntimed out after %s seconds" % timeout).strip()
        return rc, stdout or "", stderr or ""

    def unreadable(self, check, source, said, expected):
        self.problems.append(input_problem(check, said or "no output", expected, "%s: %s" % (source, said or "no output")))

    # -- InfiniBand / RoCE ports ------------------------------------------------------------

    def ib_ports(self):
        p = self.params
        ibstat = self.which("ibstat")
        ports, source = [], None
        if ibstat:
            rc, out, err = self.run([ibstat])
            if rc == 0:
                ports, source = parse_ibstat(out), "ibstat"
            else:
                self.unreadable("ib_ports_unreadable", "ibstat failed (rc %s)" % rc, _said(out, err), "port states")
                return []
        else:
            ports = [port_from_sysfs(device, number, files) for device, number, files in self.sysfs_ports()]
            source = "sysfs"
        if not ports and p.get("expected_ib_ports"):
            self.unreadable("ib_ports_unreadable", "no IB ports in %s" % ("ibstat's output" if source == "ibstat"
                                                                          else "/sys/class/infiniband (ibstat not installed)"),
                            "none", "%s port(s)" % p["expected_ib_ports"])
            return []
        self.problems += ib_port_problems(ports, p.get("expected_ib_ports"), p.get("min_ib_rate_gbps"),
                                          p.get("ib_link_layer"), p.get("ib_devices"))
        fabric = select_ports(ports, p.get("ib_link_layer"), p.get("ib_devices"))
        for port in ports:
            port["source"] = source
            port["fabric"] = port in fabric
        return ports

    # -- IMEX ---------------------------------------------------------------------------------

    def imex(self):
        tool = self.which("nvidia-imex-ctl")
        if not tool:
            self.unreadable("imex_unreadable", "nvidia-imex-ctl", "not installed", "an IMEX domain")
            return None
        rc, out, err = self.run([tool, "-N"])
        if rc != 0 or "Domain State" not in out:
            self.unreadable("imex_unreadable", "nvidia-imex-ctl -N failed (rc %s)" % rc, _said(out, err), "Domain State: UP")
            return None
        status = parse_imex_nodes(out)
        replica = ([self.params["rendezvous_address"]] if self.params.get("rendezvous_address") else []) + list(self.params.get("peers") or [])
        self.problems += imex_problems(status, self.params.get("expected_imex_nodes"), sorted(set(replica)))
        return status

    # -- network path to the other nodes of the replica --------------------------------------

    def network(self):
        p = self.params
        ip = self.which("ip")
        if not ip:
            self.unreadable("network_unreadable", "ip", "not installed (iproute2)", "routes and links")
            return None
        rc, out, err = self.run([ip, "-j", "addr", "show"])
        if rc != 0:
            self.unreadable("network_unreadable", "ip addr failed (rc %s)" % rc, _said(out, err), "the links")
            return None
        links = parse_links(out)
        socket_ifname = p.get("socket_ifname")
        derived = None
        rendezvous = p.get("rendezvous_address")
        if rendezvous:
            # The head's own address routes over lo: the interface is the one that holds it.
            derived = interface_of_address(links, rendezvous) or self.route(ip, rendezvous)["dev"]
            if derived in (None, "lo"):
                self.problems.append(input_problem(
                    "socket_interface", derived, "a fabric interface",
                    "no interface other than loopback reaches the rendezvous address %s" % rendezvous))
            elif socket_ifname and derived != socket_ifname:
                self.problems.append(input_problem(
                    "socket_interface", derived, socket_ifname,
                    "the route to the rendezvous address %s leaves by %s, not by the configured %s"
                    % (rendezvous, derived, socket_ifname)))
        chosen = socket_ifname or derived
        peers = [self.peer(ip, address, links) for address in p.get("peers") or []]
        self.problems += path_problems(peers, p.get("mtu"), chosen if chosen not in (None, "lo") else None)
        # This node's own address on the path to the head: the rendezvous address itself on the head.
        source = None
        if rendezvous:
            source = rendezvous if interface_of_address(links, rendezvous) else self.route(ip, rendezvous)["source"]
        result = {"socket_ifname": chosen, "derived_ifname": derived, "source_address": source,
                  "mtu": (links.get(chosen) or {}).get("mtu") if chosen else None, "peers": peers}
        if p.get("rendezvous_role") in ("head", "worker"):
            result["rendezvous"] = self.rendezvous(peers)
        return result

    def route(self, ip, address):
        rc, out, err = self.run([ip, "-j", "route", "get", address])
        if rc != 0:
            return {"dev": None, "source": None, "gateway": None, "local": False, "said": _said(out, err)}
        return parse_route_get(out)

    def peer(self, ip, address, links):
        route = self.route(ip, address)
        entry = {"address": address, "interface": route["dev"], "source": route["source"], "local": route["local"],
                 "interface_mtu": (links.get(route["dev"]) or {}).get("mtu"), "reachable": False,
                 "reachable_said": route.get("said"), "mtu_ok": None, "mtu_said": None}
        if route["local"] or not route["dev"]:
            return entry
        ping = self.which("ping")
        if not ping:
            entry["reachable_said"] = "ping is not installed (iputils-ping)"
            return entry
        rc, out, err = self.run([ping, "-n", "-c", "1", "-W", "2", address], timeout=10)
        outcome, said = ping_outcome(rc, out, err)
        entry["reachable"], entry["reachable_said"] = outcome == "ok", said
        mtu = self.params.get("mtu")
        if entry["reachable"] and mtu:
            rc, out, err = self.run([ping, "-n", "-M", "do", "-s", str(ping_payload(mtu)), "-c", "2", "-W", "2", address],
                                    timeout=10)
            outcome, said = ping_outcome(rc, out, err)
            entry["mtu_ok"], entry["mtu_said"] = outcome == "ok", said
        return entry

    def rendezvous(self, peers):
        p = self.params
        address, port, timeout = p["rendezvous_address"], p["rendezvous_port"], p["rendezvous_timeout"]
        if p["rendezvous_role"] == "head":
            workers = p.get("rendezvous_workers") or []
            arrived, error, in_use = wait_for_workers(address, port, workers, timeout)
            if error and not in_use:
                self.problems.append(input_problem("rendezvous_port", error, "a free port",
                                                   "the rendezvous port cannot be opened: %s" % error))
            missing = sorted(set(workers) - arrived)
            if in_use:
                # A process (the serving engine, on a redeploy) listens already: the workers' connections
                # to it are the test of the path.
                return {"role": "head", "address": address, "port": port, "in_use": True, "arrived": [], "missing": []}
            if missing and not error:
                self.problems.append(input_problem(
                    "rendezvous_port", "no connection from %s" % ", ".join(missing), "every worker connects",
                    "no connection to %s:%s from %s within %s s" % (address, port, ", ".join(missing), timeout)))
            return {"role": "head", "address": address, "port": port, "arrived": sorted(arrived), "missing": missing}
        source = next((peer["source"] for peer in peers if peer["address"] == address), None)
        error = reach_port(address, port, timeout, source=source)
        if error:
            hint = (" (nothing listens: the head must run this check in the same task - every node of the replica in one"
                    " batch, forks at least the replica's size)" if error.startswith("connection refused") else "")
            self.problems.append(input_problem(
                "rendezvous_port", error, "connected",
                "the rendezvous port %s:%s cannot be reached from here: %s%s" % (address, port, error, hint)))
        return {"role": "worker", "address": address, "port": port, "reached": error is None, "error": error}

    # -- collective -------------------------------------------------------------------------

    def collective(self):
        p = self.params
        argv = list(p["collective_command"])
        test = p.get("collective_test") or os.path.basename(argv[0])
        program = self.which(argv[0]) if "/" not in argv[0] else argv[0]
        if not program:
            self.problems.append(input_problem("collective_failed", "%s not found" % argv[0], "the benchmark installed",
                                               "%s %s: command not found" % (p["collective_scope"], test)))
            return {"test": test, "errors": ["%s: command not found" % argv[0]]}
        rc, out, err = self.run([program] + argv[1:], timeout=p.get("collective_timeout"),
                                environ=p.get("collective_environment"))
        result = parse_collective_output(out + "\n" + err, test)
        if rc != 0 and not result["errors"]:
            result["errors"] = [_said(out, err) or "exit status %s" % rc]
        result["rc"] = rc
        self.problems += collective_problems(result, rc, p.get("min_busbw_gbps"), p.get("expected_ranks"),
                                             p["collective_scope"])
        return result


def probe(params, which, run, sysfs_ports):
    """Every check the parameters ask for; ``healthy`` only when each ran and passed."""
    checks = _Probe(params, which, run, sysfs_ports)
    result = {"changed": False, "ib_ports": [], "imex": None, "network": None, "collective": None}
    if params.get("check_ib_ports"):
        result["ib_ports"] = checks.ib_ports()
    if params.get("check_imex"):
        result["imex"] = checks.imex()
    if params.get("peers") or params.get("rendezvous_address"):
        result["network"] = checks.network()
    if params.get("collective_command"):
        result["collective"] = checks.collective()
    result["problems"] = checks.problems
    result["healthy"] = not checks.problems
    result["commands"] = checks.commands
    return result


def summary_message(problems):
    return "interconnect: %d failed check(s): %s" % (len(problems), "; ".join(p["text"] for p in problems))
