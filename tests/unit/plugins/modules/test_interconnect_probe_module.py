# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.serving.interconnect_probe through its real main(), with tools on a PATH of test scripts."""

from __future__ import annotations

import json
import os
import stat

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpufleet.serving.plugins.modules import interconnect_probe
from gpu_captures import read

IBSTAT_DOWN = "ib/ibstat_CX7_mlx5_10_Down_Polling_redacted.txt"
RCCL_MI350X = "nccl/rccl-tests_all_reduce_perf_8xMI350X_EXCERPT.txt"


def tool(directory, name, output, rc=0):
    path = directory / name
    (directory / (name + ".out")).write_text(output)
    path.write_text("#!/bin/sh\ncat '%s.out'\nexit %d\n" % (path, rc))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def run_main(args, monkeypatch, capsys, bin_dir):
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ["PATH"]))
    monkeypatch.setattr(interconnect_probe, "_TOOL_DIRS", [str(bin_dir)])
    with patch_module_args(args), pytest.raises(SystemExit) as exited:
        interconnect_probe.main()
    return exited.value.code, json.loads(capsys.readouterr().out)


def test_down_port_fails_when_asked_and_still_returns_every_fact(tmp_path, monkeypatch, capsys):
    tool(tmp_path, "ibstat", read(IBSTAT_DOWN))
    code, result = run_main({"check_ib_ports": True, "expected_ib_ports": 1, "min_ib_rate_gbps": 400,
                             "fail_on_unhealthy": True, "command_timeout": 0, "_ansible_check_mode": True},
                            monkeypatch, capsys, tmp_path)
    assert code == 1 and result["failed"] is True and result["changed"] is False
    assert result["msg"].startswith("interconnect: 1 failed check(s): [ib_port_state] port mlx5_10/1 is Down/Polling")
    assert result["ib_ports"][0]["state"] == "Down"


def test_collective_argv_and_environment_reach_the_benchmark(tmp_path, monkeypatch, capsys):
    log = tmp_path / "argv.log"
    script = tmp_path / "all_reduce_perf"
    (tmp_path / "out.txt").write_text(read(RCCL_MI350X))
    script.write_text("#!/bin/sh\necho \"$@ ifname=$NCCL_SOCKET_IFNAME\" > '%s'\ncat '%s'\n" % (log, tmp_path / "out.txt"))
    script.chmod(0o755)
    code, result = run_main({"collective_command": ["all_reduce_perf", "-g", "8", "-c", "1"],
                             "collective_environment": {"NCCL_SOCKET_IFNAME": "eth1"}, "min_busbw_gbps": 300,
                             "command_timeout": 0}, monkeypatch, capsys, tmp_path)
    assert code == 0 and result["healthy"] is True and result["collective"]["busbw_gbps_at_max"] == 360.97
    assert log.read_text().strip() == "-g 8 -c 1 ifname=eth1"


def test_sysfs_ports_are_read_from_the_class_directory(tmp_path, monkeypatch):
    port = tmp_path / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    for name, text in {"state": "4: ACTIVE\n", "phys_state": "5: LinkUp\n", "rate": "400 Gb/sec (4X NDR)\n",
                       "link_layer": "InfiniBand\n"}.items():
        (port / name).write_text(text)
    monkeypatch.setattr(interconnect_probe, "_SYSFS_IB", str(tmp_path))
    assert interconnect_probe.sysfs_ports() == [("mlx5_0", 1, {"state": "4: ACTIVE\n", "phys_state": "5: LinkUp\n",
                                                               "rate": "400 Gb/sec (4X NDR)\n", "link_layer": "InfiniBand\n"})]
