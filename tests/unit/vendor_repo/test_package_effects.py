"""What installing the stand-in packages does to a gpusim host: the real .debs' payloads and maintainer
scripts, played by FakeDpkg on a tmp GPUSIM_ROOT (the order apt would use: dependencies first)."""

import json
import os
import subprocess
import sys

import pytest
import yaml
from vendor_repo_helpers import NVIDIA_FLAT, FakeDpkg, gpusim_admin, install_gpusim, run_tool

OLD, NEW = "580.95.05-1", "580.105.08-1"
QUERY = ("--query-gpu=driver_version,persistence_mode", "--format=csv,noheader")


def nvidia_deb(repo, name, version):
    return repo / NVIDIA_FLAT[0] / f"{name}_{version}_all.deb"


def amd_deb(repo, name, release):
    kind = "amdgpu" if name == "amdgpu-dkms" else "rocm"
    base = repo / (f"amd/amdgpu/{release}/ubuntu" if kind == "amdgpu" else f"amd/rocm/apt/{release}")
    found = list((base / "pool/main" / name[0] / name).glob(f"{name}_*~22.04_all.deb")) + list(
        (base / "pool/main" / name[0] / name).glob(f"{name}_*.22.04_all.deb"))
    assert len(found) == 1, found
    return found[0]


def start_daemon(root, service):
    """What the stand-in daemon does when systemd starts it: a pid file naming a live process (ours)."""
    run = root / "run/gpusim"
    run.mkdir(parents=True, exist_ok=True)
    (run / f"{service}.pid").write_text(f"{os.getpid()}\n")


def stop_daemon(root, service):
    (root / f"run/gpusim/{service}.pid").unlink()


def smi_fabric_state(root):
    out = run_tool(root, "nvidia-smi", "-q").stdout
    return [line.split(":", 1)[1].strip() for line in out.splitlines() if line.strip().startswith("State ")]


@pytest.fixture
def b300(tmp_path):
    root = install_gpusim(tmp_path / "root", "b300", "--bare")
    return root, FakeDpkg(root, tmp_path / "control")


def test_bare_host_has_no_vendor_tools_and_loads_modules_at_boot(b300):
    root = b300[0]
    assert not (root / "usr/bin/nvidia-smi").exists()
    assert (root / "usr/bin/ibstat").is_symlink()  # non-vendor tools are still there
    assert json.loads((root / "etc/gpusim/host.json").read_text())["driver_managed"] is True
    wants = root / "etc/systemd/system/multi-user.target.wants/gpusim-driver-load.service"
    assert os.readlink(wants) == "/etc/systemd/system/gpusim-driver-load.service"
    unit = (root / "etc/systemd/system/gpusim-driver-load.service").read_text()
    assert "Type=oneshot" in unit and "ExecStart=/usr/local/lib/gpusim/gpusim.py boot" in unit


def test_driver_install_upgrade_mismatch_and_reboot(repo, b300):
    root, dpkg = b300
    stack = ["nvidia-dkms-580-open", "nvidia-utils-580"]  # the two with an effect (real apt order: test_apt)
    dpkg.install(*(nvidia_deb(repo, name, OLD) for name in stack))
    assert os.path.islink(root / "usr/bin/nvidia-smi")
    smi = run_tool(root, "nvidia-smi", *QUERY)
    assert smi.returncode == 0, smi.stdout + smi.stderr
    assert smi.stdout.splitlines() == ["580.95.05, Disabled"] * 8  # persistenced not running yet
    assert "NVIDIA-SMI 580.95.05" in run_tool(root, "nvidia-smi").stdout

    # apt upgrade: new userspace at once, the running kernel module stays until a reboot.
    dpkg.install(*(nvidia_deb(repo, name, NEW) for name in stack))
    for argv in ((), QUERY, ("-q", "-x")):
        smi = run_tool(root, "nvidia-smi", *argv)
        assert smi.returncode == 18, argv
        assert smi.stdout == "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.105\n"

    assert gpusim_admin(root, "boot").returncode == 0  # what gpusim-driver-load.service does at boot
    assert run_tool(root, "nvidia-smi", *QUERY).stdout.splitlines() == ["580.105.08, Disabled"] * 8
    assert "<driver_version>580.105.08</driver_version>" in run_tool(root, "nvidia-smi", "-q", "-x").stdout

    # Downgrade (what a pin back does) mismatches the other way until the next boot.
    dpkg.install(*(nvidia_deb(repo, name, OLD) for name in stack))
    assert "NVML library version: 580.95\n" in run_tool(root, "nvidia-smi").stdout
    gpusim_admin(root, "boot")
    assert run_tool(root, "nvidia-smi", "--version").stdout.startswith("NVIDIA-SMI version  : 580.95.05")

    # Removing the kernel module package: still loaded until boot, then the driver is gone.
    dpkg.remove("nvidia-dkms-580-open")
    assert run_tool(root, "nvidia-smi", "-L").returncode == 0
    gpusim_admin(root, "boot")
    gone = run_tool(root, "nvidia-smi", "-L")
    assert gone.returncode == 9 and "couldn't communicate with the NVIDIA driver" in gone.stdout
    dpkg.remove("nvidia-utils-580")
    assert not os.path.lexists(root / "usr/bin/nvidia-smi")


