#!/usr/bin/env python3
# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Build OCI images from directories offline and push them to a registry (test tooling, stdlib only).

    ociimage.py build --layer DIR|TAR [--layer ...] [--exclude GLOB ...] [--env K=V ...]
                      [--entrypoint JSON] [--cmd JSON] [--workdir PATH] [--user USER] [--label K=V ...]
                      [--epoch SECONDS] [--ref-name NAME] --output LAYOUT_DIR
    ociimage.py push LAYOUT_DIR http://HOST:PORT/REPO[:TAG]
    ociimage.py digest LAYOUT_DIR
    ociimage.py verify LAYOUT_DIR

``build`` writes an OCI image layout (``oci-layout``, ``index.json``, ``blobs/sha256/``) holding one
image manifest for linux/amd64. Each directory layer becomes a tar with sorted entries, every mtime set
to ``--epoch``, numeric uid/gid kept and user/group names left empty, gzip-compressed with mtime 0 in its
header: the same input gives the same digests. Layers are streamed (tar -> sha256 of the tar, the
diff_id -> gzip -> sha256 of the blob -> file), so a 2 GB layer never sits in memory. It prints the
manifest digest.

``push`` speaks the Docker Registry HTTP API V2 / OCI distribution API over http.client: a blob the
registry already has (HEAD) is skipped, every other one is uploaded with POST + one monolithic PUT,
then the manifest is PUT and the registry's Docker-Content-Digest is checked. It prints
``HOST:PORT/REPO@sha256:...``, the reference a host pulls by digest. Python 3.9+.
"""

import argparse
import fnmatch
import gzip
import hashlib
import http.client
import json
import os
import re
import stat
import sys
import tarfile
import tempfile
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
REF_NAME = "org.opencontainers.image.ref.name"
LAYOUT_VERSION = "1.0.0"
CHUNK = 1 << 20
TAR_BLOCK = 512
TAR_RECORD = 20 * TAR_BLOCK
DEFAULT_GZIP_LEVEL = 6
# Repository and tag grammar of the distribution spec (names are lower case, path components joined by "/").
REPO_RE = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")
TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


class OCIError(Exception):
    """A failure the command line reports as one line, without a traceback."""


# ---------------------------------------------------------------------------------------------
# Streaming plumbing


class _HashingSink:
    """Counts and sha256-hashes every byte on its way to ``sink`` (None: hash only)."""

    def __init__(self, sink=None):
        self.sink = sink
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data) -> int:
        self.sha.update(data)
        self.size += len(data)
        if self.sink is not None:
            self.sink.write(data)
        return len(data)

    def flush(self) -> None:
        if self.sink is not None:
            self.sink.flush()

    @property
    def digest(self) -> str:
        return "sha256:" + self.sha.hexdigest()


class _TarWriter:
    """A tar stream written header by header with ``TarInfo.tobuf`` (PAX format), never seeking.

    tarfile.TarFile would do, but it keeps every member in a list; a root filesystem has 10^5 of them.
    """

    def __init__(self, sink):
        self.sink = sink
        self.pos = 0
        self._buf = bytearray()

    def _out(self, data) -> None:
        self.pos += len(data)
        if len(data) >= CHUNK:
            self.flush()
            self.sink.write(data)
            return
        self._buf += data
        if len(self._buf) >= CHUNK:
            self.flush()

    def flush(self) -> None:
        if self._buf:
            self.sink.write(bytes(self._buf))
            self._buf.clear()

    def add(self, info: tarfile.TarInfo, fileobj=None, where: str = "") -> None:
        self._out(info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape"))
        if info.isreg() and info.size:
            remaining = info.size
            while remaining:
                chunk = fileobj.read(min(CHUNK, remaining))
                if not chunk:
                    raise OCIError(f"{where or info.name}: file shrank while it was being read")
                self._out(chunk)
                remaining -= len(chunk)
            self._out(b"\0" * (-info.size % TAR_BLOCK))

    def close(self) -> None:
        # End of archive: two zero blocks, padded to a full record as GNU tar and tarfile do.
        self._out(b"\0" * (2 * TAR_BLOCK))
        self._out(b"\0" * (-self.pos % TAR_RECORD))
        self.flush()


# ---------------------------------------------------------------------------------------------
# Layers


@dataclass
class Layer:
    digest: str  # sha256 of the gzip blob
    size: int  # bytes of the gzip blob
    diff_id: str  # sha256 of the uncompressed tar
    source: str = ""
    entries: int = 0
    notes: list = field(default_factory=list)

    def descriptor(self) -> dict:
        return {"mediaType": MT_LAYER_GZIP, "digest": self.digest, "size": self.size}


def _normalise_pattern(pattern: str) -> str:
    pattern = pattern.strip()
    while pattern.startswith("./"):
        pattern = pattern[2:]
    return pattern.lstrip("/").rstrip("/")


def excluded(relpath: str, patterns) -> bool:
    """Whether a path relative to the layer root matches one of the --exclude globs.

    fnmatch's ``*`` crosses ``/``: ``proc/*`` drops everything under proc/ but keeps proc itself, and a
    pattern naming a directory (``run``) drops it with its whole subtree (the walk prunes it).
    """
    return any(fnmatch.fnmatchcase(relpath, p) for p in patterns)


def _tarinfo(name: str, st: os.stat_result, epoch: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode = stat.S_IMODE(st.st_mode)
    info.uid, info.gid = st.st_uid, st.st_gid
    # Names would come from this build machine's passwd/group, not the image's: leave them empty.
    info.uname = info.gname = ""
    info.mtime = epoch
    return info


def walk_layer(root: Path, excludes=(), epoch: int = 0, notes: Optional[list] = None):
    """Yield (TarInfo, path or None) for every entry under ``root``: pre-order, each directory's
    entries sorted by their byte names, symlinks not followed, the root itself not included."""
    notes = notes if notes is not None else []
    patterns = [_normalise_pattern(p) for p in excludes if _normalise_pattern(p)]
    first_link = {}  # (st_dev, st_ino) -> name of the first path of a hard-linked file

    def walk(directory: Path, prefix: str):
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: os.fsencode(e.name))
        except OSError as exc:
            raise OCIError(f"{directory}: cannot list: {exc.strerror or exc}") from exc
        for entry in entries:
            name = prefix + entry.name
            if excluded(name, patterns):
                continue
            path = Path(entry.path)
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError as exc:
                raise OCIError(f"{path}: {exc.strerror or exc}") from exc
            info = _tarinfo(name, st, epoch)
            mode = st.st_mode
            if stat.S_ISDIR(mode):
                info.type = tarfile.DIRTYPE
                yield info, None
                yield from walk(path, name + "/")
            elif stat.S_ISREG(mode):
                key = (st.st_dev, st.st_ino)
                if st.st_nlink > 1 and key in first_link:
                    info.type = tarfile.LNKTYPE
                    info.linkname = first_link[key]
                    yield info, None
                    continue
                if st.st_nlink > 1:
                    first_link[key] = name
                info.type = tarfile.REGTYPE
                info.size = st.st_size
                yield info, path
            elif stat.S_ISLNK(mode):
                info.type = tarfile.SYMTYPE
                info.linkname = os.readlink(path)
                yield info, None
            elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
                info.type = tarfile.CHRTYPE if stat.S_ISCHR(mode) else tarfile.BLKTYPE
                info.devmajor, info.devminor = os.major(st.st_rdev), os.minor(st.st_rdev)
                yield info, None
            elif stat.S_ISFIFO(mode):
                info.type = tarfile.FIFOTYPE
                yield info, None
            else:
                notes.append(f"skipped {name}: a socket or other special file tar cannot hold")

    yield from walk(root, "")


def _write_dir_tar(root: Path, sink, excludes, epoch: int, notes: list) -> int:
    tar = _TarWriter(sink)
    count = 0
    for info, path in walk_layer(root, excludes, epoch, notes):
        if path is None:
            tar.add(info)
        else:
            try:
                with open(path, "rb") as fh:
                    tar.add(info, fh, where=str(path))
            except OSError as exc:
                raise OCIError(f"{path}: {exc.strerror or exc}") from exc
        count += 1
    tar.close()
    return count


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


def _copy(src, dst) -> None:
    while True:
        chunk = src.read(CHUNK)
        if not chunk:
            return
        dst.write(chunk)


class _BlobWriter:
    """A temporary file in blobs/sha256/ renamed to its digest once complete (a killed build leaves no
    blob under a wrong name)."""

    def __init__(self, layout: Path):
        self.dir = layout / "blobs" / "sha256"
        self.dir.mkdir(parents=True, exist_ok=True)
        fd, self.tmp = tempfile.mkstemp(prefix=".tmp-", dir=self.dir)
        self.file = os.fdopen(fd, "wb", buffering=CHUNK)
        self.hasher = _HashingSink(self.file)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if not self.file.closed:
            self.file.close()
        if exc_type is not None and os.path.exists(self.tmp):
            os.unlink(self.tmp)
        return False

    def commit(self) -> tuple:
        self.file.close()
        digest = self.hasher.digest
        os.chmod(self.tmp, 0o644)
        os.replace(self.tmp, self.dir / digest.split(":", 1)[1])
        return digest, self.hasher.size


def write_blob(layout: Path, data: bytes) -> tuple:
    with _BlobWriter(layout) as blob:
        blob.hasher.write(data)
        return blob.commit()


def build_layer(layout: Path, source, excludes=(), epoch: int = 0, level: int = DEFAULT_GZIP_LEVEL) -> Layer:
    """Turn a directory, a tar or a tar.gz into a gzip layer blob in ``layout``.

    A directory is tarred deterministically (excludes apply); a plain tar is compressed as it is; a
    gzip file is taken as the blob unchanged (its diff_id read by decompressing it). Excludes do not
    apply to tar inputs.
    """
    source = Path(source)
    layer = Layer("", 0, "", source=str(source))
    if not source.exists():
        raise OCIError(f"layer {source}: no such file or directory")
    with _BlobWriter(layout) as blob:
        if source.is_dir():
            # mtime=0 and no file name: the gzip header is the same on every run.
            with gzip.GzipFile(filename="", mode="wb", fileobj=blob.hasher, compresslevel=level, mtime=0) as gz:
                diff = _HashingSink(gz)
                layer.entries = _write_dir_tar(source, diff, excludes, epoch, layer.notes)
        elif _is_gzip(source):
            with open(source, "rb") as fh:
                _copy(fh, blob.hasher)
            diff = _HashingSink()
            try:
                with gzip.open(source, "rb") as fh:
                    _copy(fh, diff)
            except (OSError, EOFError, gzip.BadGzipFile) as exc:
                raise OCIError(f"layer {source}: not a readable gzip file: {exc}") from exc
        else:
            if not tarfile.is_tarfile(source):
                raise OCIError(f"layer {source}: neither a directory, a tar nor a gzip-compressed tar")
            with gzip.GzipFile(filename="", mode="wb", fileobj=blob.hasher, compresslevel=level, mtime=0) as gz:
                diff = _HashingSink(gz)
                with open(source, "rb") as fh:
                    _copy(fh, diff)
        layer.diff_id = diff.digest
        layer.digest, layer.size = blob.commit()
    return layer


# ---------------------------------------------------------------------------------------------
# Image


def canonical_json(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _rfc3339(epoch: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _pairs(items, what: str) -> list:
    out = []
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise OCIError(f"{what} {item!r}: expected KEY=VALUE")
        out.append((key, value))
    return out


def _argv(value, what: str):
    """None, a list of strings, or a JSON array of strings (as on the command line)."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise OCIError(f"{what} {value!r}: not JSON ({exc.msg}); give a JSON array such as '[\"/bin/sh\", \"-c\"]'") from exc
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise OCIError(f"{what} must be a JSON array of strings, got {value!r}")
    return value


