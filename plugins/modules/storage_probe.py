#!/usr/bin/python
# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: storage_probe
short_description: Read-only probe of the filesystem and block devices behind a path
version_added: 0.1.0
description:
  - Reports the filesystem that holds a path (typically the model checkpoint root), its size,
    free space and inodes, and the block device stack behind it (partition, whole disk, md RAID
    and device-mapper members) with the transport of each device and whether it all sits on
    NVMe. It never changes the host and runs no commands.
  - The mount is found in C(/proc/self/mountinfo) (the longest mount point that is a prefix of
    the path with symlinks resolved; for mounts stacked on one mount point, the top-most one).
    Sizes come from C(statvfs). The device is found through C(/sys/dev/block/MAJ:MIN) and its
    sysfs directory; md and device-mapper members through their C(slaves) directories (for md,
    C(md/dev-*) when C(slaves) is empty), recursively.
  - When the path does not exist yet, its nearest existing ancestor is probed instead, and a
    V(path_missing) warning says so; the caller decides whether that matters.
  - Values that cannot be read are returned as V(null) (unknown), never guessed. Filesystems
    without a block device (V(overlay), V(tmpfs), network filesystems) report V(null) device
    fields, RV(transport=unknown) and V(null) C(on_nvme).
author:
  - gpufleet.serving contributors (@gpufleet)
options:
  path:
    description:
      - Absolute path to probe, for example the directory the checkpoint is or will be
        written to. It does not have to exist.
    type: path
    required: true
  required_bytes:
    description:
      - Space in bytes the caller needs on the filesystem, compared with the space available
        to unprivileged users (RV(free_bytes)). Less free space is a critical
        V(insufficient_space) problem whose message gives both numbers in bytes and in
        decimal (TB) and binary (TiB) units; free space that cannot be read is a critical
        V(space_unknown) problem.
      - Not checked when omitted.
    type: int
  fail_on_unhealthy:
    description:
      - Fail the task when any critical problem is found. The failure message names the
        problems and the result still carries every fact.
    type: bool
    default: false
notes:
  - "Problem codes: V(path_missing) (warning), V(mountinfo_unreadable) (warning),
    V(mount_not_found) (warning), V(statvfs_failed) (warning), V(raid_degraded) (warning),
    V(insufficient_space), V(space_unknown) and V(internal_error)."
  - Requires Linux (C(/proc) and C(/sys)); it needs no privileges beyond reading those and
    the path's parent directories.
  - A loop device's own transport is V(loop) and its C(on_nvme) is V(null); the file it is
    backed by is reported in RV(backing_file) but not followed.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: The module only reads; it runs fully in check mode and never reports a change.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Probe the checkpoint directory
  gpufleet.serving.storage_probe:
    path: /mnt/nvme/models/deepseek-r1
  register: model_storage

- name: Refuse to download the checkpoint onto anything but NVMe
  ansible.builtin.assert:
    that:
      - model_storage.on_nvme is true
    fail_msg: "{{ model_storage.probed_path }} is on {{ model_storage.transport }} ({{ model_storage.device }})"

- name: Require 1.8 TB free for a 1.7 TB checkpoint
  gpufleet.serving.storage_probe:
    path: /mnt/nvme/models/deepseek-r1
    required_bytes: 1800000000000
    fail_on_unhealthy: true

- name: Show the RAID members behind the model volume
  ansible.builtin.debug:
    msg: "{{ model_storage.raid_level }}: {{ model_storage.raid_members | map(attribute='device') | list }}"
  when: model_storage.transport == 'md'
"""

RETURN = r"""
changed:
  description: Always V(false); the module only reads.
  returned: always
  type: bool
  sample: false
healthy:
  description: V(true) if and only if no problem has severity V(critical).
  returned: always
  type: bool
  sample: true
path:
  description: The path as given.
  returned: always
  type: str
  sample: /mnt/nvme/models/deepseek-r1
exists:
  description: Whether the path exists.
  returned: always
  type: bool
  sample: true
probed_path:
  description: The path itself when it exists, else its nearest existing ancestor.
  returned: always
  type: str
  sample: /mnt/nvme/models
real_path:
  description: RV(probed_path) with symlinks resolved; the mount is looked up for this path.
  returned: always
  type: str
  sample: /mnt/nvme/models
mount_point:
  description: Mount point of the filesystem that holds the path; V(null) when unknown.
  returned: always
  type: str
  sample: /mnt/nvme
mount_root:
  description: Directory of the filesystem mounted there (not V(/) for bind mounts); V(null) when unknown.
  returned: always
  type: str
  sample: /
mount_source:
  description: Mount source as the kernel shows it, for example C(/dev/nvme0n1p1), C(/dev/md0), C(overlay) or C(tmpfs).
  returned: always
  type: str
  sample: /dev/md0
fs_type:
  description: Filesystem type, for example C(ext4), C(xfs), C(overlay).
  returned: always
  type: str
  sample: xfs
mount_options:
  description: Per-mount options.
  returned: always
  type: list
  elements: str
  sample: [rw, noatime]
super_options:
  description: Per-superblock (filesystem) options.
  returned: always
  type: list
  elements: str
  sample: [rw, attr2, inode64, logbufs=8, logbsize=32k, noquota]
read_only:
  description: Whether the filesystem is mounted read-only (from C(statvfs)); V(null) when unknown.
  returned: always
  type: bool
  sample: false
