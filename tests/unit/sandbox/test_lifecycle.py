"""Sandbox lifecycle on this machine: boot, survive a killed run, and leave nothing behind.

Boots two real mock hosts (about 2 s); needs root, systemd-nspawn and a built rootfs cache
(built on first use), so it is skipped elsewhere.
"""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tools" / "sandbox"))

from sandboxlib import fleet  # noqa: E402
from sandboxlib.spec import fleet_from_dict  # noqa: E402

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("systemd-nspawn") or not shutil.which("debootstrap"),
    reason="needs root, systemd-nspawn and debootstrap",
)

SPEC = fleet_from_dict(
    {
        "name": "unit-lifecycle",
        "gateway": "10.233.0.1/24",
        "hosts": [
            {"name": "life-a", "address": "10.233.0.11", "profile": "b300", "mtu": 9000, "model_disk_size": "1T"},
            {"name": "life-b", "address": "10.233.0.12", "profile": "consumer"},
        ],
    }
)


def processes_rooted_in(path):
    """Every process whose root directory is inside `path`: the hosts' systemd and all below it."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "root").startswith(str(path)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


NOTHING_LEFT = {"netns": [], "mounts": [], "links": [], "processes": [], "loop_devices": [], "state_dir": False}


def leftovers(spec):
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    loops = subprocess.run(["losetup", "--list", "--noheadings", "-O", "BACK-FILE"], capture_output=True, text=True, check=False).stdout
    return {
        "netns": [line for line in netns.splitlines() if line.startswith(f"gf-{spec.name}-")],
        "mounts": fleet.mounts_under(spec.state_dir),
        "links": [name for name in [spec.bridge] + [spec.veth(h) for h in spec.hosts] if fleet.link_exists(name)],
        "processes": [pid for h in spec.hosts for pid in fleet.nspawn_pids(fleet.host_root(spec, h))]
        + processes_rooted_in(spec.state_dir),
        "loop_devices": [line for line in loops.splitlines() if str(spec.state_dir) in line],
        "state_dir": spec.state_dir.exists(),
    }


@pytest.fixture
def fresh_fleet():
    fleet.down(SPEC, log=lambda _m: None)
    yield SPEC
    fleet.down(SPEC, log=lambda _m: None)


def test_up_is_idempotent_recovers_a_killed_host_and_down_leaves_nothing(fresh_fleet):
    spec = fresh_fleet
    first = fleet.up(spec, log=lambda _m: None)
    assert first["started"] == ["life-a", "life-b"]
    assert {row["state"] for row in fleet.status(spec)} <= set(fleet.READY_STATES)

    again = fleet.up(spec, log=lambda _m: None)
    assert again == {"fleet": spec.name, "started": [], "kept": ["life-a", "life-b"]}

    # A killed run: the host's nspawn dies without cleanup; its mount, netns and veth stay behind.
    victim = spec.host("life-a")
    for pid in fleet.nspawn_pids(fleet.host_root(spec, victim)):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    # The supervisor sees nspawn's SIGKILL status (not a reboot's 133) and exits too.
    while fleet.host_state(spec, victim) != "absent" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert fleet.host_state(spec, victim) == "absent"
    recovered = fleet.up(spec, log=lambda _m: None)
    assert recovered["started"] == ["life-a"] and recovered["kept"] == ["life-b"]

    leader = fleet.leader_of(spec, victim)
    df = subprocess.run(["nsenter", "-t", str(leader), "-a", "df", "-B1", "--output=size,fstype", "/srv/models"],
                        capture_output=True, text=True, check=True).stdout.split()
    # ext4 keeps about 2 % of a 1 TiB image for its own metadata.
    assert df[-1] == "ext4" and 0.95 * 2**40 < int(df[-2]) <= 2**40
    probe = subprocess.run(["nsenter", "-t", str(leader), "-a", "ping", "-c1", "-W2", "-M", "do", "-s", "1472", "10.233.0.12"],
                           capture_output=True, text=True, check=False)
    assert probe.returncode == 0, probe.stdout + probe.stderr

    fleet.down(spec, log=lambda _m: None)
    assert leftovers(spec) == NOTHING_LEFT


def test_down_cleans_a_half_made_fleet(fresh_fleet):
    spec = fresh_fleet
    # What a run killed right after plumbing one host's network leaves: a bridge, netns, veth, dirs.
    spec.state_dir.mkdir(parents=True)
    fleet.ensure_bridge(spec)
    fleet.plumb_network(spec, spec.hosts[0])
    assert leftovers(spec)["netns"] and leftovers(spec)["links"]
    fleet.down(spec, log=lambda _m: None)
    assert leftovers(spec) == NOTHING_LEFT


def in_host(spec, host, *argv):
    leader = fleet.leader_of(spec, spec.host(host))
    return subprocess.run(["nsenter", "-t", str(leader), "-a", *argv], capture_output=True, text=True, check=False)


def test_a_host_that_reboots_itself_comes_back(fresh_fleet):
    spec = fresh_fleet
    fleet.up(spec, log=lambda _m: None)
    before = in_host(spec, "life-a", "cat", "/proc/sys/kernel/random/boot_id").stdout.strip()
    in_host(spec, "life-a", "systemctl", "reboot")
    deadline = time.monotonic() + 60
    after = before
    while time.monotonic() < deadline:
        time.sleep(0.5)
        if fleet.host_state(spec, spec.host("life-a")) in fleet.READY_STATES:
            after = in_host(spec, "life-a", "cat", "/proc/sys/kernel/random/boot_id").stdout.strip()
            if after and after != before:
                break
    assert after and after != before, "no new boot within 60 s"
    # The overlay and the model disk are the controller's mounts: they survive the reboot.
    assert in_host(spec, "life-a", "findmnt", "-n", "-o", "FSTYPE", "/srv/models").stdout.strip() == "ext4"
    fleet.down(spec, log=lambda _m: None)
    assert leftovers(spec) == NOTHING_LEFT
