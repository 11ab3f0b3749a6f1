# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pure parsers for ``amd-smi`` and ``rocm-smi`` output (private to this collection).

Formats and where they were checked:

* ``amd-smi static``: section and key names verified against a real MI350X text capture
  (``GPU: 0`` / ``ASIC: MARKET_NAME`` / ``BUS: BDF, MAX_PCIE_WIDTH, MAX_PCIE_SPEED`` /
  ``DRIVER: VERSION`` / ``RAS: ...``; tests/fixtures/rocm/).  The ``--json`` form is not
  captured: that it uses the same names lower-cased, wraps GPUs either in a bare list or in
  ``{"gpu_data": [...]}`` (newer releases) and gives measured values as
  ``{"value": N, "unit": "..."}`` was learned from AMD's amd-smi CLI documentation and from
  public code that consumes it.
* ``amd-smi metric --json`` (``mem_usage.total_vram/used_vram``, ``temperature.hotspot/edge``,
  ``power.socket_power``, ``pcie.width/speed``, ``ecc.total_uncorrectable_count``),
  ``amd-smi version --json`` (``rocm_version``, ``amdgpu_version``),
  ``amd-smi topology --json`` (``links[].gpu/link_type/link_status``) and
  ``amd-smi process --json`` (``process_list[].process_info``): learned from docs and public
  code only; no capture exists.
* ``rocm-smi --showallinfo --json``: verified against a real 4x MI100 capture
  (``cardN`` objects with human-readable keys, a ``system`` object with the driver version
  and ``(Topology) Link type between DRM devices A and B``).

Every function is pure and never raises on odd input; what is missing is None (unknown).
"""

from __future__ import annotations

import json
import re

_UNKNOWN = frozenset(("", "n/a", "na", "none", "not supported", "unknown", "not available"))

# PCIe transfer rate (GT/s) -> generation.
_PCIE_GEN_BY_RATE = ((2.5, 1), (5.0, 2), (8.0, 3), (16.0, 4), (32.0, 5), (64.0, 6), (128.0, 7))

_UNIT_TO_MIB = {
    "b": 1.0 / (1024 * 1024),
    "kb": 1.0 / 1024,
    "kib": 1.0 / 1024,
    # amd-smi labels its memory values "MB" although they are MiB (an MI300X's 192 GiB
    # shows as 196592 MB), so MB is taken as MiB.
    "mb": 1.0,
    "mib": 1.0,
    "gb": 1024.0,
    "gib": 1024.0,
}


def clean(value):
    """Stripped string, or None for amd-smi/rocm-smi's "no value" spellings."""
    if value is None or isinstance(value, (dict, list)):
        return None
    text = str(value).strip()
    if text.lower() in _UNKNOWN:
        return None
    return text


def _leaf(value):
    """Unwrap amd-smi's ``{"value": N, "unit": U}`` objects -> (value, unit)."""
    if isinstance(value, dict):
        return value.get("value"), value.get("unit")
    return value, None


def to_number(value, kind=float):
    """Number from ``12``, ``"12.5"``, ``"32 GT/s"`` or ``{"value": 12, "unit": "W"}``."""
    raw, _unit = _leaf(value)
    if isinstance(raw, bool):
        return None
    if isinstance(raw, (int, float)):
        number = float(raw)
    else:
        text = clean(raw)
        if text is None:
            return None
        match = re.match(r"^\s*(-?\d+(?:\.\d+)?)", text)
        if not match:
            return None
        number = float(match.group(1))
    return int(number) if kind is int else number


def to_mib(value, default_unit="MB"):
    """Memory value in MiB from a ``{"value", "unit"}`` object or a plain number."""
    raw, unit = _leaf(value)
    number = to_number(raw)
    if number is None:
        return None
    if unit is None and isinstance(raw, str):
        match = re.match(r"^\s*-?\d+(?:\.\d+)?\s*([A-Za-z]+)", raw)
        unit = match.group(1) if match else None
    factor = _UNIT_TO_MIB.get(str(unit or default_unit).strip().lower())
    if factor is None:
        return None
    return int(round(number * factor))


