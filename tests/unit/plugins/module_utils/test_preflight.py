# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The preflight gate's rules on real probe results: gpu_health's probe run against the sandbox's
stand-in GPU tools (which tests/unit/gpusim checks against real captures), per profile and fault."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_space import checkpoint_space
from ansible_collections.gpufleet.serving.plugins.module_utils._gpu_probe import probe
from ansible_collections.gpufleet.serving.plugins.module_utils._preflight import (
    gate_message,
    gpu_checks_deferred,
    gpu_expectations,
    preflight_findings,
)
from ansible_collections.gpufleet.serving.plugins.module_utils._profiles import get_profile

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gpusim"))
from gpusim_helpers import install  # noqa: E402

KIMI = get_profile("model", "kimi-k3.1-pro")
ROOMY_NVME = {"path": "/srv/models", "on_nvme": True, "transport": "nvme", "mount_source": "/dev/md0", "problems": []}


def probe_sim_host(host, hardware):
    """gpu_health's probe with the host's stand-in tools as the only tools on PATH."""
    bin_dir = host.root / "usr" / "bin"

    def which(name):
        path = bin_dir / name
        return str(path) if path.exists() else None

    def run(argv):
        done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=host.env(), check=False)
        return done.returncode, done.stdout, done.stderr

    params = dict(gpu_expectations(hardware), command_timeout=0)
    return probe(params, which, run)


def checks(findings):
    return [f["check"] for f in findings]


@pytest.fixture
def sim(tmp_path):
    def make(profile, *faults):
        host = install(tmp_path / profile, profile, "node-" + profile)
        for fault in faults:
            host.fault(*fault)
        return host
    return make


@pytest.mark.parametrize(("sim_profile", "hardware_name"), [("b300", "b300"), ("mi355x", "mi355x")])
def test_healthy_nodes_pass_their_profile(sim, sim_profile, hardware_name):
    hardware = get_profile("hardware", hardware_name)
    result = probe_sim_host(sim(sim_profile), hardware)
    assert preflight_findings(hardware, KIMI, result, ROOMY_NVME) == []


def test_gb300_tray_passes_because_a_replica_spans_two_trays(sim):
    hardware = get_profile("hardware", "gb300")
    result = probe_sim_host(sim("gb300"), hardware)
    # 4 x ~269 GiB on one tray is less than the checkpoint; two trays are not.
    assert sum(g["memory_total_mib"] for g in result["gpus"]) * 2**20 < KIMI["checkpoint_bytes"]
    assert preflight_findings(hardware, KIMI, result, ROOMY_NVME) == []


@pytest.mark.parametrize(
    ("fault", "expected_check", "expected_text"),
    [
        (("gpu_missing", "--gpu", "3"), "gpu_count_mismatch", "found 7 GPU(s), expected 8"),
        (("row_remap_pending", "--gpu", "5"), "row_remap_pending", "GPU 5"),
        (("ecc_uncorrectable", "--gpu", "2"), "ecc_uncorrectable", "GPU 2"),
        (("nvlink_down", "--gpu", "1", "--link", "4"), "nvlink_down", "GPU 1"),
        (("fabric_in_progress",), "fabric_not_completed", "In Progress"),
        (("driver_not_loaded",), "tool_failed", "couldn't communicate with the NVIDIA driver"),
    ],
)
def test_each_fault_fails_the_gate_naming_it(sim, fault, expected_check, expected_text):
    hardware = get_profile("hardware", "b300")
    findings = preflight_findings(hardware, KIMI, probe_sim_host(sim("b300", fault), hardware), ROOMY_NVME)
    matching = [f for f in findings if f["check"] == expected_check]
    assert matching, checks(findings)
    assert any(expected_text in f["message"] for f in matching), matching


def test_a_consumer_gpu_is_refused_with_the_reason_and_the_alternative(sim):
    hardware = get_profile("hardware", "b300")
    findings = preflight_findings(hardware, KIMI, probe_sim_host(sim("consumer"), hardware), ROOMY_NVME)
    assert findings[0]["check"] == "model_does_not_fit"
    message = findings[0]["message"]
    assert "1 GPU(s) (NVIDIA GeForce RTX 4090) with 25.76 GB / 23.99 GiB of GPU memory per replica" in message
    assert "cannot be loaded here" in message and "about 1.70 TB" in message
    assert "hosted OpenAI-compatible API" in message
    # Every other failed check is reported in the same run, not only the first.
    assert {"gpu_count_mismatch", "gpu_model_mismatch", "memory_below_minimum"} <= set(checks(findings))


def test_the_wrong_vendor_is_named(sim):
    hardware = get_profile("hardware", "b300")
    findings = preflight_findings(hardware, KIMI, probe_sim_host(sim("mi355x"), hardware), ROOMY_NVME)
    vendor = [f for f in findings if f["check"] == "vendor_mismatch"]
    assert vendor and vendor[0]["message"] == "found amd GPU tools, expected nvidia for hardware profile b300"


