# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Collective benchmark figures from the real nccl-tests and rccl-tests captures, and the checks."""

from __future__ import annotations

from ansible_collections.gpufleet.serving.plugins.module_utils._collective_perf import (
    collective_problems,
    parse_collective_output,
)
from gpu_captures import read, replace_once

GIB_2NODE = "nccl/nccl-tests_all_gather_perf_2node_16xB200_GKE-A4_gIB_wrapper-output.txt"
RCCL_MI350X = "nccl/rccl-tests_all_reduce_perf_8xMI350X_EXCERPT.txt"
NCCL_FAILURE = "nccl/nccl-tests_all_reduce_perf_2xRTX5090_NCCL_failure.txt"


def test_two_node_capture_behind_a_wrapper():
    result = parse_collective_output(read(GIB_2NODE), "all_gather_perf")
    assert result == {
        "test": "all_gather_perf", "tool": "nccl-tests", "library_version": "NCCL version 2.26.6+cuda12.8",
        "ranks": 16, "hosts": ["nccl-gib-test-0", "nccl-gib-test-1"], "max_bytes": 8589934592,
        "busbw_gbps_at_max": 259.25, "avg_busbw_gbps": 59.3638, "wrong": 0, "rows": 24, "errors": [],
    }
    assert collective_problems(result, 0, min_busbw_gbps=246, expected_ranks=16, scope="multi-node") == []


def test_rccl_capture_with_its_wider_wrong_column():
    result = parse_collective_output(read(RCCL_MI350X), "all_reduce_perf")
    assert (result["tool"], result["max_bytes"], result["busbw_gbps_at_max"], result["avg_busbw_gbps"], result["wrong"]) == (
        "rccl-tests", 8589934592, 360.97, 111.827, 0)


def test_busbw_below_the_profile_minimum_names_both_figures():
    result = parse_collective_output(read(RCCL_MI350X), "all_reduce_perf")
    problems = collective_problems(result, 0, min_busbw_gbps=400)
    assert [(p["check"], p["found"], p["expected"]) for p in problems] == [("collective_busbw", 360.97, ">= 400 GB/s")]
    assert "intra-node all_reduce_perf bus bandwidth 360.97 GB/s at 8589934592 bytes" in problems[0]["message"]


def test_mpirun_tagged_and_srun_labelled_output():
    plain = parse_collective_output(read(GIB_2NODE), "all_gather_perf")
    tagged = "\n".join("[1,0]<stdout>:" + line for line in read(GIB_2NODE).splitlines())
    labelled = "\n".join("0: " + line for line in read(GIB_2NODE).splitlines())
    for text in (tagged, labelled):
        assert parse_collective_output(text, "all_gather_perf") == plain


def test_wrong_values_fail_even_at_full_bandwidth():
    text = replace_once(read(GIB_2NODE), "# Out of bounds values : 0 OK", "# Out of bounds values : 12 FAILED")
    # nccl-tests exits 1 when values were wrong: still a wrong-value problem, not a tool failure.
    for rc in (0, 1):
        problems = collective_problems(parse_collective_output(text, "all_gather_perf"), rc)
        assert [(p["check"], p["found"], p["expected"]) for p in problems] == [("collective_wrong", 12, 0)]


def test_a_warning_in_a_successful_run_is_not_a_failure():
    text = read(RCCL_MI350X) + "host:1:1 [0] NCCL WARN Missing \"iommu=pt\" from kernel command line\n"
    result = parse_collective_output(text, "all_reduce_perf")
    assert result["errors"] and collective_problems(result, 0) == []
    assert [p["check"] for p in collective_problems(result, 1)] == ["collective_failed"]


def test_rows_without_rank_lines_do_not_pass_the_rank_check():
    lines = [line for line in read(RCCL_MI350X).splitlines() if "Rank" not in line]
    problems = collective_problems(parse_collective_output("\n".join(lines), "all_reduce_perf"), 0, expected_ranks=8)
    assert [(p["check"], p["found"]) for p in problems] == [("collective_ranks", 0)]


def test_wrong_column_counted_when_the_summary_is_missing():
    lines = [line for line in read(GIB_2NODE).splitlines() if "Out of bounds" not in line]
    text = replace_once("\n".join(lines), "259.66      0", "259.66      3")
    assert parse_collective_output(text, "all_gather_perf")["wrong"] == 3


def test_unvalidated_run_is_not_a_pass():
    lines = [line for line in read(GIB_2NODE).splitlines() if "Out of bounds" not in line]
    text = replace_once("\n".join(lines), "259.66      0", "259.66    N/A")
    problems = collective_problems(parse_collective_output(text, "all_gather_perf"), 0)
    assert [(p["check"], p["found"]) for p in problems] == [("collective_wrong", "not validated")]


def test_nccl_failure_is_quoted_in_the_tools_words():
    result = parse_collective_output(read(NCCL_FAILURE), "all_reduce_perf")
    assert result["rows"] == 0 and result["ranks"] == 2
    assert result["errors"][0] == ("GENOA-06: Test NCCL failure common.cu:392 'unhandled cuda error "
                                   "(run with NCCL_DEBUG=INFO for details) / '")
    problems = collective_problems(result, 3, min_busbw_gbps=100)
    assert [p["check"] for p in problems] == ["collective_failed"]
    assert "Test NCCL failure common.cu:392 'unhandled cuda error" in problems[0]["message"]
    assert problems[0]["found"].startswith("rc 3: ")


def test_no_rows_and_no_error_is_still_a_failure():
    problems = collective_problems(parse_collective_output("# nThread 1 nGpus 8\n", "all_reduce_perf"), 0)
    assert [(p["check"], p["found"]) for p in problems] == [("collective_failed", "no result rows")]


def test_rank_count_must_match_the_replica():
    result = parse_collective_output(read(GIB_2NODE), "all_gather_perf")
    problems = collective_problems(result, 0, expected_ranks=8)
    assert [(p["check"], p["found"], p["expected"]) for p in problems] == [("collective_ranks", 16, 8)]


def test_gloo_stand_in_output_reads_like_nccl_tests():
    result = parse_collective_output(read("nccl/gloo_all_reduce_2rank_localhost.txt"), "gloo_all_reduce")
    assert (result["tool"], result["library_version"], result["ranks"], result["max_bytes"], result["wrong"], result["rows"]) == (
        "gloo", "gloo (torch 2.13.0+cpu)", 2, 16777216, 0, 22)
    assert result["busbw_gbps_at_max"] > 0 and result["errors"] == []


def test_gloo_failure_line_is_quoted():
    text = "tray-2: Test gloo failure: DistStoreError: Timed out after 61 seconds waiting for clients. 1/2 clients joined.\n"
    result = parse_collective_output(text, "gloo_all_reduce")
    assert result["errors"] == [text.strip()]
    assert [p["check"] for p in collective_problems(result, 3, scope="multi-node")] == ["collective_failed"]
