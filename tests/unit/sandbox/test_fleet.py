"""Boot arguments of sandbox hosts: the stand-in GPU device nodes an AMD host gets."""

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
