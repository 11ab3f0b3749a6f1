# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pure parsers for ``nvidia-smi`` output (private to this collection).

Formats and where they were checked:

* ``nvidia-smi -q -x``: element names verified against a real capture
  (A100-SXM4-80GB, driver 535.54.03, tests/fixtures/nvidia-smi/).  Elements that capture
  does not contain were learned from public documentation and code that consumes newer
  drivers' XML: ``<remapped_rows>`` children (``remapped_row_pending`` /
  ``remapped_row_failure`` ...), the 550+ ECC split (``sram_uncorrectable_parity`` /
  ``sram_uncorrectable_secded``), the pre-Ampere ECC layout (``double_bit/total``),
  ``<processes><process_info>`` and the Hopper/Blackwell ``<fabric>`` block
  (``state``, ``status``, ``cliqueId``, ``clusterUuid``, ``health``).  The 550+ ECC names,
  ``<remapped_rows>`` children, ``<processes>``, the ``<fabric>`` element names (all N/A) and
  the 590 power element names were later confirmed on an RTX PRO 6000 Blackwell capture
  (driver 590.44.01); a fabric in state ``Completed`` has not been seen in a capture.
* ``nvidia-smi nvlink -s``: verified against a real GB200 excerpt (``Link N: 53.125 GB/s``);
  the ``<inactive>`` spelling of a down link was learned from public code and issues.
* ``nvidia-smi topo -m``: verified against two real layouts (``NIC#`` columns with a NIC
  legend, space separated; and old-style ``mlx5_N`` columns, tab separated, no legend and
  no ``GPU NUMA ID`` column).

Every function here is pure: text in, plain dicts out.  Nothing raises on odd input; what
cannot be read is reported as ``None`` (unknown), never guessed.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

# Values nvidia-smi prints when it has no reading.  They mean "unknown", never zero.
_UNKNOWN_VALUES = frozenset(
    (
        "",
        "n/a",
        "not supported",
        "unknown error",
        "insufficient permissions",
        "not available",
        "unknown",
        "requested functionality has been deprecated",
        "gpu is lost",
    )
)

_NUMBER_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)")
_XML_START_RE = re.compile(r"<\?xml|<nvidia_smi_log[\s>]")
_XML_END = "</nvidia_smi_log>"


def clean(value):
    """Return a stripped string, or None when nvidia-smi reports no value."""
    if value is None:
        return None
    text = str(value).strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1].strip()
    if text.lower() in _UNKNOWN_VALUES:
        return None
    return text


def to_number(value, kind=float):
    """Leading number of a value such as ``81920 MiB``, ``67.03 W`` or ``16x``; else None."""
    text = clean(value)
    if text is None:
        return None
    match = _NUMBER_RE.match(text)
    if not match:
        return None
    try:
        number = float(match.group(1))
    except ValueError:
        return None
    if kind is int:
        return int(number)
    return number


def to_bool(value):
    """``Yes``/``No``/``Enabled``/``Disabled``/``Active``/... -> True/False; else None."""
    text = clean(value)
    if text is None:
        return None
    lowered = text.lower()
    if lowered in ("yes", "enabled", "enable", "on", "true", "active"):
        return True
    if lowered in ("no", "disabled", "disable", "off", "false", "not active", "inactive"):
        return False
    return None


def _mode(value):
    """Normalise an Enabled/Disabled mode to ``enabled``/``disabled``; other text lower-cased."""
    text = clean(value)
    if text is None:
        return None
    return text.lower()


def _find_text(element, path):
    if element is None:
        return None
    found = element.find(path)
    if found is None:
        return None
    return found.text


def split_xml_output(text):
    """Split ``nvidia-smi -q -x`` output into (xml_text or None, list of non-XML lines).

    nvidia-smi writes errors such as "Unable to determine the device handle for GPU ...:
    Unknown Error" as plain lines next to (or instead of) the XML document.
    """
    text = text or ""
    match = _XML_START_RE.search(text)
    if not match:
        return None, [line.strip() for line in text.splitlines() if line.strip()]
    end = text.find(_XML_END, match.start())
    if end < 0:
        xml_text = text[match.start():]
        rest = text[:match.start()]
    else:
        end += len(_XML_END)
        xml_text = text[match.start():end]
        rest = text[:match.start()] + "\n" + text[end:]
    return xml_text, [line.strip() for line in rest.splitlines() if line.strip()]


