# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Find the filesystem and block devices behind a path (private to this collection).

Everything here reads text and walks directories given as arguments, so the whole probe is
testable without root against a fake sysfs tree and a fake mountinfo file:

* ``mountinfo_path`` defaults to ``/proc/self/mountinfo`` (format: proc_pid_mountinfo(5));
* ``sys_root`` defaults to ``/sys``; only ``<sys_root>/dev/block/MAJ:MIN`` symlinks and the
  block device directories they lead to are read (``partition``, ``queue/rotational``,
  ``device``, ``device/model``, ``md/``, ``dm/``, ``loop/``, ``slaves/``);
* ``statvfs`` defaults to ``os.statvfs``.

Nothing here changes the host and nothing raises for what the host shows: a problem is
``{"severity", "code", "message"}`` (severity ``critical`` or ``warning``) and the path is
healthy iff there is no critical problem.
"""

from __future__ import annotations

import os
import re

CRITICAL = "critical"
WARNING = "warning"

MOUNTINFO = "/proc/self/mountinfo"
SYS_ROOT = "/sys"

TRANSPORTS = ("nvme", "sata", "scsi", "usb", "virtio", "loop", "md", "dm", "unknown")
# Leaf transports known not to be NVMe.  A loop device sits on a file of some other
# filesystem and unknown devices are unknown: both leave on_nvme null.
_NOT_NVME = ("sata", "scsi", "usb", "virtio")
_MAX_DEPTH = 8

_OCTAL_ESCAPE_RE = re.compile(r"\\([0-7]{3})")
_NVME_NAME_RE = re.compile(r"^nvme\d+(?:c\d+)?n\d+")


def problem(severity, code, message):
    return {"severity": severity, "code": code, "message": message}


def is_healthy(problems):
    return not any(item["severity"] == CRITICAL for item in problems)


# --------------------------------------------------------------------------------------
# Units
# --------------------------------------------------------------------------------------


def _scaled(value, base, units):
    amount = float(value)
    unit = units[0]
    for unit in units:
        if abs(amount) < base or unit == units[-1]:
            break
        amount /= base
    if unit in ("B",):
        return "%d %s" % (value, unit)
    return "%.2f %s" % (amount, unit)


def human_bytes(value):
    """``1700000000000`` -> ``1.70 TB / 1.55 TiB`` (decimal, then binary units)."""
    if value is None:
        return "unknown"
    decimal = _scaled(value, 1000, ("B", "kB", "MB", "GB", "TB", "PB", "EB"))
    binary = _scaled(value, 1024, ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"))
    if decimal == binary:
        return decimal
    return "%s / %s" % (decimal, binary)


def describe_bytes(value):
    """``1700000000000`` -> ``1,700,000,000,000 bytes (1.70 TB / 1.55 TiB)``."""
    return f"{value:,} bytes ({human_bytes(value)})"


# --------------------------------------------------------------------------------------
# mountinfo
# --------------------------------------------------------------------------------------


def unescape_mount_field(text):
    r"""Undo the kernel's octal escapes in mountinfo fields (``\040`` space, ``\011`` tab,
    ``\012`` newline, ``\134`` backslash)."""
    return _OCTAL_ESCAPE_RE.sub(lambda match: chr(int(match.group(1), 8)), text)


def parse_mountinfo_line(line):
    """One mountinfo line -> dict, or None when the line does not have the documented shape.

    ``36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue``:
    mount ID, parent ID, major:minor, root, mount point, mount options, zero or more
    optional fields, a ``-`` separator, filesystem type, mount source, super options.
    """
    fields = line.rstrip("\n").split(" ")
    try:
        separator = fields.index("-", 6)
    except ValueError:
        return None
    if len(fields) < separator + 3 or separator < 6:
        return None
    try:
        mount_id, parent_id = int(fields[0]), int(fields[1])
        major_text, minor_text = fields[2].split(":", 1)
        major, minor = int(major_text), int(minor_text)
    except ValueError:
        return None
    optional = {}
    for item in fields[6:separator]:
        if not item:
            continue
        key, _sep, value = item.partition(":")
        optional[key] = value if _sep else True
    return {
        "mount_id": mount_id,
        "parent_id": parent_id,
        "major": major,
        "minor": minor,
        "root": unescape_mount_field(fields[3]),
        "mount_point": unescape_mount_field(fields[4]),
        "mount_options": fields[5].split(","),
        "optional_fields": optional,
        "fs_type": unescape_mount_field(fields[separator + 1]),
        "mount_source": unescape_mount_field(fields[separator + 2]),
        # Super options never contain a space unescaped; join defensively if they did.
        "super_options": " ".join(fields[separator + 3:]).split(",") if len(fields) > separator + 3 else [],
    }


def parse_mountinfo(text):
    """All well-formed lines of a mountinfo file, in file order."""
    mounts = []
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        entry = parse_mountinfo_line(line)
        if entry is not None:
            mounts.append(entry)
    return mounts


def _is_under(path, mount_point):
    if mount_point == "/":
        return path.startswith("/")
    return path == mount_point or path.startswith(mount_point.rstrip("/") + "/")


def find_mount(mounts, real_path):
    """The mount that holds ``real_path`` (an absolute path with symlinks resolved).

    Longest mount point that is a path prefix of ``real_path``; among mounts stacked on the
    same mount point, the top-most one (the one that is no other's parent there, else the
    last one listed).
    """
    candidates = [entry for entry in mounts if _is_under(real_path, entry["mount_point"])]
    if not candidates:
        return None
    longest = max(len(entry["mount_point"]) for entry in candidates)
    stacked = [entry for entry in candidates if len(entry["mount_point"]) == longest]
    parents = {entry["parent_id"] for entry in stacked}
    top = [entry for entry in stacked if entry["mount_id"] not in parents]
    return (top or stacked)[-1]


# --------------------------------------------------------------------------------------
# sysfs
# --------------------------------------------------------------------------------------


def _read(path):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _parts(path):
    return [part for part in path.split("/") if part]


def block_dir_for_devnum(sys_root, major, minor):
    """``<sys_root>/dev/block/MAJ:MIN`` resolved to the device's own sysfs directory, or None."""
    link = os.path.join(sys_root, "dev", "block", "%d:%d" % (major, minor))
    if not os.path.exists(link):
        return None
    return os.path.realpath(link)


