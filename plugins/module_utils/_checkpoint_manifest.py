# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Checkpoint manifests: what a pinned Hub revision must contain (private to this collection).

A manifest is built once, when a revision is pinned, from the Hub's tree listing
(``GET /api/models/{repo}/tree/{sha}?recursive=true``).  Each listed file is
``{"type": "file", "path", "size", "oid"}`` where ``oid`` is the git blob sha1 of the content;
files stored in LFS add ``"lfs": {"oid": <sha256>, "size", "pointerSize"}``; ``"directory"``
entries are skipped.  Every later check is offline, against the manifest::

    {"format": 1, "repo_id", "requested_revision", "commit", "endpoint", "created",
     "total_bytes", "files": [{"path", "size", "git_oid", "sha256", "kind"}, ...]}

``git_oid`` is the listing's ``oid``; for an LFS file that is the blob id of the LFS pointer,
not of the content, so LFS files are checked by ``sha256`` only.  ``sha256`` is None for files
not stored in LFS (they are checked by their git blob id).  ``files`` is sorted by path.  Paths are relative, use ``/`` and never leave the revision
directory; anything else in a listing raises :class:`CheckpointError`.

Nothing here touches the network.  Pure functions, except the JSON file helpers at the end.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import posixpath
import re
import tempfile

MANIFEST_FORMAT = 1
FILE_KINDS = ("config", "generation_config", "tokenizer", "processor", "weight_index", "weight_shard",
              "code", "license", "readme", "other")

_REPO_PART_RE = re.compile(r"^[A-Za-z0-9._-]+$")
_MAX_REPO_PART = 96
_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
_GIT_OID_RE = re.compile(r"^[0-9a-fA-F]{40}$")
_SHA256_RE = re.compile(r"^[0-9a-fA-F]{64}$")
_READ_CHUNK = 8 * 1024 * 1024

_TOKENIZER_NAMES = frozenset((
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
    "added_tokens.json", "merges.txt", "chat_template.jinja", "chat_template.json",
    # SentencePiece and tiktoken models under their other common names (Kimi ships tiktoken.model).
    "tiktoken.model", "spiece.model", "sentencepiece.bpe.model",
))
# Files that hold a vocabulary: one of them is needed to tokenize at all.
_VOCABULARY_NAMES = frozenset(("tokenizer.json", "tokenizer.model", "tiktoken.model", "spiece.model",
                               "sentencepiece.bpe.model"))
_PROCESSOR_NAMES = frozenset(("preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json"))
_SHARD_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
# Shard formats whose multi-file checkpoints come with an index (``<name>.<format>.index.json``).
_INDEXED_FORMATS = (".safetensors", ".bin")


class CheckpointError(Exception):
    """A repo id, revision, tree listing or manifest that cannot be used, with the reason."""


# --------------------------------------------------------------------------------------
# Names
# --------------------------------------------------------------------------------------


def validate_repo_id(repo_id):
    """Return None when ``repo_id`` is a valid Hub model id (``name`` or ``org/name``), else
    raise CheckpointError saying why.

    Each part: 1 to 96 characters from ``[A-Za-z0-9._-]``, not starting or ending with ``-``
    or ``.``, without ``--`` or ``..``; the name must not end in ``.git``.
    """
    if not isinstance(repo_id, str) or not repo_id:
        raise CheckpointError("repo id must be a non-empty string, got %r" % (repo_id,))
    parts = repo_id.split("/")
    if len(parts) > 2:
        raise CheckpointError("repo id %r has more than one '/': use 'org/name' or 'name'" % repo_id)
    for part in parts:
        if not part:
            raise CheckpointError("repo id %r has an empty part: use 'org/name' or 'name'" % repo_id)
        if len(part) > _MAX_REPO_PART:
            raise CheckpointError("repo id %r: %r is %d characters long, at most %d are allowed"
                                  % (repo_id, part, len(part), _MAX_REPO_PART))
        if not _REPO_PART_RE.match(part):
            bad = sorted(set(ch for ch in part if not re.match(r"[A-Za-z0-9._-]", ch)))
            raise CheckpointError("repo id %r: %r holds characters outside [A-Za-z0-9._-]: %s"
                                  % (repo_id, part, " ".join(repr(ch) for ch in bad)))
        if "--" in part or ".." in part:
            raise CheckpointError("repo id %r: %r must not contain '--' or '..'" % (repo_id, part))
        if part[0] in "-." or part[-1] in "-.":
            raise CheckpointError("repo id %r: %r must not start or end with '-' or '.'" % (repo_id, part))
    if parts[-1].endswith(".git"):
        raise CheckpointError("repo id %r must not end with '.git'" % repo_id)
    return None


