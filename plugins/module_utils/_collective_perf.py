# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Results of a collective benchmark in nccl-tests / rccl-tests format, and the checks on them (private).

The output may come straight from ``all_reduce_perf``, or through ``mpirun --tag-output``
(``[1,0]<stdout>:``), ``srun --label`` (``0: ``) or a wrapper that prints its own lines first, so
rows are found anywhere in a line rather than at its start. The sandbox's gloo all-reduce prints
the same format, so one parser judges every collective the gate runs.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.serving.plugins.module_utils._input_problem import input_problem

# size count type redop root | time algbw busbw #wrong (out-of-place) | time algbw busbw #wrong (in-place)
_ROW_RE = re.compile(
    r"(?:^|\s)(\d+)\s+(\d+)\s+([a-z0-9_]+)\s+([a-z]+)\s+(-?\d+)"
    r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)"
    r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s*$")
_OUT_OF_BOUNDS_RE = re.compile(r"#\s*Out of bounds values\s*:\s*(\d+)\s*(\w+)?")
_AVG_RE = re.compile(r"#\s*Avg bus bandwidth\s*:\s*([\d.]+(?:[eE][-+]?\d+)?)")
_RANK_RE = re.compile(r"#\s*Rank\s+(\d+)\s.*?\bon\s+(\S+)\s+device")
_LIBRARY_RE = re.compile(r"\b((?:NCCL|RCCL) version \S+|gloo \(torch [^)]+\))")
# The tool's and the launcher's own failure lines; quoted as printed.
_ERROR_RE = re.compile(
    r"Test (?:NCCL|CUDA|HIP|gloo) failure|NCCL WARN|unhandled system error|Test failure"
    r"|MPI_ABORT|mpirun (?:noticed|has exited|was unable)|(?:ORTE|PRTE) has lost|srun: error"
    r"|command not found|No such file or directory|Timed out|timed out|RuntimeError|Connection refused")
_MAX_ERRORS = 8


def _number(text):
    try:
        return float(text)
    except ValueError:
        return None


def _wrong(text):
    return int(text) if text.isdigit() else None


def _family(text, library):
    if "rccl-tests" in text or (library or "").startswith("RCCL"):
        return "rccl-tests"
    return "gloo" if (library or "").startswith("gloo") else "nccl-tests"


def parse_collective_output(text, test):
    """The figures of one run. ``test`` names the benchmark that was run (the output does not)."""
    rows, ranks, hosts, errors = [], set(), [], []
    wrong_total, avg, library = None, None, None
    for raw in text.splitlines():
        line = raw.rstrip()
        row = _ROW_RE.search(line)
        if row:
            rows.append({
                "size": int(row.group(1)),
                "busbw_out_of_place": _number(row.group(8)),
                "busbw_in_place": _number(row.group(12)),
                "wrong": [_wrong(row.group(9)), _wrong(row.group(13))],
            })
            continue
        rank = _RANK_RE.search(line)
        if rank:
            ranks.add(int(rank.group(1)))
            if rank.group(2) not in hosts:
                hosts.append(rank.group(2))
            continue
        bounds = _OUT_OF_BOUNDS_RE.search(line)
        if bounds:
            wrong_total = int(bounds.group(1))
            continue
        average = _AVG_RE.search(line)
        if average:
            avg = float(average.group(1))
            continue
        lib = _LIBRARY_RE.search(line)
        if lib and library is None:
            library = lib.group(1)
        if _ERROR_RE.search(line):
            quoted = line.strip()
            if quoted not in errors and len(errors) < _MAX_ERRORS:
                errors.append(quoted)
    largest = max(rows, key=lambda r: r["size"]) if rows else None
    if wrong_total is None and rows:
        counts = [w for r in rows for w in r["wrong"]]
        # -c 0 prints N/A: nothing was validated, which is not the same as no error.
        wrong_total = None if any(w is None for w in counts) else sum(counts)
    at_max = None
    if largest:
        measured = [b for b in (largest["busbw_out_of_place"], largest["busbw_in_place"]) if b is not None]
        at_max = min(measured) if measured else None
    return {
        "test": test,
        "tool": _family(text, library),
        "library_version": library,
        "ranks": len(ranks),
        "hosts": hosts,
        "max_bytes": largest["size"] if largest else None,
        "busbw_gbps_at_max": at_max,
        "avg_busbw_gbps": avg,
        "wrong": wrong_total,
        "rows": len(rows),
        "errors": errors,
    }


def collective_problems(result, rc, min_busbw_gbps=None, expected_ranks=None, scope="intra-node"):
    """Problems of one collective run; never healthy on missing data.

    ``errors`` of a run that exited 0 with rows are only reported (``NCCL_DEBUG=WARN`` logs benign
    warnings); ``busbw_gbps_at_max`` is the lower of the out-of-place and in-place figures at the largest size:
    small sizes measure latency, not the links.
    """
    label = "%s %s" % (scope, result["test"])
    wrong = result["wrong"]
    # nccl-tests exits non-zero when values were wrong: that is a wrong-value problem, not a tool failure.
    # Error lines decide only when the run failed or gave no rows; a successful run may log NCCL WARNs.
    if (rc != 0 and not (wrong and result["rows"])) or (result["errors"] and not result["rows"]):
        said = "; ".join(result["errors"][:3]) or "no error text"
        return [input_problem("collective_failed", "rc %s: %s" % (rc, said), "rc 0 and no tool error",
                              "%s failed: %s" % (label, said))]
    if not result["rows"]:
        return [input_problem("collective_failed", "no result rows", "a row per message size",
                              "%s printed no results" % label)]
    problems = []
    if wrong is None:
        problems.append(input_problem("collective_wrong", "not validated", 0,
                                      "%s ran without validation (#wrong N/A); run it with -c 1" % label))
    elif wrong > 0:
        problems.append(input_problem(
            "collective_wrong", wrong, 0,
            "%s returned %d wrong value(s): data is corrupted on a link or a GPU" % (label, wrong)))
    if expected_ranks is not None and result["ranks"] != expected_ranks:
        problems.append(input_problem("collective_ranks", result["ranks"], expected_ranks,
                                      "%s listed %d rank(s) in '# Using devices', expected %d"
                                      % (label, result["ranks"], expected_ranks)))
    if min_busbw_gbps is not None:
        busbw = result["busbw_gbps_at_max"]
        if busbw is None or busbw < min_busbw_gbps:
            problems.append(input_problem(
                "collective_busbw", busbw, ">= %s GB/s" % min_busbw_gbps,
                "%s bus bandwidth %s GB/s at %s bytes, below the %s GB/s the hardware profile requires"
                % (label, busbw, result["max_bytes"], min_busbw_gbps)))
    return problems