size_bytes:
  description: Filesystem size in bytes; V(null) when unknown.
  returned: always
  type: int
  sample: 7681501126656
free_bytes:
  description: Bytes available to unprivileged users (C(f_bavail)); V(null) when unknown.
  returned: always
  type: int
  sample: 7290000000000
used_bytes:
  description: Bytes in use; V(null) when unknown.
  returned: always
  type: int
  sample: 390000000000
reserved_bytes:
  description: Free bytes reserved for root (free blocks less blocks available to users); V(null) when unknown.
  returned: always
  type: int
  sample: 0
inodes_total:
  description: Total inodes; V(0) on filesystems without a fixed inode count (for example btrfs); V(null) when unknown.
  returned: always
  type: int
  sample: 750153728
inodes_free:
  description: Free inodes available to unprivileged users; V(null) when unknown.
  returned: always
  type: int
  sample: 750150000
inodes_used:
  description: Inodes in use; V(null) when unknown.
  returned: always
  type: int
  sample: 3728
required_bytes:
  description: The O(required_bytes) option, V(null) when not given.
  returned: always
  type: int
  sample: 1800000000000
enough_space:
  description: Whether RV(free_bytes) is at least O(required_bytes); V(null) when not checked or unknown.
  returned: always
  type: bool
  sample: true
major_minor:
  description: Device number of the filesystem as shown in mountinfo.
  returned: always
  type: str
  sample: "9:0"
device:
  description: Kernel name of the block device behind the filesystem; V(null) when there is none or it is unknown.
  returned: always
  type: str
  sample: md0
disk:
  description: Whole disk of RV(device) (the device itself unless it is a partition).
  returned: always
  type: str
  sample: md0
transport:
  description: >-
    How the disk is attached: V(nvme), V(sata), V(scsi), V(usb), V(virtio), V(loop), V(md) (software RAID),
    V(dm) (device-mapper, for example LVM or dm-crypt) or V(unknown).
  returned: always
  type: str
  sample: md
on_nvme:
  description: >-
    V(true) when the device is NVMe or, for md and dm, every member ultimately sits on NVMe; V(false)
    when it, or any member, is not NVMe; V(null) when unknown (no block device, loop, unknown transport).
  returned: always
  type: bool
  sample: true
rotational:
  description: The disk's C(queue/rotational) flag; V(null) when unknown.
  returned: always
  type: bool
  sample: false
model:
  description: Disk model from sysfs (C(device/model)); V(null) when sysfs has none (md, dm, virtio).
  returned: always
  type: str
  sample: SAMSUNG MZQL27T6HBLA-00A07
raid_level:
  description: md RAID level (C(md/level)), for example C(raid0); V(null) for other devices.
  returned: always
  type: str
  sample: raid0
raid_degraded:
  description: Number of missing or failed md members (C(md/degraded)); V(null) when not md or not reported.
  returned: always
  type: int
  sample: 0
raid_members:
  description: Members of the md array; V(null) for other devices.
  returned: always
  type: list
  elements: dict
  contains: &member
    device:
      description: Kernel name of the member.
      type: str
      sample: nvme0n1
    disk:
      description: Whole disk of the member.
      type: str
      sample: nvme0n1
    transport:
      description: Transport of the member, as for RV(transport).
      type: str
      sample: nvme
    on_nvme:
      description: Whether the member ultimately sits on NVMe (V(null) when unknown).
      type: bool
      sample: true
    rotational:
      description: The member disk's rotational flag.
      type: bool
      sample: false
    model:
      description: Member disk model, V(null) when sysfs has none.
      type: str
      sample: SAMSUNG MZQL27T6HBLA-00A07
    raid_level:
      description: RAID level when the member is itself an md array.
      type: str
    dm_name:
      description: Device-mapper name when the member is itself a dm device.
      type: str
    members:
      description: The member's own members when it is an md or dm device (same keys), else empty.
      type: list
      elements: dict
dm_name:
  description: Device-mapper name (C(dm/name)), for example C(vg0-models) or C(luks-...); V(null) for other devices.
  returned: always
  type: str
  sample: vg0-models
dm_members:
  description: Devices the device-mapper device is built on; V(null) for other devices.
  returned: always
  type: list
  elements: dict
  contains: *member
backing_file:
  description: File behind a loop device; V(null) for other devices.
  returned: always
  type: str
  sample: /var/lib/images/models.img
problems:
  description: Problems found. Critical ones make the result unhealthy.
  returned: always
  type: list
  elements: dict
  contains:
    severity:
      description: V(critical) or V(warning).
      type: str
      sample: critical
    code:
      description: Stable problem code (see the notes).
      type: str
      sample: insufficient_space
    message:
      description: Human-readable explanation.
      type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.serving.plugins.module_utils._storage import probe_storage, summary_message


def run_module(module):
    """Probe the path and exit."""
    path = module.params["path"]
    required = module.params["required_bytes"]
    if not path.startswith("/"):
        module.fail_json(msg="path must be absolute, got %s" % path)
    if required is not None and required < 0:
        module.fail_json(msg="required_bytes must not be negative, got %d" % required)
    result = probe_storage(path, required_bytes=required)
    if module.params["fail_on_unhealthy"] and not result["healthy"]:
        module.fail_json(msg=summary_message(result["problems"]), **result)
    module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            required_bytes=dict(type="int"),
            fail_on_unhealthy=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    run_module(module)


if __name__ == "__main__":
    main()