def pcie_gen_from_rate(rate_gts):
    if rate_gts is None:
        return None
    for rate, gen in _PCIE_GEN_BY_RATE:
        if abs(rate_gts - rate) < 0.01:
            return gen
    return None


def load_json(text):
    """Parse JSON that may follow warning lines (amd-smi prints ``WARNING: ...`` first).

    Returns (data, error).
    """
    text = text or ""
    try:
        return json.loads(text), None
    except ValueError:
        pass
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if line.lstrip().startswith(("{", "[")):
            try:
                return json.loads("\n".join(lines[number:])), None
            except ValueError:
                continue
    snippet = " ".join(line.strip() for line in lines if line.strip())[:300]
    return None, "output is not JSON: %s" % (snippet or "(empty)")


def _gpu_entries(data):
    """amd-smi JSON lists GPUs as a bare list or under ``gpu_data``; return the list."""
    if isinstance(data, dict):
        if isinstance(data.get("gpu_data"), list):
            data = data["gpu_data"]
        elif "gpu" in data:
            data = [data]
        else:
            return []
    if not isinstance(data, list):
        return []
    return [entry for entry in data if isinstance(entry, dict)]


def _gpu_index(entry, position):
    index = to_number(entry.get("gpu"), int)
    return position if index is None else index


def _section(entry, name):
    value = entry.get(name)
    return value if isinstance(value, dict) else {}


# --------------------------------------------------------------------------------------
# amd-smi static (JSON, or the text form as captured)
# --------------------------------------------------------------------------------------


def parse_amd_smi_static_text(text):
    """Turn ``amd-smi static`` text output into the same shape as its ``--json`` output.

    Lines are ``KEY: value`` nested by indentation under ``GPU: N``; keys are lower-cased
    (that is how the JSON form names them).
    """
    gpus = []
    stack = []
    for line in (text or "").splitlines():
        if not line.strip() or ":" not in line:
            continue
        indent = len(line) - len(line.lstrip(" "))
        key, _sep, value = line.strip().partition(":")
        key = key.strip()
        value = value.strip()
        if indent == 0:
            if key.upper() == "GPU":
                entry = {"gpu": value}
                gpus.append(entry)
                stack = [(0, entry)]
            else:
                stack = []
            continue
        if not stack:
            continue
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        if value:
            parent[key.lower()] = value
        else:
            child = {}
            parent[key.lower()] = child
            stack.append((indent, child))
    return gpus


def _static_record(entry, position):
    asic = _section(entry, "asic")
    bus = _section(entry, "bus")
    vram = _section(entry, "vram")
    driver = _section(entry, "driver")
    board = _section(entry, "board")
    max_speed = to_number(bus.get("max_pcie_speed"))
    ras = _section(entry, "ras")
    return {
        "index": _gpu_index(entry, position),
        "name": clean(asic.get("market_name")) or clean(board.get("product_name")),
        "uuid": clean(entry.get("uuid")),
        "pci_bus_id": clean(bus.get("bdf")),
        "memory_total_mib": to_mib(vram.get("size")),
        "driver_version": clean(driver.get("version")),
        "pcie_max_width": to_number(bus.get("max_pcie_width"), int),
        "pcie_max_gen": pcie_gen_from_rate(max_speed),
        "ras": {key: clean(value) for key, value in ras.items() if not isinstance(value, (dict, list))},
    }


def parse_amd_smi_static(text):
    """Parse ``amd-smi static --json`` (or its text form).  Returns {"error", "gpus"}."""
    data, error = load_json(text)
    if error is None:
        entries = _gpu_entries(data)
    else:
        entries = parse_amd_smi_static_text(text)
        if entries:
            error = None
    if error is not None:
        return {"error": error, "gpus": []}
    return {"error": None, "gpus": [_static_record(entry, pos) for pos, entry in enumerate(entries)]}


# --------------------------------------------------------------------------------------
# amd-smi metric / version / topology / process (JSON)
# --------------------------------------------------------------------------------------