def image_config(diff_ids, *, env=(), entrypoint=None, cmd=None, workdir=None, user=None, labels=(),
                 epoch: int = 0, architecture: str = "amd64", os_name: str = "linux") -> dict:
    config = {}
    env_pairs = _pairs(env, "--env")
    if env_pairs:
        config["Env"] = [f"{k}={v}" for k, v in env_pairs]
    entrypoint, cmd = _argv(entrypoint, "--entrypoint"), _argv(cmd, "--cmd")
    if entrypoint is not None:
        config["Entrypoint"] = entrypoint
    if cmd is not None:
        config["Cmd"] = cmd
    if workdir:
        config["WorkingDir"] = workdir
    if user:
        config["User"] = user
    label_pairs = dict(labels) if isinstance(labels, dict) else dict(_pairs(labels, "--label"))
    if label_pairs:
        config["Labels"] = label_pairs
    return {
        "created": _rfc3339(epoch),
        "architecture": architecture,
        "os": os_name,
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": list(diff_ids)},
    }


@dataclass
class BuildResult:
    manifest_digest: str
    manifest_size: int
    config_digest: str
    layers: list


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def build_image(output, layers, *, excludes=(), env=(), entrypoint=None, cmd=None, workdir=None, user=None,
                labels=(), epoch: int = 0, ref_name: Optional[str] = None, architecture: str = "amd64",
                level: int = DEFAULT_GZIP_LEVEL, log=None) -> BuildResult:
    """Build an image layout in ``output`` from ``layers`` (directories, tars, tar.gz files).

    An existing layout in ``output`` is reused: its blobs stay (content addressed) and index.json is
    replaced so that it names only the new image.
    """
    output = Path(output)
    if not layers:
        raise OCIError("build needs at least one --layer")
    if output.exists() and any(output.iterdir()) and not (output / "oci-layout").is_file():
        raise OCIError(f"{output}: exists and is not an OCI image layout; give an empty or new directory")
    (output / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    _write_atomic(output / "oci-layout", canonical_json({"imageLayoutVersion": LAYOUT_VERSION}))
    built = []
    for source in layers:
        started = time.monotonic()
        layer = build_layer(output, source, excludes, epoch, level)
        built.append(layer)
        if log:
            for note in layer.notes:
                log(f"layer {source}: {note}")
            log(f"layer {source}: {layer.digest} {layer.size} bytes (diff_id {layer.diff_id}, {layer.entries} entries, "
                f"{time.monotonic() - started:.1f}s)")
    config = image_config([x.diff_id for x in built], env=env, entrypoint=entrypoint, cmd=cmd, workdir=workdir,
                          user=user, labels=labels, epoch=epoch, architecture=architecture)
    config_digest, config_size = write_blob(output, canonical_json(config))
    manifest = {
        "schemaVersion": 2,
        "mediaType": MT_MANIFEST,
        "config": {"mediaType": MT_CONFIG, "digest": config_digest, "size": config_size},
        "layers": [x.descriptor() for x in built],
    }
    manifest_digest, manifest_size = write_blob(output, canonical_json(manifest))
    descriptor = {"mediaType": MT_MANIFEST, "digest": manifest_digest, "size": manifest_size}
    if ref_name:
        descriptor["annotations"] = {REF_NAME: ref_name}
    index = {"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": [descriptor]}
    _write_atomic(output / "index.json", canonical_json(index))
    return BuildResult(manifest_digest, manifest_size, config_digest, built)


# ---------------------------------------------------------------------------------------------
# Reading a layout


def blob_path(layout, digest: str) -> Path:
    if not DIGEST_RE.match(digest or ""):
        raise OCIError(f"{layout}: unsupported or malformed digest {digest!r}")
    return Path(layout) / "blobs" / "sha256" / digest.split(":", 1)[1]


def _load_json(path: Path, what: str):
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError as exc:
        raise OCIError(f"{path}: missing ({what})") from exc
    except (OSError, ValueError) as exc:
        raise OCIError(f"{path}: unreadable {what}: {exc}") from exc


def manifest_descriptor(layout, ref_name: Optional[str] = None) -> dict:
    """The index.json descriptor of the layout's image manifest (the one named ``ref_name``, if given)."""
    layout = Path(layout)
    index = _load_json(layout / "index.json", "OCI layout index")
    manifests = [m for m in index.get("manifests", []) if m.get("mediaType") == MT_MANIFEST]
    if ref_name is not None:
        manifests = [m for m in manifests if (m.get("annotations") or {}).get(REF_NAME) == ref_name]
    if len(manifests) != 1:
        which = f" named {ref_name!r}" if ref_name else ""
        raise OCIError(f"{layout}: index.json lists {len(manifests)} image manifests{which}, expected exactly one")
    return manifests[0]


def read_manifest(layout, ref_name: Optional[str] = None) -> tuple:
    """(descriptor, manifest bytes, manifest dict) of the layout's image."""
    desc = manifest_descriptor(layout, ref_name)
    path = blob_path(layout, desc["digest"])
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise OCIError(f"{path}: manifest blob missing: {exc.strerror or exc}") from exc
    return desc, raw, json.loads(raw)


def file_digest(path) -> tuple:
    sha, size = hashlib.sha256(), 0
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(CHUNK)
            if not chunk:
                break
            sha.update(chunk)
            size += len(chunk)
    return "sha256:" + sha.hexdigest(), size


def verify_layout(layout, ref_name: Optional[str] = None) -> list:
    """Recompute every referenced blob's digest and size, and every layer's diff_id. Returns problems."""
    problems = []
    desc, raw, manifest = read_manifest(layout, ref_name)
    descriptors = [("manifest", desc), ("config", manifest["config"])]
    descriptors += [(f"layer {i}", d) for i, d in enumerate(manifest.get("layers", []))]
    for what, d in descriptors:
        path = blob_path(layout, d["digest"])
        if not path.is_file():
            problems.append(f"{what}: blob {d['digest']} missing")
            continue
        digest, size = file_digest(path)
        if digest != d["digest"]:
            problems.append(f"{what}: blob content hashes to {digest}, named {d['digest']}")
        if size != d["size"]:
            problems.append(f"{what}: {size} bytes, descriptor says {d['size']}")
    if problems:
        return problems
    config = json.loads(blob_path(layout, manifest["config"]["digest"]).read_bytes())
    diff_ids = config.get("rootfs", {}).get("diff_ids", [])
    if len(diff_ids) != len(manifest["layers"]):
        problems.append(f"config lists {len(diff_ids)} diff_ids for {len(manifest['layers'])} layers")
        return problems
    for i, (d, diff_id) in enumerate(zip(manifest["layers"], diff_ids)):
        sink = _HashingSink()
        with gzip.open(blob_path(layout, d["digest"]), "rb") as fh:
            _copy(fh, sink)
        if sink.digest != diff_id:
            problems.append(f"layer {i}: uncompressed tar hashes to {sink.digest}, config diff_id says {diff_id}")
    return problems


# ---------------------------------------------------------------------------------------------
# Registry


def parse_target(target: str) -> tuple:
    """``http://HOST:PORT/REPO[:TAG]`` -> (base URL, netloc, repo, tag or None)."""
    parts = urllib.parse.urlsplit(target)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise OCIError(f"{target!r}: expected http://HOST:PORT/REPO[:TAG]")
    if parts.query or parts.fragment:
        raise OCIError(f"{target!r}: no query or fragment allowed")
    ref = parts.path.strip("/")
    if "@" in ref:
        raise OCIError(f"{target!r}: push names a tag (or none); the digest comes from the layout")
    repo, tag = ref, None
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        repo, tag = ref.rsplit(":", 1)
        if not TAG_RE.match(tag):
            raise OCIError(f"{target!r}: invalid tag {tag!r}")
    if not REPO_RE.match(repo):
        raise OCIError(f"{target!r}: invalid repository name {repo!r} (lower case letters, digits, separators . _ - /)")
    return f"{parts.scheme}://{parts.netloc}", parts.netloc, repo, tag


def _error_detail(body: bytes) -> str:
    try:
        errors = json.loads(body).get("errors") or []
        text = "; ".join(f"{e.get('code')}: {e.get('message')}" + (f" ({e['detail']})" if e.get("detail") else "") for e in errors)
    except (ValueError, AttributeError, TypeError):
        text = body.decode("utf-8", "replace").strip()
    return text[:500]


class RegistryClient:
    """A keep-alive http.client connection to one registry, recording (method, path, status) per request."""

    def __init__(self, base: str, timeout: float = 300.0):
        self.base = base.rstrip("/")
        parts = urllib.parse.urlsplit(self.base)
        self.scheme, self.netloc = parts.scheme, parts.netloc
        self.host, self.port = parts.hostname, parts.port
        self.timeout = timeout
        self.conn = None
        self.requests = []

    def _connection(self):
        if self.conn is None:
            cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
            self.conn = cls(self.host, self.port, timeout=self.timeout)
        return self.conn

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def fail(self, method: str, path: str, message: str):
        raise OCIError(f"registry {self.base}: {method} {path.split('?', 1)[0]}: {message}")

    def request(self, method: str, path: str, headers=None, body=None, body_size: Optional[int] = None) -> tuple:
        """Send one request; ``body`` is bytes or a binary file of ``body_size`` bytes streamed in chunks.
        Returns (status, headers, body bytes). A keep-alive connection the server dropped is retried once."""
        headers = dict(headers or {})
        for attempt in (1, 2):
            reused = self.conn is not None
            conn = self._connection()
            try:
                conn.putrequest(method, path, skip_accept_encoding=True)
                for key, value in headers.items():
                    conn.putheader(key, value)
                if body is not None:
                    size = len(body) if isinstance(body, (bytes, bytearray)) else body_size
                    conn.putheader("Content-Length", str(size))
                conn.endheaders()
                if body is not None:
                    try:
                        self._send_body(conn, body)
                    except (BrokenPipeError, ConnectionResetError):
                        # The registry may answer (e.g. 400) and close before taking the whole body:
                        # report its answer rather than the broken pipe, when there is one.
                        resp = conn.getresponse()
                        reused = False
                    else:
                        resp = conn.getresponse()
                else:
                    resp = conn.getresponse()
                data = resp.read()
            except ConnectionRefusedError:
                self.close()
                raise OCIError(f"registry {self.base}: connection refused") from None
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                self.close()
                if reused and attempt == 1 and (body is None or isinstance(body, (bytes, bytearray)) or body.seekable()):
                    if body is not None and not isinstance(body, (bytes, bytearray)):
                        body.seek(0)
                    continue
                self.fail(method, path, f"connection lost: {exc}")
            except TimeoutError:
                self.close()
                self.fail(method, path, f"no answer within {self.timeout:g}s")
            except OSError as exc:
                self.close()
                raise OCIError(f"registry {self.base}: {exc.strerror or exc}") from None
            self.requests.append((method, path.split("?", 1)[0], resp.status))
            if resp.will_close:
                self.close()
            return resp.status, resp.headers, data
        raise AssertionError("unreachable")

    @staticmethod
    def _send_body(conn, body) -> None:
        if isinstance(body, (bytes, bytearray)):
            conn.send(body)
            return
        while True:
            chunk = body.read(CHUNK)
            if not chunk:
                return
            conn.send(chunk)

    def expect(self, method: str, path: str, ok, **kwargs) -> tuple:
        status, headers, data = self.request(method, path, **kwargs)
        if status not in ok:
            detail = _error_detail(data) if method != "HEAD" else ""
            if status == 401:
                detail = (detail + "; " if detail else "") + "the registry wants authentication, which this tool does not do"
            reason = http.client.responses.get(status, "")
            self.fail(method, path, f"HTTP {status} {reason}" + (f" ({detail})" if detail else ""))
        return status, headers, data


@dataclass
class PushResult:
    reference: str  # HOST:PORT/REPO@sha256:...
    digest: str
    uploaded: list
    skipped: list
    requests: list


def _upload_path(client: RegistryClient, location: str, digest: str) -> str:
    """The request path for the PUT that completes an upload: Location (absolute or relative) + digest."""
    if not location:
        client.fail("POST", "/v2/.../blobs/uploads/", "no Location header in the answer")
    url = urllib.parse.urljoin(client.base + "/", location)
    parts = urllib.parse.urlsplit(url)
    if parts.netloc != client.netloc:
        client.fail("POST", "/v2/.../blobs/uploads/", f"upload location on another host ({parts.netloc}) is not supported")
    query = (parts.query + "&" if parts.query else "") + "digest=" + urllib.parse.quote(digest, safe="")
    return (parts.path or "/") + "?" + query


def push_blob(client: RegistryClient, repo: str, layout, digest: str, size: int, log=None) -> bool:
    """Upload one blob unless the registry has it. Returns True if it was uploaded."""
    path = blob_path(layout, digest)
    status, _, _ = client.expect("HEAD", f"/v2/{repo}/blobs/{digest}", (200, 404))
    if status == 200:
        if log:
            log(f"blob {digest}: already in the registry")
        return False
    try:
        actual = path.stat().st_size
    except OSError as exc:
        raise OCIError(f"{path}: blob missing from the layout: {exc.strerror or exc}") from exc
    if actual != size:
        raise OCIError(f"{path}: {actual} bytes, the manifest says {size}")
    _, headers, _ = client.expect("POST", f"/v2/{repo}/blobs/uploads/", (202,), body=b"")
    put_path = _upload_path(client, headers.get("Location", ""), digest)
    started = time.monotonic()
    with open(path, "rb") as fh:
        _, headers, _ = client.expect("PUT", put_path, (201,), body=fh, body_size=size,
                                      headers={"Content-Type": "application/octet-stream"})
    returned = headers.get("Docker-Content-Digest")
    if returned and returned != digest:
        client.fail("PUT", put_path, f"registry stored the blob as {returned}, expected {digest}")
    if log:
        seconds = time.monotonic() - started
        log(f"blob {digest}: uploaded {size} bytes in {seconds:.1f}s")
    return True


def push(layout, target: str, *, ref_name: Optional[str] = None, timeout: float = 300.0, log=None) -> PushResult:
    """Push the layout's image to ``target`` (``http://HOST:PORT/REPO[:TAG]``; without a tag, by digest only)."""
    base, netloc, repo, tag = parse_target(target)
    desc, raw, manifest = read_manifest(layout, ref_name)
    digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    if digest != desc["digest"]:
        raise OCIError(f"{layout}: manifest blob hashes to {digest}, index.json says {desc['digest']}")
    media_type = manifest.get("mediaType") or desc.get("mediaType") or MT_MANIFEST
    client = RegistryClient(base, timeout)
    uploaded, skipped = [], []
    try:
        client.expect("GET", "/v2/", (200,))
        blobs = {}
        for d in [*manifest.get("layers", []), manifest["config"]]:
            blobs.setdefault(d["digest"], d["size"])
        for blob, size in blobs.items():
            (uploaded if push_blob(client, repo, layout, blob, size, log) else skipped).append(blob)
        reference = tag or digest
        put_path = f"/v2/{repo}/manifests/{reference}"
        _, headers, _ = client.expect("PUT", put_path, (201,), body=raw, headers={"Content-Type": media_type})
        returned = headers.get("Docker-Content-Digest")
        if returned is None:
            # The header is optional in the OCI spec: ask for the manifest by digest instead.
            client.expect("HEAD", f"/v2/{repo}/manifests/{digest}", (200,), headers={"Accept": media_type})
        elif returned != digest:
            client.fail("PUT", put_path, f"registry says the manifest is {returned}, the layout says {digest}")
        if log:
            log(f"manifest {digest} -> {base}/{repo}" + (f":{tag}" if tag else ""))
    finally:
        client.close()
    return PushResult(f"{netloc}/{repo}@{digest}", digest, uploaded, skipped, client.requests)


# ---------------------------------------------------------------------------------------------
# Command line


def _log(message: str) -> None:
    print(f"ociimage: {message}", file=sys.stderr, flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="ociimage.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    b = sub.add_parser("build", help="build an OCI image layout from directories or tar files; prints the manifest digest")
    b.add_argument("--layer", action="append", required=True, metavar="DIR|TAR", help="a layer, bottom first (repeatable)")
    b.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                   help="drop paths matching GLOB, relative to each directory layer's root, e.g. 'proc/*' (repeatable)")
    b.add_argument("--env", action="append", default=[], metavar="K=V")
    b.add_argument("--entrypoint", metavar="JSON", help="JSON array, e.g. '[\"/usr/bin/python3\"]'")
    b.add_argument("--cmd", metavar="JSON", help="JSON array")
    b.add_argument("--workdir", metavar="PATH")
    b.add_argument("--user", metavar="USER[:GROUP]")
    b.add_argument("--label", action="append", default=[], metavar="K=V")
    b.add_argument("--epoch", type=int, default=0, help="mtime of every tar entry and the config's created time (default 0)")
    b.add_argument("--architecture", default="amd64")
    b.add_argument("--ref-name", help=f"{REF_NAME} annotation in index.json (e.g. a tag)")
    b.add_argument("--gzip-level", type=int, default=DEFAULT_GZIP_LEVEL, choices=range(1, 10), metavar="1-9")
    b.add_argument("--output", required=True, metavar="LAYOUT_DIR")
    b.add_argument("--quiet", action="store_true", help="no per-layer lines on stderr")

    p = sub.add_parser("push", help="push a layout to a registry; prints HOST:PORT/REPO@sha256:...")
    p.add_argument("layout", metavar="LAYOUT_DIR")
    p.add_argument("target", metavar="http://HOST:PORT/REPO[:TAG]")
    p.add_argument("--ref-name", help="which image of the layout (index.json annotation), if it holds several")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait on one socket operation (default 300)")
    p.add_argument("--quiet", action="store_true")

    d = sub.add_parser("digest", help="print the manifest digest of a layout")
    d.add_argument("layout", metavar="LAYOUT_DIR")
    d.add_argument("--ref-name")

    v = sub.add_parser("verify", help="recompute every blob digest, size and diff_id of a layout")
    v.add_argument("layout", metavar="LAYOUT_DIR")
    v.add_argument("--ref-name")

    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            result = build_image(args.output, args.layer, excludes=args.exclude, env=args.env, entrypoint=args.entrypoint,
                                 cmd=args.cmd, workdir=args.workdir, user=args.user, labels=args.label, epoch=args.epoch,
                                 ref_name=args.ref_name, architecture=args.architecture, level=args.gzip_level,
                                 log=None if args.quiet else _log)
            print(result.manifest_digest)
        elif args.command == "push":
            result = push(args.layout, args.target, ref_name=args.ref_name, timeout=args.timeout,
                          log=None if args.quiet else _log)
            print(result.reference)
        elif args.command == "digest":
            print(manifest_descriptor(args.layout, args.ref_name)["digest"])
        elif args.command == "verify":
            problems = verify_layout(args.layout, args.ref_name)
            for problem in problems:
                _log(f"{args.layout}: {problem}")
            if problems:
                return 1
            print(manifest_descriptor(args.layout, args.ref_name)["digest"])
    except OCIError as exc:
        _log(str(exc))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
