# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""nvidia-smi parsers on the real captures in tests/fixtures and variants derived from them."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.serving.plugins.module_utils._nvidia_smi import (
    clean,
    parse_nvlink_status,
    parse_query_xml,
    parse_topo_matrix,
    split_xml_output,
    to_number,
)
from gpu_captures import (
    A100_XML,
    BLACKWELL_590_XML,
    DRIVER_ERROR,
    DRIVER_NOT_LOADED,
    NVLINK_GB200,
    TOPO_DELLA,
    TOPO_H100,
    a100_xml,
    exists,
    read,
    replace_once,
)

# ---------------------------------------------------------------- nvidia-smi -q -x (A100)


def test_a100_capture_header_fields():
    parsed = parse_query_xml(read(A100_XML))
    assert parsed["error"] is None
    assert parsed["messages"] == []
    assert parsed["driver_version"] == "535.54.03"
    assert parsed["cuda_version"] == "12.2"
    # The publisher kept one <gpu> of four: reported as such, not papered over.
    assert parsed["attached_gpus"] == 4
    assert len(parsed["gpus"]) == 1


def test_a100_capture_gpu_record():
    gpu = parse_query_xml(read(A100_XML))["gpus"][0]
    assert gpu["index"] == 0
    assert gpu["name"] == "NVIDIA A100-SXM4-80GB"
    assert gpu["uuid"] == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert gpu["pci_bus_id"] == "00000000:01:00.0"
    assert gpu["memory_total_mib"] == 81920
    assert gpu["memory_used_mib"] == 50
    assert gpu["persistence_mode"] == "disabled"
    assert gpu["temperature_c"] == 27.0
    assert gpu["power_draw_w"] == pytest.approx(67.03)
    assert gpu["pcie"] == {"current_gen": 4, "max_gen": 4, "current_width": 16, "max_width": 16}
    assert gpu["mig"] == {"current": "enabled", "pending": "enabled", "devices": 4}
    assert gpu["processes"] == []


def test_a100_capture_ecc_and_memory_repair():
    gpu = parse_query_xml(read(A100_XML))["gpus"][0]
    assert gpu["ecc"] == {
        "mode": "enabled",
        "volatile_uncorrectable": 0,
        "aggregate_uncorrectable": 0,
        "volatile_correctable": 0,
        "aggregate_correctable": 0,
    }
    # retired_pages counts are N/A and <remapped_rows> is the text N/A in this capture:
    # unknown, not zero and not "no".
    assert gpu["retired_pages"] == {"single_bit": None, "double_bit": None, "pending": None}
    assert gpu["row_remap"] == {"correctable": None, "uncorrectable": None, "pending": None, "failure": None}


def test_a100_capture_has_no_fabric_or_nvlink_data():
    gpu = parse_query_xml(read(A100_XML))["gpus"][0]
    assert gpu["fabric"] == {"state": None, "status": None, "clique_id": None, "cluster_uuid": None, "health": None}
    assert gpu["nvlinks"] is None
    assert gpu["nvlink_source"] is None


def test_injected_volatile_uncorrectable_count():
    text = read(A100_XML)
    at = text.index("<volatile>")
    head, tail = text[:at], text[at:]
    tail = replace_once(tail, "<dram_uncorrectable>0</dram_uncorrectable>", "<dram_uncorrectable>3</dram_uncorrectable>")
    gpu = parse_query_xml(head + tail)["gpus"][0]
    assert gpu["ecc"]["volatile_uncorrectable"] == 3
    assert gpu["ecc"]["aggregate_uncorrectable"] == 0


def test_newer_driver_split_sram_counters_are_summed():
    # Driver 550+ splits sram_uncorrectable into _parity and _secded (learned from docs).
    text = read(A100_XML)
    at = text.index("<aggregate>")
    tail = replace_once(
        text[at:],
        "<sram_uncorrectable>0</sram_uncorrectable>",
        "<sram_uncorrectable_parity>1</sram_uncorrectable_parity>"
        "<sram_uncorrectable_secded>2</sram_uncorrectable_secded>",
    )
    gpu = parse_query_xml(text[:at] + tail)["gpus"][0]
    assert gpu["ecc"]["aggregate_uncorrectable"] == 3


