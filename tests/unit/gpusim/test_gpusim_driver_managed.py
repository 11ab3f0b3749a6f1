"""install --bare and the package/boot admin commands the stand-in vendor packages call."""

import json
import os
import stat

import pytest
from gpusim_helpers import install


def state(host):
    return json.loads((host.root / "etc/gpusim/driver.json").read_text())


def test_bare_install_leaves_vendor_tools_to_packages(tmp_path):
    host = install(tmp_path / "h", "gb300", "node-0", "--bare")
    bin_dir = host.root / "usr/bin"
    assert not os.path.lexists(bin_dir / "nvidia-smi") and not os.path.lexists(bin_dir / "nvidia-imex-ctl")
    assert all((bin_dir / t).is_symlink() for t in ("ibstat", "ibv_devinfo", "all_reduce_perf"))
    assert (host.root / "etc/systemd/system/multi-user.target.wants/gpusim-driver-load.service").is_symlink()
    assert host.run("ibstat", "-l").returncode == 0
    # Called through a stray link before any driver package: no NVML library.
    (bin_dir / "nvidia-smi").symlink_to("../local/lib/gpusim/gpusim.py")
    smi = host.run("nvidia-smi")
    assert smi.returncode == 12 and "couldn't find libnvidia-ml.so" in smi.stdout


def test_non_bare_reinstall_removes_the_driver_load_unit(tmp_path):
    root = tmp_path / "h"
    install(root, "b300", "node-0", "--bare")
    host = install(root, "b300", "node-0")
    assert not (root / "etc/systemd/system/gpusim-driver-load.service").exists()
    assert not os.path.lexists(root / "etc/systemd/system/multi-user.target.wants/gpusim-driver-load.service")
    assert "driver_managed" not in json.loads((root / "etc/gpusim/host.json").read_text())
    assert host.run("nvidia-smi", "--version").stdout.startswith("NVIDIA-SMI version  : 580.95.05")


def test_package_links_survive_a_bare_reinstall(tmp_path):
    root = tmp_path / "h"
    host = install(root, "b300", "node-0", "--bare")
    assert host.admin("package", "configure", "nvidia-utils-580", "580.95.05-1", "--role", "nvidia-userspace",
                      "--link", "/usr/bin/nvidia-smi").returncode == 0
    install(root, "b300", "node-0", "--bare")
    assert (root / "usr/bin/nvidia-smi").is_symlink()
    host.admin("package", "remove", "nvidia-utils-580")
    assert not os.path.lexists(root / "usr/bin/nvidia-smi")


def test_kernel_module_loads_on_first_install_only_and_boot_syncs_it(tmp_path):
    host = install(tmp_path / "h", "b300", "node-0", "--bare")
    host.admin("package", "configure", "nvidia-dkms-580-open", "580.95.05-1", "--role", "nvidia-kmod")
    assert state(host)["modules"] == {"nvidia": "580.95.05-1"}
    host.admin("package", "configure", "nvidia-dkms-580-open", "580.105.08-1", "--role", "nvidia-kmod")
    assert state(host)["modules"] == {"nvidia": "580.95.05-1"}
    assert host.admin("boot").returncode == 0
    assert state(host)["modules"] == {"nvidia": "580.105.08-1"}
    host.admin("package", "remove", "nvidia-dkms-580-open")
    assert state(host)["modules"] == {"nvidia": "580.105.08-1"}  # still loaded until the next boot
    host.admin("boot")
    assert state(host)["modules"] == {}


def test_mismatch_and_missing_userspace(tmp_path):
    host = install(tmp_path / "h", "consumer", "node-0", "--bare")
    host.admin("package", "configure", "nvidia-dkms-580-open", "580.95.05-1", "--role", "nvidia-kmod")
    missing = host.admin("package", "list")
    assert missing.returncode == 0 and "nvidia-dkms-580-open" in missing.stdout
    host.admin("package", "configure", "nvidia-utils-580", "580.105.08-1", "--role", "nvidia-userspace",
               "--link", "/usr/bin/nvidia-smi")
    smi = host.run("nvidia-smi", "-L")
    assert (smi.returncode, smi.stdout) == (18, "Failed to initialize NVML: Driver/library version mismatch\n"
                                                "NVML library version: 580.105\n")
    host.admin("boot")  # the installed module is still 580.95.05: a reboot does not help
    assert host.run("nvidia-smi", "-L").returncode == 18
    host.admin("package", "configure", "nvidia-dkms-580-open", "580.105.08-1", "--role", "nvidia-kmod")
    host.admin("boot")
    assert host.run("nvidia-smi", "-L").stdout.startswith("GPU 0: NVIDIA GeForce RTX 4090")


def test_bad_admin_usage_exits_2(tmp_path):
    host = install(tmp_path / "h", "b300", "node-0", "--bare")
    assert host.admin("package").returncode == 2
    assert host.admin("package", "configure", "x", "1", "--bogus", "y").returncode == 2
    assert host.admin("boot", "now").returncode == 2


@pytest.mark.skipif(os.geteuid() != 0, reason="creating a character device needs root")
@pytest.mark.parametrize("with_option", [True, False])
def test_imex_channel_follows_the_modprobe_option_at_every_module_load(tmp_path, with_option):
    host = install(tmp_path / "tray", "gb300", "tray-1", "--bare")
    if with_option:
        (tmp_path / "tray/etc/modprobe.d").mkdir(parents=True, exist_ok=True)
        (tmp_path / "tray/etc/modprobe.d/imex.conf").write_text("options nvidia NVreg_CreateImexChannel0=1\n")
    channel = tmp_path / "tray/dev/nvidia-caps-imex-channels/channel0"
    host.admin("package", "configure", "nvidia-dkms-580-open", "580.95.05-1", "--role", "nvidia-kmod")
    assert channel.exists() == with_option
    channel.unlink(missing_ok=True)  # /dev is a tmpfs: a reboot loses the node
    host.admin("boot")
    assert channel.exists() == with_option
    if with_option:
        assert stat.S_ISCHR(channel.stat().st_mode) and os.major(channel.stat().st_rdev) == 508
