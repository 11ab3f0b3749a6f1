# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_gpu_probe.probe with injected which/run: the amd-smi path and the never-raise guarantee.

The amd-smi static data comes from the real MI350X capture (text form -> JSON shape); the
metric/version/topology/process JSON use key names learned from AMD docs (no capture).
"""

from __future__ import annotations

import json

from ansible_collections.gpufleet.serving.plugins.module_utils import _gpu_probe
from ansible_collections.gpufleet.serving.plugins.module_utils._amd_smi import parse_amd_smi_static_text
from gpu_captures import AMD_STATIC_MI350X, ROCM_MI100, read

PARAMS = {"vendor": "auto", "command_timeout": 0}


def fake(tools, answers):
    calls = []

    def which(name):
        return "/opt/rocm/bin/%s" % name if name in tools else None

    def run(argv):
        calls.append(argv)
        key = " ".join([argv[0].rsplit("/", 1)[-1]] + argv[1:])
        return answers.get(key, (127, "", "no fake answer for %s" % key))

    return which, run, calls


def mi350x_static(gpus=8):
    base = parse_amd_smi_static_text(read(AMD_STATIC_MI350X))[0]
    entries = []
    for index in range(gpus):
        entry = json.loads(json.dumps(base))
        entry["gpu"] = index
        entry["bus"]["bdf"] = "0000:%02x:00.0" % (5 + 16 * index)
        entry["vram"] = {"type": "HBM3E", "size": {"value": 294896, "unit": "MB"}}
        entries.append(entry)
    return json.dumps({"gpu_data": entries})


def amd_answers(gpus=8, link="XGMI", uncorrectable=0):
    metric = {"gpu_data": [
        {"gpu": index,
         "mem_usage": {"total_vram": {"value": 294896, "unit": "MB"}, "used_vram": {"value": 283, "unit": "MB"}},
         "temperature": {"hotspot": {"value": 40, "unit": "C"}},
         "power": {"socket_power": {"value": 180, "unit": "W"}},
         "pcie": {"width": 16, "speed": {"value": 32, "unit": "GT/s"}},
         "ecc": {"total_correctable_count": 0, "total_uncorrectable_count": uncorrectable if index == 2 else 0}}
        for index in range(gpus)]}
    topology = [
        {"gpu": index, "links": [{"gpu": peer, "link_type": "SELF" if peer == index else link} for peer in range(gpus)]}
        for index in range(gpus)]
    process = [{"gpu": index, "process_list": [{"process_info": "No running processes detected"}]}
               for index in range(gpus)]
    version = [{"tool": "AMDSMI Tool", "version": "26.0.0", "rocm_version": "7.0.0", "amdgpu_version": "6.14.14"}]
    return {
        "amd-smi static --json": (0, mi350x_static(gpus), ""),
        "amd-smi metric --json": (0, json.dumps(metric), ""),
        "amd-smi version --json": (0, json.dumps(version), ""),
        "amd-smi topology --json": (0, json.dumps(topology), ""),
        "amd-smi process --json": (0, json.dumps(process), ""),
    }


def test_amd_smi_healthy_eight_gpus():
    which, run, calls = fake({"amd-smi", "rocm-smi"}, amd_answers())
    params = dict(PARAMS, expected_gpu_count=8, expected_link_type="xgmi", min_memory_mib=262144,
                  min_driver_version="6.10")
    result = _gpu_probe.probe(params, which, run)
    assert result["problems"] == []
    assert result["healthy"] is True and result["changed"] is False
    assert (result["vendor"], result["tool"], result["gpu_count"]) == ("amd", "amd-smi", 8)
    assert (result["driver_version"], result["rocm_version"]) == ("6.18.3", "7.0.0")
    gpu = result["gpus"][7]
    assert gpu["name"] == "AMD Instinct MI350X"
    assert gpu["memory_total_mib"] == 294896 and gpu["memory_used_mib"] == 283
    assert gpu["pcie"] == {"current_gen": 5, "max_gen": 5, "current_width": 16, "max_width": 16}
    assert gpu["processes"] == []
    assert gpu["nvlinks"] is None and gpu["fabric"]["state"] is None
    assert result["topology"]["gpu_links"]["GPU0"]["GPU7"] == "XGMI"
    assert [call[1] for call in calls] == ["static", "metric", "version", "topology", "process"]


def test_amd_smi_uncorrectable_and_pcie_link():
    which, run, _calls = fake({"amd-smi"}, amd_answers(uncorrectable=4, link="PCIE"))
    result = _gpu_probe.probe(dict(PARAMS, expected_link_type="XGMI"), which, run)
    critical = [(item["code"], item["gpu"]) for item in result["problems"] if item["severity"] == "critical"]
    assert ("ecc_uncorrectable", 2) in critical
    assert sum(1 for code, _gpu in critical if code == "link_type_mismatch") == 8


def test_amd_smi_fails():
    message = "ERROR:root:Unable to detect any GPU devices, check amdgpu version and module status (sudo modprobe amdgpu)"
    which, run, _calls = fake({"amd-smi"}, {"amd-smi static --json": (255, "", message)})
    result = _gpu_probe.probe(PARAMS, which, run)
    assert result["healthy"] is False
    assert [item["code"] for item in result["problems"]] == ["no_gpus"]
    assert message in result["problems"][0]["message"]


def test_amd_smi_auxiliary_failures_are_warnings():
    answers = amd_answers(gpus=2)
    answers["amd-smi metric --json"] = (1, "", "metric: permission denied")
    del answers["amd-smi process --json"]
    which, run, _calls = fake({"amd-smi"}, answers)
    result = _gpu_probe.probe(PARAMS, which, run)
    assert result["healthy"] is True
    assert [(item["severity"], item["code"]) for item in result["problems"]] == [("warning", "tool_failed")] * 2
    assert result["gpus"][0]["memory_used_mib"] is None  # metric failed: unknown
    assert result["gpus"][0]["processes"] is None


def test_vendor_amd_prefers_amd_smi_and_auto_prefers_nvidia():
    which, run, calls = fake({"amd-smi", "rocm-smi", "nvidia-smi"}, amd_answers(gpus=1))
    _gpu_probe.probe(dict(PARAMS, vendor="amd"), which, run)
    assert calls[0][0].endswith("/amd-smi")
    which, run, calls = fake({"amd-smi", "nvidia-smi"}, {})
    result = _gpu_probe.probe(PARAMS, which, run)
    assert calls[0][0].endswith("/nvidia-smi") and result["vendor"] == "nvidia"


def test_internal_error_is_reported_not_raised(monkeypatch):
    def broken(_text):
        raise RuntimeError("boom")

    monkeypatch.setattr(_gpu_probe, "parse_query_xml", broken)
    which, run, _calls = fake({"nvidia-smi"}, {"nvidia-smi -q -x": (0, "<nvidia_smi_log/>", "")})
    result = _gpu_probe.probe(PARAMS, which, run)
    assert result["healthy"] is False and result["changed"] is False
    assert result["problems"][-1]["code"] == "internal_error"
    assert "boom" in result["problems"][-1]["message"]


def test_amd_smi_without_topology_falls_back_to_rocm_smi_links():
    # rocm-smi answers with the real MI100 capture (PCIe links between 4 GPUs).
    answers = amd_answers(gpus=4)
    answers["amd-smi topology --json"] = (2, "", "amd-smi: error: argument command: invalid choice: 'topology'")
    answers["rocm-smi --showallinfo --json"] = (0, read(ROCM_MI100), "")
    which, run, calls = fake({"amd-smi", "rocm-smi"}, answers)
    result = _gpu_probe.probe(dict(PARAMS, expected_link_type="PCIE"), which, run)
    assert result["problems"] == []
    assert result["topology"]["source"] == "rocm-smi --showallinfo --json"
    assert result["topology"]["gpu_links"]["GPU0"]["GPU3"] == "PCIE"
    assert result["topology"]["affinity"]["GPU2"]["numa_affinity"] == "1"
    assert calls[4][0].endswith("/rocm-smi")


def test_amd_smi_without_topology_and_without_rocm_smi():
    answers = amd_answers(gpus=2)
    answers["amd-smi topology --json"] = (2, "", "amd-smi: error: argument command: invalid choice: 'topology'")
    which, run, _calls = fake({"amd-smi"}, answers)
    result = _gpu_probe.probe(dict(PARAMS, expected_link_type="XGMI"), which, run)
    assert [(item["severity"], item["code"]) for item in result["problems"]] == [
        ("warning", "tool_failed"), ("critical", "link_type_mismatch")]
    assert "invalid choice: 'topology'" in result["problems"][0]["message"]
