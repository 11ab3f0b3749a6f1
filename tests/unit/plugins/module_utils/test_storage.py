# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_storage: mountinfo parsing, mount lookup, sysfs walking and the probe on fake trees.

The sysfs trees are built in tmp_path with the shapes the kernel uses: ``dev/block/MAJ:MIN``
and ``class/block/NAME`` are relative symlinks into ``devices/...``; a partition is a
subdirectory of its disk holding a ``partition`` file; a disk's ``device`` link goes to the
controller (NVMe: ``.../nvme/nvme0``; SATA: ``.../ata1/host0/target0:0:0/0:0:0:0``); md, dm and
loop devices live under ``devices/virtual/block`` with ``md/``, ``dm/``, ``loop/`` and
``slaves/`` links to their members' directories.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ansible_collections.gpufleet.serving.plugins.module_utils import _storage

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "storage"

NVME0 = "pci0000:00/0000:00:01.1/0000:01:00.0/nvme/nvme0/nvme0n1"
NVME1 = "pci0000:00/0000:00:01.2/0000:02:00.0/nvme/nvme1/nvme1n1"
SDA = "pci0000:00/0000:00:17.0/ata1/host0/target0:0:0/0:0:0:0/block/sda"
VDA = "pci0000:00/0000:00:02.0/virtio1/block/vda"
SAMSUNG = "SAMSUNG MZQL27T6HBLA-00A07"


# --------------------------------------------------------------------------------------
# Fake sysfs
# --------------------------------------------------------------------------------------


class FakeSys:
    def __init__(self, root):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _link(self, link, target):
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(target, link.parent))

    def block(self, devpath, devnum, rotational=None, partition=None, controller=None, model=None):
        """A block device directory under devices/ with its dev/block and class/block links."""
        path = self.root / "devices" / devpath
        path.mkdir(parents=True, exist_ok=True)
        (path / "dev").write_text(devnum + "\n")
        if partition is not None:
            (path / "partition").write_text("%d\n" % partition)
        if rotational is not None:
            (path / "queue").mkdir(exist_ok=True)
            (path / "queue" / "rotational").write_text("%d\n" % rotational)
        if controller is not None:
            controller_dir = self.root / "devices" / controller
            controller_dir.mkdir(parents=True, exist_ok=True)
            if model is not None:
                (controller_dir / "model").write_text(model + "    \n")
            self._link(path / "device", controller_dir)
        self._link(self.root / "dev" / "block" / devnum, path)
        self._link(self.root / "class" / "block" / path.name, path)
        if partition is None:
            self._link(self.root / "block" / path.name, path)
        return path

    def nvme_disk(self, devpath, devnum, model=SAMSUNG):
        return self.block(devpath, devnum, rotational=0, controller=devpath.rsplit("/", 1)[0], model=model)

    def sata_disk(self, devpath, devnum, model="SAMSUNG MZ7LH3T8HMLT", rotational=0):
        return self.block(devpath, devnum, rotational=rotational, controller=devpath.rsplit("/block/", 1)[0], model=model)

    def partition(self, disk_devpath, name, devnum, number):
        return self.block(disk_devpath + "/" + name, devnum, partition=number)

    def stacked(self, device, devnum, kind, members, **files):
        """An md/dm/loop device under devices/virtual/block with slaves links to ``members``."""
        path = self.block("virtual/block/" + device, devnum, rotational=0)
        (path / kind).mkdir()
        for relative, text in files.items():
            (path / kind / relative).write_text(text + "\n")
        (path / "slaves").mkdir()
        for member in members:
            self._link(path / "slaves" / member.name, member)
        return path


def statvfs_result(frsize=4096, blocks=1000, bfree=600, bavail=550, files=100, ffree=40):
    return os.statvfs_result((frsize, frsize, blocks, bfree, bavail, files, ffree, ffree, 0, 255))


@pytest.fixture
def fake_sys(tmp_path):
    return FakeSys(tmp_path / "sys")


