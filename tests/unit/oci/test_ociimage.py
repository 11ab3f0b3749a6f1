# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""tools/oci/ociimage.py: deterministic OCI layouts, checked against the image spec from the bytes on
disk, and pushes to a real distribution registry (Debian's docker-registry) read back by digest."""

import gzip
import hashlib
import http.server
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tarfile
import threading
from collections import Counter
from pathlib import Path

import pytest
from oci_helpers import OCIIMAGE, free_port

MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
BUILD_OPTS = {
    "env": ["PATH=/usr/local/bin:/usr/bin:/bin", "HF_HUB_OFFLINE=1"],
    "entrypoint": '["/usr/bin/tool"]',
    "cmd": '["--serve", "--port", "8000"]',
    "workdir": "/srv",
    "labels": ["org.opencontainers.image.title=fleet-test", "fleet.role=engine"],
}


def sha256_file(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def blob(layout, digest) -> Path:
    return Path(layout) / "blobs" / "sha256" / digest.split(":", 1)[1]


def load_image(layout):
    index = json.loads((Path(layout) / "index.json").read_bytes())
    desc = index["manifests"][0]
    manifest = json.loads(blob(layout, desc["digest"]).read_bytes())
    config = json.loads(blob(layout, manifest["config"]["digest"]).read_bytes())
    return index, manifest, config


def layout_files(layout) -> dict:
    root = Path(layout)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def run_cli(*args, check=True):
    proc = subprocess.run([sys.executable, str(OCIIMAGE), *map(str, args)], capture_output=True, text=True, check=False)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def extract(layer_blob: Path, dest: Path) -> list:
    """Extract a layer with Python's tarfile, as a runtime would; returns the members in archive order."""
    dest.mkdir(parents=True)
    with tarfile.open(layer_blob, "r:gz") as tar:
        members = tar.getmembers()
        kwargs = {"filter": "fully_trusted"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(dest, numeric_owner=True, **kwargs)
    return members


# ---------------------------------------------------------------------------------------------
# Building


def test_same_directories_give_the_same_digests_twice(oci, tree, tmp_path):
    first = oci.build_image(tmp_path / "a", [tree], **BUILD_OPTS)
    second = oci.build_image(tmp_path / "b", [tree], **BUILD_OPTS)
    assert first.manifest_digest == second.manifest_digest
    assert [x.digest for x in first.layers] == [x.digest for x in second.layers]
    assert layout_files(tmp_path / "a") == layout_files(tmp_path / "b")

    # A copy elsewhere, with other mtimes and a different directory listing order, is the same image.
    copy = tmp_path / "elsewhere" / "copy"
    shutil.copytree(tree, copy, symlinks=True, ignore=lambda d, names: ["fifo"] if Path(d) == tree else [])
    os.mkfifo(copy / "fifo", stat.S_IMODE((tree / "fifo").lstat().st_mode))
    os.link(copy / "usr/bin/tool", copy / "usr/bin/tool-hardlink.tmp")
    os.replace(copy / "usr/bin/tool-hardlink.tmp", copy / "usr/bin/tool-hardlink")  # copytree split the hard link
    for path in copy.rglob("*"):
        if not path.is_symlink():
            os.utime(path, (1_700_000_000, 1_700_000_000))
    if os.geteuid() == 0:
        for src in tree.rglob("*"):
            st = src.lstat()
            os.lchown(copy / src.relative_to(tree), st.st_uid, st.st_gid)
            if not src.is_symlink():
                os.chmod(copy / src.relative_to(tree), stat.S_IMODE(st.st_mode))  # chown dropped the setuid bit
    third = oci.build_image(tmp_path / "c", [copy], **BUILD_OPTS)
    assert third.manifest_digest == first.manifest_digest

    # Anything that is content changes the digest: the epoch, a byte, a mode.
    assert oci.build_image(tmp_path / "d", [tree], epoch=1, **BUILD_OPTS).manifest_digest != first.manifest_digest
    os.chmod(copy / "etc/ssh/ssh_config", 0o640)
    assert oci.build_image(tmp_path / "e", [copy], **BUILD_OPTS).manifest_digest != first.manifest_digest


def test_cli_build_prints_the_manifest_digest_and_digest_reads_it_back(tree, tmp_path):
    args = ["build", "--layer", tree, "--env", "A=1", "--entrypoint", '["/usr/bin/tool"]', "--cmd", '["x"]',
            "--workdir", "/srv", "--label", "k=v", "--output", tmp_path / "out"]
    built = run_cli(*args).stdout.strip()
    assert DIGEST.match(built)
    assert run_cli("build", *args[1:-1], tmp_path / "again").stdout.strip() == built
    assert run_cli("digest", tmp_path / "out").stdout.strip() == built
    assert run_cli("verify", tmp_path / "out").stdout.strip() == built


def test_layout_is_valid_per_the_image_spec(oci, tree, tmp_path):
    base = tmp_path / "base"
    (base / "etc").mkdir(parents=True)
    (base / "etc" / "os-release").write_text("ID=debian\n")
    layout = tmp_path / "layout"
    result = oci.build_image(layout, [base, tree], epoch=1_700_000_000, ref_name="fleet:1", **BUILD_OPTS)

    assert json.loads((layout / "oci-layout").read_bytes()) == {"imageLayoutVersion": "1.0.0"}
    index, manifest, config = load_image(layout)
    assert index["schemaVersion"] == 2 and index["mediaType"] == MT_INDEX
    assert len(index["manifests"]) == 1
    desc = index["manifests"][0]
    assert desc["mediaType"] == MT_MANIFEST
    assert desc["annotations"] == {"org.opencontainers.image.ref.name": "fleet:1"}
    assert desc["digest"] == result.manifest_digest

    # Every descriptor: digest and size recomputed from the file on disk.
    descriptors = [desc, manifest["config"], *manifest["layers"]]
    for d in descriptors:
        assert DIGEST.match(d["digest"])
        path = blob(layout, d["digest"])
        assert sha256_file(path) == d["digest"]
        assert path.stat().st_size == d["size"]
    # Nothing else in blobs/ (no temporary files left behind).
    assert sorted(p.name for p in (layout / "blobs" / "sha256").iterdir()) == sorted({d["digest"][7:] for d in descriptors})

    assert manifest["schemaVersion"] == 2
    assert manifest["mediaType"] == MT_MANIFEST
    assert manifest["config"]["mediaType"] == MT_CONFIG
    assert [x["mediaType"] for x in manifest["layers"]] == [MT_LAYER, MT_LAYER]

    assert config["architecture"] == "amd64" and config["os"] == "linux"
    assert config["created"] == "2023-11-14T22:13:20Z"
    assert config["rootfs"]["type"] == "layers"
    assert config["config"] == {
        "Env": ["PATH=/usr/local/bin:/usr/bin:/bin", "HF_HUB_OFFLINE=1"],
        "Entrypoint": ["/usr/bin/tool"],
        "Cmd": ["--serve", "--port", "8000"],
        "WorkingDir": "/srv",
        "Labels": {"org.opencontainers.image.title": "fleet-test", "fleet.role": "engine"},
    }
    # diff_ids: sha256 of each decompressed layer, in layer order.
    for layer, diff_id in zip(manifest["layers"], config["rootfs"]["diff_ids"], strict=True):
        path = blob(layout, layer["digest"])
        with gzip.open(path, "rb") as fh:
            assert "sha256:" + hashlib.sha256(fh.read()).hexdigest() == diff_id
        header = path.read_bytes()[:10]
        assert header[:3] == b"\x1f\x8b\x08"
        assert header[3] == 0, "no FNAME/FEXTRA/FCOMMENT in the gzip header"
        assert header[4:8] == b"\0\0\0\0", "gzip header mtime must be 0"
    assert oci.verify_layout(layout) == []


def test_links_modes_owners_and_special_files_survive_extraction(oci, tree, tmp_path):
    result = oci.build_image(tmp_path / "layout", [tree], epoch=86400)
    members = extract(blob(tmp_path / "layout", result.layers[0].digest), tmp_path / "x")
    out = tmp_path / "x"
    names = [m.name for m in members]

    # Sorted, pre-order, no root entry and no "./" prefix.
    assert names[0] == "big.bin" and "etc" in names and not any(n.startswith(("./", "/")) for n in names)
    assert names.index("usr") < names.index("usr/bin") < names.index("usr/bin/relative-link") < names.index("usr/bin/tool")
    assert all(m.mtime == 86400 for m in members)
    assert all(m.uname == "" and m.gname == "" for m in members)

    for src in sorted(tree.rglob("*")):
        rel = src.relative_to(tree)
        dst = out / rel
        s, d = src.lstat(), dst.lstat()
        assert stat.S_IFMT(s.st_mode) == stat.S_IFMT(d.st_mode), rel
        if not src.is_symlink():
            assert stat.S_IMODE(s.st_mode) == stat.S_IMODE(d.st_mode), rel
        if os.geteuid() == 0:
            assert (s.st_uid, s.st_gid) == (d.st_uid, d.st_gid), rel
        if src.is_symlink():
            assert os.readlink(dst) == os.readlink(src)
        elif src.is_file():
            assert dst.read_bytes() == src.read_bytes(), rel

    assert os.access(out / "usr/bin/tool", os.X_OK)
    assert stat.S_IMODE((out / "usr/bin/setuid").stat().st_mode) == 0o4755
    assert (out / "usr/bin/tool").stat().st_ino == (out / "usr/bin/tool-hardlink").stat().st_ino
    by_name = {m.name: m for m in members}
    assert by_name["usr/bin/tool-hardlink"].islnk() and by_name["usr/bin/tool-hardlink"].linkname == "usr/bin/tool"
    assert by_name["dangling"].issym() and by_name["dangling"].linkname == "does/not/exist"
    assert by_name["fifo"].isfifo()
    assert ("d" * 60 + "/" + "e" * 60 + "/long-name-over-100-chars.txt") in by_name
    assert "etc/ünïcode-名前" in by_name


def test_device_nodes_are_kept_and_sockets_skipped_with_a_note(oci, tmp_path, monkeypatch):
    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True)
    (root / "run").mkdir()
    sock = socket.socket(socket.AF_UNIX)
    monkeypatch.chdir(root / "run")  # a relative name: AF_UNIX paths are limited to 107 bytes
    sock.bind("control.sock")
    try:
        has_dev = os.geteuid() == 0
        if has_dev:
            try:
                os.mknod(root / "dev" / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            except PermissionError:
                has_dev = False
        layer = oci.build_layer(tmp_path / "layout", root)
    finally:
        sock.close()
    assert layer.notes == ["skipped run/control.sock: a socket or other special file tar cannot hold"]
    with tarfile.open(blob(tmp_path / "layout", layer.digest), "r:gz") as tar:
        names = tar.getnames()
        assert "run/control.sock" not in names
        if has_dev:
            null = tar.getmember("dev/null")
            assert null.ischr() and (null.devmajor, null.devminor) == (1, 3)


def test_excludes_drop_paths_relative_to_the_layer_root(oci, tmp_path):
    root = tmp_path / "rootfs"
    for d in ("proc/1", "sys/class", "dev/pts", "run/lock", "etc/ssh", "var/cache/apt", "home/u/proc"):
        (root / d).mkdir(parents=True)
    for f in ("proc/1/status", "sys/class/x", "dev/pts/0", "run/lock/a", "etc/ssh/ssh_host_ed25519_key",
              "etc/ssh/ssh_host_ed25519_key.pub", "etc/ssh/sshd_config", "var/cache/apt/pkgcache.bin", "home/u/proc/keep"):
        (root / f).write_text(f)
    # A hard link whose first path is excluded still arrives, as a regular file with its content.
    os.link(root / "run/lock/a", root / "var/keep-a")
    layer = oci.build_layer(tmp_path / "layout", root,
                            excludes=["proc/*", "/sys/*", "./dev/*", "etc/ssh/ssh_host_*", "run/*", "var/cache"])
    with tarfile.open(blob(tmp_path / "layout", layer.digest), "r:gz") as tar:
        names = set(tar.getnames())
        kept = tar.getmember("var/keep-a")
        assert kept.isreg() and tar.extractfile(kept).read() == b"run/lock/a"
    # The mount points stay (empty), their contents go.
    assert {"proc", "sys", "dev", "run"} <= names
    assert not {n for n in names if n.startswith(("proc/", "sys/", "dev/", "run/"))}
    assert "etc/ssh/sshd_config" in names and not {n for n in names if "ssh_host_" in n}
    assert "var/cache" not in names and not {n for n in names if n.startswith("var/cache/")}
    assert "home/u/proc/keep" in names, "patterns are anchored at the layer root"
    assert oci.excluded("proc/1/status", ["proc/*"]) and not oci.excluded("proc", ["proc/*"])


def test_tar_and_tar_gz_files_as_layers(oci, tree, tmp_path):
    plain = tmp_path / "layer.tar"
    with tarfile.open(plain, "w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(tree / "etc", arcname="etc")
    packed = tmp_path / "layer.tar.gz"
    with open(plain, "rb") as src, gzip.GzipFile(packed, "wb", mtime=12345) as dst:
        shutil.copyfileobj(src, dst)

    from_tar = oci.build_layer(tmp_path / "layout", plain)
    assert from_tar.diff_id == sha256_file(plain)
    from_gz = oci.build_layer(tmp_path / "layout", packed)
    assert from_gz.digest == sha256_file(packed), "a gzip layer is used unchanged"
    assert from_gz.diff_id == sha256_file(plain)

    result = oci.build_image(tmp_path / "image", [tree, plain, packed])
    config = load_image(tmp_path / "image")[2]
    assert config["rootfs"]["diff_ids"][1:] == [sha256_file(plain)] * 2
    assert oci.verify_layout(tmp_path / "image") == []
    assert result.layers[2].digest == sha256_file(packed)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"cmd": "/bin/sh -c x"}, "--cmd '/bin/sh -c x': not JSON"),
    ({"entrypoint": '"/bin/sh"'}, "--entrypoint must be a JSON array of strings"),
    ({"env": ["NOVALUE"]}, "--env 'NOVALUE': expected KEY=VALUE"),
    ({"labels": ["=x"]}, "--label '=x': expected KEY=VALUE"),
])
def test_bad_build_options_are_named(oci, tree, tmp_path, kwargs, message):
    with pytest.raises(oci.OCIError, match=re.escape(message)):
        oci.build_image(tmp_path / "out", [tree], **kwargs)