def test_persistence_follows_nvidia_persistenced(repo, b300):
    root, dpkg = b300
    names = ("libnvidia-compute-580", "nvidia-dkms-580-open", "nvidia-utils-580", "nvidia-compute-utils-580")
    dpkg.install(*(nvidia_deb(repo, n, OLD) for n in names))
    unit = (root / "lib/systemd/system/nvidia-persistenced.service").read_text()
    assert "Type=simple" in unit and "ExecStart=/usr/bin/nvidia-persistenced" in unit
    assert run_tool(root, "nvidia-smi", *QUERY).stdout.startswith("580.95.05, Disabled")
    start_daemon(root, "nvidia-persistenced")
    assert run_tool(root, "nvidia-smi", *QUERY).stdout.startswith("580.95.05, Enabled")
    rows = [line for line in run_tool(root, "nvidia-smi").stdout.splitlines() if "NVIDIA B300 SXM6 AC" in line]
    assert len(rows) == 8 and all("NVIDIA B300 SXM6 AC            On  |" in row for row in rows)
    (root / "run/gpusim/nvidia-persistenced.pid").write_text("999999\n")  # stale pid: the daemon died
    assert run_tool(root, "nvidia-smi", *QUERY).stdout.startswith("580.95.05, Disabled")


def test_fabric_completes_only_with_fabricmanager_running_and_nvlsm(repo, b300):
    root, dpkg = b300
    names = ("libnvidia-compute-580", "nvidia-dkms-580-open", "nvidia-utils-580", "libnvsdm-580", "nvidia-fabricmanager-580")
    dpkg.install(*(nvidia_deb(repo, n, OLD) for n in names))
    assert set(smi_fabric_state(root)) == {"In Progress"}
    start_daemon(root, "nvidia-fabricmanager")
    assert set(smi_fabric_state(root)) == {"In Progress"}  # NVLink5 without NVLSM never finishes training
    dpkg.install(repo / NVIDIA_FLAT[0] / "nvlsm_2025.06.6-1_all.deb")
    assert set(smi_fabric_state(root)) == {"Completed"}
    assert "<status>Success</status>" in run_tool(root, "nvidia-smi", "-q", "-x").stdout
    stop_daemon(root, "nvidia-fabricmanager")
    assert set(smi_fabric_state(root)) == {"In Progress"}


def test_imex_lists_nodes_from_its_config_while_the_service_runs(repo, tmp_path):
    root = install_gpusim(tmp_path / "root", "gb300", "--bare")
    dpkg = FakeDpkg(root, tmp_path / "control")
    assert not (root / "usr/bin/nvidia-imex-ctl").exists()
    names = ("libnvidia-compute-580", "nvidia-dkms-580-open", "nvidia-utils-580", "nvidia-imex-580")
    dpkg.install(*(nvidia_deb(repo, n, OLD) for n in names))
    refused = run_tool(root, "nvidia-imex-ctl", "-N")
    assert refused.returncode == 1 and "Connection refused" in refused.stderr
    (root / "etc/nvidia-imex/nodes_config.cfg").write_text("# rack 1\n10.0.0.11\n\n10.0.0.12  # tray 2\n")
    start_daemon(root, "nvidia-imex")
    table = run_tool(root, "nvidia-imex-ctl", "-N")
    assert table.returncode == 0, table.stderr
    nodes = [line for line in table.stdout.splitlines() if line.startswith("Node #")]
    assert nodes == ["Node #0   - 10.0.0.11       - READY                - Version: 580.95.05",
                     "Node #1   - 10.0.0.12       - READY                - Version: 580.95.05"]
    assert "C - Connected" in table.stdout and "Domain State: UP" in table.stdout


