"""Sandbox hosts: the stand-in GPU device nodes an AMD host gets, and the names each host resolves."""

import os
import stat
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tools" / "sandbox"))

from sandboxlib import fleet  # noqa: E402
from sandboxlib.spec import fleet_from_dict  # noqa: E402


def two_hosts():
    return fleet_from_dict({"name": "t", "gateway": "10.250.0.1/24", "hosts": [
        {"name": "amd", "address": "10.250.0.11", "profile": "mi355x"},
        {"name": "nv", "address": "10.250.0.12", "profile": "b300"},
    ]})


@pytest.mark.skipif(os.geteuid() != 0, reason="making device nodes needs root")
def test_an_amd_host_gets_kfd_and_a_dri_directory_of_real_device_nodes(tmp_path, monkeypatch):
    spec = two_hosts()
    monkeypatch.setattr(type(spec), "host_dir", lambda self, host: tmp_path / host.name)
    amd, nvidia = spec.hosts
    binds = fleet.simulated_device_binds(spec, amd)
    dri = tmp_path / "amd" / "dev-dri"
    assert binds == ["--bind=/dev/null:/dev/kfd", f"--bind={dri}:/dev/dri"]
    null = os.stat("/dev/null").st_rdev
    for name in ("card0", "renderD128"):
        # podman walks /dev/dri by entry type: a bound file would read as a regular one.
        node = os.lstat(dri / name)
        assert stat.S_ISCHR(node.st_mode) and node.st_rdev == null
    assert fleet.simulated_device_binds(spec, amd) == binds  # a second boot reuses the nodes
    assert fleet.simulated_device_binds(spec, nvidia) == []


def test_a_host_names_its_fleet_and_points_its_resolver_at_nothing_that_waits(tmp_path):
    spec = two_hosts()
    (tmp_path / "etc").mkdir()
    # debootstrap copies the machine's resolver in (a symlink on some machines): never written through.
    outside = tmp_path / "machine-resolv.conf"
    outside.write_text("nameserver 10.255.255.53\n")
    (tmp_path / "etc/resolv.conf").symlink_to(outside)
    fleet.write_names(spec, spec.hosts[0], tmp_path)
    assert (tmp_path / "etc/hostname").read_text() == "amd\n"
    assert (tmp_path / "etc/hosts").read_text().splitlines() == [
        "127.0.0.1 localhost", "10.250.0.1 controller", "10.250.0.11 amd", "10.250.0.12 nv"]
    resolv = tmp_path / "etc/resolv.conf"
    assert not resolv.is_symlink()
    assert [line for line in resolv.read_text().splitlines() if line.startswith("nameserver")] == ["nameserver 127.0.0.1"]
    assert outside.read_text() == "nameserver 10.255.255.53\n"
