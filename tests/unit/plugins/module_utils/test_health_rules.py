# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Problem decisions (_gpu_health.evaluate) on facts parsed from the real captures."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.serving.plugins.module_utils._gpu_health import (
    compare_versions,
    evaluate,
    is_healthy,
    summary_message,
)
from ansible_collections.gpufleet.serving.plugins.module_utils._nvidia_smi import (
    parse_nvlink_status,
    parse_query_xml,
    parse_topo_matrix,
)
from gpu_captures import A100_XML, NVLINK_GB200, TOPO_DELLA, TOPO_H100, a100_xml, read, replace_once


def facts_from(xml_text, topo_text=None):
    parsed = parse_query_xml(xml_text)
    topology = {"available": False, "gpu_links": {}}
    if topo_text is not None:
        topology = parse_topo_matrix(topo_text)
        topology["available"] = topology["error"] is None
    return {
        "gpu_count": len(parsed["gpus"]),
        "attached_gpus": parsed["attached_gpus"],
        "driver_version": parsed["driver_version"],
        "gpus": parsed["gpus"],
        "topology": topology,
    }


def codes(problems, severity=None):
    return sorted(item["code"] for item in problems if severity is None or item["severity"] == severity)


def test_real_a100_capture_as_published():
    problems = evaluate(facts_from(read(A100_XML)))
    # attached_gpus=4 but one <gpu> record: critical; MIG enabled: warning.
    assert codes(problems, "critical") == ["gpu_records_missing"]
    assert codes(problems, "warning") == ["mig_enabled"]
    assert not is_healthy(problems)
    mig = [item for item in problems if item["code"] == "mig_enabled"][0]
    assert mig["gpu"] == 0 and "4 MIG device(s)" in mig["message"]


def test_clean_variant_is_healthy():
    problems = evaluate(facts_from(a100_xml(mig=False)))
    assert problems == []
    assert is_healthy(problems)


def test_volatile_uncorrectable_is_critical():
    text = a100_xml(mig=False)
    at = text.index("<volatile>")
    text = text[:at] + replace_once(text[at:], "<dram_uncorrectable>0</dram_uncorrectable>",
                                    "<dram_uncorrectable>1</dram_uncorrectable>")
    problems = evaluate(facts_from(text))
    assert [(item["severity"], item["code"], item["gpu"]) for item in problems] == [
        ("critical", "ecc_uncorrectable", 0)]


def test_aggregate_only_uncorrectable_is_a_warning():
    text = a100_xml(mig=False)
    at = text.index("<aggregate>")
    text = text[:at] + replace_once(text[at:], "<dram_uncorrectable>0</dram_uncorrectable>",
                                    "<dram_uncorrectable>5</dram_uncorrectable>")
    problems = evaluate(facts_from(text))
    assert [(item["severity"], item["code"]) for item in problems] == [("warning", "ecc_uncorrectable")]
    assert is_healthy(problems)


@pytest.mark.parametrize(
    "pending, failure, expected",
    [("Yes", "No", ["row_remap_pending"]), ("No", "Yes", ["row_remap_failure"]), ("No", "No", [])],
)
def test_row_remap(pending, failure, expected):
    text = replace_once(
        a100_xml(mig=False),
        "<remapped_rows>N/A</remapped_rows>",
        "<remapped_rows><remapped_row_corr>0</remapped_row_corr><remapped_row_unc>0</remapped_row_unc>"
        "<remapped_row_pending>%s</remapped_row_pending><remapped_row_failure>%s</remapped_row_failure>"
        "</remapped_rows>" % (pending, failure),
    )
    assert codes(evaluate(facts_from(text)), "critical") == expected


def test_retired_pages_pending():
    text = replace_once(a100_xml(mig=False), "<pending_retirement>N/A</pending_retirement>",
                        "<pending_retirement>Yes</pending_retirement>")
    assert codes(evaluate(facts_from(text))) == ["retired_pages_pending"]


def test_pcie_width_degraded_is_a_warning_gen_drop_is_not():
    text = replace_once(a100_xml(mig=False), "<current_link_width>16x</current_link_width>",
                        "<current_link_width>8x</current_link_width>")
    text = replace_once(text, "<current_link_gen>4</current_link_gen>", "<current_link_gen>1</current_link_gen>")
    problems = evaluate(facts_from(text))
    assert [(item["severity"], item["code"]) for item in problems] == [("warning", "pcie_link_degraded")]
    assert "x8" in problems[0]["message"] and "x16" in problems[0]["message"]

    idle = replace_once(a100_xml(mig=False), "<current_link_gen>4</current_link_gen>",
                        "<current_link_gen>1</current_link_gen>")
    assert evaluate(facts_from(idle)) == []


def test_processes_are_a_warning():
    text = replace_once(
        a100_xml(mig=False),
        "<processes />",
        "<processes><process_info><pid>77</pid><type>C</type><process_name>vllm</process_name>"
        "<used_memory>70000 MiB</used_memory></process_info></processes>",
    )
    problems = evaluate(facts_from(text))
    assert codes(problems) == ["gpu_in_use"]
    assert "vllm (pid 77)" in problems[0]["message"]


def _fabric(text, state, status):
    return replace_once(text, "<state>N/A</state>\n            <status>N/A</status>",
                        "<state>%s</state><status>%s</status>" % (state, status))