def block_dir_for_name(sys_root, name):
    """``<sys_root>/class/block/NAME`` resolved, or None (names come from /dev/... sources)."""
    if not name or "/" in name or name in (".", ".."):
        return None
    link = os.path.join(sys_root, "class", "block", name)
    if not os.path.exists(link):
        return None
    return os.path.realpath(link)


def _transport(disk_dir):
    """Transport of a whole-disk sysfs directory (see TRANSPORTS)."""
    name = os.path.basename(disk_dir)
    if os.path.isdir(os.path.join(disk_dir, "md")):
        return "md"
    if os.path.isdir(os.path.join(disk_dir, "dm")):
        return "dm"
    if os.path.isdir(os.path.join(disk_dir, "loop")) or re.match(r"^loop\d+$", name):
        return "loop"
    parts = _parts(disk_dir)
    device_link = os.path.join(disk_dir, "device")
    if os.path.exists(device_link):
        parts += _parts(os.path.realpath(device_link))
    if "nvme" in parts or "nvme-subsystem" in parts or _NVME_NAME_RE.match(name):
        return "nvme"
    if any(re.match(r"^ata\d+$", part) for part in parts):
        return "sata"
    if any(re.match(r"^usb\d+$", part) for part in parts):
        return "usb"
    if any(re.match(r"^host\d+$", part) for part in parts):
        return "scsi"
    if any(re.match(r"^virtio\d+$", part) for part in parts):
        return "virtio"
    return "unknown"


def _rotational(disk_dir):
    value = _read(os.path.join(disk_dir, "queue", "rotational"))
    if value in ("0", "1"):
        return value == "1"
    return None


def _stack_members(disk_dir, transport):
    """Sysfs directories of the devices an md or dm device is built on."""
    dirs = []
    slaves = os.path.join(disk_dir, "slaves")
    if os.path.isdir(slaves):
        for name in sorted(os.listdir(slaves)):
            dirs.append(os.path.realpath(os.path.join(slaves, name)))
    if not dirs and transport == "md":
        md_dir = os.path.join(disk_dir, "md")
        for name in sorted(os.listdir(md_dir)):
            block = os.path.join(md_dir, name, "block")
            if name.startswith("dev-") and os.path.exists(block):
                dirs.append(os.path.realpath(block))
    return [path for path in dirs if os.path.isdir(path)]


def _combine_on_nvme(members):
    values = [member["on_nvme"] for member in members]
    if not values:
        return None
    if any(value is False for value in values):
        return False
    if all(value is True for value in values):
        return True
    return None