def test_build_refuses_a_directory_that_is_not_a_layout_and_missing_layers(oci, tree, tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file").write_text("x")
    with pytest.raises(oci.OCIError, match="not an OCI image layout"):
        oci.build_image(tmp_path / "busy", [tree])
    proc = run_cli("build", "--layer", tmp_path / "nope", "--output", tmp_path / "out", check=False)
    assert proc.returncode == 1
    assert f"layer {tmp_path / 'nope'}: no such file or directory" in proc.stderr


def test_rebuilding_into_a_layout_replaces_its_index(oci, tree, tmp_path):
    layout = tmp_path / "layout"
    first = oci.build_image(layout, [tree])
    second = oci.build_image(layout, [tree], cmd='["other"]')
    assert first.manifest_digest != second.manifest_digest
    assert oci.manifest_descriptor(layout)["digest"] == second.manifest_digest
    assert oci.verify_layout(layout) == []


def test_verify_finds_a_tampered_blob(oci, tree, tmp_path):
    result = oci.build_image(tmp_path / "layout", [tree])
    path = blob(tmp_path / "layout", result.config_digest)
    path.write_bytes(path.read_bytes().replace(b"amd64", b"arm64"))
    problems = oci.verify_layout(tmp_path / "layout")
    assert len(problems) == 1 and problems[0].startswith("config: blob content hashes to sha256:")
    assert run_cli("verify", tmp_path / "layout", check=False).returncode == 1


def test_a_large_layer_is_streamed_not_held_in_memory(tmp_path):
    root = tmp_path / "big"
    root.mkdir()
    with open(root / "weights.bin", "wb") as fh:
        fh.truncate(256 << 20)  # sparse: 256 MiB read back as zeros
    (root / "random.bin").write_bytes(os.urandom(8 << 20))
    # Peak RSS from /proc (VmHWM), reset before the build: getrusage's ru_maxrss keeps the peak of the
    # process that forked this one (a pytest worker grown by earlier tests), since exec keeps it.
    script = (
        "import importlib.util, re, sys\n"
        f"spec = importlib.util.spec_from_file_location('ociimage', {str(OCIIMAGE)!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "open('/proc/self/clear_refs', 'w').write('5')\n"
        f"r = m.build_image({str(tmp_path / 'layout')!r}, [{str(root)!r}], level=1)\n"
        "hwm = re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read()).group(1)\n"
        "print(r.manifest_digest, hwm)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    digest, maxrss_kib = proc.stdout.split()
    assert maxrss_kib.isdigit() and int(maxrss_kib) < 100 * 1024, f"peak RSS {int(maxrss_kib) // 1024} MiB for a 264 MiB layer"
    manifest, config = load_image(tmp_path / "layout")[1:]
    with gzip.open(blob(tmp_path / "layout", manifest["layers"][0]["digest"]), "rb") as fh:
        h = hashlib.sha256()
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    assert "sha256:" + h.hexdigest() == config["rootfs"]["diff_ids"][0]


# ---------------------------------------------------------------------------------------------
# Pushing to a real registry


@pytest.mark.parametrize(("target", "expected"), [
    ("http://127.0.0.1:5000/fleet/engine:v1", ("http://127.0.0.1:5000", "127.0.0.1:5000", "fleet/engine", "v1")),
    ("http://10.0.0.1:5000/engine", ("http://10.0.0.1:5000", "10.0.0.1:5000", "engine", None)),
    ("https://mirror.example:443/a/b/c:1.2-rc_3", ("https://mirror.example:443", "mirror.example:443", "a/b/c", "1.2-rc_3")),
])
def test_parse_target(oci, target, expected):
    assert oci.parse_target(target) == expected


@pytest.mark.parametrize(("target", "message"), [
    ("127.0.0.1:5000/engine:v1", "expected http://HOST:PORT/REPO"),
    ("ftp://h:1/engine", "expected http://HOST:PORT/REPO"),
    ("http://h:1/Engine:v1", "invalid repository name 'Engine'"),
    ("http://h:1/engine:-bad", "invalid tag '-bad'"),
    ("http://h:1/engine@sha256:" + "0" * 64, "the digest comes from the layout"),
])
def test_parse_target_errors(oci, target, message):
    with pytest.raises(oci.OCIError, match=re.escape(message)):
        oci.parse_target(target)


def test_push_then_read_everything_back_by_digest(oci, tree, tmp_path, registry):
    layout = tmp_path / "layout"
    built = oci.build_image(layout, [tree], **BUILD_OPTS)
    proc = run_cli("push", layout, f"{registry.url}/fleet/engine:v1")
    reference = proc.stdout.strip()
    assert reference == f"{registry.netloc}/fleet/engine@{built.manifest_digest}"

    manifest_bytes, manifest = oci.read_manifest(layout)[1:]
    for ref in (built.manifest_digest, "v1"):
        status, headers, body = registry.get(f"/v2/fleet/engine/manifests/{ref}", {"Accept": MT_MANIFEST})
        assert status == 200
        assert headers["Content-Type"] == MT_MANIFEST
        assert headers["Docker-Content-Digest"] == built.manifest_digest
        assert "sha256:" + hashlib.sha256(body).hexdigest() == built.manifest_digest
        assert body == manifest_bytes
    for d in [manifest["config"], *manifest["layers"]]:
        status, headers, body = registry.get(f"/v2/fleet/engine/blobs/{d['digest']}")
        assert status == 200
        assert len(body) == d["size"]
        assert "sha256:" + hashlib.sha256(body).hexdigest() == d["digest"]
    config = json.loads(registry.get(f"/v2/fleet/engine/blobs/{manifest['config']['digest']}")[2])
    layer_body = registry.get(f"/v2/fleet/engine/blobs/{manifest['layers'][0]['digest']}")[2]
    assert "sha256:" + hashlib.sha256(gzip.decompress(layer_body)).hexdigest() == config["rootfs"]["diff_ids"][0]


def test_second_push_skips_the_blobs_the_registry_has(oci, tree, tmp_path, registry):
    layout = tmp_path / "layout"
    built = oci.build_image(layout, [tree], cmd='["one"]')
    blobs = {built.config_digest, *(x.digest for x in built.layers)}
    log_before = len(registry.access_log())

    first = oci.push(layout, f"{registry.url}/fleet/skip:1")
    assert set(first.uploaded) == blobs and first.skipped == []
    methods = Counter(req[0] for req in first.requests)
    assert methods == Counter({"GET": 1, "HEAD": 2, "POST": 2, "PUT": 3})

    second = oci.push(layout, f"{registry.url}/fleet/skip:1")
    assert second.uploaded == [] and set(second.skipped) == blobs
    assert second.reference == first.reference
    assert Counter(req[0] for req in second.requests) == Counter({"GET": 1, "HEAD": 2, "PUT": 1})
    assert [req[1] for req in second.requests if req[0] == "PUT"] == ["/v2/fleet/skip/manifests/1"]

    # The registry's own access log agrees: one upload session per blob, all of them in the first push.
    manifest_put = ("PUT", "/v2/fleet/skip/manifests/1", 201)
    received = registry.access_log(after=log_before, until=lambda lines: lines.count(manifest_put) >= 2)
    assert sum(1 for req in received if req[0] == "POST" and req[1].startswith("/v2/fleet/skip/blobs/uploads/")) == 2
    assert received.count(manifest_put) == 2
    assert sum(1 for req in received if req[0] == "PUT" and "/blobs/uploads/" in req[1]) == 2

    # A second image on the same base layer uploads only what is new.
    extra = tmp_path / "extra"
    (extra / "srv").mkdir(parents=True)
    (extra / "srv" / "app.py").write_text("print('hi')\n")
    oci.build_image(tmp_path / "layout2", [tree, extra], cmd='["two"]')
    third = oci.push(tmp_path / "layout2", f"{registry.url}/fleet/skip:2")
    assert built.layers[0].digest in third.skipped
    assert len(third.uploaded) == 2  # the new layer and the new config


def test_push_without_a_tag_pushes_by_digest(oci, tree, tmp_path, registry):
    built = oci.build_image(tmp_path / "layout", [tree])
    result = oci.push(tmp_path / "layout", f"{registry.url}/fleet/untagged")
    assert result.reference == f"{registry.netloc}/fleet/untagged@{built.manifest_digest}"
    assert result.requests[-1] == ("PUT", f"/v2/fleet/untagged/manifests/{built.manifest_digest}", 201)
    assert registry.get(f"/v2/fleet/untagged/manifests/{built.manifest_digest}", {"Accept": MT_MANIFEST})[0] == 200


def test_a_registry_that_is_down_gives_a_clear_error(oci, tree, tmp_path):
    oci.build_image(tmp_path / "layout", [tree])
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(oci.OCIError) as err:
        oci.push(tmp_path / "layout", f"{url}/fleet/engine:v1")
    assert str(err.value) == f"registry {url}: connection refused"
    proc = run_cli("push", tmp_path / "layout", f"{url}/fleet/engine:v1", check=False)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip() == f"ociimage: registry {url}: connection refused"


def test_a_blob_the_registry_rejects_names_url_request_and_status(oci, tree, tmp_path, registry):
    built = oci.build_image(tmp_path / "layout", [tree])
    path = blob(tmp_path / "layout", built.layers[0].digest)
    data = bytearray(path.read_bytes())
    data[-9] ^= 0xFF  # same size, other content: the registry computes another digest
    path.write_bytes(bytes(data))
    with pytest.raises(oci.OCIError) as err:
        oci.push(tmp_path / "layout", f"{registry.url}/fleet/tampered:1")
    message = str(err.value)
    assert message.startswith(f"registry {registry.url}: PUT /v2/fleet/tampered/blobs/uploads/")
    assert "HTTP 400 Bad Request" in message and "DIGEST_INVALID" in message


@pytest.mark.parametrize("scenario", ["relative-location", "no-digest-header", "wrong-digest", "not-a-registry", "auth"])
def test_push_against_a_scripted_registry(oci, tree, tmp_path, scenario):
    """Answers the real registry does not give: relative Location, no Docker-Content-Digest, a wrong
    one, a server without /v2/, one that wants a login."""
    store = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def reply(self, status, headers=None, body=b""):
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def body(self):
            return self.rfile.read(int(self.headers.get("Content-Length", 0)))

        def do_GET(self):
            if scenario == "not-a-registry":
                return self.reply(404, body=b"404 page not found\n")
            if scenario == "auth":
                return self.reply(401, {"WWW-Authenticate": 'Bearer realm="x"'},
                                  b'{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}')
            return self.reply(200, body=b"{}")

        def do_HEAD(self):
            digest = self.path.rsplit("/", 1)[-1]
            self.reply(200 if digest in store else 404)

        def do_POST(self):
            self.body()
            self.reply(202, {"Location": "uploads/abc?_state=1" if scenario == "relative-location" else
                             f"http://127.0.0.1:{port}/v2/r/blobs/uploads/abc?_state=1"})

        def do_PUT(self):
            data = self.body()
            digest = "sha256:" + hashlib.sha256(data).hexdigest()
            if "/blobs/uploads/" in self.path:
                assert self.path.startswith("/v2/r/blobs/uploads/abc?_state=1&digest=sha256%3A")
                store[digest] = data
                return self.reply(201, {"Docker-Content-Digest": digest})
            store[digest] = data
            headers = {} if scenario == "no-digest-header" else {
                "Docker-Content-Digest": "sha256:" + "f" * 64 if scenario == "wrong-digest" else digest}
            return self.reply(201, headers)

    port = free_port()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        built = oci.build_image(tmp_path / "layout", [tree])
        url = f"http://127.0.0.1:{port}"
        if scenario in ("relative-location", "no-digest-header"):
            result = oci.push(tmp_path / "layout", f"{url}/r:t")
            assert result.reference == f"127.0.0.1:{port}/r@{built.manifest_digest}"
            if scenario == "no-digest-header":
                assert result.requests[-1] == ("HEAD", f"/v2/r/manifests/{built.manifest_digest}", 200)
            return
        with pytest.raises(oci.OCIError) as err:
            oci.push(tmp_path / "layout", f"{url}/r:t")
        expected = {
            "wrong-digest": f"registry {url}: PUT /v2/r/manifests/t: registry says the manifest is sha256:{'f' * 64}, "
                            f"the layout says {built.manifest_digest}",
            "not-a-registry": f"registry {url}: GET /v2/: HTTP 404 Not Found (404 page not found)",
            "auth": f"registry {url}: GET /v2/: HTTP 401 Unauthorized (UNAUTHORIZED: authentication required; "
                    "the registry wants authentication, which this tool does not do)",
        }[scenario]
        assert str(err.value) == expected
    finally:
        server.shutdown()
        server.server_close()


def test_a_containers_image_client_pulls_the_pushed_image_by_digest(oci, tree, tmp_path, registry, skopeo):
    """What a host's podman does: pull REGISTRY/repo@sha256:... (here skopeo, the same containers/image
    library, into a private vfs containers-storage) and unpack the layers."""
    built = oci.build_image(tmp_path / "layout", [tree], **BUILD_OPTS)
    reference = oci.push(tmp_path / "layout", f"{registry.url}/fleet/pulled:v1").reference
    store = f"[vfs@{tmp_path / 'cs-root'}+{tmp_path / 'cs-run'}]"
    proc = subprocess.run([skopeo, "copy", "--src-tls-verify=false", f"docker://{reference}", f"containers-storage:{store}fleet/pulled:v1"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    inspect = subprocess.run([skopeo, "inspect", "--config", f"containers-storage:{store}fleet/pulled:v1"],
                             capture_output=True, text=True, timeout=120, check=True)
    config = json.loads(inspect.stdout)
    assert config["config"]["Entrypoint"] == ["/usr/bin/tool"]
    assert config["rootfs"]["diff_ids"] == [x.diff_id for x in built.layers]
    unpacked = [p for p in (tmp_path / "cs-root" / "vfs" / "dir").iterdir() if (p / "usr/bin/tool").exists()]
    assert len(unpacked) == 1
    assert (unpacked[0] / "usr/bin/tool").read_bytes() == (tree / "usr/bin/tool").read_bytes()
    assert os.readlink(unpacked[0] / "usr/bin/relative-link") == "tool"
