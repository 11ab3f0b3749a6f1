# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The interconnect probe end to end over injected tools that answer with the real captures."""

from __future__ import annotations

import json

from ansible_collections.gpufleet.serving.plugins.module_utils._interconnect_probe import probe, summary_message
from gpu_captures import read, replace_once

IBSTAT_DOWN = "ib/ibstat_CX7_mlx5_10_Down_Polling_redacted.txt"
IMEX_TWO = "imex/nvidia-imex-ctl_-N_2node_GH200_TRIMMED.txt"
RCCL_MI350X = "nccl/rccl-tests_all_reduce_perf_8xMI350X_EXCERPT.txt"
NCCL_FAILURE = "nccl/nccl-tests_all_reduce_perf_2xRTX5090_NCCL_failure.txt"

ADDRS = json.dumps([
    {"ifname": "lo", "mtu": 65536, "operstate": "UNKNOWN", "addr_info": [{"local": "127.0.0.1"}]},
    {"ifname": "eth0", "mtu": 1500, "operstate": "UP", "addr_info": [{"local": "192.168.1.10"}]},
    {"ifname": "eth1", "mtu": 9000, "operstate": "UP", "addr_info": [{"local": "10.0.0.1"}]},
])


def active_ibstat(rate=400):
    text = replace_once(read(IBSTAT_DOWN), "State: Down", "State: Active")
    return replace_once(replace_once(text, "Physical state: Polling", "Physical state: LinkUp"), "Rate: 10", "Rate: %d" % rate)


class Host:
    """Tools on PATH and their answers; records every argv and environment."""

    def __init__(self, answers, tools=("ibstat", "nvidia-imex-ctl", "ip", "ping", "all_reduce_perf")):
        self.answers = answers
        self.tools = set(tools)
        self.calls = []

    def which(self, name):
        return "/usr/bin/" + name if name in self.tools else None

    def run(self, argv, environ):
        self.calls.append((argv, environ))
        key = " ".join(a.rsplit("/", 1)[-1] for a in argv)
        for prefix, answer in self.answers.items():
            if key.startswith(prefix):
                return answer
        raise AssertionError("unexpected command %r" % key)


def params(**overrides):
    base = {"check_ib_ports": False, "expected_ib_ports": None, "min_ib_rate_gbps": None, "ib_link_layer": None,
            "ib_devices": None, "check_imex": False, "expected_imex_nodes": None, "peers": [], "rendezvous_address": None,
            "socket_ifname": None, "mtu": None, "rendezvous_port": 29501, "rendezvous_role": "none",
            "rendezvous_workers": [], "rendezvous_timeout": 1, "collective_command": [], "collective_test": None,
            "collective_environment": {}, "collective_scope": "intra-node", "collective_timeout": 900,
            "min_busbw_gbps": None, "expected_ranks": None, "command_timeout": 0}
    base.update(overrides)
    return base


def run_probe(host, **overrides):
    return probe(params(**overrides), host.which, host.run, lambda: [])


