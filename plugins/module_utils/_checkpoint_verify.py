# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Offline verification of a revision directory against its manifest (private to this collection).

* Every manifest file must exist as a regular file (symlinks are followed) of the listed size
  and content: files stored in LFS are checked by sha256, the others by git blob id.
* Files on disk that the manifest does not list are ``extra`` (top-level directories named in
  ``ignore``, such as huggingface_hub's ``.cache``, are skipped).
* The manifest must describe a servable checkpoint (see _checkpoint_manifest.completeness_problems),
  and the weight index on disk must parse and name only files of the revision.

Hashing reads each file once with an 8 MiB buffer, computing every digest asked for in the
same pass, and runs in a bounded thread pool: hashlib releases the GIL while it digests large
buffers, so threads scale with cores and disks.

A *stamp* records, after a full successful verification, each file's size, mtime_ns, ctime_ns
and inode.  A fast (not deep) verification trusts a file whose stat still matches its record
and hashes only the others; a stamp made for another commit or another manifest is ignored.
A deep verification hashes everything.

Problems are dicts ``{"check", "path", "kind", "expected", "found", "message"}``; ``check`` is
``files`` (kinds ``missing``, ``size_mismatch``, ``hash_mismatch``, ``unreadable``,
``not_a_file``, ``extra``), ``index`` (kind ``index_unreadable``) or ``completeness`` (kind
``incomplete``).  Only the stamp and JSON writers change anything on disk.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import posixpath
import stat
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_manifest import (
    CheckpointError,
    completeness_problems,
    dumps_json,
    is_commit_sha,
    load_manifest,
    write_json_atomic,
)

STAMP_FORMAT = 1
CHUNK = 8 * 1024 * 1024
DEFAULT_IGNORE = (".cache",)


# --------------------------------------------------------------------------------------
# Hashing
# --------------------------------------------------------------------------------------


def hash_file(path, want_sha256=True, want_git_oid=False, chunk=CHUNK):
    """``{"sha256", "git_oid", "size"}`` of the file at ``path`` in one read pass; a digest
    not asked for is None and ``size`` is the number of bytes read.  Raises OSError."""
    with open(path, "rb", buffering=0) as handle:
        fd = handle.fileno()
        size = os.fstat(fd).st_size
        # A small file gets a small buffer; a file that grows meanwhile is still read to its end.
        buffer = bytearray(max(1, min(chunk, size)))
        view = memoryview(buffer)
        if hasattr(os, "posix_fadvise"):
            with contextlib.suppress(OSError):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        sha256 = hashlib.sha256() if want_sha256 else None
        sha1 = hashlib.sha1(b"blob %d\0" % size) if want_git_oid else None
        read = 0
        while True:
            count = handle.readinto(buffer)
            if not count:
                break
            block = view[:count]
            if sha256 is not None:
                sha256.update(block)
            if sha1 is not None:
                sha1.update(block)
            read += count
    if sha1 is not None and read != size:
        # The header promised ``size`` bytes: the id would be meaningless.
        raise OSError("%s changed size while it was read (%d bytes, then %d)" % (path, size, read))
    return {
        "sha256": sha256.hexdigest() if sha256 is not None else None,
        "git_oid": sha1.hexdigest() if sha1 is not None else None,
        "size": read,
    }


# --------------------------------------------------------------------------------------
# One file
# --------------------------------------------------------------------------------------


def _problem(path, kind, expected, found, message, check="files"):
    return {"check": check, "path": path, "kind": kind, "expected": expected, "found": found, "message": message}


def _file_type(mode):
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"


def _stat_entry(directory, entry):
    """``(os.stat result, None)`` or ``(None, problem)`` for a manifest entry."""
    rel = entry["path"]
    full = os.path.join(directory, rel)
    try:
        st = os.stat(full)
    except (FileNotFoundError, NotADirectoryError):
        what = "a broken symlink" if os.path.islink(full) else "missing"
        return None, _problem(rel, "missing", entry["size"], None,
                              "%s: %s (expected a file of %d bytes)" % (rel, what, entry["size"]))
    except OSError as exc:
        return None, _problem(rel, "unreadable", None, str(exc), "%s: cannot stat: %s" % (rel, exc))
    if not stat.S_ISREG(st.st_mode):
        found = _file_type(st.st_mode)
        return None, _problem(rel, "not_a_file", "file", found, "%s: is a %s, not a regular file" % (rel, found))
    if st.st_size != entry["size"]:
        return None, _problem(rel, "size_mismatch", entry["size"], st.st_size,
                              "%s: size is %d bytes, expected %d" % (rel, st.st_size, entry["size"]))
    return st, None


def _hash_entry(directory, entry):
    """``(problem or None, bytes read)`` after hashing a file whose size already matched."""
    rel = entry["path"]
    use_sha256 = entry.get("sha256") is not None
    try:
        digests = hash_file(os.path.join(directory, rel), want_sha256=use_sha256, want_git_oid=not use_sha256)
    except OSError as exc:
        return _problem(rel, "unreadable", None, str(exc), "%s: cannot read: %s" % (rel, exc)), 0
    if digests["size"] != entry["size"]:
        return _problem(rel, "size_mismatch", entry["size"], digests["size"],
                        "%s: read %d bytes, expected %d (the file changed while it was read)"
                        % (rel, digests["size"], entry["size"])), digests["size"]
    if use_sha256:
        algorithm, expected, found = "sha256", entry["sha256"].lower(), digests["sha256"]
    else:
        algorithm, expected, found = "git blob id", entry["git_oid"].lower(), digests["git_oid"]
    if found != expected:
        return _problem(rel, "hash_mismatch", expected, found,
                        "%s: %s is %s, expected %s" % (rel, algorithm, found, expected)), digests["size"]
    return None, digests["size"]


def verify_file(directory, entry):
    """None when the manifest ``entry`` matches its file under ``directory``, else a problem
    ``{"path", "kind", "expected", "found", "message", "check": "files"}`` with kind
    ``missing``, ``size_mismatch``, ``hash_mismatch``, ``unreadable`` or ``not_a_file``."""
    st, problem = _stat_entry(directory, entry)
    if st is None:
        return problem
    return _hash_entry(directory, entry)[0]


# --------------------------------------------------------------------------------------
# Stamps
# --------------------------------------------------------------------------------------


def manifest_digest(manifest):
    """sha256 of the manifest's commit and file list in their on-disk JSON form: a stamp is
    only trusted for the manifest it was made with."""
    canonical = dumps_json({"commit": manifest.get("commit"), "files": manifest.get("files")})
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _stat_record(st):
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "ino": st.st_ino}


