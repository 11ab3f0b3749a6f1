"""The cached Debian bookworm root filesystem every mock host boots from (read-only lower layer)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
from pathlib import Path

from .spec import CACHE_ROOT

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
PACKAGES = (
    "systemd", "systemd-sysv", "dbus", "openssh-server", "python3", "python3-venv", "python3-apt",
    "sudo", "iproute2", "iputils-ping", "procps", "netcat-openbsd", "ca-certificates", "gnupg", "kmod",
    # The interconnect scenario blocks a port with an nftables rule inside a host.
    "nftables",
)
# Timers that would take the apt/dpkg lock or scan disks in the middle of a test run.
MASKED_UNITS = (
    "apt-daily.timer", "apt-daily-upgrade.timer", "dpkg-db-backup.timer", "e2scrub_all.timer",
    "fstrim.timer", "console-getty.service", "getty@.service", "systemd-networkd-wait-online.service",
)
SSHD_DROPIN = """\
# Written by the gpufleet sandbox: key-only root login from the controller.
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
"""
# Bump when the customisation below changes, so old caches are rebuilt instead of reused.
LAYOUT_VERSION = 2


def cache_key() -> str:
    material = json.dumps({"suite": SUITE, "packages": PACKAGES, "masked": MASKED_UNITS, "sshd": SSHD_DROPIN, "v": LAYOUT_VERSION})
    return hashlib.sha1(material.encode()).hexdigest()[:12]


def rootfs_path() -> Path:
    return CACHE_ROOT / f"rootfs-{SUITE}-{cache_key()}"


def mounts_under(path: Path) -> list[str]:
    prefix = str(path)
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mount_point = line.split()[4].replace("\\040", " ")
        if mount_point == prefix or mount_point.startswith(prefix + "/"):
            found.append(mount_point)
    # Deepest first so nested mounts go before their parents.
    return sorted(found, key=len, reverse=True)


def ensure_rootfs(log) -> Path:
    """Return the cached rootfs, building it once (about a minute) if missing.

    The build goes to a temporary directory that is renamed into place only when complete, so a
    killed build never leaves a half-made cache that later runs would boot from. One build at a
    time per machine: a second caller (a scenario's fleet and the engine images built beside it)
    waits on the lock and finds the cache made, instead of removing the first one's build.
    """
    final = rootfs_path()
    if (final / ".gpufleet-rootfs-complete").exists():
        return final
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    with open(CACHE_ROOT / f".{final.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / ".gpufleet-rootfs-complete").exists():
            return final
        building = final.with_name(final.name + ".building")
        if building.exists():
            # A killed debootstrap leaves /proc mounted in it: never walk into a mount.
            for mount_point in mounts_under(building):
                subprocess.run(["umount", "--lazy", mount_point], check=False)
            shutil.rmtree(building)
        log(f"building the {SUITE} rootfs cache at {final} (debootstrap, about a minute, once)")
        subprocess.run(
            ["debootstrap", "--variant=minbase", "--include=" + ",".join(PACKAGES), SUITE, str(building), MIRROR],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        customise(building)
        (building / ".gpufleet-rootfs-complete").write_text(cache_key() + "\n")
        if final.exists():
            shutil.rmtree(final)
        building.rename(final)
    return final


def customise(root: Path) -> None:
    """Make the tree a neutral template: per-host identity is added to each host's upper layer."""
    (root / "etc/machine-id").write_text("")
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    (root / "etc/ssh/sshd_config.d/gpufleet-sandbox.conf").write_text(SSHD_DROPIN)
    for unit in MASKED_UNITS:
        link = root / "etc/systemd/system" / unit
        link.unlink(missing_ok=True)
        link.symlink_to("/dev/null")
    # Hosts have no route to the internet: the Debian mirror would only make every `apt-get update`
    # wait for timeouts (about 47 s). Packages come from the repositories the roles add.
    (root / "etc/apt/sources.list").write_text("# gpufleet sandbox: no default sources (no internet)\n")
    (root / "etc/apt/sources.list.d/debian.sources").unlink(missing_ok=True)
    shutil.rmtree(root / "var/lib/apt/lists", ignore_errors=True)
    (root / "var/lib/apt/lists/partial").mkdir(parents=True, exist_ok=True)
    # An apt cache from the build is useless weight.
    shutil.rmtree(root / "var/cache/apt/archives", ignore_errors=True)
    (root / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