def _metric_record(entry, position):
    mem = _section(entry, "mem_usage")
    temp = _section(entry, "temperature")
    power = _section(entry, "power")
    pcie = _section(entry, "pcie")
    ecc = _section(entry, "ecc")
    temperature = to_number(temp.get("hotspot"))
    if temperature is None:
        temperature = to_number(temp.get("edge"))
    power_w = to_number(power.get("socket_power"))
    if power_w is None:
        power_w = to_number(power.get("average_socket_power"))
    return {
        "index": _gpu_index(entry, position),
        "memory_total_mib": to_mib(mem.get("total_vram")),
        "memory_used_mib": to_mib(mem.get("used_vram")),
        "temperature_c": temperature,
        "power_draw_w": power_w,
        "pcie_current_width": to_number(pcie.get("width"), int),
        "pcie_current_gen": pcie_gen_from_rate(to_number(pcie.get("speed"))),
        "ecc_uncorrectable": to_number(ecc.get("total_uncorrectable_count"), int),
        "ecc_correctable": to_number(ecc.get("total_correctable_count"), int),
        "ecc_deferred": to_number(ecc.get("total_deferred_count"), int),
    }


def parse_amd_smi_metric(text):
    """Parse ``amd-smi metric --json``.  Returns {"error", "gpus": {index: {...}}}."""
    data, error = load_json(text)
    if error is not None:
        return {"error": error, "gpus": {}}
    records = [_metric_record(entry, pos) for pos, entry in enumerate(_gpu_entries(data))]
    return {"error": None, "gpus": {record["index"]: record for record in records}}


def parse_amd_smi_version(text):
    """Parse ``amd-smi version --json`` -> {"error", "rocm_version", "amdgpu_version", "tool_version"}."""
    data, error = load_json(text)
    result = {"error": error, "rocm_version": None, "amdgpu_version": None, "tool_version": None}
    if error is not None:
        return result
    if isinstance(data, list):
        data = data[0] if data and isinstance(data[0], dict) else {}
    if not isinstance(data, dict):
        result["error"] = "unexpected JSON shape"
        return result
    result["rocm_version"] = clean(data.get("rocm_version"))
    result["amdgpu_version"] = clean(data.get("amdgpu_version"))
    result["tool_version"] = clean(data.get("version"))
    return result


def parse_amd_smi_topology(text):
    """Parse ``amd-smi topology --json`` into ``{"error", "gpu_links": {"GPU0": {"GPU1": "XGMI"}}}``.

    Handles the per-GPU ``links`` list (current releases) and the older
    ``{"link_type": {"gpu_0": "XGMI", ...}}`` layout.
    """
    data, error = load_json(text)
    result = {"error": error, "gpu_links": {}}
    if error is not None:
        return result
    for position, entry in enumerate(_gpu_entries(data)):
        source = "GPU%d" % _gpu_index(entry, position)
        peers = {}
        links = entry.get("links")
        if isinstance(links, list):
            for link in links:
                if not isinstance(link, dict):
                    continue
                peer = to_number(link.get("gpu"), int)
                kind = clean(link.get("link_type"))
                if peer is None or "GPU%d" % peer == source or (kind or "").upper() == "SELF":
                    continue
                peers["GPU%d" % peer] = kind
        elif isinstance(entry.get("link_type"), dict):
            for key, kind in entry["link_type"].items():
                match = re.match(r"^gpu_(\d+)$", str(key))
                if not match or "GPU%s" % match.group(1) == source:
                    continue
                kind = clean(kind)
                if (kind or "").upper() == "SELF":
                    continue
                peers["GPU%s" % match.group(1)] = kind
        result["gpu_links"][source] = peers
    return result


def parse_amd_smi_process(text):
    """Parse ``amd-smi process --json`` -> {"error", "gpus": {index: [process, ...]}}."""
    data, error = load_json(text)
    result = {"error": error, "gpus": {}}
    if error is not None:
        return result
    for position, entry in enumerate(_gpu_entries(data)):
        processes = []
        for item in entry.get("process_list") or []:
            info = item.get("process_info", item) if isinstance(item, dict) else None
            if not isinstance(info, dict) or info.get("pid") is None:
                continue  # e.g. "process_info": "No running processes detected"
            memory = info.get("vram_mem")
            if memory is None:
                memory = info.get("mem_usage")
            if memory is None:
                memory = info.get("mem")
            processes.append(
                {
                    "pid": to_number(info.get("pid"), int),
                    "type": None,
                    "name": clean(info.get("name")),
                    "used_memory_mib": to_mib(memory, default_unit="B"),
                    "gpu_instance_id": None,
                    "compute_instance_id": None,
                }
            )
        result["gpus"][_gpu_index(entry, position)] = processes
    return result