def mountinfo_file(tmp_path, *lines):
    path = tmp_path / "mountinfo"
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def real_dir(tmp_path, *parts):
    path = Path(os.path.realpath(tmp_path)).joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


# --------------------------------------------------------------------------------------
# mountinfo
# --------------------------------------------------------------------------------------


def test_manual_page_example_line():
    entry = _storage.parse_mountinfo_line("36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue")
    assert entry == {
        "mount_id": 36,
        "parent_id": 35,
        "major": 98,
        "minor": 0,
        "root": "/mnt1",
        "mount_point": "/mnt2",
        "mount_options": ["rw", "noatime"],
        "optional_fields": {"master": "1"},
        "fs_type": "ext3",
        "mount_source": "/dev/root",
        "super_options": ["rw", "errors=continue"],
    }


def test_escapes_and_several_optional_fields():
    line = (r"612 27 259:3 /data\040set /mnt/nvme\040models/ck\134pt rw,noatime shared:1 master:2 propagate_from:3 unbindable"
            r" - xfs /dev/nvme0n1p3 rw,attr2,inode64")
    entry = _storage.parse_mountinfo_line(line)
    assert entry["root"] == "/data set"
    assert entry["mount_point"] == "/mnt/nvme models/ck\\pt"
    assert entry["optional_fields"] == {"shared": "1", "master": "2", "propagate_from": "3", "unbindable": True}
    assert (entry["fs_type"], entry["mount_source"], entry["major"], entry["minor"]) == ("xfs", "/dev/nvme0n1p3", 259, 3)
    assert entry["super_options"] == ["rw", "attr2", "inode64"]


def test_unescape_tab_newline_backslash():
    assert _storage.unescape_mount_field(r"a\011b\012c\134d\040e") == "a\tb\nc\\d e"


@pytest.mark.parametrize("line", ["", "garbage", "1 2 3:4 / /x rw", "x 2 3:4 / /x rw - ext4 /dev/x rw", "1 2 3-4 / /x rw - ext4 /dev/x rw"])
def test_malformed_lines_are_skipped(line):
    assert _storage.parse_mountinfo_line(line) is None


def test_real_capture_from_this_vm():
    mounts = _storage.parse_mountinfo((FIXTURES / "mountinfo_debian12_vm.txt").read_text())
    assert len(mounts) == 10
    root = [entry for entry in mounts if entry["mount_point"] == "/"][0]
    assert (root["major"], root["minor"], root["fs_type"], root["mount_source"]) == (254, 0, "ext4", "/dev/vda")
    assert "resv_strict" in root["super_options"]

    # Bind mount of a subdirectory with a propagation field.
    netns = _storage.find_mount(mounts, "/run/netns/foo")
    assert (netns["mount_id"], netns["root"], netns["optional_fields"]) == (48, "/run/netns", {"shared": "1"})
    # nsfs: the root field is not a path.
    nsfs = _storage.find_mount(mounts, "/run/netns/gf-sandbox-b300-1")
    assert (nsfs["fs_type"], nsfs["root"]) == ("nsfs", "net:[4026532179]")
    # Two tmpfs stacked on /dev/shm: the top one (30, whose parent is 25) is the visible one.
    assert _storage.find_mount(mounts, "/dev/shm/x")["mount_id"] == 30
    # Overlay: no block device behind 0:40.
    overlay = _storage.find_mount(mounts, "/var/lib/gpufleet-sandbox/fleets/sandbox/hosts/b300-1/root/opt/models")
    assert (overlay["fs_type"], overlay["mount_source"], overlay["major"]) == ("overlay", "overlay", 0)
    assert "upperdir=/var/lib/gpufleet-sandbox/fleets/sandbox/hosts/b300-1/upper" in overlay["super_options"]
    # Prefix match is per path component: /devx is not under /dev, /procfs not under /proc.
    assert _storage.find_mount(mounts, "/devx")["mount_point"] == "/"
    assert _storage.find_mount(mounts, "/procfs/a")["mount_point"] == "/"
    assert _storage.find_mount(mounts, "/proc")["mount_point"] == "/proc"