def test_amd_stack_reports_installed_versions(repo, tmp_path):
    root = install_gpusim(tmp_path / "root", "mi355x", "--bare")
    dpkg = FakeDpkg(root, tmp_path / "control")
    assert not (root / "usr/bin/amd-smi").exists() and not (root / "usr/bin/rocm-smi").exists()
    order = ("amdgpu-dkms", "rocm-core", "amd-smi-lib", "rocm-smi-lib")  # the rocm meta package has no effect
    dpkg.install(*(amd_deb(repo, n, "7.0.2") for n in order))
    assert os.readlink(root / "opt/rocm") == "rocm-7.0.2"
    assert (root / "opt/rocm/.info/version").read_text() == "7.0.2-56\n"
    for tool in ("amd-smi", "rocm-smi"):
        assert os.path.islink(root / f"usr/bin/{tool}") and os.path.islink(root / f"opt/rocm/bin/{tool}")
    version = run_tool(root, "amd-smi", "version").stdout
    assert "ROCm version: 7.0.2 | amdgpu version: 6.14.14" in version and "Library version: 26.0.2" in version
    via_opt = subprocess.run([sys.executable, str(root / "opt/rocm/bin/amd-smi"), "version"], capture_output=True,
                             text=True, env=dict(os.environ, GPUSIM_ROOT=str(root)), check=False)
    assert via_opt.stdout == version

    dpkg.install(*(amd_deb(repo, n, "7.1.0") for n in order))
    assert os.readlink(root / "opt/rocm") == "rocm-7.1.0"
    assert not list((root / "opt/rocm-7.0.2/bin").iterdir())  # old links gone, so dpkg can drop the old dirs
    version = run_tool(root, "amd-smi", "version").stdout
    assert "ROCm version: 7.1.0 | amdgpu version: 6.14.14" in version  # old module until reboot
    gpusim_admin(root, "boot")
    assert "ROCm version: 7.1.0 | amdgpu version: 6.16.6" in run_tool(root, "amd-smi", "version").stdout
    assert json.loads(run_tool(root, "rocm-smi", "--showdriverversion", "--json").stdout)["system"] == {
        "Driver version": "6.16.6"}


def test_container_toolkit_configures_docker(repo, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    FakeDpkg(root, tmp_path / "control").install(nvidia_deb(repo, "nvidia-container-toolkit", "1.17.8-1"))
    ctk = [sys.executable, str(root / "usr/bin/nvidia-ctk")]
    version = subprocess.run([*ctk, "--version"], capture_output=True, text=True, check=True).stdout
    assert version.startswith("NVIDIA Container Toolkit CLI version 1.17.8\ncommit: ")
    config = tmp_path / "etc/docker/daemon.json"
    done = subprocess.run([*ctk, "runtime", "configure", "--runtime=docker", f"--config={config}"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert f"Wrote updated config to {config}" in done.stderr
    assert json.loads(config.read_text()) == {"runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}}
    config.write_text('{"log-driver": "journald"}')
    subprocess.run([*ctk, "runtime", "configure", "--runtime", "docker", "--config", str(config)], check=True,
                   capture_output=True)
    assert json.loads(config.read_text())["log-driver"] == "journald"
    assert "nvidia" in json.loads(config.read_text())["runtimes"]


def test_container_toolkit_generates_a_cdi_spec_from_the_gpus_nvidia_smi_lists(repo, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    FakeDpkg(root, tmp_path / "control").install(nvidia_deb(repo, "nvidia-container-toolkit", "1.17.8-1"))
    ctk = [sys.executable, str(root / "usr/bin/nvidia-ctk")]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\nfor i in 0 1 2 3; do echo \"GPU $i: NVIDIA GB300 (UUID: GPU-$i)\"; done\n")
    smi.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    done = subprocess.run([*ctk, "cdi", "generate", "--format=yaml"], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    spec = yaml.safe_load(done.stdout)
    assert spec["kind"] == "nvidia.com/gpu" and spec["cdiVersion"] == "0.5.0"
    assert [d["name"] for d in spec["devices"]] == ["0", "1", "2", "3", "all"]
    assert spec["devices"][-1]["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=0,1,2,3"]
    output = tmp_path / "etc/cdi/nvidia.yaml"
    subprocess.run([*ctk, "cdi", "generate", "--output", str(output)], capture_output=True, env=env, check=True)
    assert output.read_text() == done.stdout
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2; exit 9\n")
    failed = subprocess.run([*ctk, "cdi", "generate"], capture_output=True, text=True, env=env, check=False)
    assert failed.returncode == 1 and "failed to initialize NVML" in failed.stderr


def test_packages_do_nothing_where_gpusim_is_absent(repo, tmp_path):
    root = tmp_path / "plain"
    root.mkdir()
    dpkg = FakeDpkg(root, tmp_path / "control")
    names = ("libnvidia-compute-580", "nvidia-dkms-580-open", "nvidia-utils-580")
    dpkg.install(*(nvidia_deb(repo, n, OLD) for n in names))
    dpkg.install(amd_deb(repo, "rocm-core", "7.0.2"), amd_deb(repo, "amd-smi-lib", "7.0.2"))
    assert not os.path.lexists(root / "usr/bin/nvidia-smi")
    assert not (root / "etc/gpusim").exists()
    for name in ("nvidia-utils-580", "nvidia-dkms-580-open", "amd-smi-lib", "rocm-core"):
        dpkg.remove(name)
    assert not os.path.lexists(root / "opt/rocm")
