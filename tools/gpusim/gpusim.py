#!/usr/bin/env python3
"""Simulated GPU / fabric / InfiniBand tools for GPU-less sandbox hosts.

One multi-call program: installed once per mock host and symlinked as nvidia-smi,
amd-smi, rocm-smi, ibstat, ibv_devinfo, nvidia-imex-ctl and all_reduce_perf; it
dispatches on the name it was called by. Called as ``gpusim.py <subcommand>`` it
offers the sandbox's admin commands (install, tools, fault).

Hardware is described by JSON profiles beside this file; per-host state (which
profile, hostname, injected faults) lives under ``$GPUSIM_ROOT/etc/gpusim/``.
Every renderer is a pure function of plain data so tests can feed it the values
of a real capture and compare text byte for byte. Stdlib only, Python 3.9+.
"""

import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
import sys
from pathlib import Path

HOST_CONFIG = "etc/gpusim/host.json"
FAULTS_FILE = "etc/gpusim/faults.json"
# What the stand-in vendor packages (tools/vendor_repo) report from their maintainer scripts:
# installed packages, their roles and the links they made, and which kernel-module versions are "loaded".
DRIVER_STATE = "etc/gpusim/driver.json"
# Stand-in daemons shipped by those packages write <name>.pid here while they run.
RUN_DIR = "run/gpusim"
SYSTEMD_DIR = "etc/systemd/system"
DRIVER_LOAD_UNIT = "gpusim-driver-load.service"
INSTALL_DIR = "usr/local/lib/gpusim"
BIN_DIR = "usr/bin"
# Relative, so the same link works inside the host and in a root directory seen
# from the controller (or a test's tmp dir).
LINK_TARGET = "../local/lib/gpusim/gpusim.py"
ALL_TOOLS = ("nvidia-smi", "amd-smi", "rocm-smi", "ibstat", "ibv_devinfo", "nvidia-imex-ctl", "all_reduce_perf")
# On a driver-managed (--bare) host these links come from the vendor packages, not from install.
VENDOR_TOOLS = ("nvidia-smi", "nvidia-imex-ctl", "amd-smi", "rocm-smi")
# Package role (given by the package's postinst) -> kernel module it installs.
KMOD_ROLES = {"nvidia-kmod": "nvidia", "amd-kmod": "amdgpu"}

NVSMI_DRIVER_ERROR = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)
NVSMI_BAD_ARGS = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"
NVSMI_NO_DEVICES = "No devices were found\n"
NVSMI_NO_NVML = (
    "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that the NVIDIA Display "
    "Driver is properly installed and present in your system.\n"
    "Please also try adding directory that contains libnvidia-ml.so to your system PATH.\n"
)
NVML_MISMATCH = "Failed to initialize NVML: Driver/library version mismatch\n"
# nvidia-smi's documented return codes (12, 18: NVML_ERROR_LIBRARY_NOT_FOUND, NVML_ERROR_LIB_RM_VERSION_MISMATCH).
RC_OK, RC_BAD_ARG, RC_NOT_FOUND, RC_DRIVER, RC_NO_NVML, RC_MISMATCH = 0, 2, 6, 9, 12, 18

AMDSMI_DRIVER_ERROR = (
    "ERROR:root:Unable to get devices, driver not initialized (amdgpu not found in modules)\n"
    "ERROR:root:Unable to detect any GPU devices, check amdgpu version and module status (sudo modprobe amdgpu)\n"
)
ROCMSMI_DRIVER_ERROR = (
    "cat: /sys/module/amdgpu/initstate: No such file or directory\n"
    "ERROR:root:Driver not initialized (amdgpu not found in modules)\n"
)


class ToolResult:
    """What a tool prints and returns; main() writes it out."""

    def __init__(self, stdout="", rc=RC_OK, stderr=""):
        self.stdout, self.rc, self.stderr = stdout, rc, stderr


# --------------------------------------------------------------------------- state

def sim_root():
    return Path(os.environ.get("GPUSIM_ROOT", "/"))


def profiles_dir():
    return Path(__file__).resolve().parent / "profiles"


def load_profile(name):
    path = profiles_dir() / f"{name}.json"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in profiles_dir().glob("*.json")))
        raise SystemExit(f"gpusim: unknown profile '{name}' (known: {known})")
    return json.loads(path.read_text())


def read_json(path, default):
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return default


