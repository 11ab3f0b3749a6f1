"""apt itself against the served repositories, with a private apt configuration (no change to the host's apt)."""

import os
import shutil
import subprocess

import pytest

NVIDIA_KEY = "nvidia/cuda/repos/gpufleet-test-archive-key.asc"
AMD_KEY = "amd/rocm/rocm.gpg.key"

pytestmark = pytest.mark.skipif(not shutil.which("apt-get"), reason="needs apt-get")


class PrivateApt:
    """apt-get/apt-cache with every state, cache, list and trust path under one tmp dir (via APT_CONFIG)."""

    def __init__(self, root):
        self.root = root
        for sub in ("etc/apt/apt.conf.d", "etc/apt/sources.list.d", "etc/apt/preferences.d", "etc/apt/trusted.gpg.d",
                    "var/lib/apt/lists/partial", "var/cache/apt/archives/partial", "var/lib/dpkg", "var/log/apt",
                    "keys"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        (root / "var/lib/dpkg/status").touch()
        self.config = root / "apt.conf"
        self.config.write_text("\n".join([
            f'Dir::Etc "{root}/etc/apt/";',
            f'Dir::State "{root}/var/lib/apt/";',
            f'Dir::State::status "{root}/var/lib/dpkg/status";',
            f'Dir::Cache "{root}/var/cache/apt/";',
            f'Dir::Log "{root}/var/log/apt/";',
            'APT::Architecture "amd64";',
            'APT::Architectures { "amd64"; };',
            'APT::Sandbox::User "root";',
            'Debug::NoLocking "true";',
            'Acquire::Retries "0";',
            'Acquire::http::Proxy "DIRECT";',
            "",
        ]))

    def sources(self, *lines):
        (self.root / "etc/apt/sources.list").write_text("".join(line + "\n" for line in lines))

    def run(self, *argv):
        env = dict(os.environ, APT_CONFIG=str(self.config), LC_ALL="C")
        return subprocess.run(list(argv), capture_output=True, text=True, env=env, check=False)


def install_key(apt, repo, relative, name):
    key = apt.root / "keys" / name
    shutil.copyfile(repo / relative, key)
    return key


def other_key(tmp_path):
    """An unrelated key: the repositories must not verify with it."""
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    env = dict(os.environ, GNUPGHOME=str(home))
    gpg = ["gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", ""]
    subprocess.run([*gpg, "--quick-generate-key", "wrong key <wrong@gpufleet.invalid>", "ed25519", "sign", "never"],
                   env=env, check=True, capture_output=True)
    armored = subprocess.run([*gpg, "--armor", "--export"], env=env, check=True, capture_output=True, text=True).stdout
    subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=env, check=False, capture_output=True)
    key = tmp_path / "wrong.asc"
    key.write_text(armored)
    return key


def test_apt_update_accepts_the_signature_and_sees_both_versions(repo, server, tmp_path):
    apt = PrivateApt(tmp_path / "apt")
    nvidia_key = install_key(apt, repo, NVIDIA_KEY, "nvidia.asc")
    amd_key = install_key(apt, repo, AMD_KEY, "rocm.asc")
    apt.sources(
        f"deb [signed-by={nvidia_key}] {server}/nvidia/cuda/repos/debian12/x86_64/ /",
        f"deb [arch=amd64 signed-by={amd_key}] {server}/amd/amdgpu/7.0.2/ubuntu bookworm main",
        f"deb [arch=amd64 signed-by={amd_key}] {server}/amd/rocm/apt/7.0.2 bookworm main",
        f"deb [arch=amd64 signed-by={amd_key}] {server}/amd/rocm/apt/7.1.0 bookworm main",
    )
    update = apt.run("apt-get", "update")
    assert update.returncode == 0, update.stdout + update.stderr
    assert "W:" not in update.stderr and "E:" not in update.stderr, update.stderr

    policy = apt.run("apt-cache", "policy", "nvidia-utils-580")
    assert policy.returncode == 0, policy.stderr
    assert "Candidate: 580.105.08-1" in policy.stdout
    assert "580.95.05-1 500" in policy.stdout and "580.105.08-1 500" in policy.stdout, policy.stdout

    rocm = apt.run("apt-cache", "policy", "rocm-core").stdout
    assert "7.0.2.70002-56~22.04 500" in rocm and "7.1.0.70100-20~22.04 500" in rocm, rocm
    assert "1:6.14.14.30100200-2212064.22.04" in apt.run("apt-cache", "policy", "amdgpu-dkms").stdout

    # Dependency resolution of the pinned driver stack, simulated (-s): nothing is installed.
    sim = apt.run("apt-get", "install", "-s", "-y", "nvidia-driver-580-open=580.95.05-1", "nvidia-dkms-580-open=580.95.05-1",
                  "nvidia-kernel-common-580=580.95.05-1", "nvidia-utils-580=580.95.05-1",
                  "libnvidia-compute-580=580.95.05-1", "nvidia-compute-utils-580=580.95.05-1")
    assert sim.returncode == 0, sim.stdout + sim.stderr
    assert "Inst nvidia-utils-580 (580.95.05-1" in sim.stdout
    # The meta package pins its parts: asking for a mixed set must fail to resolve.
    mixed = apt.run("apt-get", "install", "-s", "-y", "nvidia-driver-580-open=580.95.05-1",
                    "nvidia-utils-580=580.105.08-1")
    assert mixed.returncode != 0


def test_apt_update_fails_with_the_wrong_key(repo, server, tmp_path):
    apt = PrivateApt(tmp_path / "apt")
    wrong = other_key(tmp_path)
    apt.sources(f"deb [signed-by={wrong}] {server}/nvidia/cuda/repos/debian12/x86_64/ /")
    update = apt.run("apt-get", "update")
    output = update.stdout + update.stderr
    assert update.returncode != 0, output
    assert "NO_PUBKEY" in output or "not signed" in output, output
    assert "nvidia-utils-580" not in apt.run("apt-cache", "pkgnames").stdout