def _sum_counts(element, wanted):
    """Sum the children of ``element`` whose tag satisfies ``wanted``.

    Returns None when no such child carries a number (all N/A or absent).
    """
    if element is None:
        return None
    total = None
    for child in element.iter():
        if child is element or len(child):
            continue
        if not wanted(child.tag):
            continue
        number = to_number(child.text, int)
        if number is None:
            continue
        total = number if total is None else total + number
    return total


def _is_uncorrectable(tag):
    return "uncorrectable" in tag


def _is_correctable(tag):
    return "correctable" in tag and "uncorrectable" not in tag


def _ecc_counts(ecc_errors, scope):
    """ECC counts for ``volatile`` or ``aggregate`` in every known driver layout."""
    if ecc_errors is None:
        return None, None
    section = ecc_errors.find(scope)
    if section is None:
        return None, None
    # Driver >= 450: sram_/dram_ (un)correctable[_parity|_secded] leaves.
    uncorrectable = _sum_counts(section, _is_uncorrectable)
    correctable = _sum_counts(section, _is_correctable)
    # Older drivers: <single_bit>/<double_bit> groups with a <total> leaf.
    if uncorrectable is None:
        uncorrectable = to_number(_find_text(section, "double_bit/total"), int)
    if correctable is None:
        correctable = to_number(_find_text(section, "single_bit/total"), int)
    return uncorrectable, correctable


def _retired_pages(gpu):
    node = gpu.find("retired_pages")
    if node is None:
        return {"single_bit": None, "double_bit": None, "pending": None}
    pending = to_bool(_find_text(node, "pending_retirement"))
    if pending is None:
        # Older drivers called it pending_blacklist.
        pending = to_bool(_find_text(node, "pending_blacklist"))
    return {
        "single_bit": to_number(_find_text(node, "multiple_single_bit_retirement/retired_count"), int),
        "double_bit": to_number(_find_text(node, "double_bit_retirement/retired_count"), int),
        "pending": pending,
    }


def _row_remap(gpu):
    node = gpu.find("remapped_rows")
    # On GPUs/modes without row remapping the element holds the text "N/A".
    return {
        "correctable": to_number(_find_text(node, "remapped_row_corr"), int),
        "uncorrectable": to_number(_find_text(node, "remapped_row_unc"), int),
        "pending": to_bool(_find_text(node, "remapped_row_pending")),
        "failure": to_bool(_find_text(node, "remapped_row_failure")),
    }


def _pcie(gpu):
    link = gpu.find("pci/pci_gpu_link_info")
    return {
        "current_gen": to_number(_find_text(link, "pcie_gen/current_link_gen"), int),
        "max_gen": to_number(_find_text(link, "pcie_gen/max_link_gen"), int),
        "current_width": to_number(_find_text(link, "link_widths/current_link_width"), int),
        "max_width": to_number(_find_text(link, "link_widths/max_link_width"), int),
    }


def _fabric(gpu):
    node = gpu.find("fabric")
    health = None
    health_node = node.find("health") if node is not None else None
    if health_node is not None:
        health = {}
        for child in health_node:
            health[child.tag] = clean(child.text)
    return {
        "state": clean(_find_text(node, "state")),
        "status": clean(_find_text(node, "status")),
        "clique_id": clean(_find_text(node, "cliqueId")),
        "cluster_uuid": clean(_find_text(node, "clusterUuid")),
        "health": health,
    }


def _processes(gpu):
    node = gpu.find("processes")
    if node is None:
        return None
    processes = []
    for info in node.findall("process_info"):
        processes.append(
            {
                "pid": to_number(_find_text(info, "pid"), int),
                "type": clean(_find_text(info, "type")),
                "name": clean(_find_text(info, "process_name")),
                "used_memory_mib": to_number(_find_text(info, "used_memory"), int),
                "gpu_instance_id": to_number(_find_text(info, "gpu_instance_id"), int),
                "compute_instance_id": to_number(_find_text(info, "compute_instance_id"), int),
            }
        )
    return processes


def _power_draw(gpu):
    # Driver >= 530 moved power_readings to gpu_power_readings; driver 590 (verified on an
    # RTX PRO 6000 Blackwell capture) replaced power_draw by average_/instant_power_draw.
    paths = (
        "gpu_power_readings/power_draw",
        "gpu_power_readings/average_power_draw",
        "gpu_power_readings/instant_power_draw",
        "power_readings/power_draw",
    )
    for path in paths:
        value = to_number(_find_text(gpu, path))
        if value is not None:
            return value
    return None


