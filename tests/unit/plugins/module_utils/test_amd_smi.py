# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""amd-smi / rocm-smi parsers.

rocm-smi JSON and amd-smi static text are real captures.  No amd-smi ``--json`` capture
exists: those inputs are built from the real static capture (text -> the lower-cased JSON
shape) or are small objects using key names learned from AMD's docs and public code.
"""

from __future__ import annotations

import json

import pytest
from ansible_collections.gpufleet.serving.plugins.module_utils._amd_smi import (
    load_json,
    parse_amd_smi_metric,
    parse_amd_smi_process,
    parse_amd_smi_static,
    parse_amd_smi_static_text,
    parse_amd_smi_topology,
    parse_amd_smi_version,
    parse_rocm_smi_json,
    pcie_gen_from_rate,
    to_mib,
)
from gpu_captures import AMD_STATIC_MI350X, ROCM_MI100, read

# ---------------------------------------------------------------- amd-smi static (MI350X text capture)


def test_mi350x_static_text_capture():
    parsed = parse_amd_smi_static(read(AMD_STATIC_MI350X))
    assert parsed["error"] is None
    assert len(parsed["gpus"]) == 1  # the excerpt ends inside GPU 0
    gpu = parsed["gpus"][0]
    assert gpu["index"] == 0
    assert gpu["name"] == "AMD Instinct MI350X"
    assert gpu["pci_bus_id"] == "0000:05:00.0"
    assert gpu["driver_version"] == "6.18.3"
    assert gpu["pcie_max_width"] == 16
    assert gpu["pcie_max_gen"] == 5  # 32 GT/s
    # VRAM lines were cut from the excerpt: unknown, not zero.
    assert gpu["memory_total_mib"] is None
    assert gpu["uuid"] is None
    assert gpu["ras"]["poison_schema"] == "ENABLED"
    assert gpu["ras"]["bad_page_threshold"] is None


def test_mi350x_static_as_json_gpu_data_envelope():
    # Same data in the --json shape (lower-cased keys, gpu_data envelope of newer releases).
    entries = parse_amd_smi_static_text(read(AMD_STATIC_MI350X))
    entries[0]["gpu"] = 0
    entries[0]["bus"]["max_pcie_speed"] = {"value": 32, "unit": "GT/s"}
    entries[0]["vram"] = {"type": "HBM3E", "size": {"value": 294896, "unit": "MB"}}
    for document in ({"gpu_data": entries}, entries):
        gpu = parse_amd_smi_static(json.dumps(document))["gpus"][0]
        assert gpu["name"] == "AMD Instinct MI350X"
        assert gpu["pcie_max_gen"] == 5
        assert gpu["memory_total_mib"] == 294896


def test_static_with_warning_banner_before_json():
    text = "WARNING: User is missing the following required groups: render, video\n" + json.dumps(
        [{"gpu": 3, "asic": {"market_name": "AMD Instinct MI355X"}, "bus": {"bdf": "0000:75:00.0"}}]
    )
    gpu = parse_amd_smi_static(text)["gpus"][0]
    assert (gpu["index"], gpu["name"], gpu["pci_bus_id"]) == (3, "AMD Instinct MI355X", "0000:75:00.0")


@pytest.mark.parametrize("text", ["", "ERROR: amdgpu driver not loaded", "{", "[1, 2]", "null"])
def test_static_odd_output_never_raises(text):
    parsed = parse_amd_smi_static(text)
    assert parsed["gpus"] == [] or parsed["error"] is None


# ---------------------------------------------------------------- amd-smi metric / version / topology / process


def test_metric_learned_layout():
    document = {"gpu_data": [{
        "gpu": 0,
        "mem_usage": {"total_vram": {"value": 294896, "unit": "MB"}, "used_vram": {"value": 283, "unit": "MB"}},
        "temperature": {"edge": "N/A", "hotspot": {"value": 41, "unit": "C"}, "mem": {"value": 35, "unit": "C"}},
        "power": {"socket_power": {"value": 214, "unit": "W"}},
        "pcie": {"width": 16, "speed": {"value": 32, "unit": "GT/s"}},
        "ecc": {"total_correctable_count": 0, "total_uncorrectable_count": 2, "total_deferred_count": 0},
    }]}
    gpu = parse_amd_smi_metric(json.dumps(document))["gpus"][0]
    assert gpu == {
        "index": 0, "memory_total_mib": 294896, "memory_used_mib": 283, "temperature_c": 41.0,
        "power_draw_w": 214.0, "pcie_current_width": 16, "pcie_current_gen": 5,
        "ecc_uncorrectable": 2, "ecc_correctable": 0, "ecc_deferred": 0,
    }


def test_metric_missing_sections_are_unknown():
    gpu = parse_amd_smi_metric('[{"gpu": 1}]')["gpus"][1]
    assert all(value is None for key, value in gpu.items() if key != "index")


def test_version():
    text = json.dumps([{"tool": "AMDSMI Tool", "version": "26.2.0+021c61fc", "amdsmi_library_version": "26.2.0",
                        "rocm_version": "7.0.2", "amdgpu_version": "6.16.6", "amd_hsmp_driver_version": "N/A"}])
    assert parse_amd_smi_version(text) == {
        "error": None, "rocm_version": "7.0.2", "amdgpu_version": "6.16.6", "tool_version": "26.2.0+021c61fc"}


def test_topology_links_layout():
    text = json.dumps([
        {"gpu": 0, "bdf": "0000:05:00.0", "links": [
            {"gpu": 0, "link_type": "SELF", "link_status": "ENABLED"},
            {"gpu": 1, "link_type": "XGMI", "link_status": "ENABLED"}]},
        {"gpu": 1, "bdf": "0000:15:00.0", "links": [
            {"gpu": 0, "link_type": "XGMI"}, {"gpu": 1, "link_type": "SELF"}]},
    ])
    assert parse_amd_smi_topology(text)["gpu_links"] == {"GPU0": {"GPU1": "XGMI"}, "GPU1": {"GPU0": "XGMI"}}


def test_topology_older_layout():
    text = json.dumps([{"gpu": 0, "link_type": {"gpu_0": "SELF", "gpu_1": "PCIE"}}])
    assert parse_amd_smi_topology(text)["gpu_links"] == {"GPU0": {"GPU1": "PCIE"}}


def test_process_list():
    text = json.dumps([
        {"gpu": 0, "process_list": [{"process_info": {"name": "python3", "pid": 4242,
                                                      "vram_mem": {"value": 1048576, "unit": "B"}}}]},
        {"gpu": 1, "process_list": [{"process_info": "No running processes detected"}]},
    ])
    gpus = parse_amd_smi_process(text)["gpus"]
    assert gpus[0][0]["pid"] == 4242 and gpus[0][0]["used_memory_mib"] == 1
    assert gpus[1] == []


# ---------------------------------------------------------------- rocm-smi (4x MI100 capture)


def test_rocm_smi_mi100_capture():
    parsed = parse_rocm_smi_json(read(ROCM_MI100))
    assert parsed["error"] is None
    assert parsed["driver_version"] == "6.3.6"
    assert [gpu["index"] for gpu in parsed["gpus"]] == [0, 1, 2, 3]
    gpu = parsed["gpus"][0]
    assert gpu["name"] == "Arcturus GL-XL [Instinct MI100]"
    assert gpu["pci_bus_id"] == "0000:83:00.0"
    assert gpu["memory_total_mib"] == 32752  # 34342961152 B
    assert gpu["memory_used_mib"] == 6
    assert gpu["temperature_c"] == 55.0  # junction
    assert gpu["power_draw_w"] == 36.0
    assert (gpu["pcie_current_gen"], gpu["pcie_current_width"]) == (4, 16)
    assert gpu["numa_node"] == "1"
    assert gpu["ecc_uncorrectable"] is None  # not in this capture


def test_rocm_smi_mi100_topology():
    links = parse_rocm_smi_json(read(ROCM_MI100))["gpu_links"]
    assert links["GPU0"] == {"GPU1": "PCIE", "GPU2": "PCIE", "GPU3": "PCIE"}
    assert links["GPU3"]["GPU1"] == "PCIE"


def test_rocm_smi_driver_error_text():
    parsed = parse_rocm_smi_json("ERROR:root:Driver not initialized (amdgpu not found in modules)\n")
    assert parsed["error"].startswith("output is not JSON: ERROR:root:Driver not initialized")
    assert parsed["gpus"] == []


# ---------------------------------------------------------------- helpers


@pytest.mark.parametrize("rate, gen", [(2.5, 1), (16, 4), (32.0, 5), (64, 6), (3.0, None), (None, None)])
def test_pcie_gen_from_rate(rate, gen):
    assert pcie_gen_from_rate(rate) == gen


@pytest.mark.parametrize(
    "value, mib",
    [({"value": 192, "unit": "GB"}, 196608), ({"value": 1024, "unit": "KB"}, 1), ("2048 MB", 2048), ("N/A", None),
     ({"value": 5, "unit": "parsecs"}, None)],
)
def test_to_mib(value, mib):
    assert to_mib(value) == mib


def test_load_json_reports_the_output():
    data, error = load_json("amd-smi: command failed")
    assert data is None and "amd-smi: command failed" in error
