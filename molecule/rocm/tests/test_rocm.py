"""State after converge (testinfra): amdgpu and ROCm 7.0.2 installed at the pin and held, the service
account in render/video, amd-smi reporting the release, and a check-mode run that changes nothing."""

import json
import os
import re
import subprocess

PACKAGES = ["amdgpu-dkms", "rocm", "rocm-core", "amd-smi-lib", "rocm-smi-lib"]


def test_packages_are_at_the_release_and_held(host):
    held = set(host.run("apt-mark showhold").stdout.split())
    assert host.package("amdgpu-dkms").version.startswith("1:6.14.14.30100200-")
    for name in PACKAGES[1:]:
        assert re.fullmatch(r"[0-9.]+\.70002-[^-]+", host.package(name).version), (name, host.package(name).version)
    assert set(PACKAGES) <= held, held


def test_amd_smi_reports_the_pinned_release(host):
    versions = json.loads(host.check_output("amd-smi version --json"))
    text = json.dumps(versions)
    assert "7.0.2" in text, text
    assert host.file("/opt/rocm/.info/version").content_string.startswith("7.0.2")


def test_service_account_can_use_the_gpus(host):
    groups = set(host.user("vllm").groups)
    assert {"render", "video"} <= groups


def test_repositories_are_the_configured_ones(host):
    sources = host.file("/etc/apt/sources.list.d/gpufleet-rocm.sources").content_string
    assert "URIs: http://10.232.4.1:8080/amd/amdgpu/7.0.2/ubuntu" in sources
    assert "URIs: http://10.232.4.1:8080/amd/rocm/apt/7.0.2" in sources
    assert sources.count("Signed-By: /etc/apt/keyrings/gpufleet-rocm.asc") == 2


def test_check_mode_after_converge_changes_nothing():
    result = subprocess.run(
        ["ansible-playbook", "--check", "--diff", "-i", os.environ["MOLECULE_INVENTORY_FILE"],
         os.path.join(os.environ["MOLECULE_SCENARIO_DIRECTORY"], "converge.yml")],
        capture_output=True, text=True, check=False, env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    recap = re.findall(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)", result.stdout, re.M)
    assert recap and all(changed == "0" for _, changed in recap), recap