def write_json(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def upstream_version(debian_version, parts=3):
    """'1:6.14.14.30100200-2212064.24.04' -> '6.14.14'; '580.95.05-1' -> '580.95.05'."""
    version = debian_version.split(":", 1)[-1]
    if "-" in version:
        version = version.rsplit("-", 1)[0]
    return ".".join(version.split(".")[:parts])


def pid_alive(pidfile):
    try:
        pid = int(pidfile.read_text().strip())
    except (FileNotFoundError, ValueError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stable_hex(*parts, length=32):
    """Deterministic pseudo-random hex so serials/UUIDs are stable per host and slot."""
    return hashlib.sha256("/".join(str(p) for p in parts).encode()).hexdigest()[:length]


def uuid_from(*parts):
    h = stable_hex(*parts)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


class Host:
    """One mock host: its config, its profile, and the faults injected into it."""

    def __init__(self, root=None):
        root = root or sim_root()
        self.root = root
        self.config = read_json(root / HOST_CONFIG, None)
        if self.config is None:
            raise SystemExit(f"gpusim: no host config at {root / HOST_CONFIG} (run 'gpusim.py install')")
        self.profile = load_profile(self.config["profile"])
        self.faults = read_json(root / FAULTS_FILE, [])
        self.hostname = self.config.get("hostname", "localhost")
        # Driver-managed (installed with --bare): versions, daemons and tools come from the vendor packages.
        self.driver_managed = bool(self.config.get("driver_managed"))
        self.state = read_json(root / DRIVER_STATE, {"packages": {}, "modules": {}})

    def package_version(self, name):
        entry = self.state["packages"].get(name)
        return entry["version"] if entry else None

    def role_version(self, role):
        versions = [p["version"] for p in self.state["packages"].values() if p.get("role") == role]
        return versions[0] if versions else None

    def service_running(self, name):
        return pid_alive(self.root / RUN_DIR / f"{name}.pid")

    @property
    def driver(self):
        """The profile's driver block; on a driver-managed host, the installed packages' versions instead."""
        drv = dict(self.profile["driver"])
        if not self.driver_managed:
            return drv
        userspace = self.role_version("nvidia-userspace")
        if userspace:
            version = upstream_version(userspace)
            drv.update(version=version, nvml_version=upstream_version(userspace, 2))
        amdgpu = self.state["modules"].get("amdgpu")
        if amdgpu and self.profile.get("vendor") == "amd":
            drv["version"] = upstream_version(amdgpu)
        rocm = self.role_version("rocm-core")
        if rocm and "rocm_version" in drv:
            drv["rocm_version"] = upstream_version(rocm)
        amdsmi = self.role_version("amd-smi")
        if amdsmi and "amdsmi_library_version" in drv:
            library = upstream_version(amdsmi)
            drv["amdsmi_library_version"] = library
            if not drv["amdsmi_tool_version"].startswith(library + "+"):
                drv["amdsmi_tool_version"] = f"{library}+{stable_hex(amdsmi, length=8)}"
        return drv

    def loaded_module(self):
        """Version of the vendor's kernel module that is loaded (driver-managed hosts), None if none is."""
        return self.state["modules"].get("amdgpu" if self.profile.get("vendor") == "amd" else "nvidia")

    def nvml_problem(self):
        """None, or the ToolResult nvidia-smi gives when userspace and kernel module do not fit together."""
        if not self.driver_managed:
            return None
        userspace = self.role_version("nvidia-userspace")
        if not userspace:
            return ToolResult(NVSMI_NO_NVML, RC_NO_NVML)
        loaded = self.loaded_module()
        if loaded and upstream_version(loaded) != upstream_version(userspace):
            # NVML prints its own version as major.minor, e.g. 580.105 for 580.105.08.
            return ToolResult(NVML_MISMATCH + f"NVML library version: {upstream_version(userspace, 2)}\n", RC_MISMATCH)
        return None

    def persistence_mode(self):
        if self.driver_managed and self.profile.get("vendor") == "nvidia":
            return "Enabled" if self.service_running("nvidia-persistenced") else "Disabled"
        return self.profile["gpu_model"]["persistence_mode"]

    def has_fault(self, kind):
        return any(f["kind"] == kind for f in self.faults)

    def fault_targets(self, kind, key):
        return {f[key] for f in self.faults if f["kind"] == kind and key in f}

    @property
    def driver_loaded(self):
        if self.driver_managed and not self.loaded_module():
            return False
        return not self.has_fault("driver_not_loaded")

    def visible_gpu_slots(self):
        """Physical slots still enumerated; indices renumber around a missing GPU, as on real hosts."""
        missing = self.fault_targets("gpu_missing", "gpu")
        return [slot for slot in range(len(self.profile["gpus"])) if slot not in missing]

    def down_links(self, slot):
        return {f["link"] for f in self.faults if f["kind"] == "nvlink_down" and f.get("gpu") == slot}

    def gpu_uuid(self, slot):
        return "GPU-" + uuid_from(self.hostname, slot, "gpu")

    def gpu_serial(self, slot):
        return str(int(stable_hex(self.hostname, slot, "serial", length=12), 16))[:13].rjust(13, "1")

    def fabric(self):
        """Fabric block values (XML/-q), honouring the fabric_in_progress fault."""
        spec = self.profile.get("fabric")
        if not spec:
            return None
        needs = spec.get("driver_managed_requires", {}) if self.driver_managed else {}
        unmet = ([s for s in needs.get("services", []) if not self.service_running(s)]
                 + [p for p in needs.get("packages", []) if not self.package_version(p)])
        if self.has_fault("fabric_in_progress") or unmet:
            # What a tray shows while NVLSM / fabric manager has not finished training.
            return {"state": "In Progress", "status": "N/A", "clique_id": "N/A", "cluster_uuid": "N/A",
                    "health_summary": "N/A", "bandwidth": "N/A", "flag": "N/A"}
        # HGX nodes are each their own NVLink domain; NVL72 trays share the rack's.
        host_scoped = spec.get("cluster_uuid_scope") == "host"
        cluster = uuid_from(self.hostname, "nvlink-domain") if host_scoped else spec["cluster_uuid"]
        return {"state": spec["state"], "status": spec["status"],
                "clique_id": str(self.config.get("clique_id", spec["clique_id"])),
                "cluster_uuid": self.config.get("cluster_uuid", cluster),
                "health_summary": spec["health_summary"], "bandwidth": "Full", "flag": "False"}


# --------------------------------------------------------------------------- NVIDIA data

def nvidia_gpu_view(host, slot, index):
    """Flat per-GPU values every nvidia-smi renderer reads."""
    model = host.profile["gpu_model"]
    slot_spec = host.profile["gpus"][slot]
    uncorrectable = slot in host.fault_targets("ecc_uncorrectable", "gpu")
    remap_pending = slot in host.fault_targets("row_remap_pending", "gpu")
    ecc_on = model["ecc_mode"] == "Enabled"
    mem = model["memory_total_mib"], model["memory_reserved_mib"], model["memory_used_mib"]
    return {
        "index": index, "slot": slot, "name": model["product_name"], "uuid": host.gpu_uuid(slot),
        "serial": host.gpu_serial(slot), "pci_bus_id": slot_spec["pci_bus_id"],
        "module_id": slot_spec["module_id"], "minor_number": slot,
        "memory_total": mem[0], "memory_reserved": mem[1], "memory_used": mem[2],
        "memory_free": mem[0] - mem[1] - mem[2],
        "temperature": model["temperature_c"], "power_draw": model["power_w"]["draw"],
        "power_limit": model["power_w"]["limit"], "persistence_mode": host.persistence_mode(),
        "ecc_enabled": ecc_on,
        # Counts as a real page-retirement/row-remap event reports them: a few DRAM
        # uncorrectables in both volatile and aggregate, plus one SRAM parity error.
        "dram_uncorrectable": (2 if uncorrectable else 0) if ecc_on else "N/A",
        "sram_uncorrectable": (1 if uncorrectable else 0) if ecc_on else "N/A",
        "remap_pending": remap_pending, "remap_uncorrectable": 1 if (remap_pending or uncorrectable) else 0,
        "down_links": host.down_links(slot),
    }


def nvidia_gpu_views(host):
    return [nvidia_gpu_view(host, slot, index) for index, slot in enumerate(host.visible_gpu_slots())]


# --------------------------------------------------------------------------- nvidia-smi table

TABLE_WIDTH = 91


def _rule(char="-", joints=True):
    if not joints:
        return "+" + char * (TABLE_WIDTH - 2) + "+"
    return "+" + char * 41 + "+" + char * 24 + "+" + char * 22 + "+"


def render_nvsmi_table(header, gpus, timestamp=None):
    """The default nvidia-smi summary table.

    header: driver_version, cuda_version; gpus: dicts with index, name, persistence
    ('On'/'Off'), bus_id, display_active, volatile_ecc, fan, temp, perf, power_usage,
    power_cap, memory_used, memory_total, util, compute_mode, mig_mode.
    """
    drv = header["driver_version"]
    # 565 drivers print the rule under the version line as '|---+', 570+ as '+---+'.
    under_header = _rule() if int(drv.split(".")[0]) >= 570 else "|" + _rule()[1:]
    lines = [timestamp] if timestamp else []
    lines += [
        _rule(joints=False),
        ("| NVIDIA-SMI " + drv.ljust(23) + "Driver Version: " + drv.ljust(15)
         + "CUDA Version: " + header["cuda_version"].ljust(9) + "|"),
        under_header,
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
        "|                                         |                        |               MIG M. |",
        "|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|",
    ]
    for gpu in gpus:
        name = gpu["name"] if len(gpu["name"]) <= 31 else gpu["name"][:28] + "..."
        lines.append(f"|{gpu['index']:>4}  {name:<31}{gpu['persistence']:<3} |"
                     f"{gpu['bus_id']:>19} {gpu['display_active']:<3} |{gpu['volatile_ecc']:>21} |")
        lines.append(f"| {gpu['fan']:>3}   {gpu['temp']:>3}    {gpu['perf']:<2}{gpu['power_usage']:>16} / "
                     f"{gpu['power_cap']:>5} |{gpu['memory_used']:>11} / {gpu['memory_total']:>9} |"
                     f"{gpu['util']:>8}{gpu['compute_mode']:>13} |")
        lines.append("|" + " " * 41 + "|" + " " * 24 + "|" + f"{gpu['mig_mode']:>21} |")
        lines.append(_rule())
    lines += [
        " " * (TABLE_WIDTH - 2),
        _rule(joints=False),
        "| Processes:" + " " * 78 + "|",
        "|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |",
        "|        ID   ID                                                               Usage      |",
        "|" + "=" * 89 + "|",
        "|  No running processes found" + " " * 61 + "|",
        _rule(joints=False),
    ]
    return "\n".join(lines) + "\n"


def table_rows(host, views):
    model = host.profile["gpu_model"]
    rows = []
    for v in views:
        fan = model["fan_speed"].replace(" ", "") if model["fan_speed"] != "N/A" else "N/A"
        ecc = str(v["dram_uncorrectable"] + v["sram_uncorrectable"]) if v["ecc_enabled"] else "N/A"
        rows.append({
            "index": v["index"], "name": v["name"],
            "persistence": "On" if v["persistence_mode"] == "Enabled" else "Off",
            "bus_id": v["pci_bus_id"], "display_active": "Off", "volatile_ecc": ecc, "fan": fan,
            "temp": f"{v['temperature']}C", "perf": model["performance_state"],
            "power_usage": f"{round(v['power_draw'])}W", "power_cap": f"{round(v['power_limit'])}W",
            "memory_used": f"{v['memory_used']}MiB", "memory_total": f"{v['memory_total']}MiB",
            "util": "0%", "compute_mode": model["compute_mode"], "mig_mode": model["mig_mode"],
        })
    return rows


# --------------------------------------------------------------------------- nvidia-smi -q -x

class TextBlock(str):
    """Element whose body is bare text on its own line (e.g. <mig_devices> None)."""


def _xml_escape(text):
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def render_xml_element(tag, body, depth, attrs=""):
    pad = "\t" * depth
    if isinstance(body, TextBlock):
        return [f"{pad}<{tag}{attrs}>", f"{pad}\t{body}", f"{pad}</{tag}>"]
    if isinstance(body, list):
        lines = [f"{pad}<{tag}{attrs}>"]
        for child_tag, child_body in body:
            lines += render_xml_element(child_tag, child_body, depth + 1)
        return lines + [f"{pad}</{tag}>"]
    return [f"{pad}<{tag}{attrs}>{_xml_escape(str(body))}</{tag}>"]


def _w(value):
    return f"{value:.2f} W"


def _na_or(value, fmt):
    return "N/A" if value == "N/A" else fmt.format(value)


def nvsmi_gpu_tree(host, view):
    """Children of one <gpu> element, in the order of the nvsmi_device_v13 capture."""
    model = host.profile["gpu_model"]
    fabric = host.fabric()
    clocks = model["clocks_mhz"]
    power = model["power_w"]
    temps = model["temperature_limits_c"]
    bus_id = view["pci_bus_id"]
    domain, bus, dev_fn = bus_id.split(":")
    ecc = view["ecc_enabled"]

    def ecc_counts(aggregate):
        zero = 0 if ecc else "N/A"
        counts = [("sram_correctable", zero),
                  ("sram_uncorrectable_parity", view["sram_uncorrectable"]),
                  ("sram_uncorrectable_secded", zero),
                  ("dram_correctable", zero),
                  ("dram_uncorrectable", view["dram_uncorrectable"])]
        if aggregate:
            counts.append(("sram_threshold_exceeded", "No" if ecc else "N/A"))
        return counts

    remap_unc = view["remap_uncorrectable"] if ecc else "N/A"
    fabric_block = [("state", "N/A"), ("status", "N/A"), ("cliqueId", "N/A"), ("clusterUuid", "N/A"),
                    ("health", [(k, "N/A") for k in ("summary", "bandwidth", "route_recovery_in_progress",
                                                     "route_unhealthy", "access_timeout_recovery",
                                                     "incorrect_configuration")])]
    if fabric:
        fabric_block = [
            ("state", fabric["state"]), ("status", fabric["status"]),
            ("cliqueId", fabric["clique_id"]), ("clusterUuid", fabric["cluster_uuid"]),
            ("health", [("summary", fabric["health_summary"]), ("bandwidth", fabric["bandwidth"]),
                        ("route_recovery_in_progress", fabric["flag"]), ("route_unhealthy", fabric["flag"]),
                        ("access_timeout_recovery", fabric["flag"]), ("incorrect_configuration", fabric["flag"])]),
        ]
    event_reasons = ("gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown",
                     "hw_thermal_slowdown", "hw_power_brake_slowdown", "sync_boost", "sw_thermal_slowdown",
                     "display_clocks_setting")
    return [
        ("product_name", model["product_name"]),
        ("product_brand", model["product_brand"]),
        ("product_architecture", model["product_architecture"]),
        ("display_mode", model["display_mode"]),
        ("display_attached", "No"),
        ("display_active", "Disabled"),
        ("persistence_mode", view["persistence_mode"]),
        ("addressing_mode", model["addressing_mode"]),
        ("mig_mode", [("current_mig", model["mig_mode"]), ("pending_mig", model["mig_mode"])]),
        ("mig_devices", TextBlock("None")),
        ("accounting_mode", "Disabled"),
        ("accounting_mode_buffer_size", "4000"),
        ("driver_model", [("current_dm", "N/A"), ("pending_dm", "N/A")]),
        ("serial", view["serial"]),
        ("uuid", view["uuid"]),
        ("pdi", "0x" + stable_hex(host.hostname, view["slot"], "pdi", length=16)),
        ("minor_number", str(view["minor_number"])),
        ("vbios_version", model["vbios_version"]),
        ("multigpu_board", "No"),
        ("board_id", "0x" + (bus + dev_fn[:2]).lower().lstrip("0").rjust(3, "0")),
        ("board_part_number", model["board_part_number"]),
        ("gpu_part_number", model["gpu_part_number"]),
        ("gpu_fru_part_number", "N/A"),
        ("platformInfo", [
            ("chassis_serial_number", host.config.get("chassis_serial", "")),
            ("slot_number", str(host.config.get("node_index", 0))),
            ("tray_index", str(host.config.get("node_index", 0))),
            ("host_id", "1"),
            ("peer_type", "Switch Connected" if model.get("nvlink") else "Direct Connected"),
            ("module_id", str(view["module_id"])),
            ("gpu_fabric_guid", "0x" + stable_hex(host.hostname, view["slot"], "fabric-guid", length=16)
             if model.get("nvlink") else "0x0000000000000000"),
        ]),
        ("inforom_version", [(k, model["inforom"][k]) for k in ("img_version", "oem_object", "ecc_object",
                                                                "pwr_object")]),
        ("inforom_bbx_flush", [("latest_timestamp", "N/A"), ("latest_duration", "N/A")]),
        ("gpu_operation_mode", [("current_gom", "N/A"), ("pending_gom", "N/A")]),
        ("c2c_mode", model["c2c_mode"]),
        ("gpu_virtualization_mode", [("virtualization_mode", "None"), ("host_vgpu_mode", "N/A"),
                                     ("vgpu_heterogeneous_mode", "N/A")]),
        ("gpu_recovery_action", "None"),
        ("gsp_firmware_version", host.driver["version"]),
        ("ibmnpu", [("relaxed_ordering_mode", "N/A")]),
        ("pci", [
            ("pci_bus", bus), ("pci_device", dev_fn[:2]), ("pci_domain", domain[-4:]),
            ("pci_base_class", "3"), ("pci_sub_class", "2" if model["product_brand"] == "NVIDIA" else "0"),
            ("pci_device_id", model["pci_device_id"]), ("pci_bus_id", bus_id),
            ("pci_sub_system_id", model["pci_sub_system_id"]),
            ("pci_gpu_link_info", [
                ("pcie_gen", [("max_link_gen", str(model["pcie"]["max_link_gen"])),
                              ("current_link_gen", str(model["pcie"]["current_link_gen"])),
                              ("device_current_link_gen", str(model["pcie"]["current_link_gen"])),
                              ("max_device_link_gen", str(model["pcie"]["max_link_gen"])),
                              ("max_host_link_gen", str(model["pcie"]["max_link_gen"]))]),
                ("link_widths", [("max_link_width", model["pcie"]["link_width"]),
                                 ("current_link_width", model["pcie"]["link_width"])]),
            ]),
            ("pci_bridge_chip", [("bridge_chip_type", "N/A"), ("bridge_chip_fw", "N/A")]),
            ("replay_counter", "0"), ("replay_rollover_counter", "0"),
            ("tx_util", "0 KB/s"), ("rx_util", "0 KB/s"),
            ("atomic_caps_outbound", "N/A"),
            ("atomic_caps_inbound", "FETCHADD_32 FETCHADD_64 SWAP_32 SWAP_64 CAS_32 CAS_64 "),
        ]),
        ("fan_speed", model["fan_speed"]),
        ("performance_state", model["performance_state"]),
        ("clocks_event_reasons", [(f"clocks_event_reason_{r}", "Not Active") for r in event_reasons]),
        ("clocks_event_reasons_counters", [
            (f"clocks_event_reasons_counters_{r}", "0 us")
            for r in ("sw_power_cap", "sync_boost", "sw_therm_slowdown", "hw_therm_slowdown", "hw_power_brake")]),
        ("sparse_operation_mode", "N/A"),
        ("fb_memory_usage", [("total", f"{view['memory_total']} MiB"), ("reserved", f"{view['memory_reserved']} MiB"),
                             ("used", f"{view['memory_used']} MiB"), ("free", f"{view['memory_free']} MiB")]),
        ("bar1_memory_usage", [("total", f"{model['bar1_total_mib']} MiB"), ("used", "1 MiB"),
                               ("free", f"{model['bar1_total_mib'] - 1} MiB")]),
        ("cc_protected_memory_usage", [("total", "0 MiB"), ("used", "0 MiB"), ("free", "0 MiB")]),
        ("compute_mode", model["compute_mode"]),
        ("utilization", [(k, "0 %") for k in ("gpu_util", "memory_util", "encoder_util", "decoder_util",
                                              "jpeg_util", "ofa_util")]),
        ("encoder_stats", [("session_count", "0"), ("average_fps", "0"), ("average_latency", "0")]),
        ("fbc_stats", [("session_count", "0"), ("average_fps", "0"), ("average_latency", "0")]),
        ("dram_encryption_mode", [("current_dram_encryption", "Disabled" if ecc else "N/A"),
                                  ("pending_dram_encryption", "Disabled" if ecc else "N/A")]),
        ("ecc_mode", [("current_ecc", model["ecc_mode"]), ("pending_ecc", model["ecc_mode"])]),
        ("ecc_errors", [
            ("volatile", ecc_counts(aggregate=False)),
            ("aggregate", ecc_counts(aggregate=True)),
            ("aggregate_uncorrectable_sram_sources", [
                ("sram_l2", view["sram_uncorrectable"]), ("sram_sm", 0 if ecc else "N/A"),
                ("sram_microcontroller", 0 if ecc else "N/A"), ("sram_pcie", 0 if ecc else "N/A"),
                ("sram_other", 0 if ecc else "N/A")]),
            ("channel_repair_pending", "No"),
            ("tpc_repair_pending", "No"),
            ("unrepairable_memory", "No" if ecc else "N/A"),
        ]),
        ("retired_pages", [
            ("multiple_single_bit_retirement", [("retired_count", "N/A"), ("retired_pagelist", "N/A")]),
            ("double_bit_retirement", [("retired_count", "N/A"), ("retired_pagelist", "N/A")]),
            ("pending_blacklist", "N/A"), ("pending_retirement", "N/A"),
        ]),
        ("remapped_rows", [
            ("remapped_row_corr", 0 if ecc else "N/A"),
            ("remapped_row_unc", remap_unc),
            ("remapped_row_pending", ("Yes" if view["remap_pending"] else "No") if ecc else "N/A"),
            ("remapped_row_failure", "No" if ecc else "N/A"),
            ("row_remapper_histogram", [
                ("row_remapper_histogram_max", f"{2816 - (1 if view['remap_pending'] else 0)} bank(s)"),
                ("row_remapper_histogram_high", "0 bank(s)"),
                ("row_remapper_histogram_partial", f"{1 if view['remap_pending'] else 0} bank(s)"),
                ("row_remapper_histogram_low", "0 bank(s)"),
                ("row_remapper_histogram_none", "0 bank(s)"),
            ]),
        ]),
        ("temperature", [
            ("gpu_temp", f"{view['temperature']} C"),
            ("gpu_temp_tlimit", f"{temps['tlimit']} C"),
            ("gpu_temp_max_tlimit_threshold", f"{temps['shutdown_tlimit']} C"),
            ("gpu_temp_slow_tlimit_threshold", f"{temps['slowdown_tlimit']} C"),
            ("gpu_temp_max_gpu_tlimit_threshold", f"{temps['max_operating_tlimit']} C"),
            ("gpu_target_temperature", "N/A"),
            ("memory_temp", _na_or(model["memory_temperature_c"], "{} C")),
            ("gpu_temp_max_mem_tlimit_threshold", _na_or(temps["memory_max_operating_tlimit"], "{} C")),
        ]),
        ("supported_gpu_target_temp", [("gpu_target_temp_min", "N/A"), ("gpu_target_temp_max", "N/A")]),
        ("gpu_power_readings", [
            ("power_state", model["performance_state"]),
            ("average_power_draw", _w(view["power_draw"])), ("instant_power_draw", _w(view["power_draw"])),
            ("current_power_limit", _w(power["limit"])), ("requested_power_limit", _w(power["limit"])),
            ("default_power_limit", _w(power["default"])), ("min_power_limit", _w(power["min"])),
            ("max_power_limit", _w(power["max"])),
        ]),
        ("gpu_memory_power_readings", [("average_power_draw", "N/A"), ("instant_power_draw", "N/A")]),
        ("module_power_readings", [("power_state", model["performance_state"])]
         + [(k, "N/A") for k in ("average_power_draw", "instant_power_draw", "current_power_limit",
                                 "requested_power_limit", "default_power_limit", "min_power_limit",
                                 "max_power_limit")]),
        ("power_smoothing", "N/A"),
        ("power_profiles", [("power_profile_requested_profiles", "N/A"),
                            ("power_profile_enforced_profiles", "N/A")]),
        ("edpp_multiplier", "N/A"),
        ("clocks", [("graphics_clock", f"{clocks['graphics']} MHz"), ("sm_clock", f"{clocks['sm']} MHz"),
                    ("mem_clock", f"{clocks['memory']} MHz"), ("video_clock", f"{clocks['video']} MHz")]),
        ("applications_clocks", [("graphics_clock", "Requested functionality has been deprecated"),
                                 ("mem_clock", "Requested functionality has been deprecated")]),
        ("default_applications_clocks", [("graphics_clock", "Requested functionality has been deprecated"),
                                         ("mem_clock", "Requested functionality has been deprecated")]),
        ("deferred_clocks", [("mem_clock", "N/A")]),
        ("max_clocks", [("graphics_clock", f"{clocks['max_graphics']} MHz"), ("sm_clock", f"{clocks['max_sm']} MHz"),
                        ("mem_clock", f"{clocks['max_memory']} MHz"), ("video_clock", f"{clocks['max_video']} MHz")]),
        ("max_customer_boost_clocks", [("graphics_clock", f"{clocks['max_graphics']} MHz")]),
        ("clock_policy", [("auto_boost", "N/A"), ("auto_boost_default", "N/A")]),
        ("fabric", fabric_block),
        ("supported_clocks", [("supported_mem_clock", [("value", f"{clocks['max_memory']} MHz")] + [
            ("supported_graphics_clock", f"{clocks['max_graphics'] - 15 * step} MHz") for step in range(4)])]),
        ("processes", []),
        ("accounted_processes", []),
        ("capabilities", [("egm", "disabled")]),
    ]


def render_nvsmi_xml(host, views, timestamp):
    drv = host.driver
    lines = ['<?xml version="1.0" ?>', '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">', "<nvidia_smi_log>",
             f"\t<timestamp>{timestamp}</timestamp>", f"\t<driver_version>{drv['version']}</driver_version>",
             f"\t<cuda_version>{drv['cuda_version']}</cuda_version>",
             f"\t<attached_gpus>{len(host.visible_gpu_slots())}</attached_gpus>"]
    for view in views:
        lines += render_xml_element("gpu", nvsmi_gpu_tree(host, view), 1, f' id="{view["pci_bus_id"]}"')
        lines.append("")
    lines.append("</nvidia_smi_log>")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- nvidia-smi -q (text)

# XML tag -> label printed by `nvidia-smi -q`; (label, {child labels}) for sections.
# Only sections listed here are printed in text form (see README: -q text is a subset).
Q_LABELS = {
    "product_name": "Product Name", "product_brand": "Product Brand",
    "product_architecture": "Product Architecture", "display_mode": "Display Mode",
    "display_attached": "Display Attached", "display_active": "Display Active",
    "persistence_mode": "Persistence Mode", "addressing_mode": "Addressing Mode",
    "mig_mode": ("MIG Mode", {"current_mig": "Current", "pending_mig": "Pending"}),
    "accounting_mode": "Accounting Mode", "accounting_mode_buffer_size": "Accounting Mode Buffer Size",
    "serial": "Serial Number", "uuid": "GPU UUID", "pdi": "GPU PDI", "minor_number": "Minor Number",
    "vbios_version": "VBIOS Version", "multigpu_board": "MultiGPU Board", "board_id": "Board ID",
    "board_part_number": "Board Part Number", "gpu_part_number": "GPU Part Number",
    "platformInfo": ("Platform Info", {"chassis_serial_number": "Chassis Serial Number",
                                       "slot_number": "Slot Number", "tray_index": "Tray Index",
                                       "host_id": "Host ID", "peer_type": "Peer Type", "module_id": "Module Id",
                                       "gpu_fabric_guid": "GPU Fabric GUID"}),
    "c2c_mode": "C2C Mode", "gsp_firmware_version": "GSP Firmware Version",
    "pci": ("PCI", {"pci_bus": "Bus", "pci_device": "Device", "pci_domain": "Domain",
                    "pci_device_id": "Device Id", "pci_bus_id": "Bus Id", "pci_sub_system_id": "Sub System Id"}),
    "fan_speed": "Fan Speed", "performance_state": "Performance State",
    "fb_memory_usage": ("FB Memory Usage", {"total": "Total", "reserved": "Reserved", "used": "Used",
                                            "free": "Free"}),
    "bar1_memory_usage": ("BAR1 Memory Usage", {"total": "Total", "used": "Used", "free": "Free"}),
    "compute_mode": "Compute Mode",
    "utilization": ("Utilization", {"gpu_util": "GPU", "memory_util": "Memory", "encoder_util": "Encoder",
                                    "decoder_util": "Decoder", "jpeg_util": "JPEG", "ofa_util": "OFA"}),
    "ecc_mode": ("ECC Mode", {"current_ecc": "Current", "pending_ecc": "Pending"}),
    "ecc_errors": ("ECC Errors", {
        "volatile": ("Volatile", {"sram_correctable": "SRAM Correctable",
                                  "sram_uncorrectable_parity": "SRAM Uncorrectable Parity",
                                  "sram_uncorrectable_secded": "SRAM Uncorrectable SEC-DED",
                                  "dram_correctable": "DRAM Correctable", "dram_uncorrectable": "DRAM Uncorrectable"}),
        "aggregate": ("Aggregate", {"sram_correctable": "SRAM Correctable",
                                    "sram_uncorrectable_parity": "SRAM Uncorrectable Parity",
                                    "sram_uncorrectable_secded": "SRAM Uncorrectable SEC-DED",
                                    "dram_correctable": "DRAM Correctable",
                                    "dram_uncorrectable": "DRAM Uncorrectable",
                                    "sram_threshold_exceeded": "SRAM Threshold Exceeded"}),
        "channel_repair_pending": "Channel Repair Pending", "tpc_repair_pending": "TPC Repair Pending"}),
    "remapped_rows": ("Remapped Rows", {
        "remapped_row_corr": "Correctable Error", "remapped_row_unc": "Uncorrectable Error",
        "remapped_row_pending": "Pending", "remapped_row_failure": "Remapping Failure Occurred",
        "row_remapper_histogram": ("Bank Remap Availability Histogram", {
            "row_remapper_histogram_max": "Max", "row_remapper_histogram_high": "High",
            "row_remapper_histogram_partial": "Partial", "row_remapper_histogram_low": "Low",
            "row_remapper_histogram_none": "None"})}),
    "temperature": ("Temperature", {
        "gpu_temp": "GPU Current Temp", "gpu_temp_tlimit": "GPU T.Limit Temp",
        "gpu_temp_max_tlimit_threshold": "GPU Shutdown T.Limit Temp",
        "gpu_temp_slow_tlimit_threshold": "GPU Slowdown T.Limit Temp",
        "gpu_temp_max_gpu_tlimit_threshold": "GPU Max Operating T.Limit Temp",
        "gpu_target_temperature": "GPU Target Temperature", "memory_temp": "Memory Current Temp",
        "gpu_temp_max_mem_tlimit_threshold": "Memory Max Operating T.Limit Temp"}),
    "gpu_power_readings": ("GPU Power Readings", {
        "average_power_draw": "Average Power Draw", "instant_power_draw": "Instantaneous Power Draw",
        "current_power_limit": "Current Power Limit", "requested_power_limit": "Requested Power Limit",
        "default_power_limit": "Default Power Limit", "min_power_limit": "Min Power Limit",
        "max_power_limit": "Max Power Limit"}),
    "clocks": ("Clocks", {"graphics_clock": "Graphics", "sm_clock": "SM", "mem_clock": "Memory",
                          "video_clock": "Video"}),
    "max_clocks": ("Max Clocks", {"graphics_clock": "Graphics", "sm_clock": "SM", "mem_clock": "Memory",
                                  "video_clock": "Video"}),
    "fabric": ("Fabric", {"state": "State", "status": "Status", "cliqueId": "CliqueId",
                          "clusterUuid": "ClusterUUID",
                          "health": ("Health", {"summary": "Summary", "bandwidth": "Bandwidth",
                                                "route_recovery_in_progress": "Route Recovery in progress",
                                                "route_unhealthy": "Route Unhealthy",
                                                "access_timeout_recovery": "Access Timeout Recovery",
                                                "incorrect_configuration": "Incorrect Configuration"})}),
    "processes": "Processes",
}
Q_LABEL_WIDTH = 42  # the colon sits in column 42 at every nesting depth


def _q_line(depth, label, value=None):
    text = "    " * depth + label
    return text if value is None else text.ljust(Q_LABEL_WIDTH) + ": " + str(value)


def _q_section(children, labels, depth):
    lines = []
    for tag, body in children:
        spec = labels.get(tag)
        if spec is None:
            continue
        if isinstance(spec, tuple):
            label, child_labels = spec
            lines.append(_q_line(depth, label))
            lines += _q_section(body, child_labels, depth + 1)
        elif isinstance(body, list):
            lines.append(_q_line(depth, spec, "None"))  # empty process lists print "None"
        else:
            lines.append(_q_line(depth, spec, body))
    return lines


def render_nvsmi_query_text(host, views, timestamp):
    drv = host.driver
    lines = ["", "==============NVSMI LOG==============", "", _q_line(0, "Timestamp", timestamp),
             _q_line(0, "Driver Version", drv["version"]), _q_line(0, "CUDA Version", drv["cuda_version"]), "",
             _q_line(0, "Attached GPUs", len(host.visible_gpu_slots()))]
    for view in views:
        lines.append(f"GPU {view['pci_bus_id']}")
        lines += _q_section(nvsmi_gpu_tree(host, view), Q_LABELS, 1)
        lines.append("")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- nvidia-smi --query-gpu

# field -> (header unit suffix, value getter(view, model, host) -> (value, unit))
def _query_fields():
    def mib(key):
        return lambda v, m, h: (v[key], " MiB")

    def plain(fn):
        return lambda v, m, h: (fn(v, m, h), "")

    def ecc_total(v, m, h):
        if not v["ecc_enabled"]:
            return "[N/A]", ""
        return v["dram_uncorrectable"] + v["sram_uncorrectable"], ""

    return {
        "index": ("", plain(lambda v, m, h: v["index"])),
        "count": ("", plain(lambda v, m, h: len(h.visible_gpu_slots()))),
        "name": ("", plain(lambda v, m, h: v["name"])),
        "gpu_name": ("", plain(lambda v, m, h: v["name"])),
        "uuid": ("", plain(lambda v, m, h: v["uuid"])),
        "gpu_uuid": ("", plain(lambda v, m, h: v["uuid"])),
        "serial": ("", plain(lambda v, m, h: v["serial"])),
        "pci.bus_id": ("", plain(lambda v, m, h: v["pci_bus_id"])),
        "gpu_bus_id": ("", plain(lambda v, m, h: v["pci_bus_id"])),
        "driver_version": ("", plain(lambda v, m, h: h.driver["version"])),
        "vbios_version": ("", plain(lambda v, m, h: m["vbios_version"])),
        "persistence_mode": ("", plain(lambda v, m, h: v["persistence_mode"])),
        "pstate": ("", plain(lambda v, m, h: m["performance_state"])),
        "compute_mode": ("", plain(lambda v, m, h: m["compute_mode"])),
        "mig.mode.current": ("", plain(lambda v, m, h: m["mig_mode"] if m["mig_mode"] != "N/A" else "[N/A]")),
        "ecc.mode.current": ("", plain(lambda v, m, h: m["ecc_mode"] if m["ecc_mode"] != "N/A" else "[N/A]")),
        "memory.total": (" [MiB]", mib("memory_total")),
        "memory.reserved": (" [MiB]", mib("memory_reserved")),
        "memory.used": (" [MiB]", mib("memory_used")),
        "memory.free": (" [MiB]", mib("memory_free")),
        "temperature.gpu": ("", plain(lambda v, m, h: v["temperature"])),
        "power.draw": (" [W]", lambda v, m, h: (f"{v['power_draw']:.2f}", " W")),
        "power.limit": (" [W]", lambda v, m, h: (f"{v['power_limit']:.2f}", " W")),
        "utilization.gpu": (" [%]", lambda v, m, h: (0, " %")),
        "utilization.memory": (" [%]", lambda v, m, h: (0, " %")),
        "clocks.sm": (" [MHz]", lambda v, m, h: (m["clocks_mhz"]["sm"], " MHz")),
        "clocks.max.sm": (" [MHz]", lambda v, m, h: (m["clocks_mhz"]["max_sm"], " MHz")),
        "ecc.errors.uncorrected.volatile.total": ("", ecc_total),
        "ecc.errors.uncorrected.aggregate.total": ("", ecc_total),
    }


QUERY_FIELDS = _query_fields()


def render_query_gpu(host, views, fields, fmt_options):
    model = host.profile["gpu_model"]
    with_header = "noheader" not in fmt_options
    with_units = "nounits" not in fmt_options
    lines = []
    if with_header:
        lines.append(", ".join(f + (QUERY_FIELDS[f][0] if with_units else "") for f in fields))
    for view in views:
        cells = []
        for field in fields:
            value, unit = QUERY_FIELDS[field][1](view, model, host)
            cells.append(f"{value}{unit if with_units else ''}")
        lines.append(", ".join(cells))
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- topo -m / nvlink -s

TOPO_LEGEND = """Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def _tab_pad(text, column):
    """Append tabs until the tab-expanded text reaches `column` (nvidia-smi aligns with tabs)."""
    text += "\t"
    while len(text.expandtabs()) < column:
        text += "\t"
    return text


def render_topo_matrix(devices, matrix, affinity, nic_names):
    """`nvidia-smi topo -m`, tab separated as the tool prints it.

    devices: row/column labels (GPU0.., NIC0..); matrix[i][j]: cell text;
    affinity: per GPU row (cpu_affinity, numa_affinity, gpu_numa_id);
    nic_names: NIC labels' real names for the 'NIC Legend'.
    """
    extra = ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
    header = "\t" + "\t".join(devices) + "\t"
    starts = []
    for name in extra:
        starts.append(len(header.expandtabs()))
        header += name + "\t"
    lines = [header.rstrip("\t")]
    for i, row_name in enumerate(devices):
        cells = [" X " if i == j else matrix[i][j] for j in range(len(devices))]
        line = row_name + "\t" + "\t".join(cells)
        if i < len(affinity):
            for value, start in zip(affinity[i], starts):
                line = _tab_pad(line, start) + str(value)
            lines.append(line)
        else:
            lines.append(line)
    lines += ["", TOPO_LEGEND.rstrip("\n")]
    if nic_names:
        lines += ["", "NIC Legend:", ""] + [f"  NIC{i}: {name}" for i, name in enumerate(nic_names)]
    return "\n".join(lines) + "\n\n"


def topo_data(host, views):
    profile = host.profile
    gpus = profile["gpus"]
    links_total = (profile["gpu_model"].get("nvlink") or {}).get("links", 0)
    nics = profile["nics"]
    devices = [f"GPU{v['index']}" for v in views] + [f"NIC{i}" for i in range(len(nics))]
    numa = [gpus[v["slot"]]["numa_node"] for v in views] + [gpus[n["near_gpu"]]["numa_node"] for n in nics]
    near = [None] * len(views) + [n["near_gpu"] for n in nics]
    slots = [v["slot"] for v in views] + [None] * len(nics)

    def pcie_relation(a, b):
        if near[a] is not None and slots[b] is not None and near[a] == slots[b]:
            return "PIX"
        if near[b] is not None and slots[a] is not None and near[b] == slots[a]:
            return "PIX"
        return "NODE" if numa[a] == numa[b] else "SYS"

    matrix = []
    for a in range(len(devices)):
        row = []
        for b in range(len(devices)):
            if a < len(views) and b < len(views) and profile["gpu_interconnect"]:
                # NVSwitch systems report the bonded link count each GPU has up.
                active = links_total - max(len(views[a]["down_links"]), len(views[b]["down_links"]))
                row.append(f"NV{active}" if active > 0 else pcie_relation(a, b))
            else:
                row.append(pcie_relation(a, b))
        matrix.append(row)
    affinity = [(gpus[v["slot"]]["cpu_affinity"], gpus[v["slot"]]["numa_node"], gpus[v["slot"]]["gpu_numa_id"])
                for v in views]
    return devices, matrix, affinity, [n["name"] for n in nics]


def render_nvlink_status(entries):
    """`nvidia-smi nvlink -s`. entries: (index, name, uuid, [link speed or None for inactive])."""
    lines = []
    for index, name, uuid, links in entries:
        lines.append(f"GPU {index}: {name} (UUID: {uuid})")
        for link, speed in enumerate(links):
            lines.append(f"\t Link {link}: {speed if speed else '<inactive>'}")
    return "\n".join(lines) + "\n" if lines else ""


# --------------------------------------------------------------------------- nvidia-smi CLI

def _timestamp():
    # A fixed clock keeps output deterministic; the format is ctime()'s, as nvidia-smi prints.
    return "Mon Nov 10 09:30:00 2025"


def nvidia_smi(host, argv):
    if host.driver_managed and not host.role_version("nvidia-userspace"):
        return ToolResult(NVSMI_NO_NVML, RC_NO_NVML)
    if not host.driver_loaded:
        return ToolResult(NVSMI_DRIVER_ERROR, RC_DRIVER)
    problem = host.nvml_problem()
    if problem:
        return problem
    args = list(argv)
    ids = None
    if "-i" in args or "--id" in args or any(a.startswith("--id=") for a in args):
        ids, args = _take_ids(args)
        if ids is None:
            return ToolResult(NVSMI_BAD_ARGS, RC_BAD_ARG)
    views = nvidia_gpu_views(host)
    if ids is not None:
        chosen = []
        for wanted in ids:
            match = [v for v in views if str(v["index"]) == wanted or v["uuid"] == wanted
                     or v["pci_bus_id"].lower() == wanted.lower()]
            if not match:
                return ToolResult(NVSMI_NO_DEVICES, RC_NOT_FOUND)
            chosen += match
        views = chosen
    if not args:
        drv = host.driver
        header = {"driver_version": drv["version"], "cuda_version": drv["cuda_version"]}
        return ToolResult(render_nvsmi_table(header, table_rows(host, views), _timestamp()))
    if args in (["-L"], ["--list-gpus"]):
        return ToolResult("".join(f"GPU {v['index']}: {v['name']} (UUID: {v['uuid']})\n" for v in views))
    if args == ["--version"]:
        drv = host.driver
        return ToolResult(f"NVIDIA-SMI version  : {drv['version']}\nNVML version        : {drv['nvml_version']}\n"
                          f"DRIVER version      : {drv['version']}\nCUDA Version        : {drv['cuda_version']}\n")
    if sorted(args) in (["-q"], ["--query"]):
        return ToolResult(render_nvsmi_query_text(host, views, _timestamp()))
    if sorted(args) in (["-q", "-x"], ["--query", "--xml-format"], ["-q", "--xml-format"], ["--query", "-x"]):
        return ToolResult(render_nvsmi_xml(host, views, _timestamp()))
    if args[0] == "topo":
        if args[1:] in (["-m"], ["--matrix"]):
            return ToolResult(render_topo_matrix(*topo_data(host, views)))
        return ToolResult(NVSMI_BAD_ARGS, RC_BAD_ARG)
    if args[0] == "nvlink":
        rest = args[1:]
        if rest and rest[0] in ("-i", "--id") and len(rest) >= 2:
            views = [v for v in views if str(v["index"]) == rest[1]]
            if not views:
                return ToolResult(NVSMI_NO_DEVICES, RC_NOT_FOUND)
            rest = rest[2:]
        if rest in (["-s"], ["--status"]):
            nvlink = host.profile["gpu_model"].get("nvlink")
            if not nvlink:
                return ToolResult("")  # GPUs without NVLink print nothing
            entries = [(v["index"], v["name"], v["uuid"],
                        [None if link in v["down_links"] else nvlink["link_speed"]
                         for link in range(nvlink["links"])]) for v in views]
            return ToolResult(render_nvlink_status(entries))
        return ToolResult(NVSMI_BAD_ARGS, RC_BAD_ARG)
    query = [a for a in args if a.startswith("--query-gpu=")]
    fmt = [a for a in args if a.startswith("--format=")]
    if query and fmt and len(args) == 2:
        fields = [f.strip() for f in query[0].split("=", 1)[1].split(",") if f.strip()]
        for field in fields:
            if field not in QUERY_FIELDS:
                return ToolResult(f'Field "{field}" is not a valid field to query.\n\n', RC_BAD_ARG)
        options = fmt[0].split("=", 1)[1].split(",")
        if options[0] != "csv" or any(o not in ("csv", "noheader", "nounits") for o in options):
            return ToolResult(NVSMI_BAD_ARGS, RC_BAD_ARG)
        return ToolResult(render_query_gpu(host, views, fields, options))
    return ToolResult(NVSMI_BAD_ARGS, RC_BAD_ARG)


def _take_ids(args):
    """Remove -i/--id from args; returns (ids, remaining) or (None, args) when malformed."""
    remaining, ids = [], None
    it = iter(range(len(args)))
    for pos in it:
        arg = args[pos]
        if arg in ("-i", "--id"):
            if pos + 1 >= len(args):
                return None, args
            ids = args[pos + 1].split(",")
            next(it, None)
        elif arg.startswith("--id="):
            ids = arg.split("=", 1)[1].split(",")
        else:
            remaining.append(arg)
    return ids, remaining


# --------------------------------------------------------------------------- InfiniBand

def nic_guid(host, nic, kind):
    raw = stable_hex(host.hostname, nic["name"], kind, length=16)
    return "0x" + raw


def nic_port(host, nic):
    """Port values; ib_port_down shows what a real unplugged/untrained port reports.

    ib_port_degraded: the link trained, but at a lower rate (fewer lanes or a slower speed); the lowest wins.
    """
    if nic["name"] in host.fault_targets("ib_port_down", "port"):
        return {"state": "Down", "physical_state": "Polling", "rate": 10}
    rates = [f["rate"] for f in host.faults if f["kind"] == "ib_port_degraded" and f.get("port") == nic["name"]]
    return {"state": "Active", "physical_state": "LinkUp", "rate": min(rates, default=nic["rate"])}


def render_ibstat_ca(ca):
    """One CA in ibstat's layout. ca: name, ca_type, firmware, node_guid, sys_guid, ports[list of dicts]."""
    lines = [f"CA '{ca['name']}'", f"\tCA type: {ca['ca_type']}", f"\tNumber of ports: {len(ca['ports'])}",
             f"\tFirmware version: {ca['firmware']}", f"\tHardware version: {ca.get('hardware_version', '0')}",
             f"\tNode GUID: {ca['node_guid']}", f"\tSystem image GUID: {ca['sys_guid']}"]
    for number, port in enumerate(ca["ports"], start=1):
        lines += [f"\tPort {number}:", f"\t\tState: {port['state']}", f"\t\tPhysical state: {port['physical_state']}",
                  f"\t\tRate: {port['rate']}", f"\t\tBase lid: {port['base_lid']}", f"\t\tLMC: {port['lmc']}",
                  f"\t\tSM lid: {port['sm_lid']}", f"\t\tCapability mask: {port['capability_mask']}",
                  f"\t\tPort GUID: {port['port_guid']}", f"\t\tLink layer: {port['link_layer']}"]
    return "\n".join(lines) + "\n"


def ibstat_ca_data(host, nic):
    port = nic_port(host, nic)
    return {
        "name": nic["name"], "ca_type": nic["ca_type"], "firmware": nic["firmware"],
        "node_guid": nic_guid(host, nic, "node"), "sys_guid": nic_guid(host, nic, "node"),
        "ports": [dict(port, base_lid=nic["base_lid"], lmc=0, sm_lid=nic["sm_lid"],
                       capability_mask=nic["capability_mask"], port_guid=nic_guid(host, nic, "node"),
                       link_layer=nic["link_layer"])],
    }


def ibstat(host, argv):
    nics = host.profile["nics"]
    if argv in (["-l"], ["--list_of_cas"]):
        return ToolResult("".join(n["name"] + "\n" for n in nics))
    if argv and argv[0].startswith("-"):
        return ToolResult("", 255, f"ibstat: invalid option -- '{argv[0].lstrip('-')}'\n")
    if argv:
        chosen = [n for n in nics if n["name"] == argv[0]]
        if not chosen:
            return ToolResult("", 255, f"ibpanic: [{os.getpid()}] main: '{argv[0]}' IB device can't be found: "
                                       "No such file or directory\n")
    else:
        chosen = nics
    return ToolResult("".join(render_ibstat_ca(ibstat_ca_data(host, n)) for n in chosen))


def _colon_guid(guid):
    raw = guid[2:]
    return ":".join(raw[i:i + 4] for i in range(0, 16, 4))


def ibv_devinfo(host, argv):
    nics = host.profile["nics"]
    verbose = "-v" in argv or "--verbose" in argv
    args = [a for a in argv if a not in ("-v", "--verbose")]
    if args in (["-l"], ["--list"]):
        return ToolResult(f"{len(nics)} HCAs found:\n" + "".join(f"\t{n['name']}\n" for n in nics))
    if len(args) == 2 and args[0] in ("-d", "--ib-dev"):
        chosen = [n for n in nics if n["name"] == args[1]]
        if not chosen:
            return ToolResult("", 255, f"IB device '{args[1]}' wasn't found\n")
    elif not args:
        chosen = nics
    else:
        return ToolResult("", 255, f"ibv_devinfo: unrecognized option '{args[0]}'\n")
    if not chosen:
        return ToolResult("", 255, "No IB devices found\n")
    out = []
    for nic in chosen:
        port = nic_port(host, nic)
        up = port["state"] == "Active"
        guid = _colon_guid(nic_guid(host, nic, "node"))
        out += [f"hca_id:\t{nic['name']}", "\ttransport:\t\t\tInfiniBand (0)", f"\tfw_ver:\t\t\t\t{nic['firmware']}",
                f"\tnode_guid:\t\t\t{guid}", f"\tsys_image_guid:\t\t\t{guid}", "\tvendor_id:\t\t\t0x02c9",
                f"\tvendor_part_id:\t\t\t{nic['vendor_part_id']}", "\thw_ver:\t\t\t\t0x0",
                f"\tboard_id:\t\t\t{nic['board_id']}", "\tphys_port_cnt:\t\t\t1"]
        if verbose:
            out += ["\tmax_mr_size:\t\t\t0xffffffffffffffff", "\tpage_size_cap:\t\t\t0xfffffffffffff000",
                    "\tmax_qp:\t\t\t\t131072", "\tmax_qp_wr:\t\t\t32768"]
        out += ["\t\tport:\t1",
                "\t\t\tstate:\t\t\tPORT_ACTIVE (4)" if up else "\t\t\tstate:\t\t\tPORT_DOWN (1)",
                "\t\t\tmax_mtu:\t\t4096 (5)", "\t\t\tactive_mtu:\t\t4096 (5)",
                f"\t\t\tsm_lid:\t\t\t{nic['sm_lid']}", f"\t\t\tport_lid:\t\t{nic['base_lid']}",
                "\t\t\tport_lmc:\t\t0x00", f"\t\t\tlink_layer:\t\t{nic['link_layer']}"]
        if verbose:
            out += ["\t\t\tphys_state:\t\tLINK_UP (5)" if up else "\t\t\tphys_state:\t\tPOLLING (2)"]
        out.append("")
    return ToolResult("\n".join(out) + "\n")


# --------------------------------------------------------------------------- IMEX

IMEX_NODES_CONFIG = "etc/nvidia-imex/nodes_config.cfg"


def imex_nodes(root):
    """IPs in nodes_config.cfg: one a line; blank lines and '#' comments ignored."""
    try:
        text = (root / IMEX_NODES_CONFIG).read_text()
    except FileNotFoundError:
        return []
    return [line.split("#", 1)[0].strip() for line in text.splitlines() if line.split("#", 1)[0].strip()]


def imex_peers(host):
    """The domain's nodes in order, as {ip, hostname}: host.json's imex_peers (or the host alone), or on a
    driver-managed host the IPs in nodes_config.cfg."""
    peers = host.config.get("imex_peers") or [{"ip": host.config.get("ip", "127.0.0.1"), "hostname": host.hostname}]
    peers = [p if isinstance(p, dict) else {"ip": p, "hostname": p} for p in peers]
    if host.driver_managed:
        # The daemon reads its peers from the node config the deployment writes (one IP a line).
        names = {p["ip"]: p["hostname"] for p in peers}
        peers = [{"ip": ip, "hostname": names.get(ip, ip)} for ip in imex_nodes(host.root)]
    return peers


def imex_own_index(host, peers):
    """This host's node number: where its ip sits in the node list (as the daemon finds itself), else
    host.json's node_index."""
    ips = [p["ip"] for p in peers]
    ip = host.config.get("ip")
    return ips.index(ip) if ip in ips else host.config.get("node_index", 0)


def imex_domain_state(count, not_ready):
    """UP with every node READY, DOWN with none, DEGRADED in between (the -N -j "status" words)."""
    if not not_ready:
        return "UP"
    return "DEGRADED" if len(not_ready) < count else "DOWN"


def render_imex_nodes(peers, version, not_ready, hostnames):
    """nvidia-imex-ctl -N. A node in not_ready shows UNAVAILABLE and I (Invalid) in its row and column."""
    lines = ["Connectivity Table Legend:",
             "I - Invalid - Node wasn't reachable, no connection status available",
             "N - Never Connected",
             "R - Recovering - Connection was lost, but clean up has not yet been triggered.",
             "D - Disconnected - Connection was lost, and clean up has been triggreed.",
             "A - Authenticating - If GSSAPI enabled, client has initiated mutual authentication.",
             "!V! - Version mismatch, communication disabled.",
             "!M! - Node map mismatch, communication disabled.",
             "C - Connected - Ready for operation", "", "11/10/2025 09:30:00.000", "Nodes:"]
    for number, peer in enumerate(peers):
        address = f"{peer['ip']} ({peer['hostname']})" if hostnames else peer["ip"]
        status = "UNAVAILABLE" if number in not_ready else "READY"
        lines.append(f"Node #{number:<3} - {address:<15} - {status:<20} - Version: {version}")
    lines += ["", " Nodes From\\To  " + "".join(f"{n:<4}" for n in range(len(peers)))]
    for row in range(len(peers)):
        cells = ("I" if not_ready & {row, col} else "C" for col in range(len(peers)))
        lines.append(f"{row:>8}        " + "".join(f"{cell:<4}" for cell in cells))
    lines.append(f"Domain State: {imex_domain_state(len(peers), not_ready)}")
    return "\n".join(lines) + "\n"


def imex_ctl(host, argv):
    flags = set(argv)
    if not flags & {"-N", "-q"} or flags - {"-N", "-H", "-q"}:
        return ToolResult("Usage: nvidia-imex-ctl [-i <IP> <PORT>|-u <unix domain socket path>|"
                          "-c <nvidia-imex config.cfg path>] <-n|-N|-q|-s|-d|-m> [-t <timeout>]\n", 1)
    if not host.driver_loaded or (host.driver_managed and not host.service_running("nvidia-imex")):
        return ToolResult("", 1, "Failed to connect to IMEX daemon: Connection refused\n")
    peers = imex_peers(host)
    # imex_peer_not_ready: node numbers beyond the node list have no effect
    not_ready = {n for n in host.fault_targets("imex_peer_not_ready", "node") if n < len(peers)}
    if "-q" in flags:
        # -q is the local daemon's own state: only the host's own node index makes it not READY.
        return ToolResult("UNAVAILABLE\n" if imex_own_index(host, peers) in not_ready else "READY\n")
    version = host.profile["imex"]["version"]
    if host.driver_managed:
        version = upstream_version(host.role_version("nvidia-imex") or version)
    return ToolResult(render_imex_nodes(peers, version, not_ready, "-H" in flags))


# --------------------------------------------------------------------------- AMD

def amd_gpu_views(host):
    model = host.profile["gpu_model"]
    views = []
    for index, slot in enumerate(host.visible_gpu_slots()):
        spec = host.profile["gpus"][slot]
        uncorrectable = slot in host.fault_targets("ecc_uncorrectable", "gpu")
        pending = slot in host.fault_targets("row_remap_pending", "gpu")
        views.append({
            "index": index, "slot": slot, "bdf": spec["bdf"], "oam_id": spec["oam_id"], "kfd_id": spec["kfd_id"],
            "node_id": spec["node_id"], "numa_node": spec["numa_node"],
            "uuid": f"{stable_hex(host.hostname, slot, 'amd', length=2)}ff{model['device_id'][2:]}-0000-1000-80"
                    f"{stable_hex(host.hostname, slot, 'amd-uuid', length=2)}-{stable_hex(host.hostname, slot, length=12)}",
            "serial": model["serial_prefix"] + stable_hex(host.hostname, slot, "amd-serial", length=12).upper(),
            "ecc_uncorrectable": 4 if uncorrectable else 0,
            # Pending bad pages: AMD's counterpart of a pending row remap.
            "bad_pages_pending": [f"0x{stable_hex(host.hostname, slot, 'page', length=9)}000"] if pending else [],
        })
    return views


def _unit(value, unit):
    return {"value": value, "unit": unit}


def amd_static_sections(host, view):
    """Section name -> list of (KEY, value); value may be _unit() dicts (shown 'v unit' in text)."""
    model, drv = host.profile["gpu_model"], host.driver
    return {
        "asic": [("market_name", model["market_name"]), ("vendor_id", model["vendor_id"]),
                 ("vendor_name", model["vendor_name"]), ("subvendor_id", model["vendor_id"]),
                 ("device_id", model["device_id"]), ("subsystem_id", model["subsystem_id"]),
                 ("rev_id", model["rev_id"]), ("asic_serial", "0x" + stable_hex(host.hostname, view["slot"],
                                                                                 "asic", length=16).upper()),
                 ("oam_id", view["oam_id"]), ("num_compute_units", model["num_compute_units"]),
                 ("target_graphics_version", model["target_graphics_version"]), ("flags", 16)],
        "bus": [("bdf", view["bdf"]), ("max_pcie_width", model["pcie"]["max_width"]),
                ("max_pcie_speed", _unit(model["pcie"]["max_speed_gts"], "GT/s")), ("pcie_levels", "N/A"),
                ("pcie_interface_version", model["pcie"]["interface_version"]),
                ("slot_type", model["pcie"]["slot_type"])],
        "ifwi": [(k, model["ifwi"][k]) for k in ("name", "build_date", "part_number", "version")],
        "driver": [("name", drv["name"]), ("version", drv["version"]),
                   ("os_kernel_version", host.config.get("kernel", "6.8.0-60-generic"))],
        "board": [("model_number", model["board"]["model_number"]), ("product_serial", view["serial"]),
                  ("fru_id", model["board"]["fru_id"]), ("product_name", model["board"]["product_name"]),
                  ("manufacturer_name", model["board"]["manufacturer_name"])],
        "ras": [("eeprom_version", "0x10000"), ("bad_page_threshold", 128), ("bad_page_threshold_exceeded", "False"),
                ("parity_schema", "DISABLED"), ("single_bit_schema", "DISABLED"), ("double_bit_schema", "DISABLED"),
                ("poison_schema", "ENABLED")],
        "numa": [("node", view["numa_node"]), ("affinity", view["numa_node"])],
        "vram": [("type", model["vram_type"]), ("vendor", model["vram_vendor"]),
                 ("size", _unit(model["vram_total_mb"], "MB")), ("bit_width", model["vram_bit_width"])],
    }


def amd_metric_sections(host, view):
    model = host.profile["gpu_model"]
    temps, power, volts = model["temperature_c"], model["power_w"], model["voltage_mv"]
    ecc = view["ecc_uncorrectable"]
    return {
        "usage": [("gfx_activity", _unit(0, "%")), ("umc_activity", _unit(0, "%")), ("mm_activity", _unit(0, "%"))],
        "power": [("socket_power", _unit(power["socket"], "W")), ("gfx_voltage", _unit(volts["gfx"], "mV")),
                  ("soc_voltage", _unit(volts["soc"], "mV")), ("mem_voltage", _unit(volts["mem"], "mV")),
                  ("throttle_status", "UNTHROTTLED"), ("power_management", "ENABLED")],
        "temperature": [("edge", temps["edge"] if temps["edge"] == "N/A" else _unit(temps["edge"], "\u00b0C")),
                        ("hotspot", _unit(temps["hotspot"], "\u00b0C")), ("mem", _unit(temps["mem"], "\u00b0C"))],
        "mem_usage": [("total_vram", _unit(model["vram_total_mb"], "MB")),
                      ("used_vram", _unit(model["vram_used_mb"], "MB")),
                      ("free_vram", _unit(model["vram_total_mb"] - model["vram_used_mb"], "MB"))],
        "ecc": [("total_correctable_count", 0), ("total_uncorrectable_count", ecc), ("total_deferred_count", 0),
                ("cache_correctable_count", 0), ("cache_uncorrectable_count", 0)],
    }


AMD_STATIC_FLAGS = {"-a": "asic", "--asic": "asic", "-b": "bus", "--bus": "bus", "-V": "ifwi", "--vbios": "ifwi",
                    "--ifwi": "ifwi", "-d": "driver", "--driver": "driver", "-B": "board", "--board": "board",
                    "-r": "ras", "--ras": "ras", "-u": "numa", "--numa": "numa", "-v": "vram", "--vram": "vram"}
AMD_METRIC_FLAGS = {"-u": "usage", "--usage": "usage", "-p": "power", "--power": "power", "-t": "temperature",
                    "--temperature": "temperature", "-m": "mem-usage", "--mem-usage": "mem_usage",
                    "-e": "ecc", "--ecc": "ecc"}


def _amd_text_value(value):
    if isinstance(value, dict):
        return f"{value['value']} {value['unit']}"
    return str(value)


def render_amd_text(blocks):
    """blocks: [(gpu index, {section: [(key, value)]})] in amd-smi's plain layout."""
    lines = []
    for index, sections in blocks:
        lines.append(f"GPU: {index}")
        for section, items in sections.items():
            if section is None:
                lines += [f"    {key.upper()}: {_amd_text_value(value)}" for key, value in items]
                continue
            lines.append(f"    {section.upper()}:")
            lines += [f"        {key.upper()}: {_amd_text_value(value)}" for key, value in items]
        lines.append("")
    return "\n".join(lines) + "\n"


def render_amd_json(blocks):
    data = []
    for index, sections in blocks:
        entry = {"gpu": index}
        for section, items in sections.items():
            if section is None:
                entry.update(dict(items))
            else:
                entry[section] = dict(items)
        data.append(entry)
    return json.dumps(data, indent=4, ensure_ascii=False) + "\n"


def amd_smi(host, argv):
    drv = host.driver
    version_line = (f"AMDSMI Tool: {drv['amdsmi_tool_version']} | AMDSMI Library version: "
                    f"{drv['amdsmi_library_version']} | ROCm version: {drv['rocm_version']} | "
                    f"amdgpu version: {drv['version']} | amd_hsmp version: N/A\n")
    if not host.driver_loaded:
        # amd-smi logs the init failures, then still prints its own version with ROCm unknown.
        short_version = (f"AMDSMI Tool: {drv['amdsmi_tool_version']} | AMDSMI Library version: "
                         f"{drv['amdsmi_library_version']} | ROCm version: N/A\n")
        return ToolResult(short_version, 1, AMDSMI_DRIVER_ERROR)
    if not argv:
        return ToolResult("usage: amd-smi [-h] {version,list,static,firmware,bad-pages,metric,process,topology}\n")
    command, rest = argv[0], list(argv[1:])
    as_json = "--json" in rest
    rest = [a for a in rest if a != "--json"]
    views = amd_gpu_views(host)
    if "-g" in rest or "--gpu" in rest:
        flag = "-g" if "-g" in rest else "--gpu"
        pos = rest.index(flag)
        wanted, end = [], pos + 1
        while end < len(rest) and rest[end].isdigit():
            wanted.append(int(rest[end]))
            end += 1
        if not wanted or any(w >= len(views) for w in wanted):
            return ToolResult("", 1, f"AmdSmiInvalidParameterValueException: Invalid parameter value: "
                                     f"GPU ID {' '.join(rest[pos + 1:end]) or 'missing'} is not valid\n")
        views = [views[w] for w in wanted]
        rest = rest[:pos] + rest[end:]
    if command == "version" and not rest:
        if as_json:
            return ToolResult(json.dumps([{"tool": "AMDSMI Tool", "version": drv["amdsmi_tool_version"],
                                           "amdsmi_library_version": drv["amdsmi_library_version"],
                                           "rocm_version": drv["rocm_version"], "amdgpu_version": drv["version"],
                                           "amd_hsmp_version": "N/A"}], indent=4) + "\n")
        return ToolResult(version_line)
    if command == "list" and not rest:
        blocks = [(v["index"], {None: [("bdf", v["bdf"]), ("uuid", v["uuid"]), ("kfd_id", v["kfd_id"]),
                                       ("node_id", v["node_id"]), ("partition_id", 0)]}) for v in views]
        return ToolResult(render_amd_json(blocks) if as_json else render_amd_text(blocks))
    if command in ("static", "metric"):
        flag_map = AMD_STATIC_FLAGS if command == "static" else AMD_METRIC_FLAGS
        unknown = [a for a in rest if a not in flag_map]
        if unknown:
            return ToolResult("", 2, f"amd-smi {command}: error: unrecognized arguments: {' '.join(unknown)}\n")
        wanted = {flag_map[a].replace("-", "_") for a in rest}
        builder = amd_static_sections if command == "static" else amd_metric_sections
        blocks = []
        for v in views:
            sections = builder(host, v)
            blocks.append((v["index"], {k: s for k, s in sections.items() if not wanted or k in wanted}))
        return ToolResult(render_amd_json(blocks) if as_json else render_amd_text(blocks))
    if command == "bad-pages" and not rest:
        blocks = []
        for v in views:
            pending = [("page_address", p) for p in v["bad_pages_pending"]]
            items = ([("retired", "No bad pages found.")]
                     + (pending + [("page_size", _unit(4, "KB")), ("status", "PENDING")]
                        if pending else [("pending", "No bad pages found.")])
                     + [("un_res", "No bad pages found.")])
            blocks.append((v["index"], {None: items}))
        return ToolResult(render_amd_json(blocks) if as_json else render_amd_text(blocks))
    return ToolResult("", 2, f"amd-smi: error: argument command: invalid choice: '{command}'\n")


ROCM_SMI_SECTIONS = {
    "--showid": ["Device Name", "Device ID", "Device Rev", "Subsystem ID", "GUID"],
    "--showproductname": ["Card series", "Card model", "Card vendor", "Card SKU"],
    "--showuse": ["GPU use (%)"],
    "--showmemuse": ["GPU Memory Allocated (VRAM%)"],
    "--showtemp": ["Temperature (Sensor edge) (C)", "Temperature (Sensor junction) (C)",
                   "Temperature (Sensor memory) (C)"],
    "--showpower": ["Current Socket Graphics Package Power (W)"],
    "--showbus": ["PCI Bus"],
    "--showserial": ["Serial Number"],
    "--showuniqueid": ["Unique ID"],
}


def rocm_smi_card(host, view):
    """One card's key/value pairs, keys spelled as `rocm-smi --showallinfo --json` spells them."""
    model = host.profile["gpu_model"]
    clocks, temps = model["clocks_mhz"], model["temperature_c"]
    vram_bytes = model["vram_total_mb"] * 1024 * 1024
    used_bytes = model["vram_used_mb"] * 1024 * 1024
    card = {
        "Device Name": model["market_name"], "Device ID": model["device_id"], "Device Rev": model["rev_id"],
        "Subsystem ID": model["subsystem_id"], "GUID": str(view["kfd_id"]),
        "Unique ID": "0x" + stable_hex(host.hostname, view["slot"], "asic", length=16),
        "VBIOS version": model["vbios_version"],
        "Temperature (Sensor edge) (C)": "N/A" if temps["edge"] == "N/A" else f"{temps['edge']:.1f}",
        "Temperature (Sensor junction) (C)": f"{temps['hotspot']:.1f}",
        "Temperature (Sensor memory) (C)": f"{temps['mem']:.1f}",
        "fclk clock speed:": f"({clocks['fclk']}Mhz)", "fclk clock level:": "0",
        "mclk clock speed:": f"({clocks['mclk']}Mhz)", "mclk clock level:": "0",
        "sclk clock speed:": f"({clocks['sclk']}Mhz)", "sclk clock level:": "0",
        "socclk clock speed:": f"({clocks['socclk']}Mhz)", "socclk clock level:": "0",
        "pcie clock level": f"0 ({model['pcie']['max_speed_gts']:.1f}GT/s x{model['pcie']['max_width']})",
        "sclk clock level": f"0 ({clocks['sclk']}Mhz)",
        "Performance Level": "auto", "GPU OverDrive value (%)": "0", "GPU Memory OverDrive value (%)": "0",
        "Max Graphics Package Power (W)": f"{model['power_w']['cap']:.1f}",
        "Current Socket Graphics Package Power (W)": f"{model['power_w']['socket']:.1f}",
        "GPU use (%)": "0", "GPU Memory Allocated (VRAM%)": "0", "GPU memory use (%)": "0",
        "Memory Activity": "N/A", "Avg. Memory Bandwidth": "0",
        "GPU memory vendor": model["vram_vendor"].lower(), "PCIe Replay Count": "0",
        "Serial Number": view["serial"], "Voltage (mV)": str(model["voltage_mv"]["gfx"]),
        "PCI Bus": view["bdf"].upper(),
        "VRAM Total Memory (B)": str(vram_bytes), "VRAM Total Used Memory (B)": str(used_bytes),
        "VIS_VRAM Total Memory (B)": str(vram_bytes), "VIS_VRAM Total Used Memory (B)": str(used_bytes),
        "GTT Total Memory (B)": str(1 << 40), "GTT Total Used Memory (B)": "12058624",
        **{f"{name} firmware version": version for name, version in model["firmware"].items()},
        "Card series": model["rocm_smi_card_series"], "Card model": model["rocm_smi_card_model"],
        "Card vendor": "Advanced Micro Devices, Inc. [AMD/ATI]", "Card SKU": model["rocm_smi_card_sku"],
        "(Topology) Numa Node": str(view["numa_node"]), "(Topology) Numa Affinity": str(view["numa_node"]),
    }
    return card


def rocm_smi(host, argv):
    if not host.driver_loaded:
        return ToolResult("", 1, ROCMSMI_DRIVER_ERROR)
    as_json = "--json" in argv
    flags = [a for a in argv if a != "--json"]
    if flags == ["--showmeminfo", "vram"]:
        keys = ["VRAM Total Memory (B)", "VRAM Total Used Memory (B)"]
    elif flags == ["--showallinfo"] or flags == ["-a"]:
        keys = None
    elif flags == ["--showdriverversion"]:
        keys = []
    elif flags and all(f in ROCM_SMI_SECTIONS for f in flags):
        keys = [k for f in flags for k in ROCM_SMI_SECTIONS[f]]
    else:
        return ToolResult("", 2, f"rocm-smi: error: unrecognized arguments: {' '.join(flags) or '(none)'}\n")
    views = amd_gpu_views(host)
    data = {}
    for view in views:
        card = rocm_smi_card(host, view)
        if keys is not None:
            card = {k: card[k] for k in keys}
        if card:
            data[f"card{view['index']}"] = card
    if keys is None or flags == ["--showdriverversion"]:
        system = {"Driver version": host.driver["version"]}
        if keys is None:
            for kind, value in (("Weight", "15"), ("Hops", "1"), ("Link type", "XGMI")):
                for a in range(len(views)):
                    for b in range(a + 1, len(views)):
                        system[f"(Topology) {kind} between DRM devices {a} and {b}"] = value
        data["system"] = system
    if as_json:
        return ToolResult(json.dumps(data) + "\n")
    lines = ["", "", "============================ ROCm System Management Interface ============================"]
    for owner, values in data.items():
        prefix = f"GPU[{owner[4:]}]\t\t: " if owner.startswith("card") else ""
        lines += [f"{prefix}{key}: {value}" for key, value in values.items()]
    lines += ["================================== End of ROCm SMI Log ===================================", ""]
    return ToolResult("\n".join(lines))


# --------------------------------------------------------------------------- all_reduce_perf

def parse_size(text):
    text = text.strip()
    factor = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    return int(float(text[:-1] if factor > 1 else text) * factor)


def _time_str(usec, flavor):
    if usec >= 10000.0:
        # rccl-tests prints whole microseconds one column narrower (seen in the MI350X capture).
        return f"{usec:6.0f}" if flavor == "rccl" else f"{usec:7.0f}"
    if usec >= 100.0:
        return f"{usec:7.1f}"
    return f"{usec:7.2f}"


def render_perf_header_rows(flavor):
    """The three column-title lines; rccl-tests widens '#wrong' by one column."""
    if flavor == "rccl":
        return ["#                                                              out-of-place                       in-place",
                "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong",
                "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)           (us)  (GB/s)  (GB/s)"]
    return ["#                                                              out-of-place                       in-place",
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"]


def render_perf_row(flavor, size, count, dtype, op, root, results):
    """results: two (time_us, algbw, busbw, wrong) tuples, out-of-place then in-place."""
    wrong_width = 6 if flavor == "rccl" else 5
    row = f"{size:12d}  {count:12d}  {dtype:>8}  {op:>6}  {root:6d}"
    for usec, algbw, busbw, wrong in results:
        row += f"  {_time_str(usec, flavor)}  {algbw:6.2f}  {busbw:6.2f}  {wrong:>{wrong_width}}"
    return row


DTYPE_BYTES = {"int8": 1, "uint8": 1, "half": 2, "bfloat16": 2, "float": 4, "int32": 4, "int": 4, "double": 8,
               "int64": 8, "uint64": 8}


def all_reduce_perf(host, argv):
    options = {"-b": "32M", "-e": "32M", "-f": "1", "-i": "1M", "-g": "1", "-t": "1", "-w": "5", "-n": "20",
               "-d": "float", "-o": "sum", "-c": "1", "-G": "0", "-a": "1", "-m": "1"}
    long_names = {"--minbytes": "-b", "--maxbytes": "-e", "--stepfactor": "-f", "--stepbytes": "-i",
                  "--ngpus": "-g", "--nthreads": "-t", "--warmup_iters": "-w", "--iters": "-n",
                  "--datatype": "-d", "--op": "-o", "--check": "-c", "--cudagraph": "-G"}
    pos = 0
    while pos < len(argv):
        flag = long_names.get(argv[pos], argv[pos])
        if flag not in options or pos + 1 >= len(argv):
            return ToolResult("", 1, f"invalid option '{argv[pos]}'\n")
        options[flag] = argv[pos + 1]
        pos += 2
    profile = host.profile
    spec = profile["collectives"]
    flavor = spec["flavor"]
    if not host.driver_loaded:
        runtime = "HIP" if flavor == "rccl" else "CUDA"
        reason = "no ROCm-capable device is detected" if flavor == "rccl" else "CUDA driver version is insufficient for CUDA runtime version"
        return ToolResult("", 1, f"{host.hostname}: Test {runtime} failure common.cu:1087 '{reason}'\n .. "
                                 f"{host.hostname} pid {os.getpid()}: Test failure common.cu:1011\n")
    ngpus = int(options["-g"]) * int(options["-t"])
    visible = host.visible_gpu_slots()
    if ngpus > len(visible):
        return ToolResult("", 1, f"{host.hostname}: Test {'HIP' if flavor == 'rccl' else 'CUDA'} failure "
                                 f"common.cu:1091 'invalid device ordinal'\n")
    dtype = options["-d"]
    if dtype not in DTYPE_BYTES:
        return ToolResult("", 1, f"invalid type {dtype}, defaulting to float .. \n")
    min_bytes, max_bytes = parse_size(options["-b"]), parse_size(options["-e"])
    factor, step_bytes = int(options["-f"]), parse_size(options["-i"])
    step_text = f"{factor}(factor)" if factor > 1 else f"{step_bytes}(bytes)"
    out = [f"# nThread {options['-t']} nGpus {options['-g']} minBytes {min_bytes} maxBytes {max_bytes} "
           f"step: {step_text} warmup iters: {options['-w']} iters: {options['-n']} agg iters: 1 "
           f"validation: {options['-c']} graph: {options['-G']}", "#"]
    if flavor == "rccl":
        out.append("rccl-tests: Version Unknown")
    out.append("# Using devices")
    names = (profile["gpu_model"].get("product_name") or profile["gpu_model"]["market_name"])
    pid_base = 4000 + int(stable_hex(host.hostname, "pid", length=4), 16) % 50000
    for rank in range(ngpus):
        slot = visible[rank]
        gpu = profile["gpus"][slot]
        bus = gpu.get("pci_bus_id") or gpu["bdf"]
        domain, pci_bus = bus.split(":")[-3][-4:], bus.split(":")[-2]
        out.append(f"#  Rank {rank:2d} Group  0 Pid {pid_base:6d} on {host.hostname:>10} device {rank:2d} "
                   f"[{domain}:{pci_bus.lower()}:00] {names}")
    out += [spec["library_version"], "#"] + render_perf_header_rows(flavor)
    if host.has_fault("nccl_init_failure"):
        out += perf_init_failure(host.hostname, flavor, int(options["-g"]), pid_base)
        return ToolResult("\n".join(out) + "\n", RC_TEST_NCCL_ERROR)
    peak = perf_peak_busbw(host, spec, visible[:ngpus])
    busbw_sum, failed_checks = 0.0, 0
    sizes = perf_sizes(min_bytes, max_bytes, factor, step_bytes)
    for size in sizes:
        results = perf_results(spec, peak, ngpus, size, perf_wrong(host, size, options["-c"]))
        busbw_sum += results[0][2] + results[1][2]
        failed_checks += sum(r[3] not in ("0", "N/A") for r in results)
        out.append(render_perf_row(flavor, size, size // DTYPE_BYTES[dtype], dtype, options["-o"], -1, results))
    # Each thread counts the checks its GPUs failed; the footer prints the sum (errors[0]).
    errors = failed_checks * int(options["-t"])
    out += perf_footer(flavor, busbw_sum / (2 * len(sizes)) if sizes else 0.0, errors)
    # nccl-tests up to 2.17.2 and rccl-tests end run() with exit(EXIT_FAILURE) when errors[0] is not 0.
    return ToolResult("\n".join(out) + "\n", 1 if errors else RC_OK)


def perf_peak_busbw(host, spec, slots):
    """Bus bandwidth saturates at the profile's peak; fewer active NVLinks cap it proportionally, and
    collective_slow scales it to its percent (the lowest wins)."""
    links = (host.profile["gpu_model"].get("nvlink") or {}).get("links")
    worst_down = max([len(host.down_links(s)) for s in slots] or [0])
    percent = min(host.fault_targets("collective_slow", "percent"), default=100)
    return spec["peak_busbw_gbps"] * ((links - worst_down) / links if links else 1.0) * percent / 100


def perf_sizes(min_bytes, max_bytes, factor, step_bytes):
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size = size * factor if factor > 1 else size + step_bytes
        if factor <= 1 and step_bytes <= 0:
            break
    return sizes


def perf_wrong(host, size, check):
    """The #wrong cell. collective_wrong corrupts size/1MiB elements of every result from 1 MiB up; the
    tools print the count with %g. Without a check (-c 0) there is nothing to count."""
    if check == "0":
        return "N/A"
    if host.has_fault("collective_wrong") and size >= 1 << 20:
        return f"{float(size >> 20):g}"
    return "0"


def perf_results(spec, peak, ngpus, size, wrong):
    """Out-of-place and in-place (time_us, algbw, busbw, wrong): a fixed latency plus size over bandwidth."""
    bus_factor = 2.0 * (ngpus - 1) / ngpus
    algbw_peak = peak / bus_factor if bus_factor else 0.0
    results = []
    for in_place in (False, True):
        usec = spec["latency_us"] * (1.03 if in_place else 1.0) + (size / (algbw_peak * 1e3) if algbw_peak else 0)
        algbw = size / usec / 1e3
        results.append((usec, algbw, algbw * bus_factor, wrong))
    return results


def perf_footer(flavor, avg_busbw, errors):
    """The summary; errors is the number of failed data checks (common.cu prints errors[0])."""
    lines = ["# Errors with asterisks indicate errors that have exceeded the maximum threshold."] if flavor == "rccl" else []
    return lines + [f"# Out of bounds values : {errors} {'FAILED' if errors else 'OK'}",
                    f"# Avg bus bandwidth    : {avg_busbw:g}", "#", ""]


# nccl_init_failure: NCCL fails with ncclSystemError while it connects to a peer. NCCL >= 2.22 connects
# lazily (NCCL_RUNTIME_CONNECT=1), so this surfaces in the first warm-up collective, after the column titles.
# The NCCLCHECK site, then every TESTCHECK frame up to main(), at the source lines of the versions simulated:
# nccl-tests v2.16.5 src/common.cu and src/all_reduce.cu, rccl-tests ae3e635 (see README).
PERF_FAILURE_TRACE = {
    # flavour: (site with -g > 1: ncclGroupEnd in startColl, site with -g 1: ncclAllReduce,
    #           startColl's runColl frame (-g 1 only), frames: TimeTest warm-up, runTest, threadRunTests, run, main)
    "nccl": ("common.cu:411", "all_reduce.cu:44", "common.cu:400",
             ("common.cu:609", "all_reduce.cu:90", "common.cu:642", "common.cu:1202", "common.cu:937")),
    "rccl": ("common.cu:504", "all_reduce.cu:45", "common.cu:493",
             ("common.cu:718", "all_reduce.cu:91", "common.cu:827", "common.cu:1373", "common.cu:1164")),
}
# ncclGetErrorString(ncclSystemError); main() returns testNcclError from TESTCHECK(run()).
NCCL_SYSTEM_ERROR = "unhandled system error (run with NCCL_DEBUG=INFO for details)"
RC_TEST_NCCL_ERROR = 3
# The WARN socketConnectCheck logs (NCCL 2.27.7 misc/socket.cc:592; 2.26.6, which RCCL 2.26.6 follows: 556).
SOCKET_WARN = {
    "nccl": "misc/socket.cc:592 NCCL WARN socketStartConnect: connect to 10.0.0.2<29500> failed : "
            "Software caused connection abort",
    "rccl": "misc/socket.cc:556 NCCL WARN socketStartConnect: Connect to 10.0.0.2<29500> failed : "
            "Software caused connection abort",
}


def perf_init_failure(hostname, flavor, gpus_per_thread, pid):
    """The lines after the column titles: NCCL's WARN (only when NCCL_DEBUG lets it through; WARNs start
    with a blank line), the failed NCCLCHECK and the TESTCHECK trace. Both tools cut the hostname at '.'."""
    name = hostname.split(".")[0]
    group_site, single_site, run_coll_frame, frames = PERF_FAILURE_TRACE[flavor]
    lines = []
    if os.environ.get("NCCL_DEBUG", "").upper() in ("WARN", "INFO", "TRACE"):
        lines += ["", f"{name}:{pid}:{pid + 37} [0] {SOCKET_WARN[flavor]}"]
    site = group_site if gpus_per_thread > 1 else single_site
    trace = frames if gpus_per_thread > 1 else (run_coll_frame, *frames)
    lines.append(f"{name}: Test NCCL failure {site} '{NCCL_SYSTEM_ERROR} / '")
    return lines + [f" .. {name} pid {pid}: Test failure {frame}" for frame in trace]


# --------------------------------------------------------------------------- admin commands

# kind -> (required options, what the profile must have for the fault to mean anything)
FAULT_KINDS = {
    "gpu_missing": (("gpu",), None),
    "ecc_uncorrectable": (("gpu",), None),
    "row_remap_pending": (("gpu",), None),
    "nvlink_down": (("gpu", "link"), "nvlink"),
    "fabric_in_progress": ((), "fabric"),
    "driver_not_loaded": ((), None),
    "ib_port_down": (("port",), "nics"),
    "ib_port_degraded": (("port", "rate"), "nics"),
    "collective_slow": (("percent",), "collectives"),
    "collective_wrong": ((), "collectives"),
    "nccl_init_failure": ((), "collectives"),
    "imex_peer_not_ready": (("node",), "imex"),
}
# option -> smallest accepted value, largest (None: no limit); all but --port are integers
FAULT_OPTIONS = {"gpu": (None, None), "link": (None, None), "port": None, "percent": (1, 99), "rate": (1, None),
                 "node": (0, None)}
FAULT_USAGE = ("usage: gpusim.py fault {add KIND [--gpu N] [--link N] [--port NAME] [--rate R] [--percent P] "
               "[--node N]|clear [KIND]|list}\n")


def _profile_has(profile, capability):
    if capability == "nvlink":
        return bool(profile["gpu_model"].get("nvlink"))
    if capability == "collectives":
        # consumer carries a collectives block for the timing model but ships no all_reduce_perf
        return bool(profile.get("collectives")) and "all_reduce_perf" in profile["tools"]
    return bool(profile.get(capability))


def _parse_fault_options(kind, options):
    """(fault dict, None) or (None, ToolResult exit 2) for a bad, malformed or missing option."""
    fault = {"kind": kind}
    while options:
        key = options[0][2:] if options[0].startswith("--") else None
        if len(options) < 2 or key not in FAULT_OPTIONS:
            return None, ToolResult("", 2, f"gpusim: bad fault option '{options[0]}'\n")
        value, limits = options[1], FAULT_OPTIONS[key]
        if limits is not None:
            if not re.fullmatch(r"-?\d+", value):
                return None, ToolResult("", 2, f"gpusim: --{key} needs an integer, not '{value}'\n")
            value = int(value)
            low, high = limits
            if (low is not None and value < low) or (high is not None and value > high):
                bounds = f"{low}..{high}" if high is not None else f">= {low}"
                return None, ToolResult("", 2, f"gpusim: --{key} must be {bounds}, not {value}\n")
        fault[key] = value
        options = options[2:]
    missing = [k for k in FAULT_KINDS[kind][0] if k not in fault]
    if missing:
        return None, ToolResult("", 2, f"gpusim: fault {kind} needs --{' --'.join(missing)}\n")
    return fault, None


def _fault_refusal(host, fault):
    """Why this hardware cannot have the fault (a gpusim: message for exit 3), or None."""
    profile, kind, name = host.profile, fault["kind"], host.profile["name"]
    capability = FAULT_KINDS[kind][1]
    if capability and not _profile_has(profile, capability):
        return f"gpusim: fault {kind} does not apply to profile {name} (it has no {capability})\n"
    if "gpu" in fault and not 0 <= fault["gpu"] < len(profile["gpus"]):
        return f"gpusim: profile {name} has no GPU {fault['gpu']}\n"
    if "link" in fault and not 0 <= fault["link"] < profile["gpu_model"]["nvlink"]["links"]:
        return f"gpusim: GPU has no NVLink link {fault['link']}\n"
    if "port" in fault and fault["port"] not in {n["name"] for n in profile["nics"]}:
        return f"gpusim: profile {name} has no IB device {fault['port']}\n"
    if "rate" in fault and fault["rate"] >= _nic(profile, fault["port"])["rate"]:
        return (f"gpusim: {fault['port']} runs at rate {_nic(profile, fault['port'])['rate']}; "
                f"a degraded rate must be lower, not {fault['rate']}\n")
    # A driver-managed host reads its peers from nodes_config.cfg, which the deployment writes later:
    # there an index beyond the peers is accepted and has no effect.
    if "node" in fault and not host.driver_managed and fault["node"] >= len(imex_peers(host)):
        return f"gpusim: the IMEX domain has {len(imex_peers(host))} node(s), no node #{fault['node']}\n"
    return None


def _nic(profile, name):
    return next(n for n in profile["nics"] if n["name"] == name)


def cmd_fault(argv):
    root = sim_root()
    faults_path = root / FAULTS_FILE
    faults = read_json(faults_path, [])
    if not argv or argv[0] not in ("add", "clear", "list"):
        return ToolResult("", 2, FAULT_USAGE)
    if argv[0] == "list":
        return ToolResult("".join(json.dumps(f, sort_keys=True) + "\n" for f in faults))
    if argv[0] == "clear":
        kept = [f for f in faults if len(argv) > 1 and f["kind"] != argv[1]]
        write_json(faults_path, kept)
        return ToolResult()
    if len(argv) < 2 or argv[1] not in FAULT_KINDS:
        return ToolResult("", 2, f"gpusim: unknown fault kind (known: {', '.join(FAULT_KINDS)})\n")
    fault, error = _parse_fault_options(argv[1], argv[2:])
    if error:
        return error
    # Faults that cannot happen on this hardware are refused rather than silently ignored.
    refusal = _fault_refusal(Host(root), fault)
    if refusal:
        return ToolResult("", 3, refusal)
    if fault not in faults:
        faults.append(fault)
    write_json(faults_path, faults)
    return ToolResult()


def cmd_tools(argv):
    if len(argv) != 2 or argv[0] != "--profile":
        return ToolResult("", 2, "usage: gpusim.py tools --profile NAME\n")
    return ToolResult("".join(t + "\n" for t in load_profile(argv[1])["tools"]))


INSTALL_USAGE = ("usage: gpusim.py install --root DIR --profile NAME --hostname H [--bare] "
                 "[--node-index I] [--ip ADDR] [--cluster-uuid U] [--imex-peers IP,IP..]\n")

DRIVER_LOAD_UNIT_TEXT = """[Unit]
Description=gpusim: load the installed (simulated) GPU kernel modules
Documentation=file:///usr/local/lib/gpusim/gpusim.py
After=local-fs.target
Before=nvidia-persistenced.service nvidia-fabricmanager.service nvidia-imex.service multi-user.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/lib/gpusim/gpusim.py boot

[Install]
WantedBy=multi-user.target
"""


def _link_target(root, link):
    """Relative link target from LINK to the installed program, so links work inside the host and from outside."""
    return os.path.relpath(root / INSTALL_DIR / "gpusim.py", link.parent)


def _points_to_gpusim(link):
    return link.is_symlink() and os.readlink(link).endswith("/lib/gpusim/gpusim.py")


def _install_driver_load_unit(root, enable):
    unit = root / SYSTEMD_DIR / DRIVER_LOAD_UNIT
    wants = root / SYSTEMD_DIR / "multi-user.target.wants" / DRIVER_LOAD_UNIT
    if enable:
        unit.parent.mkdir(parents=True, exist_ok=True)
        unit.write_text(DRIVER_LOAD_UNIT_TEXT)
        wants.parent.mkdir(parents=True, exist_ok=True)
        if wants.is_symlink() or wants.exists():
            wants.unlink()
        wants.symlink_to("/" + SYSTEMD_DIR + "/" + DRIVER_LOAD_UNIT)  # what `systemctl enable` writes
    else:
        for path in (wants, unit):
            if path.is_symlink() or path.exists():
                path.unlink()


def cmd_install(argv):
    options, bare = {}, False
    while argv:
        if argv[0] == "--bare":
            bare, argv = True, argv[1:]
            continue
        if len(argv) < 2 or not argv[0].startswith("--"):
            return ToolResult("", 2, INSTALL_USAGE)
        options[argv[0][2:]] = argv[1]
        argv = argv[2:]
    missing = [k for k in ("root", "profile", "hostname") if k not in options]
    if missing:
        return ToolResult("", 2, f"gpusim: install needs --{' --'.join(missing)}\n")
    profile = load_profile(options["profile"])
    root = Path(options["root"])
    install_dir = root / INSTALL_DIR
    (install_dir / "profiles").mkdir(parents=True, exist_ok=True)
    # Re-running the installed copy inside a host (install --root / ...) must not copy files onto themselves.
    if Path(__file__).resolve() != (install_dir / "gpusim.py").resolve():
        shutil.copyfile(Path(__file__).resolve(), install_dir / "gpusim.py")
        for source in profiles_dir().glob("*.json"):
            shutil.copyfile(source, install_dir / "profiles" / source.name)
    (install_dir / "gpusim.py").chmod(0o755)
    config = {"profile": profile["name"], "hostname": options["hostname"],
              "node_index": int(options.get("node-index", 0))}
    if "ip" in options:
        config["ip"] = options["ip"]
    if "cluster-uuid" in options:
        config["cluster_uuid"] = options["cluster-uuid"]
    if "imex-peers" in options:
        config["imex_peers"] = [p for p in options["imex-peers"].split(",") if p]
    if bare:
        config["driver_managed"] = True
    write_json(root / HOST_CONFIG, config)
    if not (root / FAULTS_FILE).exists():
        write_json(root / FAULTS_FILE, [])
    _install_driver_load_unit(root, enable=bare)
    bin_dir = root / BIN_DIR
    bin_dir.mkdir(parents=True, exist_ok=True)
    # On a bare host the vendor tools' links belong to the packages: keep those a package made.
    package_links = {link for p in read_json(root / DRIVER_STATE, {"packages": {}})["packages"].values()
                     for link in p.get("links", [])}
    wanted = [t for t in profile["tools"] if not (bare and t in VENDOR_TOOLS)]
    for tool in ALL_TOOLS:
        link = bin_dir / tool
        if link.is_symlink() and os.readlink(link) == LINK_TARGET and f"/{BIN_DIR}/{tool}" not in package_links:
            link.unlink()  # drop links left by a previous install with another profile
    for tool in wanted:
        link = bin_dir / tool
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(LINK_TARGET)
    return ToolResult()


PACKAGE_USAGE = ("usage: gpusim.py package configure NAME VERSION [--role ROLE] [--link PATH]..\n"
                 "       gpusim.py package remove NAME\n"
                 "       gpusim.py package list\n")


def cmd_package(argv):
    """Called by the stand-in vendor packages' maintainer scripts (postinst configure, prerm remove)."""
    root = sim_root()
    state_path = root / DRIVER_STATE
    state = read_json(state_path, {"packages": {}, "modules": {}})
    if argv == ["list"]:
        return ToolResult(json.dumps(state, indent=2, sort_keys=True) + "\n")
    if len(argv) == 2 and argv[0] == "remove":
        entry = state["packages"].pop(argv[1], None)
        for path in (entry or {}).get("links", []):
            link = root / path.lstrip("/")
            if _points_to_gpusim(link):
                link.unlink()
        # A removed kernel module stays loaded until the next boot, as after a real `dkms remove`.
        write_json(state_path, state)
        return ToolResult()
    if len(argv) < 3 or argv[0] != "configure":
        return ToolResult("", 2, PACKAGE_USAGE)
    name, version, rest = argv[1], argv[2], argv[3:]
    entry = {"version": version, "links": []}
    while rest:
        if len(rest) < 2 or rest[0] not in ("--role", "--link"):
            return ToolResult("", 2, PACKAGE_USAGE)
        if rest[0] == "--role":
            entry["role"] = rest[1]
        else:
            entry["links"].append("/" + rest[1].lstrip("/"))
        rest = rest[2:]
    for path in entry["links"]:
        link = root / path.lstrip("/")
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink():
            link.unlink()
        if not link.exists():  # never replace a real file
            link.symlink_to(_link_target(root, link))
    state["packages"][name] = entry
    module = KMOD_ROLES.get(entry.get("role"))
    if module and not state["modules"].get(module):
        # First install: the module gets loaded right away (dkms install + modprobe). An upgrade
        # leaves the running module alone until the next boot.
        state["modules"][module] = version
        if module == "nvidia":
            on_nvidia_module_load(root)
    write_json(state_path, state)
    return ToolResult()


IMEX_CHANNEL_MAJOR = 508  # what /proc/devices lists for nvidia-caps-imex-channels on a real node
IMEX_CHANNEL_OPTION = re.compile(r"^\s*options\s+nvidia\s+.*\bNVreg_CreateImexChannel0=1\b", re.M)


def on_nvidia_module_load(root):
    """What nvidia.ko does when it loads: with NVreg_CreateImexChannel0=1 among its modprobe options
    it creates IMEX channel 0. /dev is a tmpfs, so the node is gone after every reboot until then."""
    options = "".join(p.read_text(errors="replace") for p in sorted((root / "etc/modprobe.d").glob("*.conf")))
    if not IMEX_CHANNEL_OPTION.search(options):
        return
    channel = root / "dev/nvidia-caps-imex-channels/channel0"
    if channel.exists():
        return
    channel.parent.mkdir(parents=True, exist_ok=True)
    # Without root (unit tests on a tmp root) the device node cannot be made; nothing else differs.
    with contextlib.suppress(PermissionError):
        os.mknod(channel, 0o666 | stat.S_IFCHR, os.makedev(IMEX_CHANNEL_MAJOR, 0))


def cmd_boot(argv):
    """What gpusim-driver-load.service does at every boot: load the installed module versions."""
    if argv:
        return ToolResult("", 2, "usage: gpusim.py boot\n")
    root = sim_root()
    state_path = root / DRIVER_STATE
    state = read_json(state_path, {"packages": {}, "modules": {}})
    installed = {KMOD_ROLES[p["role"]]: p["version"] for p in state["packages"].values() if p.get("role") in KMOD_ROLES}
    state["modules"] = installed
    write_json(state_path, state)
    if installed.get("nvidia"):
        on_nvidia_module_load(root)
    return ToolResult()


TOOLS = {"nvidia-smi": nvidia_smi, "amd-smi": amd_smi, "rocm-smi": rocm_smi, "ibstat": ibstat,
         "ibv_devinfo": ibv_devinfo, "nvidia-imex-ctl": imex_ctl, "all_reduce_perf": all_reduce_perf}
ADMIN = {"install": cmd_install, "tools": cmd_tools, "fault": cmd_fault, "package": cmd_package, "boot": cmd_boot}


def run(prog, argv):
    if prog in TOOLS:
        host = Host()
        if prog not in host.profile["tools"]:
            return ToolResult("", 127, f"{prog}: command not found\n")
        return TOOLS[prog](host, argv)
    if argv and argv[0] in ADMIN:
        return ADMIN[argv[0]](argv[1:])
    return ToolResult("", 2, "usage: gpusim.py {install|tools|fault|package|boot} ... (or call it as one of: "
                             + ", ".join(ALL_TOOLS) + ")\n")


def main(argv=None):
    argv = sys.argv if argv is None else argv
    result = run(os.path.basename(argv[0]), argv[1:])
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    return result.rc


if __name__ == "__main__":
    sys.exit(main())