def test_stacked_mounts_top_is_not_a_parent_even_when_listed_first():
    mounts = _storage.parse_mountinfo(
        "27 1 254:0 / / rw - ext4 /dev/vda rw\n"
        "90 80 259:1 / /mnt/nvme rw - xfs /dev/nvme0n1p1 rw\n"
        "80 27 259:2 / /mnt/nvme rw - xfs /dev/nvme1n1p1 rw\n"
    )
    assert _storage.find_mount(mounts, "/mnt/nvme/models")["mount_source"] == "/dev/nvme0n1p1"
    assert _storage.find_mount([], "/x") is None


# --------------------------------------------------------------------------------------
# Units
# --------------------------------------------------------------------------------------


def test_human_units():
    assert _storage.human_bytes(1_700_000_000_000) == "1.70 TB / 1.55 TiB"
    assert _storage.human_bytes(512) == "512 B"
    assert _storage.human_bytes(1536) == "1.54 kB / 1.50 KiB"
    assert _storage.describe_bytes(2 * 10**12) == "2,000,000,000,000 bytes (2.00 TB / 1.82 TiB)"


def test_space_from_statvfs():
    space = _storage.space_from_statvfs(statvfs_result())
    assert space == {
        "size_bytes": 4096000,
        "free_bytes": 550 * 4096,
        "used_bytes": 400 * 4096,
        "reserved_bytes": 50 * 4096,
        "inodes_total": 100,
        "inodes_free": 40,
        "inodes_used": 60,
        "read_only": False,
    }


# --------------------------------------------------------------------------------------
# sysfs trees
# --------------------------------------------------------------------------------------


def test_plain_nvme_partition(fake_sys):
    disk = fake_sys.nvme_disk(NVME0, "259:0")
    fake_sys.partition(NVME0, "nvme0n1p1", "259:1", 1)
    info = _storage.describe_block_dir(_storage.block_dir_for_devnum(str(fake_sys.root), 259, 1))
    assert (info["device"], info["disk"], info["transport"], info["on_nvme"]) == ("nvme0n1p1", "nvme0n1", "nvme", True)
    assert info["rotational"] is False and info["model"] == SAMSUNG and info["members"] == []
    whole = _storage.describe_block_dir(str(disk))
    assert (whole["device"], whole["disk"]) == ("nvme0n1", "nvme0n1")


def test_nvme_multipath_head_under_nvme_subsystem(fake_sys):
    head = "virtual/nvme-subsystem/nvme-subsys0/nvme0n1"
    fake_sys.block(head, "259:0", rotational=0, controller="virtual/nvme-subsystem/nvme-subsys0", model=SAMSUNG)
    info = _storage.describe_block_dir(_storage.block_dir_for_devnum(str(fake_sys.root), 259, 0))
    assert (info["transport"], info["on_nvme"], info["model"]) == ("nvme", True, SAMSUNG)


def test_md_raid0_over_two_nvme_namespaces(fake_sys):
    first = fake_sys.nvme_disk(NVME0, "259:0")
    second = fake_sys.nvme_disk(NVME1, "259:4")
    fake_sys.stacked("md0", "9:0", "md", [first, second], level="raid0")
    info = _storage.describe_block_dir(_storage.block_dir_for_devnum(str(fake_sys.root), 9, 0))
    assert (info["device"], info["disk"], info["transport"], info["raid_level"]) == ("md0", "md0", "md", "raid0")
    assert info["on_nvme"] is True and info["model"] is None and info["rotational"] is False
    assert [(m["device"], m["transport"], m["on_nvme"]) for m in info["members"]] == [
        ("nvme0n1", "nvme", True), ("nvme1n1", "nvme", True)]


