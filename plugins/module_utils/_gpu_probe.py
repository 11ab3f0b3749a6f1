# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Run the vendor GPU tools and assemble the gpu_health result (private to this collection).

The tools are reached only through two injected callables, so this is testable without a
GPU or an Ansible module object:

* ``which(name)`` -> absolute path or None;
* ``run(argv)`` -> ``(rc, stdout, stderr)``; argv is always a list, never a shell string.

Nothing here changes the host: every command is a read-only query.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.serving.plugins.module_utils._amd_smi import (
    parse_amd_smi_metric,
    parse_amd_smi_process,
    parse_amd_smi_static,
    parse_amd_smi_topology,
    parse_amd_smi_version,
    parse_rocm_smi_json,
)
from ansible_collections.gpufleet.serving.plugins.module_utils._gpu_health import (
    CRITICAL,
    EXPECTATION_KEYS,
    WARNING,
    evaluate,
    is_healthy,
    problem,
)
from ansible_collections.gpufleet.serving.plugins.module_utils._nvidia_smi import (
    parse_nvlink_status,
    parse_query_xml,
    parse_summary_table,
    parse_topo_matrix,
)

NVIDIA_SMI = "nvidia-smi"
AMD_SMI = "amd-smi"
ROCM_SMI = "rocm-smi"

_NO_DEVICES_RE = re.compile(r"no devices were found|no gpus? (?:were )?(?:found|detected)|unable to detect any gpu", re.I)
_ERROR_LINE_RE = re.compile(r"unable|error|lost|fail|could ?n[o']t", re.I)
_MAX_MESSAGE = 1000


def empty_topology():
    return {
        "available": False,
        "source": None,
        "devices": [],
        "matrix": {},
        "gpu_links": {},
        "nics": {},
        "affinity": {},
        "legend": {},
        "warnings": [],
    }


def empty_gpu(index):
    """A GPU record with every field present and unknown."""
    return {
        "index": index,
        "name": None,
        "uuid": None,
        "pci_bus_id": None,
        "memory_total_mib": None,
        "memory_used_mib": None,
        "persistence_mode": None,
        "ecc": {
            "mode": None,
            "volatile_uncorrectable": None,
            "aggregate_uncorrectable": None,
            "volatile_correctable": None,
            "aggregate_correctable": None,
        },
        "retired_pages": {"single_bit": None, "double_bit": None, "pending": None},
        "row_remap": {"correctable": None, "uncorrectable": None, "pending": None, "failure": None},
        "temperature_c": None,
        "power_draw_w": None,
        "pcie": {"current_gen": None, "max_gen": None, "current_width": None, "max_width": None},
        "nvlinks": None,
        "nvlink_source": None,
        "fabric": {"state": None, "status": None, "clique_id": None, "cluster_uuid": None, "health": None},
        "mig": {"current": None, "pending": None, "devices": 0},
        "processes": None,
    }


def _tool_text(stdout, stderr):
    """The tool's own words: non-empty lines of stdout then stderr, capped in length."""
    lines = [line.strip() for line in ((stdout or "") + "\n" + (stderr or "")).splitlines() if line.strip()]
    text = " ".join(lines)
    if len(text) > _MAX_MESSAGE:
        text = text[:_MAX_MESSAGE] + " ..."
    return text