def _xml_nvlinks(gpu):
    """NVLink state from the XML when a driver includes it; None when it does not.

    None of the published ``-q -x`` captures carries NVLink state, so the caller falls back
    to ``nvidia-smi nvlink -s``.  This only reads an ``<nvlink>`` element if one exists.
    """
    node = gpu.find("nvlink")
    if node is None:
        return None
    links = []
    for number, link in enumerate(node.findall("link")):
        state = to_bool(_find_text(link, "state"))
        links.append(
            {
                "link": to_number(_find_text(link, "id"), int) if link.find("id") is not None else number,
                "state": "unknown" if state is None else ("up" if state else "down"),
                "speed_gbps": to_number(_find_text(link, "speed")),
            }
        )
    return links or None


def _gpu_record(position, gpu):
    mig = gpu.find("mig_mode")
    mig_devices = gpu.find("mig_devices")
    ecc_errors = gpu.find("ecc_errors")
    vol_unc, vol_cor = _ecc_counts(ecc_errors, "volatile")
    agg_unc, agg_cor = _ecc_counts(ecc_errors, "aggregate")
    pci_bus_id = clean(_find_text(gpu, "pci/pci_bus_id")) or clean(gpu.get("id"))
    nvlinks = _xml_nvlinks(gpu)
    return {
        "index": position,
        "name": clean(_find_text(gpu, "product_name")),
        "uuid": clean(_find_text(gpu, "uuid")),
        "pci_bus_id": pci_bus_id,
        "memory_total_mib": to_number(_find_text(gpu, "fb_memory_usage/total"), int),
        "memory_used_mib": to_number(_find_text(gpu, "fb_memory_usage/used"), int),
        "persistence_mode": _mode(_find_text(gpu, "persistence_mode")),
        "ecc": {
            "mode": _mode(_find_text(gpu, "ecc_mode/current_ecc")),
            "volatile_uncorrectable": vol_unc,
            "aggregate_uncorrectable": agg_unc,
            "volatile_correctable": vol_cor,
            "aggregate_correctable": agg_cor,
        },
        "retired_pages": _retired_pages(gpu),
        "row_remap": _row_remap(gpu),
        "temperature_c": to_number(_find_text(gpu, "temperature/gpu_temp")),
        "power_draw_w": _power_draw(gpu),
        "pcie": _pcie(gpu),
        "nvlinks": nvlinks,
        "nvlink_source": "nvidia-smi -q -x" if nvlinks is not None else None,
        "fabric": _fabric(gpu),
        "mig": {
            "current": _mode(_find_text(mig, "current_mig")),
            "pending": _mode(_find_text(mig, "pending_mig")),
            "devices": len(mig_devices.findall("mig_device")) if mig_devices is not None else 0,
        },
        "processes": _processes(gpu),
    }


def parse_query_xml(text):
    """Parse ``nvidia-smi -q -x`` output.

    Returns a dict with ``error`` (None or a message), ``messages`` (non-XML lines the tool
    printed, e.g. device-handle errors), ``driver_version``, ``cuda_version``,
    ``attached_gpus`` and ``gpus`` (a list of per-GPU dicts, in output order which is
    nvidia-smi's index order).
    """
    result = {
        "error": None,
        "malformed_xml": False,
        "messages": [],
        "driver_version": None,
        "cuda_version": None,
        "attached_gpus": None,
        "gpus": [],
    }
    xml_text, messages = split_xml_output(text)
    result["messages"] = messages
    if xml_text is None:
        result["error"] = "output contains no nvidia_smi_log XML document"
        return result
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError as exc:
        result["error"] = "output is not well-formed XML (%s)" % exc
        result["malformed_xml"] = True
        return result
    if root.tag != "nvidia_smi_log":
        result["error"] = "unexpected XML root element <%s>" % root.tag
        return result
    result["driver_version"] = clean(_find_text(root, "driver_version"))
    result["cuda_version"] = clean(_find_text(root, "cuda_version"))
    result["attached_gpus"] = to_number(_find_text(root, "attached_gpus"), int)
    result["gpus"] = [_gpu_record(position, gpu) for position, gpu in enumerate(root.findall("gpu"))]
    return result


# --------------------------------------------------------------------------------------
# nvidia-smi nvlink -s
# --------------------------------------------------------------------------------------

_NVLINK_GPU_RE = re.compile(r"^\s*GPU\s+(\d+):\s*(.*?)\s*(?:\(UUID:\s*([^)]+)\))?\s*$")
_NVLINK_LINK_RE = re.compile(r"^\s*Link\s+(\d+):\s*(.*?)\s*$")
_SPEED_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*GB/s$", re.IGNORECASE)


def _link_state(raw):
    text = raw.strip()
    match = _SPEED_RE.match(text)
    if match:
        return "up", float(match.group(1))
    lowered = text.strip("<>").strip().lower()
    if lowered in ("inactive", "down", "disabled", "off"):
        return "down", None
    return "unknown", None