def test_persistence_and_rocm_floors_come_from_the_profile(sim):
    b300 = get_profile("hardware", "b300")
    result = probe_sim_host(sim("b300"), b300)
    for gpu in result["gpus"][:2]:
        gpu["persistence_mode"] = "disabled"
    findings = preflight_findings(b300, KIMI, result, ROOMY_NVME)
    assert checks(findings) == ["persistence_mode_off"]
    assert findings[0]["message"].startswith("GPU(s) 0, 1: persistence mode disabled, expected enabled")

    mi355x = get_profile("hardware", "mi355x", {"min_rocm_version": "99.0"})
    result = probe_sim_host(sim("mi355x"), mi355x)
    findings = preflight_findings(mi355x, KIMI, result, ROOMY_NVME)
    assert checks(findings) == ["rocm_below_minimum"]
    assert "expected 99.0 or newer" in findings[0]["message"]


def test_a_bare_os_has_its_gpu_checks_deferred_only_when_the_driver_stage_follows(sim):
    b300 = get_profile("hardware", "b300")
    no_driver = probe_sim_host(sim("b300", ("driver_not_loaded",)), b300)
    no_tool = probe(dict(gpu_expectations(b300), command_timeout=0), lambda name: None, None)
    for gpu in (no_driver, no_tool):
        assert gpu_checks_deferred(gpu, driver_pending=True)
        assert not gpu_checks_deferred(gpu, driver_pending=False)
        assert preflight_findings(b300, KIMI, gpu, ROOMY_NVME, driver_pending=True) == []
        assert checks(preflight_findings(b300, KIMI, gpu, ROOMY_NVME))[0] in ("tool_failed", "tool_missing")
    # Storage is judged now either way.
    full = dict(ROOMY_NVME, problems=[{"severity": "critical", "code": "insufficient_space", "message": "free 1 B < required 2 B"}])
    assert checks(preflight_findings(b300, KIMI, no_tool, full, driver_pending=True)) == ["insufficient_space"]


def test_a_driver_that_answers_is_judged_now_even_when_the_driver_stage_follows(sim):
    b300 = get_profile("hardware", "b300")
    gpu = probe_sim_host(sim("b300", ("ecc_uncorrectable", "--gpu", "3")), b300)
    assert not gpu_checks_deferred(gpu, driver_pending=True)
    assert "ecc_uncorrectable" in checks(preflight_findings(b300, KIMI, gpu, ROOMY_NVME, driver_pending=True))
    assert not gpu_checks_deferred(None, driver_pending=True)
    # A failed side query (a warning) on a host whose driver answers defers nothing.
    side_query = dict(gpu, problems=[{"severity": "warning", "code": "tool_failed", "message": "nvidia-smi nvlink -s failed"}])
    assert not gpu_checks_deferred(side_query, driver_pending=True)


def test_storage_problems_and_nvme_requirement():
    hardware = get_profile("hardware", "cpu_sandbox")
    loop = {"path": "/srv/models", "on_nvme": None, "transport": "loop", "mount_source": "/dev/loop0",
            "problems": [{"severity": "critical", "code": "insufficient_space", "message": "free 1 B < required 2 B"},
                         {"severity": "warning", "code": "path_missing", "message": "ignored: a warning"}]}
    findings = preflight_findings(hardware, KIMI, None, loop, require_nvme=True)
    assert checks(findings) == ["insufficient_space", "model_dir_not_on_nvme"]
    assert findings[1]["message"] == ("/srv/models is on /dev/loop0 (transport loop, NVMe unknown), "
                                      "expected an NVMe filesystem for the checkpoint")
    assert checks(preflight_findings(hardware, KIMI, None, loop, require_nvme=False)) == ["insufficient_space"]


class _Statvfs:
    """A filesystem of 3.7796e12 free bytes: what a 3.84 TB ext4 gives root (tools/sandbox)."""
    f_frsize = f_bsize = 4096
    f_blocks = f_bfree = f_bavail = 3_779_600_000_000 // 4096
    f_files = f_ffree = f_favail = 1000
    f_flag = 0


def test_space_plan_problems_are_findings_and_judged_with_deferred_gpu_checks(tmp_path):
    b300 = get_profile("hardware", "b300")
    no_tool = probe(dict(gpu_expectations(b300), command_timeout=0), lambda name: None, None)
    params = {"model_dir": str(tmp_path / "moonshotai--Kimi-K3.1-Pro"), "commit": "", "target_bytes": KIMI["checkpoint_bytes"]}
    roomy = checkpoint_space(params, statvfs=lambda path: _Statvfs())
    assert roomy["healthy"] and preflight_findings(b300, KIMI, no_tool, ROOMY_NVME, driver_pending=True, space_result=roomy) == []
    # Four Kimi checkpoints cannot fit on 3.78 TB: the refusal is a finding even while the GPU checks wait.
    crowded = checkpoint_space(dict(params, target_bytes=4 * KIMI["checkpoint_bytes"]), statvfs=lambda path: _Statvfs())
    findings = preflight_findings(b300, KIMI, no_tool, ROOMY_NVME, driver_pending=True, space_result=crowded)
    assert checks(findings) == ["insufficient_space"]
    assert findings[0]["message"].startswith("not enough space in %s for revision (not pinned yet)" % params["model_dir"])


def test_gate_message_names_the_host_and_every_check():
    text = gate_message("b300-2", [{"check": "a", "message": "found 1, expected 2"}, {"check": "b", "message": "m"}])
    assert text == "b300-2: preflight failed 2 check(s):\n  - a: found 1, expected 2\n  - b: m"
