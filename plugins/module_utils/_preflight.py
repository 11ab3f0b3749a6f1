# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The preflight gate's decisions: probe results + profiles -> every failed check of a host.

Pure functions over the results of the gpu_health and storage_probe modules, so the gate's
rules are unit-tested on recorded results and the role only runs probes and reports.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.serving.plugins.module_utils._gpu_health import compare_versions
from ansible_collections.gpufleet.serving.plugins.module_utils._profiles import gpu_health_expectations, gpu_target_names
from ansible_collections.gpufleet.serving.plugins.module_utils._storage import human_bytes

CRITICAL = "critical"
HOSTED_API_ADVICE = (
    "serve this model from a hosted OpenAI-compatible API instead (the official Kimi API, or a "
    "provider such as CometAPI), or deploy on a supported node (%s)" % ", ".join(gpu_target_names())
)


def finding(check, message):
    return {"check": check, "message": message}


def gpu_expectations(hardware):
    """The gpu_health module options of the gate: the profile's expectations, with whichever vendor tool
    the host has (an NVIDIA profile on an AMD host is then judged on what amd-smi shows, not deferred)."""
    return dict(gpu_health_expectations(hardware), vendor="auto")


# The GPU tool is absent or cannot talk to a driver: what a bare OS looks like before the driver stage.
DRIVER_ABSENT_CODES = ("tool_missing", "tool_failed")


def gpu_checks_deferred(gpu_result, driver_pending):
    """Whether the GPU checks wait for the driver stage: only when one follows (`driver_pending`)
    and the main GPU query is missing or cannot reach a driver (a critical problem; a failed side
    query such as `nvlink -s` is only a warning). Any other GPU problem is judged now."""
    if not driver_pending or gpu_result is None:
        return False
    return any(item.get("code") in DRIVER_ABSENT_CODES and item.get("severity") == CRITICAL
               for item in gpu_result.get("problems") or [])


def preflight_findings(hardware, model, gpu_result, storage_result, require_nvme=True, driver_pending=False,
                       space_result=None):
    """Every failed check, in a stable order; an empty list means the host passes the gate.

    `gpu_result` is the gpu_health result run with gpu_expectations(hardware), or None when the
    profile has no GPUs. Its critical problems are findings as they are (they already say what
    was found and what was expected); the checks below add what only the profiles know. With
    `driver_pending` (the driver stage runs next) a host without a usable GPU tool is judged on
    storage only; the caller runs the gate again once the driver is in. `space_result` is the
    checkpoint_space result (the room the target revision needs, counting what is staged).
    """
    findings = []
    if gpu_result is not None and not gpu_checks_deferred(gpu_result, driver_pending):
        findings.extend(_gpu_findings(hardware, model, gpu_result))
    findings.extend(_storage_findings(storage_result, require_nvme))
    for item in (space_result or {}).get("problems") or []:
        if item.get("severity") == CRITICAL:
            findings.append(finding(item["code"], item["message"]))
    return findings


def _gpu_findings(hardware, model, gpu):
    findings = []
    gpus = gpu.get("gpus") or []
    vendor = gpu.get("vendor")
    fits = _model_fit(hardware, model, gpus)
    if fits is not None:
        findings.append(fits)
    if vendor not in (None, "unknown") and vendor != hardware["vendor"]:
        findings.append(finding(
            "vendor_mismatch",
            "found %s GPU tools, expected %s for hardware profile %s" % (vendor, hardware["vendor"], hardware["name"]),
        ))
    pattern = hardware.get("gpu_model_pattern")
    if pattern and gpus:
        wrong = sorted({g.get("name") or "unknown" for g in gpus if not re.search(pattern, g.get("name") or "")})
        if wrong:
            findings.append(finding(
                "gpu_model_mismatch",
                "found %s, expected GPUs whose name matches %r (profile %s)" % (", ".join(wrong), pattern, hardware["name"]),
            ))
    if hardware.get("persistence_mode_required"):
        off = [str(g.get("index")) for g in gpus if g.get("persistence_mode") != "enabled"]
        if off:
            found = sorted({str(g.get("persistence_mode")) for g in gpus if g.get("persistence_mode") != "enabled"})
            findings.append(finding(
                "persistence_mode_off",
                "GPU(s) %s: persistence mode %s, expected enabled (nvidia-persistenced)" % (", ".join(off), "/".join(found)),
            ))
    min_rocm = hardware.get("min_rocm_version")
    if min_rocm:
        rocm = gpu.get("rocm_version")
        order = compare_versions(rocm, min_rocm) if rocm else None
        if order is None or order < 0:
            findings.append(finding("rocm_below_minimum", "found ROCm %s, expected %s or newer" % (rocm or "unknown", min_rocm)))
    for item in gpu.get("problems") or []:
        if item.get("severity") == CRITICAL:
            where = "" if item.get("gpu") is None else "GPU %s: " % item["gpu"]
            findings.append(finding(item["code"], where + item["message"]))
    return findings


def _model_fit(hardware, model, gpus):
    """Refuse hosts whose GPUs cannot even hold the checkpoint (a single consumer GPU, say)."""
    memory = [g.get("memory_total_mib") for g in gpus]
    if not gpus or any(m is None for m in memory):
        return None
    replica_bytes = sum(memory) * 2**20 * int(hardware["nodes_per_replica"])
    checkpoint = float(model["checkpoint_bytes"])
    if replica_bytes >= checkpoint:
        return None
    names = ", ".join(sorted({g.get("name") or "unknown" for g in gpus}))
    return finding(
        "model_does_not_fit",
        "found %d GPU(s) (%s) with %s of GPU memory per replica; the %s checkpoint alone is about %s, "
        "so it cannot be loaded here: %s" % (
            len(gpus), names, human_bytes(replica_bytes), model.get("description", model["name"]).split(":")[0],
            human_bytes(checkpoint), HOSTED_API_ADVICE,
        ),
    )


def _storage_findings(storage, require_nvme):
    findings = []
    for item in storage.get("problems") or []:
        if item.get("severity") == CRITICAL:
            findings.append(finding(item["code"], item["message"]))
    if require_nvme and storage.get("on_nvme") is not True:
        transport = storage.get("transport") or "unknown"
        state = "not NVMe" if storage.get("on_nvme") is False else "NVMe unknown"
        findings.append(finding(
            "model_dir_not_on_nvme",
            "%s is on %s (transport %s, %s), expected an NVMe filesystem for the checkpoint" % (
                storage.get("path"), storage.get("mount_source") or "an unknown device", transport, state),
        ))
    return findings


def gate_message(host, findings):
    lines = ["%s: preflight failed %d check(s):" % (host, len(findings))]
    lines += ["  - %s: %s" % (item["check"], item["message"]) for item in findings]
    return "\n".join(lines)