def _matches_record(st, record):
    """Whether a stat result equals a stamp record (size and mtime_ns always; ctime_ns and
    ino when the record has them)."""
    if not isinstance(record, dict):
        return False
    if record.get("size") != st.st_size or record.get("mtime_ns") != st.st_mtime_ns:
        return False
    if "ctime_ns" in record and record["ctime_ns"] != st.st_ctime_ns:
        return False
    return not ("ino" in record and record["ino"] != st.st_ino)


def _utc_now():
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def make_stamp(directory, manifest, tool_version="1"):
    """``{"format": 1, "commit", "manifest_sha256", "tool_version", "verified_at", "files":
    {path: {"size", "mtime_ns", "ctime_ns", "ino"}}}`` from the files as they are now.

    Call it only right after a full successful verification of ``directory``: the stamp
    says the files it records were verified.  Raises CheckpointError when a file is missing."""
    files = {}
    for entry in manifest["files"]:
        path = os.path.join(directory, entry["path"])
        try:
            st = os.stat(path)
        except OSError as exc:
            raise CheckpointError("cannot stamp %s: %s" % (path, exc)) from None
        files[entry["path"]] = _stat_record(st)
    return {
        "format": STAMP_FORMAT,
        "commit": manifest["commit"],
        "manifest_sha256": manifest_digest(manifest),
        "tool_version": tool_version,
        "verified_at": _utc_now(),
        "files": files,
    }