def test_fabric_required_but_unknown_fails_closed():
    problems = evaluate(facts_from(a100_xml(mig=False)), {"require_fabric_completed": True})
    assert codes(problems, "critical") == ["fabric_not_completed"]
    assert "state unknown, status unknown" in problems[0]["message"]


def test_fabric_required_and_completed():
    text = _fabric(a100_xml(mig=False), "Completed", "Success")
    assert evaluate(facts_from(text), {"require_fabric_completed": True}) == []


def test_fabric_in_progress():
    text = _fabric(a100_xml(mig=False), "In Progress", "N/A")
    assert codes(evaluate(facts_from(text)), "warning") == ["fabric_not_completed"]
    assert codes(evaluate(facts_from(text), {"require_fabric_completed": True}), "critical") == [
        "fabric_not_completed"]


def test_fabric_completed_with_error_status_is_critical_even_unrequired():
    text = _fabric(a100_xml(mig=False), "Completed", "Insufficient Resources")
    problems = evaluate(facts_from(text))
    assert codes(problems, "critical") == ["fabric_not_completed"]
    assert "Insufficient Resources" in problems[0]["message"]


def test_gpu_count_and_memory_and_driver_expectations():
    facts = facts_from(a100_xml(gpus=2, mig=False))
    assert evaluate(facts, {"expected_gpu_count": 2, "min_memory_mib": 81920, "min_driver_version": "535.54.03"}) == []
    problems = evaluate(facts, {"expected_gpu_count": 8, "min_memory_mib": 100000, "min_driver_version": "570.86"})
    assert codes(problems) == ["driver_below_minimum", "gpu_count_mismatch", "memory_below_minimum",
                               "memory_below_minimum"]
    assert {item["gpu"] for item in problems if item["code"] == "memory_below_minimum"} == {0, 1}


def test_driver_version_unknown_fails_closed():
    facts = facts_from(a100_xml(mig=False))
    facts["driver_version"] = None
    problems = evaluate(facts, {"min_driver_version": "535"})
    assert codes(problems, "critical") == ["driver_below_minimum"]


def test_link_type_on_h100_topology():
    facts = facts_from(a100_xml(gpus=4, mig=False), read(TOPO_H100))
    assert evaluate(facts, {"expected_link_type": "NV6"}) == []
    problems = evaluate(facts, {"expected_link_type": "NV18"})
    assert codes(problems) == ["link_type_mismatch"] * 4
    assert problems[0]["gpu"] == 0 and "GPU1=NV6" in problems[0]["message"]


def test_link_type_on_pcie_topology_and_unknown_topology():
    facts = facts_from(a100_xml(gpus=2, mig=False), read(TOPO_DELLA))
    problems = evaluate(facts, {"expected_link_type": "nv12"})
    assert [(item["gpu"], item["message"]) for item in problems] == [
        (0, "links to GPU1=SYS are not nv12"), (1, "links to GPU0=SYS are not nv12")]
    no_topo = facts_from(a100_xml(gpus=2, mig=False))
    problems = evaluate(no_topo, {"expected_link_type": "NV12"})
    assert codes(problems, "critical") == ["link_type_mismatch"] and problems[0]["gpu"] is None


def _with_links(facts, nvlink_text):
    parsed = parse_nvlink_status(nvlink_text)
    for gpu in facts["gpus"]:
        entry = parsed["gpus"].get(gpu["index"])
        gpu["nvlinks"] = entry["links"] if entry else None
    return facts


def test_nvlink_gb200_all_up():
    facts = _with_links(facts_from(a100_xml(gpus=2, mig=False)), read(NVLINK_GB200))
    assert evaluate(facts) == []


def test_nvlink_one_link_down_is_critical():
    text = replace_once(read(NVLINK_GB200), "Link 7: 53.125 GB/s", "Link 7: <inactive>")
    facts = _with_links(facts_from(a100_xml(gpus=2, mig=False)), text)
    problems = evaluate(facts)
    assert [(item["severity"], item["code"], item["gpu"]) for item in problems] == [("critical", "nvlink_down", 0)]
    assert "17 of 18" in problems[0]["message"]


def test_all_links_inactive_without_nvlink_expectation_is_a_warning():
    text = read(NVLINK_GB200).replace("53.125 GB/s", "<inactive>")
    facts = _with_links(facts_from(a100_xml(gpus=2, mig=False)), text)
    assert {item["severity"] for item in evaluate(facts)} == {"warning"}
    facts["topology"] = {"available": True, "gpu_links": {"GPU0": {"GPU1": "NV18"}, "GPU1": {"GPU0": "NV18"}}}
    assert codes(evaluate(facts, {"expected_link_type": "NV18"}), "critical") == ["nvlink_down", "nvlink_down"]


@pytest.mark.parametrize(
    "left, right, result",
    [("535.54.03", "535.54.3", 0), ("570.86.15", "570.124.06", -1), ("580", "575.57.08", 1),
     ("6.18.3", "6.10.5", 1), (None, "1", None), ("unknown", "1", None)],
)
def test_compare_versions(left, right, result):
    assert compare_versions(left, right) == result


def test_summary_message_names_critical_problems():
    problems = evaluate(facts_from(read(A100_XML)))
    message = summary_message(problems)
    assert "1 critical problem(s)" in message
    assert "[gpu_records_missing]" in message
    assert "mig_enabled" not in message