def test_healthy_node_with_every_check():
    # AMD's published excerpt elides the rank lines after rank 1, so it lists two ranks.
    host = Host({
        "ibstat": (0, active_ibstat(), ""),
        "nvidia-imex-ctl -N": (0, read(IMEX_TWO).replace("10.136.206.47", "10.0.0.1").replace("10.136.206.48", "10.0.0.2"), ""),
        "ip -j addr show": (0, ADDRS, ""),
        "ip -j route get 10.0.0.2": (0, '[{"dst":"10.0.0.2","dev":"eth1","prefsrc":"10.0.0.1"}]', ""),
        "ping -n -c 1": (0, "1 packets transmitted, 1 received", ""),
        "ping -n -M do -s 8972": (0, "2 packets transmitted, 2 received", ""),
        "all_reduce_perf": (0, read(RCCL_MI350X), ""),
    })
    result = run_probe(host, check_ib_ports=True, expected_ib_ports=1, min_ib_rate_gbps=400, check_imex=True,
                       expected_imex_nodes=2, peers=["10.0.0.2"], rendezvous_address="10.0.0.1", mtu=9000,
                       collective_command=["all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "8", "-c", "1"],
                       collective_environment={"NCCL_SOCKET_IFNAME": "eth1"}, min_busbw_gbps=300, expected_ranks=2)
    assert result["problems"] == [] and result["healthy"] is True and result["changed"] is False
    assert result["network"]["socket_ifname"] == "eth1" and result["network"]["mtu"] == 9000
    assert result["collective"]["busbw_gbps_at_max"] == 360.97 and result["collective"]["rc"] == 0
    assert result["ib_ports"][0]["source"] == "ibstat" and result["ib_ports"][0]["fabric"] is True
    assert result["network"]["source_address"] == "10.0.0.1"
    assert (["/usr/bin/all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "8", "-c", "1"],
            {"NCCL_SOCKET_IFNAME": "eth1"}) in host.calls


def test_sysfs_when_ibstat_is_not_installed():
    host = Host({}, tools=())
    files = {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "400 Gb/sec (4X NDR)", "link_layer": "InfiniBand"}
    result = probe(params(check_ib_ports=True, expected_ib_ports=1, min_ib_rate_gbps=400), host.which, host.run,
                   lambda: [("mlx5_0", 1, files)])
    assert result["healthy"] is True and result["ib_ports"][0]["source"] == "sysfs"
    empty = run_probe(host, check_ib_ports=True, expected_ib_ports=8)
    assert [p["check"] for p in empty["problems"]] == ["ib_ports_unreadable"]
    assert "ibstat not installed" in empty["problems"][0]["message"]


def test_imex_daemon_down_is_quoted():
    host = Host({"nvidia-imex-ctl -N": (1, "", "Failed to connect to IMEX daemon: Connection refused\n")})
    result = run_probe(host, check_imex=True, expected_imex_nodes=2)
    assert result["healthy"] is False and result["imex"] is None
    assert result["problems"][0]["check"] == "imex_unreadable"
    assert "Failed to connect to IMEX daemon: Connection refused" in result["problems"][0]["message"]


def test_collective_failure_and_missing_benchmark():
    host = Host({"all_reduce_perf": (3, read(NCCL_FAILURE), "")})
    result = run_probe(host, collective_command=["all_reduce_perf", "-g", "2"], min_busbw_gbps=100)
    assert [p["check"] for p in result["problems"]] == ["collective_failed"]
    assert "Test NCCL failure common.cu:392" in summary_message(result["problems"])
    missing = run_probe(Host({}, tools=()), collective_command=["all_reduce_perf"], min_busbw_gbps=100)
    assert missing["problems"][0]["message"] == "intra-node all_reduce_perf: command not found"


def test_interface_derived_on_a_worker_and_a_loopback_rendezvous_refused():
    worker = Host({
        "ip -j addr show": (0, ADDRS, ""),
        "ip -j route get 10.0.0.7": (0, '[{"dst":"10.0.0.7","dev":"eth1","prefsrc":"10.0.0.1"}]', ""),
    })
    result = run_probe(worker, rendezvous_address="10.0.0.7", socket_ifname="eth0")
    assert result["network"]["derived_ifname"] == "eth1"
    assert [(p["check"], p["found"], p["expected"]) for p in result["problems"]] == [("socket_interface", "eth1", "eth0")]
    loopback = run_probe(Host({"ip -j addr show": (0, ADDRS, "")}), rendezvous_address="127.0.0.1")
    assert [(p["check"], p["found"]) for p in loopback["problems"]] == [("socket_interface", "lo")]


def test_commands_run_under_timeout_when_limited():
    host = Host({"timeout -k 5 60 ibstat": (124, "", "")}, tools=("ibstat", "timeout"))
    result = run_probe(host, check_ib_ports=True, expected_ib_ports=1, command_timeout=60)
    assert result["problems"][0]["check"] == "ib_ports_unreadable"
    assert "timed out after 60 seconds" in result["problems"][0]["message"]
    assert result["commands"] == [{"argv": ["/usr/bin/ibstat"], "rc": 124}]