def load_stamp(path):
    """The stamp at ``path``, or None when it is missing, unreadable or not a stamp."""
    try:
        with open(path) as handle:
            stamp = json.load(handle)
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(stamp, dict) or stamp.get("format") != STAMP_FORMAT:
        return None
    if not isinstance(stamp.get("commit"), str) or not isinstance(stamp.get("files"), dict):
        return None
    return stamp


def write_stamp_atomic(path, stamp):
    """Write ``stamp`` to ``path`` atomically (temporary file, fsync, rename)."""
    write_json_atomic(path, stamp)


def stamp_usable(stamp, manifest):
    """Whether ``stamp`` was made for this manifest (same commit, and same file list when the
    stamp records the manifest's digest)."""
    if not isinstance(stamp, dict) or stamp.get("commit") != manifest.get("commit"):
        return False
    if not isinstance(stamp.get("files"), dict):
        return False
    recorded = stamp.get("manifest_sha256")
    return recorded is None or recorded == manifest_digest(manifest)


# --------------------------------------------------------------------------------------
# A directory
# --------------------------------------------------------------------------------------


def find_extra_files(directory, manifest, ignore=DEFAULT_IGNORE):
    """Sorted relative paths of files (and symlinks) under ``directory`` that the manifest does
    not list, skipping top-level entries named in ``ignore``."""
    listed = set(entry["path"] for entry in manifest["files"])
    ignored = set(ignore or ())
    extra = []
    for root, dirnames, filenames in os.walk(directory):
        rel_root = os.path.relpath(root, directory)
        rel_root = "" if rel_root == "." else rel_root.replace(os.sep, "/")
        if not rel_root:
            dirnames[:] = [name for name in dirnames if name not in ignored]
            filenames = [name for name in filenames if name not in ignored]
        # Symlinks to directories are not walked into; unless listed they are extra too.
        names = list(filenames) + [name for name in dirnames if os.path.islink(os.path.join(root, name))]
        for name in names:
            rel = posixpath.join(rel_root, name) if rel_root else name
            if rel not in listed:
                extra.append(rel)
    return sorted(extra)


def _index_problems(directory, manifest, files_ok):
    """Problems with the weight index files on disk, and their combined weight map
    (tensor -> shard path relative to the revision directory)."""
    problems = []
    weight_map = {}
    for entry in manifest["files"]:
        if entry["kind"] != "weight_index" or entry["path"] not in files_ok:
            continue
        rel = entry["path"]
        try:
            with open(os.path.join(directory, rel)) as handle:
                index = json.load(handle)
            names = index.get("weight_map") if isinstance(index, dict) else None
            if not isinstance(names, dict):
                raise ValueError("weight_map is missing or not an object")
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            problems.append(_problem(rel, "index_unreadable", None, None,
                                     "%s: cannot read the weight map: %s" % (rel, exc), check="index"))
            continue
        base = posixpath.dirname(rel)
        for tensor, shard in names.items():
            value = posixpath.join(base, shard) if isinstance(shard, str) and base else shard
            weight_map["%s:%s" % (rel, tensor)] = value
    return problems, weight_map


def _completeness_as_problems(items):
    return [_problem(item["path"], "incomplete", None, None, item["message"], check="completeness") for item in items]