def test_md_raid1_mixing_nvme_and_sata_is_not_on_nvme(fake_sys):
    fake_sys.nvme_disk(NVME0, "259:0")
    nvme_part = fake_sys.partition(NVME0, "nvme0n1p2", "259:2", 2)
    fake_sys.sata_disk(SDA, "8:0")
    sata_part = fake_sys.partition(SDA, "sda2", "8:2", 2)
    fake_sys.stacked("md1", "9:1", "md", [nvme_part, sata_part], level="raid1", degraded="0")
    info = _storage.describe_block_dir(_storage.block_dir_for_devnum(str(fake_sys.root), 9, 1))
    assert info["raid_level"] == "raid1" and info["raid_degraded"] == 0
    assert info["on_nvme"] is False
    members = {m["device"]: m for m in info["members"]}
    assert (members["nvme0n1p2"]["disk"], members["nvme0n1p2"]["on_nvme"]) == ("nvme0n1", True)
    assert (members["sda2"]["disk"], members["sda2"]["transport"], members["sda2"]["on_nvme"]) == ("sda", "sata", False)
    assert members["sda2"]["model"] == "SAMSUNG MZ7LH3T8HMLT"


def test_md_members_from_dev_entries_when_slaves_is_empty(fake_sys):
    member = fake_sys.nvme_disk(NVME0, "259:0")
    md = fake_sys.block("virtual/block/md5", "9:5", rotational=0)
    (md / "md" / "dev-nvme0n1").mkdir(parents=True)
    (md / "md" / "level").write_text("raid1\n")
    (md / "md" / "degraded").write_text("1\n")
    (md / "md" / "dev-nvme0n1" / "block").symlink_to(os.path.relpath(member, md / "md" / "dev-nvme0n1"))
    info = _storage.describe_block_dir(str(md))
    assert [m["device"] for m in info["members"]] == ["nvme0n1"]
    assert info["on_nvme"] is True and info["raid_degraded"] == 1


def test_partition_of_an_md_array(fake_sys):
    member = fake_sys.nvme_disk(NVME0, "259:0")
    fake_sys.stacked("md126", "9:126", "md", [member], level="raid1")
    fake_sys.partition("virtual/block/md126", "md126p1", "259:9", 1)
    info = _storage.describe_block_dir(_storage.block_dir_for_devnum(str(fake_sys.root), 259, 9))
    assert (info["device"], info["disk"], info["transport"], info["on_nvme"]) == ("md126p1", "md126", "md", True)


def test_dm_over_nvme_partition(fake_sys):
    fake_sys.nvme_disk(NVME0, "259:0")
    part = fake_sys.partition(NVME0, "nvme0n1p3", "259:3", 3)
    fake_sys.stacked("dm-0", "253:0", "dm", [part], name="vg0-models", uuid="LVM-abc")
    info = _storage.describe_block_dir(_storage.block_dir_for_devnum(str(fake_sys.root), 253, 0))
    assert (info["device"], info["transport"], info["dm_name"], info["on_nvme"]) == ("dm-0", "dm", "vg0-models", True)
    assert [(m["device"], m["disk"], m["on_nvme"]) for m in info["members"]] == [("nvme0n1p3", "nvme0n1", True)]


def test_lvm_on_dm_crypt_on_md_over_nvme_and_virtio(fake_sys):
    nvme = fake_sys.nvme_disk(NVME0, "259:0")
    virtio = fake_sys.block(VDA, "254:0", rotational=1, controller="pci0000:00/0000:00:02.0/virtio1")
    md = fake_sys.stacked("md0", "9:0", "md", [nvme, virtio], level="raid1")
    crypt = fake_sys.stacked("dm-0", "253:0", "dm", [md], name="luks-1234")
    fake_sys.stacked("dm-1", "253:1", "dm", [crypt], name="vg0-models")
    info = _storage.describe_block_dir(_storage.block_dir_for_devnum(str(fake_sys.root), 253, 1))
    assert info["on_nvme"] is False
    crypt_info = info["members"][0]
    assert (crypt_info["device"], crypt_info["dm_name"]) == ("dm-0", "luks-1234")
    md_info = crypt_info["members"][0]
    assert (md_info["device"], md_info["raid_level"]) == ("md0", "raid1")
    assert [(m["transport"], m["on_nvme"], m["rotational"]) for m in md_info["members"]] == [
        ("nvme", True, False), ("virtio", False, True)]