def is_commit_sha(revision):
    """Whether ``revision`` is a full commit sha: exactly 40 lowercase hex digits."""
    return isinstance(revision, str) and bool(_COMMIT_RE.match(revision))


def check_relative_path(path):
    """Return None when ``path`` is a safe file path inside a revision directory, else raise
    CheckpointError: it must be a non-empty relative POSIX path, without backslashes, NUL,
    empty, ``.`` or ``..`` components."""
    if not isinstance(path, str) or not path:
        raise CheckpointError("unsafe path %r: empty or not a string" % (path,))
    if "\\" in path:
        raise CheckpointError("unsafe path %r: contains a backslash" % path)
    if "\0" in path:
        raise CheckpointError("unsafe path %r: contains a NUL character" % path)
    if path.startswith("/"):
        raise CheckpointError("unsafe path %r: absolute" % path)
    for part in path.split("/"):
        if part == "..":
            raise CheckpointError("unsafe path %r: contains '..'" % path)
        if part in ("", "."):
            raise CheckpointError("unsafe path %r: empty or '.' component" % path)
    return None


def classify_path(path):
    """The kind of a repository file, from its name (see FILE_KINDS)."""
    name = posixpath.basename(path)
    lower = name.lower()
    upper = name.upper()
    if name == "config.json":
        return "config"
    if name == "generation_config.json":
        return "generation_config"
    if name in _TOKENIZER_NAMES or name.startswith("vocab.") or name.endswith(".tiktoken"):
        return "tokenizer"
    if name in _PROCESSOR_NAMES:
        return "processor"
    if name.endswith(".safetensors.index.json") or name.endswith(".bin.index.json"):
        return "weight_index"
    if lower.endswith(_SHARD_SUFFIXES):
        return "weight_shard"
    if lower.endswith(".py"):
        return "code"
    if upper.startswith(("LICENSE", "LICENCE", "COPYING")):
        return "license"
    if upper.startswith("README"):
        return "readme"
    return "other"


# --------------------------------------------------------------------------------------
# Git blob ids
# --------------------------------------------------------------------------------------


def git_blob_oid_bytes(data):
    """Git blob id (hex sha1 of ``b"blob <size>\\0" + data``) of ``data``."""
    digest = hashlib.sha1(b"blob %d\0" % len(data))
    digest.update(data)
    return digest.hexdigest()


