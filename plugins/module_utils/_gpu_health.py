# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Turn parsed GPU facts into a list of problems (private to this collection).

Pure functions only.  A problem is ``{"severity", "gpu", "code", "message"}`` where severity
is ``critical`` or ``warning`` and ``gpu`` is the GPU index or None for host-wide problems.
The host is healthy iff there is no critical problem.

Policy for expectations that cannot be checked because a value is unknown: the check fails
closed (a critical problem whose message says the value is unknown), because an
expectation the operator asked for was not shown to hold.
"""

from __future__ import annotations

import re

CRITICAL = "critical"
WARNING = "warning"

EXPECTATION_KEYS = (
    "expected_gpu_count",
    "expected_link_type",
    "require_fabric_completed",
    "min_memory_mib",
    "min_driver_version",
)


def problem(severity, code, message, gpu=None):
    return {"severity": severity, "gpu": gpu, "code": code, "message": message}


def is_healthy(problems):
    return not any(item["severity"] == CRITICAL for item in problems)


def version_tuple(text):
    """``535.54.03`` -> (535, 54, 3); None when there is no leading number."""
    if text is None:
        return None
    parts = re.findall(r"\d+", str(text))
    if not parts or not re.match(r"^\s*\d", str(text)):
        return None
    return tuple(int(part) for part in parts)


def compare_versions(left, right):
    """-1/0/1 comparing dotted versions; None when either is not a version."""
    first, second = version_tuple(left), version_tuple(right)
    if first is None or second is None:
        return None
    width = max(len(first), len(second))
    first += (0,) * (width - len(first))
    second += (0,) * (width - len(second))
    return (first > second) - (first < second)


def summary_message(problems):
    """One line naming every critical problem (then warnings) for fail_json."""
    critical = [item for item in problems if item["severity"] == CRITICAL]
    parts = []
    for item in critical:
        where = "" if item["gpu"] is None else "GPU %s: " % item["gpu"]
        parts.append("[%s] %s%s" % (item["code"], where, item["message"]))
    return "GPU health check failed with %d critical problem(s): %s" % (len(critical), "; ".join(parts))


# --------------------------------------------------------------------------------------
# Per-GPU checks
# --------------------------------------------------------------------------------------


def _check_ecc(gpu, index, problems):
    ecc = gpu.get("ecc") or {}
    volatile = ecc.get("volatile_uncorrectable")
    aggregate = ecc.get("aggregate_uncorrectable")
    if volatile:
        problems.append(
            problem(
                CRITICAL,
                "ecc_uncorrectable",
                "%d uncorrectable ECC error(s) since the last driver load (aggregate: %s)"
                % (volatile, "unknown" if aggregate is None else aggregate),
                index,
            )
        )
    elif aggregate:
        problems.append(
            problem(
                WARNING,
                "ecc_uncorrectable",
                "%d uncorrectable ECC error(s) in the lifetime (aggregate) counter; none since the last driver load"
                % aggregate,
                index,
            )
        )


def _check_memory_repair(gpu, index, problems):
    remap = gpu.get("row_remap") or {}
    if remap.get("pending"):
        problems.append(
            problem(CRITICAL, "row_remap_pending", "row remapping is pending; the GPU needs a reset", index)
        )
    if remap.get("failure"):
        problems.append(
            problem(CRITICAL, "row_remap_failure", "row remapping failed; the GPU needs replacement", index)
        )
    retired = gpu.get("retired_pages") or {}
    if retired.get("pending"):
        problems.append(
            problem(
                CRITICAL,
                "retired_pages_pending",
                "page retirement is pending; the GPU needs a reset or reboot",
                index,
            )
        )


def _check_pcie(gpu, index, problems):
    pcie = gpu.get("pcie") or {}
    current, maximum = pcie.get("current_width"), pcie.get("max_width")
    # Only the width is judged: GPUs drop their link generation when idle to save power,
    # so a lower current generation is normal and is reported but not flagged.
    if current is not None and maximum is not None and current < maximum:
        problems.append(
            problem(
                WARNING,
                "pcie_link_degraded",
                "PCIe link width x%d is below its maximum x%d (gen %s of max %s)"
                % (current, maximum, _unknown(pcie.get("current_gen")), _unknown(pcie.get("max_gen"))),
                index,
            )
        )


def _check_nvlinks(gpu, index, nvlink_expected, problems):
    links = gpu.get("nvlinks")
    if not links:
        return
    down = [link["link"] for link in links if link.get("state") == "down"]
    if not down:
        return
    up = [link for link in links if link.get("state") == "up"]
    # A GPU whose links are all inactive and of which NVLink was not expected (PCIe cards
    # list links too) is only a warning; a partial failure or an NVLink expectation is not.
    severity = CRITICAL if (up or nvlink_expected) else WARNING
    problems.append(
        problem(
            severity,
            "nvlink_down",
            "NVLink link(s) %s inactive (%d of %d listed links up)"
            % (", ".join(str(number) for number in down), len(up), len(links)),
            index,
        )
    )


def fabric_ok(fabric):
    state = (fabric.get("state") or "").lower()
    status = (fabric.get("status") or "").lower()
    return state == "completed" and status == "success"


def _check_fabric(gpu, index, required, problems):
    fabric = gpu.get("fabric") or {}
    state, status = fabric.get("state"), fabric.get("status")
    if required:
        if not fabric_ok(fabric):
            problems.append(
                problem(
                    CRITICAL,
                    "fabric_not_completed",
                    "fabric registration is not complete: state %s, status %s"
                    % (_unknown(state), _unknown(status)),
                    index,
                )
            )
    elif state is not None:
        if state.lower() == "completed" and status is not None and status.lower() != "success":
            problems.append(
                problem(
                    CRITICAL,
                    "fabric_not_completed",
                    "fabric registration completed with status %s" % status,
                    index,
                )
            )
        elif state.lower() != "completed":
            problems.append(
                problem(WARNING, "fabric_not_completed", "fabric state is %s" % state, index)
            )
    health = fabric.get("health") or {}
    summary = health.get("summary")
    if summary is not None and summary.lower() != "healthy":
        problems.append(problem(WARNING, "fabric_unhealthy", "fabric health summary is %s" % summary, index))


def _check_mig(gpu, index, problems):
    mig = gpu.get("mig") or {}
    current, pending = mig.get("current"), mig.get("pending")
    if current == "enabled":
        problems.append(
            problem(
                WARNING,
                "mig_enabled",
                "MIG mode is enabled (%d MIG device(s); pending mode %s)"
                % (mig.get("devices") or 0, _unknown(pending)),
                index,
            )
        )
    elif pending == "enabled":
        problems.append(problem(WARNING, "mig_enabled", "MIG mode is pending enable (needs a GPU reset)", index))


def _check_processes(gpu, index, problems):
    processes = gpu.get("processes")
    if not processes:
        return
    described = [
        "%s (pid %s)" % (item.get("name") or "unknown", _unknown(item.get("pid"))) for item in processes
    ]
    problems.append(
        problem(
            WARNING,
            "gpu_in_use",
            "%d process(es) use the GPU: %s" % (len(processes), ", ".join(described)),
            index,
        )
    )


def _check_memory_minimum(gpu, index, minimum, problems):
    total = gpu.get("memory_total_mib")
    if total is None:
        problems.append(
            problem(
                CRITICAL,
                "memory_below_minimum",
                "total memory is unknown; cannot confirm the required %d MiB" % minimum,
                index,
            )
        )
    elif total < minimum:
        problems.append(
            problem(
                CRITICAL,
                "memory_below_minimum",
                "total memory %d MiB is below the required %d MiB" % (total, minimum),
                index,
            )
        )


def _unknown(value):
    return "unknown" if value is None else value


# --------------------------------------------------------------------------------------
# Host-wide checks
# --------------------------------------------------------------------------------------


def _check_link_type(topology, expected, problems):
    links = (topology or {}).get("gpu_links") or {}
    if not (topology or {}).get("available") or not links:
        problems.append(
            problem(
                CRITICAL,
                "link_type_mismatch",
                "GPU-to-GPU link types are unknown (topology not available); cannot confirm %s" % expected,
            )
        )
        return
    wanted = expected.strip().upper()
    for source in sorted(links, key=_device_order):
        wrong = []
        for peer in sorted(links[source], key=_device_order):
            kind = links[source][peer]
            if (kind or "").upper() != wanted:
                wrong.append("%s=%s" % (peer, _unknown(kind)))
        if wrong:
            problems.append(
                problem(
                    CRITICAL,
                    "link_type_mismatch",
                    "links to %s are not %s" % (", ".join(wrong), expected),
                    _device_order(source),
                )
            )


def _device_order(name):
    match = re.search(r"(\d+)$", str(name))
    return int(match.group(1)) if match else 0


def evaluate(facts, expectations=None):
    """Return the problems found in ``facts`` (the module's result minus problems/healthy).

    ``facts`` needs ``gpu_count``, ``driver_version``, ``gpus`` and ``topology``; an
    ``attached_gpus`` value (nvidia-smi's own count) is compared with the GPU records.
    ``expectations`` holds the optional module options named in EXPECTATION_KEYS.
    """
    expectations = expectations or {}
    problems = []
    gpus = facts.get("gpus") or []
    count = facts.get("gpu_count")

    attached = facts.get("attached_gpus")
    if attached is not None and attached != len(gpus):
        problems.append(
            problem(
                CRITICAL,
                "gpu_records_missing",
                "the driver reports %d attached GPU(s) but the tool returned records for %d"
                % (attached, len(gpus)),
            )
        )

    expected_count = expectations.get("expected_gpu_count")
    if expected_count is not None and count != expected_count:
        problems.append(
            problem(
                CRITICAL,
                "gpu_count_mismatch",
                "found %s GPU(s), expected %d" % (_unknown(count), expected_count),
            )
        )

    min_driver = expectations.get("min_driver_version")
    if min_driver:
        driver = facts.get("driver_version")
        comparison = compare_versions(driver, min_driver)
        if comparison is None:
            problems.append(
                problem(
                    CRITICAL,
                    "driver_below_minimum",
                    "driver version %s cannot be compared with the required minimum %s"
                    % (_unknown(driver), min_driver),
                )
            )
        elif comparison < 0:
            problems.append(
                problem(
                    CRITICAL,
                    "driver_below_minimum",
                    "driver version %s is below the required minimum %s" % (driver, min_driver),
                )
            )

    expected_link = expectations.get("expected_link_type")
    nvlink_expected = bool(expected_link) and expected_link.strip().upper().startswith("NV")
    min_memory = expectations.get("min_memory_mib")
    fabric_required = bool(expectations.get("require_fabric_completed"))

    for gpu in gpus:
        index = gpu.get("index")
        _check_ecc(gpu, index, problems)
        _check_memory_repair(gpu, index, problems)
        _check_nvlinks(gpu, index, nvlink_expected, problems)
        _check_fabric(gpu, index, fabric_required, problems)
        _check_pcie(gpu, index, problems)
        _check_mig(gpu, index, problems)
        _check_processes(gpu, index, problems)
        if min_memory is not None:
            _check_memory_minimum(gpu, index, min_memory, problems)

    if expected_link and count:
        _check_link_type(facts.get("topology"), expected_link, problems)
    return problems