def test_row_remap_block_learned_from_docs():
    text = replace_once(
        read(A100_XML),
        "<remapped_rows>N/A</remapped_rows>",
        "<remapped_rows><remapped_row_corr>0</remapped_row_corr><remapped_row_unc>2</remapped_row_unc>"
        "<remapped_row_pending>Yes</remapped_row_pending><remapped_row_failure>No</remapped_row_failure>"
        "</remapped_rows>",
    )
    gpu = parse_query_xml(text)["gpus"][0]
    assert gpu["row_remap"] == {"correctable": 0, "uncorrectable": 2, "pending": True, "failure": False}


def test_retired_pages_pending():
    text = replace_once(read(A100_XML), "<pending_retirement>N/A</pending_retirement>",
                        "<pending_retirement>Yes</pending_retirement>")
    text = replace_once(text, "<retired_count>N/A</retired_count>", "<retired_count>2</retired_count>")
    gpu = parse_query_xml(text)["gpus"][0]
    assert gpu["retired_pages"] == {"single_bit": 2, "double_bit": None, "pending": True}


def test_blackwell_fabric_block_learned_from_docs():
    text = replace_once(
        read(A100_XML),
        "<state>N/A</state>\n            <status>N/A</status>",
        "<state>Completed</state><status>Success</status><cliqueId>32766</cliqueId>"
        "<clusterUuid>dc6e40c4-d722-4357-9ba6-5291dd461278</clusterUuid>"
        "<health><bandwidth>Full</bandwidth><summary>Healthy</summary></health>",
    )
    fabric = parse_query_xml(text)["gpus"][0]["fabric"]
    assert fabric == {
        "state": "Completed",
        "status": "Success",
        "clique_id": "32766",
        "cluster_uuid": "dc6e40c4-d722-4357-9ba6-5291dd461278",
        "health": {"bandwidth": "Full", "summary": "Healthy"},
    }


def test_processes_block():
    text = replace_once(
        read(A100_XML),
        "<processes />",
        "<processes><process_info><gpu_instance_id>3</gpu_instance_id><compute_instance_id>0</compute_instance_id>"
        "<pid>4242</pid><type>C</type><process_name>python3</process_name><used_memory>1024 MiB</used_memory>"
        "</process_info></processes>",
    )
    assert parse_query_xml(text)["gpus"][0]["processes"] == [
        {"pid": 4242, "type": "C", "name": "python3", "used_memory_mib": 1024,
         "gpu_instance_id": 3, "compute_instance_id": 0}
    ]


def test_multi_gpu_variant_keeps_order_and_indices():
    parsed = parse_query_xml(a100_xml(gpus=8))
    assert parsed["attached_gpus"] == 8
    assert [gpu["index"] for gpu in parsed["gpus"]] == list(range(8))
    assert parsed["gpus"][7]["pci_bus_id"] == "00000000:08:00.0"


def test_driver_not_loaded_capture_is_an_error_with_the_tools_words():
    parsed = parse_query_xml(read(DRIVER_ERROR))
    assert parsed["error"] == "output contains no nvidia_smi_log XML document"
    assert DRIVER_NOT_LOADED in parsed["messages"]
    assert parsed["gpus"] == []


def test_device_handle_error_next_to_xml_is_kept_as_a_message():
    message = "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error"
    parsed = parse_query_xml(message + "\n" + a100_xml())
    assert parsed["error"] is None
    assert parsed["messages"] == [message]
    assert len(parsed["gpus"]) == 1


@pytest.mark.parametrize("text", ["", "garbage", "<nvidia_smi_log><gpu>", "<other/>", None])
def test_non_xml_output_never_raises(text):
    parsed = parse_query_xml(text)
    assert parsed["error"] is not None or text == "<other/>"
    assert parsed["gpus"] == []