def _check_entries(directory, manifest, records, workers):
    """Stat every entry, trust those matching ``records``, hash the rest in a pool.

    Returns ``(problems, ok_paths, counters)``."""
    problems = []
    ok_paths = set()
    to_hash = []
    trusted = 0
    for entry in manifest["files"]:
        st, problem = _stat_entry(directory, entry)
        if st is None:
            problems.append(problem)
        elif records is not None and _matches_record(st, records.get(entry["path"])):
            trusted += 1
            ok_paths.add(entry["path"])
        else:
            to_hash.append(entry)
    # Largest first, so that one big file does not start last and run alone.
    to_hash.sort(key=lambda item: (-item["size"], item["path"]))
    workers = max(1, int(workers or 1))
    if workers == 1 or len(to_hash) <= 1:
        results = [_hash_entry(directory, entry) for entry in to_hash]
    else:
        with ThreadPoolExecutor(max_workers=min(workers, len(to_hash))) as pool:
            results = list(pool.map(lambda entry: _hash_entry(directory, entry), to_hash))
    hashed_bytes = 0
    for entry, (problem, count) in zip(to_hash, results):
        hashed_bytes += count
        if problem is None:
            ok_paths.add(entry["path"])
        else:
            problems.append(problem)
    return problems, ok_paths, {"files_hashed": len(to_hash), "bytes_hashed": hashed_bytes,
                                "files_trusted_by_stamp": trusted}


def verify_tree(directory, manifest, deep=False, stamp=None, workers=4, ignore=DEFAULT_IGNORE, check_extra=True,
                trust_remote_code=False):
    """Verify ``directory`` against ``manifest``.

    Returns ``{"ok", "problems", "files_total", "files_hashed", "bytes_hashed",
    "files_trusted_by_stamp", "extra_files", "stamp_used", "seconds"}``; ``ok`` is true when
    there is no problem.  ``stamp`` (see make_stamp) is used only when not ``deep`` and made
    for this manifest.  ``extra_files`` lists unlisted files; they are problems only with
    ``check_extra``.  Raises OSError only for failures outside the files checked.
    """
    started = time.monotonic()
    result = {"ok": False, "problems": [], "files_total": len(manifest["files"]), "files_hashed": 0,
              "bytes_hashed": 0, "files_trusted_by_stamp": 0, "extra_files": [], "stamp_used": False, "seconds": 0.0}
    if not os.path.isdir(directory):
        what = "does not exist" if not os.path.lexists(directory) else "is not a directory"
        result["problems"].append(_problem(".", "missing", "directory", None, "%s %s" % (directory, what)))
        result["seconds"] = round(time.monotonic() - started, 3)
        return result

    records = None
    if stamp is not None and not deep and stamp_usable(stamp, manifest):
        records = stamp["files"]
        result["stamp_used"] = True
    problems, ok_paths, counters = _check_entries(directory, manifest, records, workers)
    result.update(counters)

    result["extra_files"] = find_extra_files(directory, manifest, ignore)
    if check_extra:
        problems.extend(_problem(rel, "extra", None, rel, "%s: not part of revision %s" % (rel, manifest["commit"]))
                        for rel in result["extra_files"])

    index_problems, weight_map = _index_problems(directory, manifest, ok_paths)
    problems.extend(index_problems)
    problems.extend(_completeness_as_problems(completeness_problems(manifest, trust_remote_code, weight_map or None)))

    problems.sort(key=lambda item: (item["check"] != "files", item["path"] or "", item["kind"]))
    result["problems"] = problems
    result["ok"] = not problems
    result["seconds"] = round(time.monotonic() - started, 3)
    return result


# --------------------------------------------------------------------------------------
# The checkpoint_verify module's result
# --------------------------------------------------------------------------------------


def default_manifest_path(real_dir):
    """``<model_dir>/manifests/<commit>.json`` for a resolved ``<model_dir>/revisions/<commit>``
    directory, or None when the directory's name is not a commit sha."""
    commit = os.path.basename(real_dir.rstrip("/"))
    if not is_commit_sha(commit):
        return None
    model_dir = os.path.dirname(os.path.dirname(real_dir.rstrip("/")))
    return os.path.join(model_dir, "manifests", commit + ".json")


