# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_health results as Prometheus node-exporter textfile metrics.

Only health verdicts and counters are exported, not temperature or power (the node's GPU
exporter already has those). The text then changes only when the health changes, so the file
written by a converged node does not show up as drift on every nightly check.
"""

from __future__ import annotations

from ansible_collections.gpufleet.serving.plugins.module_utils._gpu_health import fabric_ok

PREFIX = "gpufleet_gpu_health"


def _escape(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels):
    if not labels:
        return ""
    return "{" + ",".join('%s="%s"' % (key, _escape(value)) for key, value in sorted(labels.items())) + "}"


def _bool(value):
    return None if value is None else (1 if value else 0)


def gpu_health_metrics(result):
    """Prometheus exposition text (with HELP/TYPE lines) for one gpu_health result."""
    families = []

    def family(name, help_text, samples):
        kept = [(labels, value) for labels, value in samples if value is not None]
        if kept:
            families.append((PREFIX + "_" + name, help_text, kept))

    gpus = result.get("gpus") or []
    problems = result.get("problems") or []
    family("healthy", "1 when the last probe found no critical problem.", [({}, _bool(result.get("healthy")))])
    family("gpus", "GPUs the vendor tool reported.", [({}, result.get("gpu_count"))])
    family(
        "problems",
        "Problems found by the last probe, by severity.",
        [({"severity": severity}, sum(1 for p in problems if p.get("severity") == severity)) for severity in ("critical", "warning")],
    )
    family(
        "problem",
        "One sample per problem found by the last probe (1 while present).",
        [({"code": p.get("code"), "gpu": "" if p.get("gpu") is None else p["gpu"], "severity": p.get("severity")}, 1) for p in problems],
    )

    def per_gpu(name, help_text, getter):
        family(name, help_text, [({"gpu": g.get("index"), "uuid": g.get("uuid") or ""}, getter(g)) for g in gpus])

    per_gpu("memory_total_bytes", "Total GPU memory.",
            lambda g: None if g.get("memory_total_mib") is None else g["memory_total_mib"] * 2**20)
    per_gpu("ecc_uncorrectable_volatile", "Uncorrectable ECC errors since the driver loaded.",
            lambda g: (g.get("ecc") or {}).get("volatile_uncorrectable"))
    per_gpu("ecc_uncorrectable_aggregate", "Uncorrectable ECC errors over the GPU's lifetime.",
            lambda g: (g.get("ecc") or {}).get("aggregate_uncorrectable"))
    per_gpu("row_remap_pending", "1 when a row remap waits for a GPU reset.",
            lambda g: _bool((g.get("row_remap") or {}).get("pending")))
    per_gpu("row_remap_failure", "1 when a row remap failed (the GPU needs service).",
            lambda g: _bool((g.get("row_remap") or {}).get("failure")))
    per_gpu("persistence_mode_enabled", "1 when persistence mode is on.",
            lambda g: None if g.get("persistence_mode") is None else _bool(g["persistence_mode"] == "enabled"))
    per_gpu("fabric_completed", "1 when the NVLink fabric registration is Completed with status Success.",
            lambda g: None if (g.get("fabric") or {}).get("state") is None else _bool(fabric_ok(g["fabric"])))
    per_gpu("nvlink_inactive_links", "NVLink links that are not up.",
            lambda g: None if g.get("nvlinks") is None else sum(1 for link in g["nvlinks"] if link.get("state") != "up"))

    lines = []
    for name, help_text, samples in families:
        lines.append("# HELP %s %s" % (name, help_text))
        lines.append("# TYPE %s gauge" % name)
        lines.extend("%s%s %s" % (name, _labels(labels), value) for labels, value in samples)
    return "\n".join(lines) + "\n"