def test_loop_device(fake_sys):
    fake_sys.stacked("loop0", "7:0", "loop", [], backing_file="/var/lib/images/models.img")
    info = _storage.describe_block_dir(_storage.block_dir_for_devnum(str(fake_sys.root), 7, 0))
    assert (info["transport"], info["on_nvme"], info["backing_file"]) == ("loop", None, "/var/lib/images/models.img")


def test_unknown_and_empty_stacks(fake_sys):
    fake_sys.block("virtual/block/zram0", "252:0", rotational=0)
    assert _storage.describe_block_dir(str(fake_sys.root / "devices/virtual/block/zram0"))["transport"] == "unknown"
    fake_sys.stacked("md9", "9:9", "md", [], level="raid0")
    info = _storage.describe_block_dir(str(fake_sys.root / "devices/virtual/block/md9"))
    assert (info["transport"], info["on_nvme"], info["members"]) == ("md", None, [])
    assert _storage.block_dir_for_devnum(str(fake_sys.root), 0, 40) is None


@pytest.mark.parametrize(
    ("devpath", "controller", "transport"),
    [
        ("pci0000:00/0000:00:14.0/usb2/2-1/2-1:1.0/host6/target6:0:0/6:0:0:0/block/sdb",
         "pci0000:00/0000:00:14.0/usb2/2-1/2-1:1.0/host6/target6:0:0/6:0:0:0", "usb"),
        ("pci0000:00/0000:00:03.0/0000:03:00.0/host2/port-2:0/end_device-2:0/target2:0:0/2:0:0:0/block/sdc",
         "pci0000:00/0000:00:03.0/0000:03:00.0/host2/port-2:0/end_device-2:0/target2:0:0/2:0:0:0", "scsi"),
        ("pci0000:00/0000:00:04.0/virtio2/host0/target0:0:1/0:0:1:0/block/sdd",
         "pci0000:00/0000:00:04.0/virtio2/host0/target0:0:1/0:0:1:0", "scsi"),
        (VDA, "pci0000:00/0000:00:02.0/virtio1", "virtio"),
    ],
)
def test_transports(fake_sys, devpath, controller, transport):
    disk = fake_sys.block(devpath, "8:16", rotational=0, controller=controller)
    info = _storage.describe_block_dir(str(disk))
    assert (info["transport"], info["on_nvme"]) == (transport, False)


# --------------------------------------------------------------------------------------
# probe_storage on fake mountinfo + fake sysfs + fake statvfs, real paths in tmp_path
# --------------------------------------------------------------------------------------


def test_probe_nvme_partition_mount(tmp_path, fake_sys):
    fake_sys.nvme_disk(NVME0, "259:0")
    fake_sys.partition(NVME0, "nvme0n1p1", "259:1", 1)
    mnt = real_dir(tmp_path, "mnt", "nvme")
    models = real_dir(tmp_path, "mnt", "nvme", "models")
    mountinfo = mountinfo_file(
        tmp_path,
        "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw",
        "120 27 259:1 / %s rw,noatime shared:5 - xfs /dev/nvme0n1p1 rw,attr2,inode64,noquota" % mnt,
    )
    result = _storage.probe_storage(models, required_bytes=1000, mountinfo_path=mountinfo,
                                    sys_root=str(fake_sys.root), statvfs=lambda path: statvfs_result())
    assert result["healthy"] is True and result["problems"] == [] and result["changed"] is False
    assert (result["exists"], result["probed_path"], result["mount_point"]) == (True, models, mnt)
    assert (result["fs_type"], result["mount_source"], result["major_minor"]) == ("xfs", "/dev/nvme0n1p1", "259:1")
    assert result["mount_options"] == ["rw", "noatime"]
    assert (result["device"], result["disk"], result["transport"], result["on_nvme"]) == ("nvme0n1p1", "nvme0n1", "nvme", True)
    assert result["raid_members"] is None and result["dm_members"] is None
    assert (result["free_bytes"], result["enough_space"], result["required_bytes"]) == (550 * 4096, True, 1000)


