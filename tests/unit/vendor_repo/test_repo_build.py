"""The built repositories: layout, signatures, checksums, both versions of every package, control data."""

import hashlib
import shutil
import subprocess
import urllib.error
import urllib.request

import pytest
from vendor_repo_helpers import NVIDIA_FLAT, amd_dist_dirs, free_port, parse_stanzas

NVIDIA_KEY = "nvidia/cuda/repos/gpufleet-test-archive-key.asc"
AMD_KEY = "amd/rocm/rocm.gpg.key"
RELEASE_DIRS = NVIDIA_FLAT + amd_dist_dirs()


@pytest.fixture(scope="module")
def keyring(repo, tmp_path_factory):
    """The exported ASCII key, dearmored into a keyring file gpgv can read."""
    tmp = tmp_path_factory.mktemp("keyring")
    ring = tmp / "key.gpg"
    subprocess.run(["gpg", "--batch", "--dearmor", "-o", str(ring), str(repo / NVIDIA_KEY)], check=True,
                   env={"GNUPGHOME": str(tmp), "PATH": "/usr/bin:/bin"})
    return ring


def gpgv(keyring, *files):
    return subprocess.run(["gpgv", "--keyring", str(keyring), *map(str, files)], capture_output=True, text=True,
                          check=False)


def packages_files(repo):
    """(directory that Filename is relative to, Packages path) for every repository."""
    found = [(repo / d, repo / d / "Packages") for d in NVIDIA_FLAT]
    for dist in amd_dist_dirs():
        base = repo / dist.split("/dists/", maxsplit=1)[0]
        found.append((base, repo / dist / "main/binary-amd64/Packages"))
    return found


def test_keys_are_the_same_armored_public_key(repo):
    nvidia, amd = (repo / NVIDIA_KEY).read_text(), (repo / AMD_KEY).read_text()
    assert nvidia.startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    assert "PRIVATE" not in nvidia
    assert nvidia == amd


@pytest.mark.parametrize("directory", RELEASE_DIRS)
def test_release_signatures_verify(repo, keyring, directory):
    release_dir = repo / directory
    inline = gpgv(keyring, release_dir / "InRelease")
    detached = gpgv(keyring, release_dir / "Release.gpg", release_dir / "Release")
    assert inline.returncode == 0, inline.stderr
    assert detached.returncode == 0, detached.stderr


def test_tampered_release_fails_verification(repo, keyring, tmp_path):
    release_dir = repo / NVIDIA_FLAT[0]
    shutil.copy(release_dir / "Release.gpg", tmp_path / "Release.gpg")
    (tmp_path / "Release").write_text((release_dir / "Release").read_text().replace("Origin:", "Origin: evil"))
    assert gpgv(keyring, tmp_path / "Release.gpg", tmp_path / "Release").returncode != 0


@pytest.mark.parametrize("directory", RELEASE_DIRS)
def test_release_lists_the_index_files_with_their_hashes(repo, directory):
    release = parse_stanzas((repo / directory / "Release").read_text())[0]
    for algorithm, digest in (("MD5Sum", hashlib.md5), ("SHA256", hashlib.sha256)):
        entries = [line.split() for line in release[algorithm].strip().splitlines()]
        names = {entry[2] for entry in entries}
        assert names and all(name.endswith(("Packages", "Packages.gz")) for name in names)
        for value, size, name in entries:
            data = (repo / directory / name).read_bytes()
            assert (value, int(size)) == (digest(data).hexdigest(), len(data)), f"{directory}/{name}"


def test_packages_entries_match_their_debs(repo):
    checked = 0
    for base, packages in packages_files(repo):
        for entry in parse_stanzas(packages.read_text()):
            data = (base / entry["Filename"]).read_bytes()
            assert int(entry["Size"]) == len(data), entry["Filename"]
            assert entry["SHA256"] == hashlib.sha256(data).hexdigest(), entry["Filename"]
            assert entry["MD5sum"] == hashlib.md5(data).hexdigest(), entry["Filename"]
            assert entry["Architecture"] == "all"
            checked += 1
    assert checked == 6 * 12 * 2 + 2 * 3 * 5  # flat: 6 repos x 12 packages x 2 versions; AMD: 2 releases x 3 dists x 5