def test_truncated_xml_capture_is_an_error():
    text = read(A100_XML)
    parsed = parse_query_xml(text[: len(text) // 2])
    assert "not well-formed" in parsed["error"]


def test_split_xml_output_without_xml():
    assert split_xml_output("No devices were found\n") == (None, ["No devices were found"])


@pytest.mark.parametrize(
    "value, expected",
    [("81920 MiB", 81920.0), ("16x", 16.0), ("N/A", None), ("[Not Supported]", None), ("Unknown Error", None), (None, None)],
)
def test_to_number(value, expected):
    assert to_number(value) == expected


def test_clean_treats_gpu_is_lost_as_unknown():
    assert clean("GPU is lost") is None
    assert clean(" Enabled ") == "Enabled"


# ---------------------------------------------------------------- nvidia-smi nvlink -s (GB200)


def test_gb200_nvlink_excerpt():
    parsed = parse_nvlink_status(read(NVLINK_GB200))
    assert parsed["truncated"] is True
    assert sorted(parsed["gpus"]) == [0, 1]
    gpu0 = parsed["gpus"][0]
    assert gpu0["name"] == "NVIDIA GB200"
    assert gpu0["uuid"] == "GPU-d1b93026-6d5b-03bd-3a71-f85b47a61bde"
    assert len(gpu0["links"]) == 18
    assert all(link["state"] == "up" and link["speed_gbps"] == 53.125 for link in gpu0["links"])
    # The poster cut GPU 1 after two links; the rest are simply not listed (unknown).
    assert [link["link"] for link in parsed["gpus"][1]["links"]] == [0, 1]


def test_inactive_link_is_down():
    text = replace_once(read(NVLINK_GB200), "Link 3: 53.125 GB/s", "Link 3: <inactive>")
    links = parse_nvlink_status(text)["gpus"][0]["links"]
    assert links[3] == {"link": 3, "state": "down", "speed_gbps": None}
    assert sum(1 for link in links if link["state"] == "up") == 17


def test_unrecognised_link_text_is_unknown():
    text = replace_once(read(NVLINK_GB200), "Link 5: 53.125 GB/s", "Link 5: some future status")
    assert parse_nvlink_status(text)["gpus"][0]["links"][5]["state"] == "unknown"


def test_nvlink_empty_output():
    assert parse_nvlink_status("") == {"gpus": {}, "truncated": False}


# ---------------------------------------------------------------- nvidia-smi topo -m


def test_topo_h100_nic_columns_spaces():
    topo = parse_topo_matrix(read(TOPO_H100))
    assert topo["error"] is None
    assert topo["devices"] == ["GPU0", "GPU1", "GPU2", "GPU3", "NIC0", "NIC1", "NIC2", "NIC3"]
    assert topo["gpu_links"]["GPU0"] == {"GPU1": "NV6", "GPU2": "NV6", "GPU3": "NV6"}
    assert topo["matrix"]["GPU2"]["NIC2"] == "PIX"
    assert topo["matrix"]["NIC3"]["NIC3"] == "X"
    assert topo["affinity"]["GPU0"] == {"cpu_affinity": "6,14,22,30", "numa_affinity": "3", "gpu_numa_id": None}
    assert topo["affinity"]["GPU1"]["numa_affinity"] == "1"


def test_topo_h100_truncated_legend_is_reported_not_guessed():
    topo = parse_topo_matrix(read(TOPO_H100))
    assert topo["nics"] == {"NIC0": None, "NIC1": None, "NIC2": None, "NIC3": None}
    assert any("NIC legend" in warning for warning in topo["warnings"])
    assert topo["legend"]["PHB"].startswith("Connection traversing PCIe as well as a PCIe Host Bridge")
    assert "PIX" not in topo["legend"]  # cut off in the capture


def test_topo_with_nic_legend_appended():
    # The NIC legend layout ("NIC0: mlx5_0") was learned from docs; appended to the real matrix.
    text = read(TOPO_H100) + "  PXB  = x\n\nNIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_1\n  NIC2: mlx5_2\n  NIC3: mlx5_3\n"
    topo = parse_topo_matrix(text)
    assert topo["nics"] == {"NIC0": "mlx5_0", "NIC1": "mlx5_1", "NIC2": "mlx5_2", "NIC3": "mlx5_3"}
    assert topo["warnings"] == []


def test_topo_della_old_style_mlx5_columns_tabs():
    topo = parse_topo_matrix(read(TOPO_DELLA))
    assert topo["error"] is None
    assert topo["devices"] == ["GPU0", "GPU1", "mlx5_0", "mlx5_1"]
    assert topo["nics"] == {"mlx5_0": "mlx5_0", "mlx5_1": "mlx5_1"}
    assert topo["gpu_links"] == {"GPU0": {"GPU1": "SYS"}, "GPU1": {"GPU0": "SYS"}}
    assert topo["matrix"]["mlx5_0"] == {"GPU0": "NODE", "GPU1": "SYS", "mlx5_0": "X", "mlx5_1": "SYS"}
    # No GPU NUMA ID column in this layout: unknown.
    assert topo["affinity"]["GPU1"] == {"cpu_affinity": "64-127", "numa_affinity": "1", "gpu_numa_id": None}
    assert topo["legend"]["NV#"] == "Connection traversing a bonded set of # NVLinks"
    assert topo["warnings"] == []


def test_topo_tabs_replaced_by_spaces_parses_the_same():
    spaced = read(TOPO_DELLA).replace("\t", "    ")
    topo = parse_topo_matrix(spaced)
    assert topo["gpu_links"] == {"GPU0": {"GPU1": "SYS"}, "GPU1": {"GPU0": "SYS"}}
    assert topo["affinity"]["GPU0"]["cpu_affinity"] == "0-63"


@pytest.mark.parametrize("cut", [1, 2, 3, 5, 9])
def test_topo_cut_anywhere_never_raises(cut):
    lines = read(TOPO_H100).splitlines()[:cut]
    topo = parse_topo_matrix("\n".join(lines))
    assert topo["error"] is None
    assert set(topo["devices"]) >= {"GPU0", "NIC3"}


def test_topo_without_matrix():
    assert parse_topo_matrix(read(DRIVER_ERROR))["error"] is not None


# ---------------------------------------------------------------- nvidia-smi -q -x (driver 590, Blackwell)

needs_blackwell = pytest.mark.skipif(not exists(BLACKWELL_590_XML), reason="Blackwell 590 capture not present")


@needs_blackwell
def test_blackwell_590_capture():
    parsed = parse_query_xml(read(BLACKWELL_590_XML))
    assert parsed["error"] is None
    assert parsed["driver_version"] == "590.44.01"
    assert parsed["cuda_version"] == "13.1"
    gpu = parsed["gpus"][0]
    assert gpu["memory_total_mib"] == 97887
    assert gpu["persistence_mode"] == "enabled"
    assert gpu["power_draw_w"] == pytest.approx(3.97)  # average_power_draw on 590
    assert gpu["pcie"] == {"current_gen": 1, "max_gen": 4, "current_width": 16, "max_width": 16}
    assert gpu["ecc"]["mode"] == "disabled"
    assert gpu["ecc"]["volatile_uncorrectable"] is None  # all N/A with ECC off
    assert gpu["row_remap"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    assert gpu["mig"] == {"current": None, "pending": None, "devices": 0}
    assert gpu["fabric"]["state"] is None
    assert gpu["fabric"]["health"]["summary"] is None
    assert gpu["processes"][0]["pid"] == 116860
    assert gpu["processes"][0]["used_memory_mib"] == 65710
    assert gpu["processes"][0]["gpu_instance_id"] is None


@needs_blackwell
def test_blackwell_590_capture_fabric_completed_variant():
    text = replace_once(read(BLACKWELL_590_XML), "<state>N/A</state>", "<state>Completed</state>")
    text = replace_once(text, "<status>N/A</status>", "<status>Success</status>")
    text = replace_once(text, "<summary>N/A</summary>", "<summary>Healthy</summary>")
    fabric = parse_query_xml(text)["gpus"][0]["fabric"]
    assert (fabric["state"], fabric["status"], fabric["health"]["summary"]) == ("Completed", "Success", "Healthy")