def test_probe_md_raid0_with_missing_path_and_insufficient_space(tmp_path, fake_sys):
    first = fake_sys.nvme_disk(NVME0, "259:0")
    second = fake_sys.nvme_disk(NVME1, "259:4")
    fake_sys.stacked("md0", "9:0", "md", [first, second], level="raid0", degraded="0")
    mnt = real_dir(tmp_path, "data")
    missing = os.path.join(mnt, "models", "deepseek-r1")
    mountinfo = mountinfo_file(tmp_path, "27 1 254:0 / / rw - ext4 /dev/vda rw",
                               "130 27 9:0 / %s rw,noatime - ext4 /dev/md0 rw" % mnt)
    # 3.84 TB RAID0, 1.5 TB free for users; the checkpoint needs 1.7 TB.
    st = statvfs_result(frsize=4096, blocks=937_500_000, bfree=400_000_000, bavail=366_210_937)
    result = _storage.probe_storage(missing, required_bytes=1_700_000_000_000, mountinfo_path=mountinfo,
                                    sys_root=str(fake_sys.root), statvfs=lambda path: st)
    assert (result["exists"], result["probed_path"]) == (False, mnt)
    assert (result["transport"], result["raid_level"], result["on_nvme"]) == ("md", "raid0", True)
    assert [m["device"] for m in result["raid_members"]] == ["nvme0n1", "nvme1n1"]
    assert result["enough_space"] is False and result["healthy"] is False
    codes = [(item["severity"], item["code"]) for item in result["problems"]]
    assert codes == [("warning", "path_missing"), ("critical", "insufficient_space")]
    message = result["problems"][1]["message"]
    assert "1,499,999,997,952 bytes (1.50 TB / 1.36 TiB)" in message
    assert "1,700,000,000,000 bytes (1.70 TB / 1.55 TiB)" in message


def test_probe_dm_and_degraded_md_warning(tmp_path, fake_sys):
    fake_sys.nvme_disk(NVME0, "259:0")
    part = fake_sys.partition(NVME0, "nvme0n1p3", "259:3", 3)
    fake_sys.stacked("dm-2", "253:2", "dm", [part], name="vg0-models")
    fake_sys.stacked("md3", "9:3", "md", [part], level="raid1", degraded="1")
    dm_mnt, md_mnt = real_dir(tmp_path, "dm"), real_dir(tmp_path, "md")
    mountinfo = mountinfo_file(tmp_path, "27 1 254:0 / / rw - ext4 /dev/vda rw",
                               "140 27 253:2 / %s rw - ext4 /dev/mapper/vg0-models rw" % dm_mnt,
                               "141 27 9:3 / %s rw - ext4 /dev/md3 rw" % md_mnt)
    kwargs = dict(mountinfo_path=mountinfo, sys_root=str(fake_sys.root), statvfs=lambda path: statvfs_result())
    result = _storage.probe_storage(dm_mnt, **kwargs)
    assert (result["transport"], result["dm_name"], result["on_nvme"]) == ("dm", "vg0-models", True)
    assert result["dm_members"][0]["device"] == "nvme0n1p3" and result["raid_members"] is None
    result = _storage.probe_storage(md_mnt, **kwargs)
    assert result["healthy"] is True
    assert [item["code"] for item in result["problems"]] == ["raid_degraded"]