def versions_by_package(packages_path):
    result = {}
    for entry in parse_stanzas(packages_path.read_text()):
        result.setdefault(entry["Package"], []).append(entry["Version"])
    return result


NVIDIA_EXPECTED = {
    **{name: ["580.95.05-1", "580.105.08-1"] for name in (
        "nvidia-driver-580-open", "nvidia-dkms-580-open", "nvidia-kernel-common-580", "nvidia-utils-580",
        "libnvidia-compute-580", "nvidia-compute-utils-580", "nvidia-modprobe", "nvidia-fabricmanager-580",
        "libnvsdm-580", "nvidia-imex-580")},
    "nvlsm": ["2025.06.6-1", "2025.10.2-1"],
    "nvidia-container-toolkit": ["1.17.8-1", "1.18.0-1"],
}


@pytest.mark.parametrize("directory", NVIDIA_FLAT)
def test_every_nvidia_package_is_there_in_both_versions(repo, directory):
    assert versions_by_package(repo / directory / "Packages") == NVIDIA_EXPECTED


def test_amd_releases_hold_their_own_versions_in_order(repo):
    found = {}
    for dist in amd_dist_dirs():
        release = dist.split("/")[2] if dist.startswith("amd/amdgpu") else dist.split("/")[3]
        for name, versions in versions_by_package(repo / dist / "main/binary-amd64/Packages").items():
            assert len(versions) == 1
            found.setdefault((name, dist.split("/dists/")[1]), {})[release] = versions[0]
    names = {entry[0] for entry in found}
    assert names == {"amdgpu-dkms", "rocm", "amd-smi-lib", "rocm-smi-lib", "rocm-core"}
    assert found[("rocm-core", "noble")] == {"7.0.2": "7.0.2.70002-56~24.04", "7.1.0": "7.1.0.70100-20~24.04"}
    assert found[("amdgpu-dkms", "noble")]["7.0.2"] == "1:6.14.14.30100200-2212064.24.04"
    for (name, dist), by_release in found.items():
        assert set(by_release) == {"7.0.2", "7.1.0"}, (name, dist)
        # The newer release must also be the newer Debian version, or upgrades would not happen.
        older, newer = by_release["7.0.2"], by_release["7.1.0"]
        assert subprocess.run(["dpkg", "--compare-versions", newer, "gt", older], check=False).returncode == 0


def deb_field(deb, *fields):
    return subprocess.run(["dpkg-deb", "--field", str(deb), *fields], capture_output=True, text=True,
                          check=True).stdout


def test_dpkg_deb_info_shows_declared_names_versions_and_depends(repo):
    flat = repo / NVIDIA_FLAT[0]
    for version in ("580.95.05-1", "580.105.08-1"):
        meta = flat / f"nvidia-driver-580-open_{version}_all.deb"
        fields = parse_stanzas(deb_field(meta, "Package", "Version", "Architecture", "Depends", "Maintainer"))[0]
        assert fields["Package"] == "nvidia-driver-580-open"
        assert fields["Version"] == version
        assert fields["Architecture"] == "all"
        assert fields["Maintainer"].startswith("gpufleet sandbox")
        depends = [d.strip() for d in fields["Depends"].split(",")]
        for pinned in ("nvidia-dkms-580-open", "nvidia-kernel-common-580", "nvidia-utils-580", "libnvidia-compute-580",
                       "nvidia-compute-utils-580"):
            assert f"{pinned} (= {version})" in depends
    info = subprocess.run(["dpkg-deb", "--info", str(flat / "nvidia-utils-580_580.95.05-1_all.deb")],
                          capture_output=True, text=True, check=True).stdout
    assert "Package: nvidia-utils-580" in info and "stand-in" in info
    assert "Depends: libnvidia-compute-580 (= 580.95.05-1)" in info
    fm = deb_field(flat / "nvidia-fabricmanager-580_580.105.08-1_all.deb", "Depends", "Suggests")
    assert "libnvsdm-580 (= 580.105.08-1)" in fm and "Suggests: nvlsm" in fm
    rocm = repo / "amd/rocm/apt/7.1.0/pool/main/r/rocm/rocm_7.1.0.70100-20~24.04_all.deb"
    assert "amd-smi-lib (= 26.1.0.70100-20~24.04)" in deb_field(rocm, "Depends")