class _Probe:
    """One probe run: holds the result being built and the command log."""

    def __init__(self, params, which, run):
        self.params = params
        self.which = which
        self.run_fn = run
        self.problems = []
        self.commands = []
        self.timeout_bin = None
        self.result = {
            "changed": False,
            "vendor": "unknown",
            "tool": None,
            "gpu_count": None,
            "attached_gpus": None,
            "driver_version": None,
            "cuda_version": None,
            "rocm_version": None,
            "gpus": [],
            "topology": empty_topology(),
        }

    # -- command running ------------------------------------------------------------------

    def run(self, argv):
        timeout = self.params.get("command_timeout")
        full = list(argv)
        if timeout and self.timeout_bin:
            full = [self.timeout_bin, "-k", "5", str(timeout)] + full
        rc, stdout, stderr = self.run_fn(full)
        self.commands.append({"argv": list(argv), "rc": rc})
        if timeout and self.timeout_bin and rc in (124, 137):
            stderr = ((stderr or "") + "\ntimed out after %s seconds" % timeout).strip()
        return rc, stdout or "", stderr or ""

    def main_query_failed(self, command, rc, stdout, stderr, parse_error):
        """The vendor tool's main query failed: critical, in the tool's own words where it gave any."""
        text = _tool_text(stdout, stderr) if (rc != 0 or not stdout.strip()) else parse_error
        code = "no_gpus" if _NO_DEVICES_RE.search(text or "") else "tool_failed"
        self.problems.append(problem(CRITICAL, code, "%s failed (rc %s): %s" % (command, rc, text or "no output")))

    def aux_failed(self, argv, rc, text):
        self.problems.append(
            problem(
                WARNING,
                "tool_failed",
                "%s failed (rc %s): %s" % (" ".join(argv), rc, text or "no output"),
            )
        )

    # -- vendor selection -----------------------------------------------------------------

    def select(self):
        vendor = self.params.get("vendor") or "auto"
        candidates = []
        if vendor in ("auto", "nvidia"):
            candidates.append(("nvidia", NVIDIA_SMI))
        if vendor in ("auto", "amd"):
            # amd-smi first; rocm-smi is the fallback for hosts without it.
            candidates.extend((("amd", AMD_SMI), ("amd", ROCM_SMI)))
        for candidate_vendor, name in candidates:
            path = self.which(name)
            if path:
                return candidate_vendor, name, path
        wanted = {"auto": "nvidia-smi, amd-smi or rocm-smi", "nvidia": "nvidia-smi", "amd": "amd-smi or rocm-smi"}
        self.result["vendor"] = vendor if vendor != "auto" else "unknown"
        self.problems.append(
            problem(
                CRITICAL,
                "tool_missing",
                "no GPU management tool found on the host (looked for %s in PATH and /opt/rocm/bin)"
                % wanted.get(vendor, vendor),
            )
        )
        return None, None, None

    # -- NVIDIA ---------------------------------------------------------------------------

    def nvidia(self, path):
        argv = [path, "-q", "-x"]
        rc, stdout, stderr = self.run(argv)
        parsed = parse_query_xml(stdout)
        if rc == 0 and parsed["malformed_xml"] and self.nvidia_from_table(path, parsed["error"]):
            return
        result = self.result
        result["driver_version"] = parsed["driver_version"]
        result["cuda_version"] = parsed["cuda_version"]
        result["attached_gpus"] = parsed["attached_gpus"]
        gpus = []
        for record in parsed["gpus"]:
            gpu = empty_gpu(record["index"])
            gpu.update(record)
            gpus.append(gpu)
        result["gpus"] = gpus

        own_words = " ".join(parsed["messages"] + [line.strip() for line in stderr.splitlines() if line.strip()])
        if len(own_words) > _MAX_MESSAGE:
            own_words = own_words[:_MAX_MESSAGE] + " ..."
        if rc != 0 or parsed["error"] is not None:
            text = own_words or parsed["error"] or "no output"
            if _NO_DEVICES_RE.search(text) and not gpus:
                self.problems.append(problem(CRITICAL, "no_gpus", "nvidia-smi: %s" % text))
            else:
                self.problems.append(
                    problem(CRITICAL, "tool_failed", "nvidia-smi -q -x failed (rc %s): %s" % (rc, text))
                )
            if not gpus:
                return
        elif own_words:
            severity = CRITICAL if _ERROR_LINE_RE.search(own_words) else WARNING
            self.problems.append(problem(severity, "tool_failed", "nvidia-smi -q -x reported: %s" % own_words))
        if not gpus:
            self.problems.append(problem(CRITICAL, "no_gpus", "nvidia-smi -q -x listed no GPUs"))
            return

        self.nvidia_topology(path)
        if any(gpu["nvlinks"] is None for gpu in gpus):
            self.nvidia_nvlinks(path, gpus)

    def nvidia_from_table(self, path, xml_error):
        """Some driver builds print invalid XML (unescaped text in a field): read the summary table.

        Only what the table shows is filled in; every other health field stays unknown, so
        expectations that need them still fail closed.
        """
        rc, stdout, stderr = self.run([path])
        table = parse_summary_table(stdout)
        if rc != 0 or table["error"] is not None:
            return False
        self.problems.append(problem(
            WARNING, "xml_unparseable",
            "nvidia-smi -q -x printed invalid XML (%s); GPUs were read from the summary table, "
            "so health details beyond volatile uncorrectable ECC are unknown" % xml_error,
        ))
        result = self.result
        result["driver_version"], result["cuda_version"] = table["driver_version"], table["cuda_version"]
        result["attached_gpus"] = len(table["gpus"])
        gpus = []
        for row in table["gpus"]:
            gpu = empty_gpu(row["index"])
            for key in ("name", "persistence_mode", "pci_bus_id", "temperature_c", "power_draw_w", "memory_used_mib", "memory_total_mib"):
                gpu[key] = row[key]
            gpu["ecc"]["volatile_uncorrectable"] = row["ecc_volatile_uncorrectable"]
            gpu["processes"] = [p for p in table["processes"] if p["gpu"] == row["index"]]
            gpus.append(gpu)
        result["gpus"] = gpus
        self.nvidia_topology(path)
        self.nvidia_nvlinks(path, gpus)
        return True

    def nvidia_topology(self, path):
        argv = [path, "topo", "-m"]
        rc, stdout, stderr = self.run(argv)
        if rc != 0:
            self.aux_failed(["nvidia-smi", "topo", "-m"], rc, _tool_text(stdout, stderr))
            return
        parsed = parse_topo_matrix(stdout)
        if parsed["error"] is not None:
            self.aux_failed(
                ["nvidia-smi", "topo", "-m"], rc, "%s: %s" % (parsed["error"], _tool_text(stdout, stderr))
            )
            return
        topology = empty_topology()
        topology.update({key: value for key, value in parsed.items() if key != "error"})
        topology["available"] = True
        topology["source"] = "nvidia-smi topo -m"
        self.result["topology"] = topology

    def nvidia_nvlinks(self, path, gpus):
        argv = [path, "nvlink", "-s"]
        rc, stdout, stderr = self.run(argv)
        if rc != 0:
            self.aux_failed(["nvidia-smi", "nvlink", "-s"], rc, _tool_text(stdout, stderr))
            return
        parsed = parse_nvlink_status(stdout)
        by_uuid = {entry["uuid"]: entry for entry in parsed["gpus"].values() if entry.get("uuid")}
        for gpu in gpus:
            if gpu["nvlinks"] is not None:
                continue
            entry = by_uuid.get(gpu.get("uuid")) if gpu.get("uuid") else None
            if entry is None:
                entry = parsed["gpus"].get(gpu["index"])
            if entry is None:
                continue
            gpu["nvlinks"] = entry["links"]
            gpu["nvlink_source"] = "nvidia-smi nvlink -s"

    # -- AMD ------------------------------------------------------------------------------

    def amd_smi(self, path):
        argv = [path, "static", "--json"]
        rc, stdout, stderr = self.run(argv)
        static = parse_amd_smi_static(stdout)
        if rc != 0 or static["error"] is not None:
            self.main_query_failed("amd-smi static --json", rc, stdout, stderr, static["error"])
            return
        if not static["gpus"]:
            self.problems.append(problem(CRITICAL, "no_gpus", "amd-smi static --json listed no GPUs"))
            return
        gpus = []
        for record in static["gpus"]:
            gpu = empty_gpu(record["index"])
            for key in ("name", "uuid", "pci_bus_id", "memory_total_mib"):
                gpu[key] = record[key]
            gpu["pcie"]["max_width"] = record["pcie_max_width"]
            gpu["pcie"]["max_gen"] = record["pcie_max_gen"]
            gpus.append(gpu)
        self.result["gpus"] = gpus
        drivers = [record["driver_version"] for record in static["gpus"] if record["driver_version"]]
        self.result["driver_version"] = drivers[0] if drivers else None

        rc, stdout, stderr = self.run([path, "metric", "--json"])
        metric = parse_amd_smi_metric(stdout)
        if rc != 0 or metric["error"] is not None:
            self.aux_failed(["amd-smi", "metric", "--json"], rc, _tool_text(stdout, stderr) or metric["error"])
        else:
            for gpu in gpus:
                values = metric["gpus"].get(gpu["index"])
                if not values:
                    continue
                if values["memory_total_mib"] is not None:
                    gpu["memory_total_mib"] = values["memory_total_mib"]
                gpu["memory_used_mib"] = values["memory_used_mib"]
                gpu["temperature_c"] = values["temperature_c"]
                gpu["power_draw_w"] = values["power_draw_w"]
                gpu["pcie"]["current_width"] = values["pcie_current_width"]
                gpu["pcie"]["current_gen"] = values["pcie_current_gen"]
                # amdgpu RAS counters count since the driver loaded: the volatile scope.
                gpu["ecc"]["volatile_uncorrectable"] = values["ecc_uncorrectable"]
                gpu["ecc"]["volatile_correctable"] = values["ecc_correctable"]

        rc, stdout, stderr = self.run([path, "version", "--json"])
        version = parse_amd_smi_version(stdout)
        if rc != 0 or version["error"] is not None:
            self.aux_failed(["amd-smi", "version", "--json"], rc, _tool_text(stdout, stderr) or version["error"])
        else:
            self.result["rocm_version"] = version["rocm_version"]
            if self.result["driver_version"] is None:
                self.result["driver_version"] = version["amdgpu_version"]

        rc, stdout, stderr = self.run([path, "topology", "--json"])
        topo = parse_amd_smi_topology(stdout)
        if rc == 0 and topo["error"] is None and topo["gpu_links"]:
            self.set_amd_topology("amd-smi topology --json", topo["gpu_links"], {})
        elif not self.rocm_smi_topology() and (rc != 0 or topo["error"] is not None):
            self.aux_failed(["amd-smi", "topology", "--json"], rc, _tool_text(stdout, stderr) or topo["error"])

        rc, stdout, stderr = self.run([path, "process", "--json"])
        processes = parse_amd_smi_process(stdout)
        if rc != 0 or processes["error"] is not None:
            self.aux_failed(["amd-smi", "process", "--json"], rc, _tool_text(stdout, stderr) or processes["error"])
        else:
            for gpu in gpus:
                if gpu["index"] in processes["gpus"]:
                    gpu["processes"] = processes["gpus"][gpu["index"]]

    def rocm_smi(self, path):
        argv = [path, "--showallinfo", "--json"]
        rc, stdout, stderr = self.run(argv)
        parsed = parse_rocm_smi_json(stdout)
        if rc != 0 or parsed["error"] is not None:
            self.main_query_failed("rocm-smi --showallinfo --json", rc, stdout, stderr, parsed["error"])
            if not parsed["gpus"]:
                return
        if not parsed["gpus"]:
            self.problems.append(problem(CRITICAL, "no_gpus", "rocm-smi --showallinfo --json listed no GPUs"))
            return
        gpus = []
        affinity = {}
        for record in parsed["gpus"]:
            gpu = empty_gpu(record["index"])
            for key in ("name", "uuid", "pci_bus_id", "memory_total_mib", "memory_used_mib",
                        "temperature_c", "power_draw_w"):
                gpu[key] = record[key]
            gpu["pcie"]["current_gen"] = record["pcie_current_gen"]
            gpu["pcie"]["current_width"] = record["pcie_current_width"]
            gpu["ecc"]["volatile_uncorrectable"] = record["ecc_uncorrectable"]
            gpus.append(gpu)
            affinity["GPU%d" % record["index"]] = {
                "cpu_affinity": None,
                "numa_affinity": record["numa_affinity"] if record["numa_affinity"] is not None else record["numa_node"],
                "gpu_numa_id": None,
            }
        self.result["gpus"] = gpus
        self.result["driver_version"] = parsed["driver_version"]
        self.set_amd_topology("rocm-smi --showallinfo --json", parsed["gpu_links"], affinity)

    def rocm_smi_topology(self):
        """Fallback for amd-smi releases without ``topology``: rocm-smi's link types.

        Returns True when a topology was set.
        """
        path = self.which(ROCM_SMI)
        if not path:
            return False
        rc, stdout, _stderr = self.run([path, "--showallinfo", "--json"])
        parsed = parse_rocm_smi_json(stdout)
        if rc != 0 or parsed["error"] is not None or not parsed["gpu_links"]:
            return False
        affinity = {}
        for record in parsed["gpus"]:
            numa = record["numa_affinity"] if record["numa_affinity"] is not None else record["numa_node"]
            affinity["GPU%d" % record["index"]] = {"cpu_affinity": None, "numa_affinity": numa, "gpu_numa_id": None}
        self.set_amd_topology("rocm-smi --showallinfo --json", parsed["gpu_links"], affinity)
        return True

    def set_amd_topology(self, source, gpu_links, affinity):
        topology = empty_topology()
        names = sorted(set(gpu_links) | set(affinity), key=lambda name: int(name[3:]))
        matrix = {}
        for name in names:
            row = {peer: gpu_links.get(name, {}).get(peer) for peer in names if peer != name}
            row[name] = "X"
            matrix[name] = row
        topology.update(
            {
                "available": bool(gpu_links),
                "source": source,
                "devices": names,
                "matrix": matrix,
                "gpu_links": gpu_links,
                "affinity": affinity,
            }
        )
        self.result["topology"] = topology

    # -- driver ---------------------------------------------------------------------------

    def execute(self):
        self.timeout_bin = self.which("timeout") if self.params.get("command_timeout") else None
        vendor, tool, path = self.select()
        if vendor is not None:
            self.result["vendor"] = vendor
            self.result["tool"] = tool
            if tool == NVIDIA_SMI:
                self.nvidia(path)
            elif tool == AMD_SMI:
                self.amd_smi(path)
            else:
                self.rocm_smi(path)
            self.result["gpu_count"] = len(self.result["gpus"])
        expectations = {key: self.params.get(key) for key in EXPECTATION_KEYS}
        tool_ok = not any(item["code"] in ("tool_missing", "tool_failed", "no_gpus") and
                          item["severity"] == CRITICAL for item in self.problems)
        if tool_ok or self.result["gpus"]:
            self.problems.extend(evaluate(self.result, expectations))
        elif expectations.get("expected_gpu_count") is not None:
            self.problems.append(
                problem(
                    CRITICAL,
                    "gpu_count_mismatch",
                    "GPU count unknown (the GPU tool failed), expected %d" % expectations["expected_gpu_count"],
                )
            )
        self.result["problems"] = self.problems
        self.result["healthy"] = is_healthy(self.problems)
        self.result["commands"] = self.commands
        return self.result


def probe(params, which, run):
    """Probe the host's GPUs.  Returns the module result (``changed`` is always False).

    ``params`` holds the module options.  Never raises for anything the tools print: an
    unexpected internal error is itself reported as a critical ``internal_error`` problem.
    """
    runner = _Probe(params, which, run)
    try:
        return runner.execute()
    except Exception as exc:  # pylint: disable=broad-except
        runner.problems.append(
            problem(CRITICAL, "internal_error", "gpu_health could not evaluate the tool output: %r" % (exc,))
        )
        result = runner.result
        result["problems"] = runner.problems
        result["healthy"] = False
        result["commands"] = runner.commands
        return result