def test_probe_overlay_root_has_no_block_device(tmp_path, fake_sys):
    root = real_dir(tmp_path, "sandbox", "root")
    mountinfo = mountinfo_file(
        tmp_path, "27 1 254:0 / / rw - ext4 /dev/vda rw",
        "47 27 0:40 / %s rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w" % root)
    result = _storage.probe_storage(root, mountinfo_path=mountinfo, sys_root=str(fake_sys.root),
                                    statvfs=lambda path: statvfs_result())
    assert (result["fs_type"], result["mount_source"], result["major_minor"]) == ("overlay", "overlay", "0:40")
    assert (result["device"], result["disk"], result["transport"], result["on_nvme"]) == (None, None, "unknown", None)
    assert result["healthy"] is True and result["enough_space"] is None


def test_probe_btrfs_anonymous_devnum_falls_back_to_source_name(tmp_path, fake_sys):
    fake_sys.nvme_disk(NVME0, "259:0")
    fake_sys.partition(NVME0, "nvme0n1p2", "259:2", 2)
    mnt = real_dir(tmp_path, "btrfs")
    mountinfo = mountinfo_file(tmp_path, "27 1 254:0 / / rw - ext4 /dev/vda rw",
                               "150 27 0:45 /@models %s rw - btrfs /dev/nvme0n1p2 rw,subvol=/@models" % mnt)
    result = _storage.probe_storage(mnt, mountinfo_path=mountinfo, sys_root=str(fake_sys.root),
                                    statvfs=lambda path: statvfs_result(files=0, ffree=0))
    assert (result["mount_root"], result["device"], result["on_nvme"]) == ("/@models", "nvme0n1p2", True)
    assert result["inodes_total"] == 0


def test_probe_unreadable_inputs_never_raise(tmp_path):
    def broken_statvfs(path):
        raise OSError(5, "Input/output error")

    result = _storage.probe_storage(real_dir(tmp_path, "x"), required_bytes=1, mountinfo_path=str(tmp_path / "nope"),
                                    sys_root=str(tmp_path / "nosys"), statvfs=broken_statvfs)
    assert [item["code"] for item in result["problems"]] == ["mountinfo_unreadable", "statvfs_failed", "space_unknown"]
    assert result["healthy"] is False and result["enough_space"] is None and result["mount_point"] is None


def test_probe_internal_error_is_a_problem(tmp_path):
    def bad_statvfs(path):
        raise RuntimeError("boom")

    result = _storage.probe_storage(real_dir(tmp_path, "x"), mountinfo_path=str(tmp_path / "nope"), statvfs=bad_statvfs)
    assert result["healthy"] is False and result["changed"] is False
    assert result["problems"][-1]["code"] == "internal_error" and "boom" in result["problems"][-1]["message"]


def test_probe_resolves_symlinks_before_finding_the_mount(tmp_path, fake_sys):
    fake_sys.nvme_disk(NVME0, "259:0")
    mnt = real_dir(tmp_path, "nvme")
    link = Path(real_dir(tmp_path)) / "models"
    link.symlink_to(mnt)
    mountinfo = mountinfo_file(tmp_path, "27 1 254:0 / / rw - ext4 /dev/vda rw",
                               "160 27 259:0 / %s rw - ext4 /dev/nvme0n1 rw" % mnt)
    result = _storage.probe_storage(str(link), mountinfo_path=mountinfo, sys_root=str(fake_sys.root),
                                    statvfs=lambda path: statvfs_result())
    assert (result["probed_path"], result["real_path"], result["device"]) == (str(link), mnt, "nvme0n1")


def test_summary_message():
    problems = [_storage.problem("warning", "path_missing", "x"), _storage.problem("critical", "insufficient_space", "y")]
    assert _storage.summary_message(problems) == "Storage check failed with 1 critical problem(s): [insufficient_space] y"