def describe_block_dir(block_dir, depth=0):
    """Facts about the block device whose sysfs directory is ``block_dir`` (a partition or
    a whole disk), recursing into md/dm members."""
    name = os.path.basename(block_dir)
    # A partition is a subdirectory of its disk and has a ``partition`` file.
    is_partition = os.path.exists(os.path.join(block_dir, "partition"))
    disk_dir = os.path.dirname(block_dir) if is_partition else block_dir
    transport = _transport(disk_dir)
    info = {
        "device": name,
        "disk": os.path.basename(disk_dir),
        "transport": transport,
        "on_nvme": None,
        "rotational": _rotational(disk_dir),
        "model": _read(os.path.join(disk_dir, "device", "model")) or None,
        "raid_level": None,
        "raid_degraded": None,
        "dm_name": None,
        "backing_file": None,
        "members": [],
    }
    if transport == "nvme":
        info["on_nvme"] = True
    elif transport in _NOT_NVME:
        info["on_nvme"] = False
    elif transport == "loop":
        info["backing_file"] = _read(os.path.join(disk_dir, "loop", "backing_file")) or None
    elif transport in ("md", "dm"):
        if transport == "md":
            info["raid_level"] = _read(os.path.join(disk_dir, "md", "level")) or None
            degraded = _read(os.path.join(disk_dir, "md", "degraded"))
            info["raid_degraded"] = int(degraded) if degraded and degraded.isdigit() else None
        else:
            info["dm_name"] = _read(os.path.join(disk_dir, "dm", "name")) or None
        if depth < _MAX_DEPTH:
            info["members"] = [describe_block_dir(path, depth + 1) for path in _stack_members(disk_dir, transport)]
        info["on_nvme"] = _combine_on_nvme(info["members"])
    return info


# --------------------------------------------------------------------------------------
# statvfs
# --------------------------------------------------------------------------------------


def space_from_statvfs(st):
    """Sizes in bytes from an ``os.statvfs`` result (or any object with its attributes)."""
    frsize = st.f_frsize or st.f_bsize
    return {
        "size_bytes": st.f_blocks * frsize,
        "free_bytes": st.f_bavail * frsize,
        "used_bytes": (st.f_blocks - st.f_bfree) * frsize,
        "reserved_bytes": max(st.f_bfree - st.f_bavail, 0) * frsize,
        "inodes_total": st.f_files,
        "inodes_free": st.f_favail,
        "inodes_used": max(st.f_files - st.f_ffree, 0),
        "read_only": bool(st.f_flag & getattr(os, "ST_RDONLY", 1)),
    }


# --------------------------------------------------------------------------------------
# The probe
# --------------------------------------------------------------------------------------


def nearest_existing(path):
    """``(probed_path, exists)``: ``path`` itself when it exists, else its nearest existing ancestor."""
    current = os.path.normpath(path)
    if os.path.exists(current):
        return current, True
    while True:
        parent = os.path.dirname(current)
        if parent == current:
            return current, False
        current = parent
        if os.path.exists(current):
            return current, False


def empty_result(path):
    result = {
        "changed": False,
        "healthy": True,
        "path": path,
        "exists": False,
        "probed_path": None,
        "real_path": None,
        "mount_point": None,
        "mount_root": None,
        "mount_source": None,
        "fs_type": None,
        "mount_options": [],
        "super_options": [],
        "read_only": None,
        "size_bytes": None,
        "free_bytes": None,
        "used_bytes": None,
        "reserved_bytes": None,
        "inodes_total": None,
        "inodes_free": None,
        "inodes_used": None,
        "required_bytes": None,
        "enough_space": None,
        "major_minor": None,
        "device": None,
        "disk": None,
        "transport": "unknown",
        "on_nvme": None,
        "rotational": None,
        "model": None,
        "raid_level": None,
        "raid_degraded": None,
        "raid_members": None,
        "dm_name": None,
        "dm_members": None,
        "backing_file": None,
        "problems": [],
    }
    return result


def _member_view(info):
    keys = ("device", "disk", "transport", "on_nvme", "rotational", "model", "raid_level", "dm_name")
    view = {key: info[key] for key in keys}
    view["members"] = [_member_view(member) for member in info["members"]]
    return view


