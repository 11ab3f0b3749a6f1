# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The plain nvidia-smi summary table (real 8x H100 capture) and the probe's fallback to it."""

from __future__ import annotations

from ansible_collections.gpufleet.serving.plugins.module_utils._gpu_probe import probe
from ansible_collections.gpufleet.serving.plugins.module_utils._nvidia_smi import parse_summary_table
from gpu_captures import A100_XML, read, replace_once

H100_TABLE = "nvidia-smi/nvidia-smi_table_8xH100-SXM_565.57.01.txt"
BUS_IDS = ["00000000:%s:00.0" % bus for bus in ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")]


def test_h100_table_parses_exactly():
    table = parse_summary_table(read(H100_TABLE))
    assert table["error"] is None
    assert (table["driver_version"], table["cuda_version"]) == ("565.57.01", "12.7")
    assert [g["index"] for g in table["gpus"]] == list(range(8))
    assert {g["name"] for g in table["gpus"]} == {"NVIDIA H100 80GB HBM3"}
    assert [g["pci_bus_id"] for g in table["gpus"]] == BUS_IDS
    assert {(g["memory_used_mib"], g["memory_total_mib"]) for g in table["gpus"]} == {(1, 81559)}
    assert {g["persistence_mode"] for g in table["gpus"]} == {"enabled"}
    assert {g["ecc_volatile_uncorrectable"] for g in table["gpus"]} == {0}
    assert [g["power_draw_w"] for g in table["gpus"]] == [100.0, 82.0, 85.0, 85.0, 84.0, 85.0, 86.0, 75.0]
    assert table["gpus"][0]["temperature_c"] == 30
    assert table["processes"] == []


def test_table_without_header_is_an_error_not_a_guess():
    assert parse_summary_table("No devices were found")["error"] == "output has no 'NVIDIA-SMI ... Driver Version' header"
    assert parse_summary_table("")["gpus"] == []


def test_probe_falls_back_to_the_table_when_the_xml_is_malformed():
    # A driver build printing an unescaped '&' in a text field makes the whole document invalid.
    broken_xml = replace_once(read(A100_XML), "<product_brand>", "<product_brand>R&D ")
    answers = {
        "nvidia-smi -q -x": (0, broken_xml, ""),
        "nvidia-smi": (0, read(H100_TABLE), ""),
    }

    def which(name):
        return "/usr/bin/" + name if name == "nvidia-smi" else None

    def run(argv):
        key = " ".join([argv[0].rsplit("/", 1)[-1]] + argv[1:])
        return answers.get(key, (1, "", "not answered: " + key))

    result = probe({"vendor": "nvidia", "command_timeout": 0, "expected_gpu_count": 8}, which, run)
    assert result["gpu_count"] == 8 and result["driver_version"] == "565.57.01"
    assert result["gpus"][3]["pci_bus_id"] == BUS_IDS[3]
    assert result["gpus"][0]["row_remap"]["pending"] is None  # not in the table: unknown, not guessed
    codes = {(p["code"], p["severity"]) for p in result["problems"]}
    assert ("xml_unparseable", "warning") in codes
    assert result["healthy"] is True