def empty_module_result(deep):
    # No "path" key: AnsibleModule.exit_json would add the stat of that path (and overwrite "mode").
    return {
        "changed": False,
        "healthy": False,
        "problems": [],
        "details": [],
        "real_path": None,
        "manifest": None,
        "stamp": None,
        "stamp_status": "none",
        "commit": None,
        "mode": "deep" if deep else "fast",
        "files_total": 0,
        "files_hashed": 0,
        "bytes_hashed": 0,
        "files_trusted_by_stamp": 0,
        "extra_files": [],
        "seconds": 0.0,
    }


def _add(result, problem):
    result["details"].append(problem)


def _run_checks(result, path, manifest_path, stamp_path, deep, workers, trust_remote_code):
    real = os.path.realpath(path)
    result["real_path"] = real
    dir_name = os.path.basename(real.rstrip("/"))
    if manifest_path is None:
        manifest_path = default_manifest_path(real)
        if manifest_path is None:
            _add(result, _problem(None, "manifest_unknown", "a directory named by a commit sha", dir_name,
                                  "cannot derive the manifest: %s resolves to %s, whose name is not a commit sha; "
                                  "pass manifest" % (path, real), check="manifest"))
            return
    result["manifest"] = manifest_path
    try:
        manifest = load_manifest(manifest_path)
    except CheckpointError as exc:
        kind = "manifest_missing" if not os.path.exists(manifest_path) else "manifest_invalid"
        _add(result, _problem(None, kind, None, None, "%s; the revision cannot be verified without it" % exc,
                              check="manifest"))
        return
    commit = manifest["commit"]
    result["commit"] = commit
    if is_commit_sha(dir_name) and dir_name != commit:
        _add(result, _problem(None, "commit_mismatch", commit, dir_name,
                              "%s is revision %s but the manifest %s describes %s" % (real, dir_name, manifest_path, commit),
                              check="manifest"))
    if stamp_path is None:
        stamp_path = os.path.join(os.path.dirname(manifest_path), commit + ".stamp.json")
    result["stamp"] = stamp_path
    stamp = None
    if deep:
        result["stamp_status"] = "ignored"
    elif not os.path.exists(stamp_path):
        result["stamp_status"] = "missing"
    else:
        stamp = load_stamp(stamp_path)
        result["stamp_status"] = "used" if stamp is not None and stamp_usable(stamp, manifest) else "unusable"
    verified = verify_tree(real, manifest, deep=deep, stamp=stamp, workers=workers, trust_remote_code=trust_remote_code)
    for key in ("files_total", "files_hashed", "bytes_hashed", "files_trusted_by_stamp", "extra_files"):
        result[key] = verified[key]
    result["details"].extend(verified["problems"])


def checkpoint_verify(path, manifest_path=None, stamp_path=None, deep=False, workers=4, trust_remote_code=False):
    """The checkpoint_verify module's result for ``path`` (a revision directory or a symlink to
    one).  Never raises: an unexpected error becomes an ``internal_error`` problem."""
    started = time.monotonic()
    result = empty_module_result(deep)
    try:
        _run_checks(result, path, manifest_path, stamp_path, deep, workers, trust_remote_code)
    except Exception as exc:  # pylint: disable=broad-except
        _add(result, _problem(None, "internal_error", None, None,
                              "checkpoint_verify could not check %s: %r" % (path, exc), check="internal"))
    result["problems"] = [item["message"] for item in result["details"]]
    result["healthy"] = not result["details"]
    result["seconds"] = round(time.monotonic() - started, 3)
    return result


def summary_message(result, path):
    """One line for fail_json: how many problems, and the first few."""
    shown = result["problems"][:5]
    more = len(result["problems"]) - len(shown)
    return "Checkpoint %s failed verification with %d problem(s): %s%s" % (
        result["real_path"] or path, len(result["problems"]), "; ".join(shown),
        "; and %d more" % more if more > 0 else "")