def parse_nvlink_status(text):
    """Parse ``nvidia-smi nvlink -s``.

    Returns ``{"gpus": {index: {"name", "uuid", "links": [...]}}, "truncated": bool}``.
    Each link is ``{"link": n, "state": "up"|"down"|"unknown", "speed_gbps": float|None}``.
    ``<inactive>`` is down; a bandwidth figure is up; anything else is unknown.  A line of
    ``...`` (an elided capture) sets ``truncated``: links that are not listed are unknown,
    never assumed down.
    """
    gpus = {}
    truncated = False
    current = None
    for line in (text or "").splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if stripped in ("...", "\u2026"):
            truncated = True
            continue
        gpu_match = _NVLINK_GPU_RE.match(line)
        if gpu_match:
            current = {
                "name": gpu_match.group(2) or None,
                "uuid": gpu_match.group(3).strip() if gpu_match.group(3) else None,
                "links": [],
            }
            gpus[int(gpu_match.group(1))] = current
            continue
        link_match = _NVLINK_LINK_RE.match(line)
        if link_match and current is not None:
            state, speed = _link_state(link_match.group(2))
            current["links"].append(
                {"link": int(link_match.group(1)), "state": state, "speed_gbps": speed}
            )
    return {"gpus": gpus, "truncated": truncated}


# --------------------------------------------------------------------------------------
# nvidia-smi topo -m
# --------------------------------------------------------------------------------------

_NIC_LEGEND_RE = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
_LEGEND_RE = re.compile(r"^\s*(\S+)\s+=\s+(.+?)\s*$")
_EXTRA_COLUMNS = {
    "cpu affinity": "cpu_affinity",
    "numa affinity": "numa_affinity",
    "gpu numa id": "gpu_numa_id",
}


def _split_cells(line):
    if "\t" in line:
        return [cell.strip() for cell in line.split("\t")]
    return line.split()


def _split_header(line):
    cells = [cell.strip() for cell in line.split("\t")] if "\t" in line else re.split(r"\s{2,}", line.strip())
    return [cell for cell in cells if cell]


def parse_topo_matrix(text):
    """Parse ``nvidia-smi topo -m``.

    Returns a dict:

    * ``devices``: matrix column names in order (``GPU0``, ``NIC0`` or ``mlx5_0`` ...);
    * ``matrix``: ``{row: {column: link}}`` for every device row (``X`` for self);
    * ``gpu_links``: the GPU-to-GPU part, self excluded;
    * ``affinity``: ``{"GPU0": {"cpu_affinity", "numa_affinity", "gpu_numa_id"}}``;
    * ``nics``: NIC column -> device name (from the NIC legend; old-style ``mlx5_N``
      columns name themselves; None where the legend does not say);
    * ``legend``: link-type legend (``SYS`` -> description ...);
    * ``warnings``: what could not be read (e.g. a truncated NIC legend).

    ``error`` is set when no matrix header is found.
    """
    result = {
        "error": None,
        "devices": [],
        "matrix": {},
        "gpu_links": {},
        "affinity": {},
        "nics": {},
        "legend": {},
        "warnings": [],
    }
    lines = (text or "").splitlines()
    header_at = None
    for number, line in enumerate(lines):
        cells = _split_header(line)
        if cells and cells[0].startswith("GPU") and re.match(r"^GPU\d+$", cells[0]):
            header_at = number
            header = cells
            break
    if header_at is None:
        result["error"] = "no topology matrix header (GPU0 ...) found"
        return result

    devices = []
    extras = []
    for cell in header:
        key = _EXTRA_COLUMNS.get(cell.lower())
        if key is not None:
            extras.append(key)
        elif not extras:
            devices.append(cell)
        else:
            extras.append(cell.lower().replace(" ", "_"))
    result["devices"] = devices

    row_end = len(lines)
    for number in range(header_at + 1, len(lines)):
        line = lines[number]
        if not line.strip() or line.strip().startswith("Legend"):
            row_end = number
            break
        cells = _split_cells(line)
        if not cells or not cells[0]:
            continue
        name = cells[0]
        values = cells[1:]
        row = {}
        for position, device in enumerate(devices):
            value = values[position] if position < len(values) else ""
            row[device] = value or None
        result["matrix"][name] = row
        if name.startswith("GPU"):
            affinity = {key: None for key in ("cpu_affinity", "numa_affinity", "gpu_numa_id")}
            for position, key in enumerate(extras):
                at = len(devices) + position
                if at < len(values):
                    affinity[key] = clean(values[at])
            result["affinity"][name] = affinity
            result["gpu_links"][name] = {
                peer: link for peer, link in row.items() if peer.startswith("GPU") and peer != name
            }

    nic_legend = {}
    legend = {}
    for line in lines[row_end:]:
        nic_match = _NIC_LEGEND_RE.match(line)
        if nic_match:
            nic_legend[nic_match.group(1)] = nic_match.group(2)
            continue
        legend_match = _LEGEND_RE.match(line)
        if legend_match:
            legend[legend_match.group(1)] = legend_match.group(2)
    result["legend"] = legend

    missing = []
    for device in devices:
        if device.startswith("GPU"):
            continue
        if re.match(r"^NIC\d+$", device):
            result["nics"][device] = nic_legend.get(device)
            if device not in nic_legend:
                missing.append(device)
        else:
            # Old-style output names the NIC (mlx5_0 ...) directly as the column.
            result["nics"][device] = device
    if missing:
        result["warnings"].append(
            "NIC legend does not name %s (legend missing or truncated); NIC device names unknown"
            % ", ".join(missing)
        )
    gpu_columns = [device for device in devices if device.startswith("GPU")]
    for gpu in gpu_columns:
        if gpu not in result["matrix"]:
            result["warnings"].append("matrix has a %s column but no %s row" % (gpu, gpu))
    return result


