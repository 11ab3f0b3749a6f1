"""State after converge (testinfra): versions installed and held, services, modules config, and a
check-mode run of the converge playbook that would change nothing (what the nightly drift check sees)."""

import json
import os
import re
import subprocess

import pytest

PINNED = "580.95.05-1"
BRANCH_PACKAGES = ["nvidia-driver-580-open", "nvidia-dkms-580-open", "nvidia-kernel-common-580", "nvidia-utils-580",
                   "libnvidia-compute-580", "nvidia-compute-utils-580", "nvidia-modprobe"]
EXTRAS = {
    "b300": {"nvidia-fabricmanager-580": PINNED, "libnvsdm-580": PINNED, "nvlsm": "2025.06.6-1",
             "nvidia-container-toolkit": "1.17.8-1"},
    "gb300": {"nvidia-imex-580": PINNED},
}


def profile(host):
    return "b300" if host.backend.get_hostname().startswith("nd-b300") else "gb300"


def test_every_package_is_installed_at_its_pin_and_held(host):
    expected = {name: PINNED for name in BRANCH_PACKAGES} | EXTRAS[profile(host)]
    held = set(host.run("apt-mark showhold").stdout.split())
    for name, version in expected.items():
        assert host.package(name).version == version, name
        assert name in held, f"{name} is not held"
    preferences = host.file("/etc/apt/preferences.d/gpufleet-nvidia-driver").content_string
    for name, version in expected.items():
        assert re.search(rf"Package: {re.escape(name)}\nPin: version {re.escape(version)}\nPin-Priority: 1001", preferences)


def test_nvidia_smi_reports_the_pinned_driver(host):
    out = host.check_output("nvidia-smi --query-gpu=driver_version,persistence_mode --format=csv,noheader")
    rows = [line.split(", ") for line in out.splitlines()]
    assert rows and all(row == ["580.95.05", "Enabled"] for row in rows), rows


def test_services_are_enabled_and_running(host):
    services = ["nvidia-persistenced"] + (["nvidia-fabricmanager"] if profile(host) == "b300" else ["nvidia-imex"])
    for name in services:
        assert host.service(name).is_enabled, name
        assert host.service(name).is_running, name


def test_docker_has_the_nvidia_runtime_on_the_container_node(host):
    config = host.file("/etc/docker/daemon.json")
    if profile(host) != "b300":
        assert not config.exists
        return
    runtimes = json.loads(config.content_string)["runtimes"]
    assert runtimes["nvidia"]["path"] == "nvidia-container-runtime"


def test_kernel_module_configuration(host):
    assert "blacklist nouveau" in host.file("/etc/modprobe.d/gpufleet-blacklist-nouveau.conf").content_string
    modules = host.file("/etc/modules-load.d/gpufleet-nvidia.conf").content_string.split()
    assert {"mlx5_ib", "ib_umad"} <= set(modules)
    imex_option = host.file("/etc/modprobe.d/gpufleet-nvidia-imex.conf")
    assert imex_option.exists == (profile(host) == "gb300")


def test_fabric_or_imex_domain_is_up(host):
    if profile(host) == "b300":
        states = host.check_output("nvidia-smi -q -x | grep -A2 '<fabric>'")
        assert "<state>Completed</state>" in states and "<status>Success</status>" in states
    else:
        nodes = host.file("/etc/nvidia-imex/nodes_config.cfg").content_string
        assert [line for line in nodes.splitlines() if line and not line.startswith("#")] == ["10.232.3.21", "10.232.3.22"]
        assert host.run("test -c /dev/nvidia-caps-imex-channels/channel0").rc == 0


@pytest.fixture(scope="module")
def check_run():
    """The converge playbook in check mode with diff, once, against every host."""
    result = subprocess.run(
        ["ansible-playbook", "--check", "--diff", "-i", os.environ["MOLECULE_INVENTORY_FILE"],
         os.path.join(os.environ["MOLECULE_SCENARIO_DIRECTORY"], "converge.yml")],
        capture_output=True, text=True, check=False, env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"},
    )
    return result


def test_check_mode_after_converge_changes_nothing(check_run):
    assert check_run.returncode == 0, check_run.stdout[-3000:] + check_run.stderr[-2000:]
    recap = re.findall(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)", check_run.stdout, re.M)
    assert recap and all(changed == "0" for _, changed in recap), recap