# --------------------------------------------------------------------------------------
# rocm-smi --showallinfo --json
# --------------------------------------------------------------------------------------

_ROCM_LINK_RE = re.compile(r"^\(Topology\) Link type between DRM devices (\d+) and (\d+)$")
_ROCM_PCIE_RE = re.compile(r"(\d+(?:\.\d+)?)\s*GT/s\s*x(\d+)", re.IGNORECASE)


def _first(card, *keys):
    """Value of the first key present, matching keys case-insensitively."""
    lowered = {str(key).lower(): value for key, value in card.items()}
    for key in keys:
        value = clean(lowered.get(key.lower()))
        if value is not None:
            return value
    return None


def _rocm_card(index, card):
    vram_total = to_number(_first(card, "VRAM Total Memory (B)"))
    vram_used = to_number(_first(card, "VRAM Total Used Memory (B)"))
    temperature = to_number(_first(card, "Temperature (Sensor junction) (C)", "Temperature (Sensor edge) (C)"))
    power = to_number(
        _first(
            card,
            "Current Socket Graphics Package Power (W)",
            "Average Graphics Package Power (W)",
        )
    )
    pcie_gen = None
    pcie_width = None
    pcie = _first(card, "pcie clock level")
    match = _ROCM_PCIE_RE.search(pcie or "")
    if match:
        pcie_gen = pcie_gen_from_rate(float(match.group(1)))
        pcie_width = int(match.group(2))
    uncorrectable = None
    for key, value in card.items():
        # rocm-smi --showrasinfo style keys, when present: "... UE" / "Uncorrectable ..."
        lowered = str(key).lower()
        if "uncorrectable" in lowered or lowered.endswith(" ue"):
            number = to_number(value, int)
            if number is not None:
                uncorrectable = number if uncorrectable is None else uncorrectable + number
    return {
        "index": index,
        "name": _first(card, "Card Series", "Card series", "Card model", "Device Name"),
        "uuid": _first(card, "Unique ID", "GUID"),
        "pci_bus_id": _first(card, "PCI Bus"),
        "memory_total_mib": int(round(vram_total / (1024 * 1024))) if vram_total is not None else None,
        "memory_used_mib": int(round(vram_used / (1024 * 1024))) if vram_used is not None else None,
        "temperature_c": temperature,
        "power_draw_w": power,
        "pcie_current_gen": pcie_gen,
        "pcie_current_width": pcie_width,
        "numa_node": _first(card, "(Topology) Numa Node"),
        "numa_affinity": _first(card, "(Topology) Numa Affinity"),
        "ecc_uncorrectable": uncorrectable,
    }


def parse_rocm_smi_json(text):
    """Parse ``rocm-smi ... --json``.

    Returns {"error", "driver_version", "gpus": [...], "gpu_links": {"GPU0": {"GPU1": "PCIE"}}}.
    """
    data, error = load_json(text)
    result = {"error": error, "driver_version": None, "gpus": [], "gpu_links": {}}
    if error is not None:
        return result
    if not isinstance(data, dict):
        result["error"] = "unexpected JSON shape (expected an object of cardN entries)"
        return result
    cards = []
    for key, value in data.items():
        match = re.match(r"^card(\d+)$", str(key))
        if match and isinstance(value, dict):
            cards.append((int(match.group(1)), value))
    cards.sort(key=lambda item: item[0])
    result["gpus"] = [_rocm_card(index, card) for index, card in cards]
    system = data.get("system") if isinstance(data.get("system"), dict) else {}
    result["driver_version"] = _first(system, "Driver version")
    links = {}
    for key, value in system.items():
        match = _ROCM_LINK_RE.match(str(key))
        if not match:
            continue
        first, second = "GPU%s" % match.group(1), "GPU%s" % match.group(2)
        kind = clean(value)
        links.setdefault(first, {})[second] = kind
        links.setdefault(second, {})[first] = kind
    result["gpu_links"] = links
    return result