# --------------------------------------------------------------------------------------
# nvidia-smi (no arguments): the summary table
# --------------------------------------------------------------------------------------

_TABLE_VERSION_RE = re.compile(r"NVIDIA-SMI\s+(\S+)\s+Driver Version:\s*(\S+)\s+CUDA Version:\s*(\S+)")
_TABLE_GPU_LINE1_RE = re.compile(
    r"^\|\s*(\d+)\s+(.+?)\s+(On|Off)\s*\|\s*([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s+\S+\s*\|\s*(\S+)\s*\|$"
)
_TABLE_GPU_LINE2_RE = re.compile(
    r"^\|\s*(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*/\s*(\S+)\s*\|\s*(\d+)MiB\s*/\s*(\d+)MiB\s*\|\s*(\S+)\s+(\S+)\s*\|$"
)
_TABLE_PROCESS_RE = re.compile(r"^\|\s*(\d+)\s+(\S+)\s+(\S+)\s+(\d+)\s+(\S+)\s+(.+?)\s+(\d+)MiB\s*\|$")


def parse_summary_table(text):
    """Parse the table plain ``nvidia-smi`` prints, the fallback when ``-q -x`` is unusable.

    It has fewer facts than the XML: names can be cut short by the column width, and ECC
    shows only the volatile uncorrectable count. Everything else stays unknown (None).
    """
    result = {"error": None, "driver_version": None, "cuda_version": None, "gpus": [], "processes": []}
    version = _TABLE_VERSION_RE.search(text or "")
    if version is None:
        result["error"] = "output has no 'NVIDIA-SMI ... Driver Version' header"
        return result
    result["driver_version"], result["cuda_version"] = version.group(2), version.group(3)
    lines = [line.rstrip() for line in text.splitlines()]
    for number, line in enumerate(lines):
        first = _TABLE_GPU_LINE1_RE.match(line)
        if first is None:
            continue
        second = _TABLE_GPU_LINE2_RE.match(lines[number + 1]) if number + 1 < len(lines) else None
        gpu = {
            "index": int(first.group(1)),
            "name": first.group(2).strip(),
            "persistence_mode": "enabled" if first.group(3) == "On" else "disabled",
            "pci_bus_id": first.group(4),
            "ecc_volatile_uncorrectable": to_number(first.group(5), int),
            "temperature_c": None,
            "power_draw_w": None,
            "memory_used_mib": None,
            "memory_total_mib": None,
        }
        if second is not None:
            gpu["temperature_c"] = to_number(second.group(2).rstrip("C"), int)
            gpu["power_draw_w"] = to_number(second.group(4).rstrip("W"))
            gpu["memory_used_mib"] = int(second.group(6))
            gpu["memory_total_mib"] = int(second.group(7))
        result["gpus"].append(gpu)
    for line in lines:
        process = _TABLE_PROCESS_RE.match(line)
        if process is not None:
            result["processes"].append({
                "gpu": int(process.group(1)),
                "pid": int(process.group(4)),
                "type": process.group(5),
                "name": process.group(6).strip(),
                "used_memory_mib": int(process.group(7)),
            })
    if not result["gpus"]:
        result["error"] = "the table lists no GPU rows"
    return result