def test_debs_ship_the_stand_in_files(repo):
    flat = repo / NVIDIA_FLAT[0]

    def contents(name):
        return subprocess.run(["dpkg-deb", "-c", str(flat / name)], capture_output=True, text=True, check=True).stdout

    assert "./lib/systemd/system/nvidia-persistenced.service" in contents("nvidia-compute-utils-580_580.95.05-1_all.deb")
    assert "./lib/systemd/system/nvidia-fabricmanager.service" in contents("nvidia-fabricmanager-580_580.95.05-1_all.deb")
    imex = contents("nvidia-imex-580_580.95.05-1_all.deb")
    assert "./lib/systemd/system/nvidia-imex.service" in imex and "./etc/nvidia-imex/nodes_config.cfg" in imex
    assert "./usr/bin/nvidia-ctk" in contents("nvidia-container-toolkit_1.18.0-1_all.deb")


def test_debs_are_reproducible_and_the_key_is_reused(repo, tmp_path, vendor_repo):
    data = vendor_repo.load_data()
    epoch = data["source_date_epoch"]
    spec = next(p for p in data["nvidia"]["packages"] if p["name"] == "nvidia-compute-utils-580")
    again = vendor_repo.Package(spec, "580.95.05-1", {}, data["maintainer"]).build(tmp_path, epoch)
    assert again.read_bytes() == (repo / NVIDIA_FLAT[0] / again.name).read_bytes()
    fingerprint = (repo / ".gnupg/key-fingerprint").read_text().strip()
    assert vendor_repo.Signer(repo, data["key_uid"]).fingerprint == fingerprint


def fetch(url, method="GET"):
    with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=5) as response:
        return response.status, response.read()


def test_server_serves_get_and_head_but_never_the_signing_key(server, repo):
    status, body = fetch(f"{server}/{NVIDIA_KEY}")
    assert status == 200 and body == (repo / NVIDIA_KEY).read_bytes()
    status, body = fetch(f"{server}/{NVIDIA_FLAT[0]}/InRelease", method="HEAD")
    assert status == 200 and body == b""
    for secret in ("/.gnupg/pubring.kbx", "/.gnupg/", "/nvidia/../.gnupg/trustdb.gpg", "/.debs/"):
        with pytest.raises(urllib.error.HTTPError) as error:
            fetch(server + secret)
        assert error.value.code == 404, secret


def test_stop_tolerates_a_stale_or_missing_pidfile(vendor_repo, tmp_path):
    stale = tmp_path / "stale.pid"
    stale.write_text("999999\n")
    assert vendor_repo.stop(stale) is False
    assert not stale.exists()
    assert vendor_repo.stop(tmp_path / "missing.pid") is False


def test_serve_then_stop(vendor_repo, repo, tmp_path):
    port, pidfile = free_port(), tmp_path / "s.pid"
    vendor_repo.serve(repo, "127.0.0.1", port, pidfile, tmp_path / "s.log")
    assert fetch(f"http://127.0.0.1:{port}/{AMD_KEY}")[0] == 200
    assert vendor_repo.stop(pidfile) is True
    assert not pidfile.exists()
    with pytest.raises(urllib.error.URLError):
        fetch(f"http://127.0.0.1:{port}/{AMD_KEY}")
    assert "GET /" + AMD_KEY in (tmp_path / "s.log").read_text()