def git_blob_oid_file(path):
    """Git blob id of the file at ``path``, read in chunks."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        digest = hashlib.sha1(b"blob %d\0" % size)
        read = 0
        while True:
            block = handle.read(_READ_CHUNK)
            if not block:
                break
            read += len(block)
            digest.update(block)
    if read != size:
        raise CheckpointError("%s changed size while it was read (%d bytes, then %d)" % (path, size, read))
    return digest.hexdigest()


# --------------------------------------------------------------------------------------
# Manifests
# --------------------------------------------------------------------------------------


def _size(value, what):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CheckpointError("%s: size must be a non-negative integer, got %r" % (what, value))
    return value


def _file_from_tree_entry(entry):
    path = entry.get("path")
    check_relative_path(path)
    size = _size(entry.get("size"), path)
    oid = entry.get("oid")
    if not isinstance(oid, str) or not _GIT_OID_RE.match(oid):
        raise CheckpointError("%s: oid must be a 40-digit hex git blob id, got %r" % (path, oid))
    sha256 = None
    lfs = entry.get("lfs")
    if lfs is not None:
        if not isinstance(lfs, dict):
            raise CheckpointError("%s: lfs must be an object, got %r" % (path, lfs))
        sha256 = lfs.get("oid")
        if not isinstance(sha256, str) or not _SHA256_RE.match(sha256):
            raise CheckpointError("%s: lfs.oid must be a 64-digit hex sha256, got %r" % (path, sha256))
        sha256 = sha256.lower()
        lfs_size = lfs.get("size", size)
        if _size(lfs_size, path + " (lfs)") != size:
            raise CheckpointError("%s: the listing gives two sizes, %d and lfs.size %d" % (path, size, lfs_size))
    return {"path": path, "size": size, "git_oid": oid.lower(), "sha256": sha256, "kind": classify_path(path)}


def _check_unique(files):
    """Raise on duplicate paths and on a path that is both a file and a directory."""
    seen = set()
    for item in files:
        if item["path"] in seen:
            raise CheckpointError("duplicate path %r in the listing" % item["path"])
        seen.add(item["path"])
    for item in files:
        parent = posixpath.dirname(item["path"])
        while parent:
            if parent in seen:
                raise CheckpointError("%r is listed both as a file and as a directory (of %r)" % (parent, item["path"]))
            parent = posixpath.dirname(parent)


def manifest_from_tree(repo_id, requested_revision, commit, entries, endpoint, created):
    """The manifest of ``commit`` from the Hub tree listing ``entries`` (a list of dicts).

    ``requested_revision`` is what the user asked for (a branch, tag or sha), ``commit`` the
    sha it resolved to, ``endpoint`` the Hub URL and ``created`` a timestamp string; they are
    recorded as given.  Raises CheckpointError for an invalid repo id or commit, an entry of
    an unknown type, unsafe or duplicate paths, or malformed sizes and ids.
    """
    validate_repo_id(repo_id)
    if not is_commit_sha(commit):
        raise CheckpointError("commit must be a full 40-digit lowercase hex sha, got %r" % (commit,))
    if not isinstance(entries, list):
        raise CheckpointError("the tree listing must be a JSON list, got %s" % type(entries).__name__)
    files = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise CheckpointError("tree entry must be an object, got %r" % (entry,))
        kind = entry.get("type")
        if kind == "directory":
            continue
        if kind != "file":
            raise CheckpointError("tree entry %r has unknown type %r" % (entry.get("path"), kind))
        files.append(_file_from_tree_entry(entry))
    files.sort(key=lambda item: item["path"])
    _check_unique(files)
    return {
        "format": MANIFEST_FORMAT,
        "repo_id": repo_id,
        "requested_revision": requested_revision,
        "commit": commit,
        "endpoint": endpoint,
        "created": created,
        "total_bytes": sum(item["size"] for item in files),
        "files": files,
    }


def validate_manifest(manifest):
    """Return None when ``manifest`` has the shape manifest_from_tree builds, else raise
    CheckpointError.  Kinds are recomputed by name when absent."""
    if not isinstance(manifest, dict):
        raise CheckpointError("a manifest must be a JSON object")
    if manifest.get("format") != MANIFEST_FORMAT:
        raise CheckpointError("unsupported manifest format %r (this version reads %d)" % (manifest.get("format"), MANIFEST_FORMAT))
    if not is_commit_sha(manifest.get("commit")):
        raise CheckpointError("manifest commit must be a full 40-digit lowercase hex sha, got %r" % (manifest.get("commit"),))
    files = manifest.get("files")
    if not isinstance(files, list):
        raise CheckpointError("manifest files must be a list")
    for item in files:
        if not isinstance(item, dict):
            raise CheckpointError("manifest file entry must be an object, got %r" % (item,))
        check_relative_path(item.get("path"))
        _size(item.get("size"), item["path"])
        git_oid = item.get("git_oid")
        sha256 = item.get("sha256")
        if sha256 is not None and (not isinstance(sha256, str) or not _SHA256_RE.match(sha256)):
            raise CheckpointError("%s: sha256 must be 64 hex digits or null, got %r" % (item["path"], sha256))
        if git_oid is not None and (not isinstance(git_oid, str) or not _GIT_OID_RE.match(git_oid)):
            raise CheckpointError("%s: git_oid must be 40 hex digits or null, got %r" % (item["path"], git_oid))
        if sha256 is None and git_oid is None:
            raise CheckpointError("%s: the manifest gives neither a sha256 nor a git_oid" % item["path"])
        if "kind" not in item:
            item["kind"] = classify_path(item["path"])
    _check_unique(files)
    return None


# --------------------------------------------------------------------------------------
# Completeness
# --------------------------------------------------------------------------------------


def _completeness(path, message):
    return {"check": "completeness", "path": path, "message": message}


def _missing_indexes(files):
    """Problems for directories with several shards of an indexed format and no index for it."""
    shards = {}
    indexes = set()
    for item in files:
        directory, name = posixpath.split(item["path"])
        if item["kind"] == "weight_index":
            for fmt in _INDEXED_FORMATS:
                if name.endswith(fmt + ".index.json"):
                    indexes.add((directory, fmt))
        elif item["kind"] == "weight_shard":
            for fmt in _INDEXED_FORMATS:
                if name.lower().endswith(fmt):
                    shards.setdefault((directory, fmt), []).append(item["path"])
    problems = []
    for (directory, fmt), paths in sorted(shards.items()):
        if len(paths) > 1 and (directory, fmt) not in indexes:
            where = directory or "the top directory"
            problems.append(_completeness(
                posixpath.join(directory, "model%s.index.json" % fmt),
                "%s holds %d %s shards but no %s.index.json that maps tensors to them"
                % (where, len(paths), fmt, fmt)))
    return problems


def completeness_problems(manifest, trust_remote_code, index_weight_map=None):
    """What a servable checkpoint needs and the manifest lacks: a list of
    ``{"check": "completeness", "path", "message"}`` (``path`` None when no single file is meant).

    * ``config.json`` in the top directory;
    * a vocabulary in the top directory (``tokenizer.json``, ``tokenizer.model``,
      ``tiktoken.model``, a SentencePiece model, ``*.tiktoken`` or ``vocab.*``);
    * at least one weight file, and an index in every directory holding more than one
      ``.safetensors`` (or ``.bin``) shard;
    * every shard named by ``index_weight_map`` (tensor name -> shard path relative to the
      revision directory; the values of the weight index's ``weight_map``);
    * with ``trust_remote_code``, at least one ``.py`` file.
    """
    files = manifest.get("files") or []
    paths = set(item["path"] for item in files)
    top = [item for item in files if "/" not in item["path"]]
    problems = []
    if "config.json" not in paths:
        problems.append(_completeness("config.json", "the revision has no config.json in its top directory"))
    if not any(item["path"] in _VOCABULARY_NAMES or item["path"].startswith("vocab.") or item["path"].endswith(".tiktoken")
               for item in top):
        problems.append(_completeness(
            None, "the revision has no tokenizer vocabulary in its top directory (tokenizer.json, tokenizer.model, "
                  "tiktoken.model, *.tiktoken or vocab.*)"))
    if not any(item["kind"] == "weight_shard" for item in files):
        problems.append(_completeness(None, "the revision has no weight files (.safetensors, .bin, .pt, .pth or .gguf)"))
    problems.extend(_missing_indexes(files))
    if index_weight_map:
        named = set()
        for tensor, shard in index_weight_map.items():
            if not isinstance(shard, str):
                problems.append(_completeness(None, "the weight index maps %r to %r, which is not a file name" % (tensor, shard)))
            else:
                named.add(shard)
        for shard in sorted(named - paths):
            problems.append(_completeness(shard, "the weight index names %s, which the revision does not have" % shard))
    if trust_remote_code and not any(item["kind"] == "code" for item in files):
        problems.append(_completeness(None, "remote code is trusted but the revision ships no code files"))
    return problems


# --------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------


def dumps_json(data):
    """The on-disk JSON form: sorted keys, indent 1, trailing newline."""
    return json.dumps(data, sort_keys=True, indent=1) + "\n"


def write_json_atomic(path, data, mode=0o644):
    """Write ``data`` as JSON to ``path`` atomically: a temporary file in the same directory,
    fsync, ``os.replace``, then fsync of the directory (best effort)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(dumps_json(data))
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def load_manifest(path):
    """The manifest at ``path``, validated; raises CheckpointError when it is missing,
    unreadable, not JSON or not a manifest."""
    try:
        with open(path) as handle:
            manifest = json.load(handle)
    except FileNotFoundError:
        raise CheckpointError("manifest %s does not exist" % path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError("cannot read manifest %s: %s" % (path, exc)) from None
    except ValueError as exc:
        raise CheckpointError("manifest %s is not valid JSON: %s" % (path, exc)) from None
    try:
        validate_manifest(manifest)
    except CheckpointError as exc:
        raise CheckpointError("manifest %s: %s" % (path, exc)) from None
    return manifest


def write_manifest_atomic(path, manifest):
    """Validate ``manifest`` and write it to ``path`` atomically (see write_json_atomic)."""
    validate_manifest(manifest)
    write_json_atomic(path, manifest)