def _apply_device(result, info):
    for key in ("device", "disk", "transport", "on_nvme", "rotational", "model", "raid_level",
                "raid_degraded", "dm_name", "backing_file"):
        result[key] = info[key]
    members = [_member_view(member) for member in info["members"]]
    if info["transport"] == "md":
        result["raid_members"] = members
        if info["raid_degraded"]:
            result["problems"].append(problem(
                WARNING, "raid_degraded",
                "md array %s (%s) reports %d missing or failed member(s)"
                % (info["disk"], info["raid_level"] or "unknown level", info["raid_degraded"])))
    elif info["transport"] == "dm":
        result["dm_members"] = members


def _resolve_device(result, mount, sys_root):
    block_dir = block_dir_for_devnum(sys_root, mount["major"], mount["minor"])
    if block_dir is None and mount["mount_source"].startswith("/dev/"):
        # btrfs and some others show an anonymous 0:N device number; the source names the device.
        source = mount["mount_source"]
        name = os.path.basename(os.path.realpath(source)) if os.path.exists(source) else os.path.basename(source)
        block_dir = block_dir_for_name(sys_root, name)
    if block_dir is not None:
        _apply_device(result, describe_block_dir(block_dir))


def check_space(result, required_bytes):
    """Set ``enough_space`` and add the space problems for ``required_bytes`` (None: no check)."""
    if required_bytes is None:
        return
    result["required_bytes"] = required_bytes
    free = result["free_bytes"]
    where = "%s (filesystem mounted at %s)" % (result["probed_path"] or result["path"], result["mount_point"] or "unknown")
    if free is None:
        result["enough_space"] = None
        result["problems"].append(problem(
            CRITICAL, "space_unknown",
            "free space on %s is unknown, so the required %s cannot be confirmed" % (where, describe_bytes(required_bytes))))
        return
    result["enough_space"] = free >= required_bytes
    if not result["enough_space"]:
        result["problems"].append(problem(
            CRITICAL, "insufficient_space",
            "free space on %s is %s, less than the required %s; short by %s"
            % (where, describe_bytes(free), describe_bytes(required_bytes), describe_bytes(required_bytes - free))))


def _probe(result, path, required_bytes, mountinfo_path, sys_root, statvfs):
    probed, exists = nearest_existing(path)
    result["exists"] = exists
    result["probed_path"] = probed
    real = os.path.realpath(probed)
    result["real_path"] = real
    if not exists:
        result["problems"].append(problem(
            WARNING, "path_missing", "%s does not exist; probed its nearest existing ancestor %s" % (path, probed)))

    try:
        with open(mountinfo_path) as handle:
            mounts = parse_mountinfo(handle.read())
    except (OSError, UnicodeDecodeError) as exc:
        mounts = []
        result["problems"].append(problem(WARNING, "mountinfo_unreadable", "cannot read %s: %s" % (mountinfo_path, exc)))
    mount = find_mount(mounts, real)
    if mount is None:
        if mounts:
            result["problems"].append(problem(WARNING, "mount_not_found", "no mount in %s holds %s" % (mountinfo_path, real)))
    else:
        result["mount_point"] = mount["mount_point"]
        result["mount_root"] = mount["root"]
        result["mount_source"] = mount["mount_source"]
        result["fs_type"] = mount["fs_type"]
        result["mount_options"] = mount["mount_options"]
        result["super_options"] = mount["super_options"]
        result["major_minor"] = "%d:%d" % (mount["major"], mount["minor"])
        _resolve_device(result, mount, sys_root)

    try:
        result.update(space_from_statvfs(statvfs(probed)))
    except OSError as exc:
        result["problems"].append(problem(WARNING, "statvfs_failed", "statvfs(%s) failed: %s" % (probed, exc)))

    check_space(result, required_bytes)


def probe_storage(path, required_bytes=None, mountinfo_path=MOUNTINFO, sys_root=SYS_ROOT, statvfs=os.statvfs):
    """Probe ``path`` (absolute).  Returns the module result; never raises for what the host
    shows, and an unexpected error becomes a critical ``internal_error`` problem."""
    result = empty_result(path)
    try:
        _probe(result, path, required_bytes, mountinfo_path, sys_root, statvfs)
    except Exception as exc:  # pylint: disable=broad-except
        result["problems"].append(problem(CRITICAL, "internal_error", "storage_probe could not inspect %s: %r" % (path, exc)))
    result["healthy"] = is_healthy(result["problems"])
    return result


def summary_message(problems):
    """One line naming every critical problem, for fail_json."""
    critical = [item for item in problems if item["severity"] == CRITICAL]
    return "Storage check failed with %d critical problem(s): %s" % (
        len(critical), "; ".join("[%s] %s" % (item["code"], item["message"]) for item in critical))
