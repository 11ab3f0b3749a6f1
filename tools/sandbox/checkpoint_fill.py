#!/usr/bin/env python3
# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fill a sandbox host's model directory with full-size revisions that cost no real bytes (test tooling).

A revision is written as the checkpoint role leaves it: revisions/<commit>/ with a config, a
tokenizer, a weight index and N shards, manifests/<commit>.json in the collection's manifest
format (sizes, git blob ids, sha256 fields) and manifests/<commit>.stamp.json, optionally linked
as `current` or `previous`. Shards are allocated with fallocate(2), never written: on the
sandbox's sparse ext4 image 1.7 TB of shards take about 2 s and almost no disk on the machine, yet
the host's filesystem counts every byte, as it would a downloaded Kimi K3.1 Pro.

Shard contents are zeros, so their sha256 fields do not match (a deep verification fails on
purpose); the stamp makes a fast verification trust them, as after a real download.

Runs on the host with the system python3 (standard library only):
  checkpoint_fill.py --model-dir /srv/models/moonshotai--Kimi-K3.1-Pro --commit <40 hex> \
      --bytes 1700000000000 [--shards 64] [--link current|previous] [--manifest-only]
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import sys

MANIFEST_FORMAT = 1
STAMP_FORMAT = 1


def dumps_json(data):
    """The collection's on-disk JSON form (_checkpoint_manifest.dumps_json)."""
    return json.dumps(data, sort_keys=True, indent=1) + "\n"


def git_blob_oid(data):
    digest = hashlib.sha1(b"blob %d\0" % len(data))
    digest.update(data)
    return digest.hexdigest()


def small_files(repo_id, shards, total):
    """The non-shard files of the revision, with real content."""
    names = ["model-%05d-of-%05d.safetensors" % (index, shards) for index in range(1, shards + 1)]
    index = {"metadata": {"total_size": total}, "weight_map": dict(("model.layers.%d.weight" % i, name) for i, name in enumerate(names))}
    return names, {
        "config.json": dumps_json({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k3", "_name_or_path": repo_id}).encode(),
        "tokenizer.json": dumps_json({"version": "1.0", "model": {"type": "BPE", "vocab": {}}}).encode(),
        "model.safetensors.index.json": dumps_json(index).encode(),
    }


def plan_revision(repo_id, commit, total, shards):
    """Manifest entries and file contents (None: a shard to allocate) summing to exactly ``total`` bytes."""
    names, contents = small_files(repo_id, shards, total)
    rest = total - sum(len(data) for data in contents.values())
    if rest < shards:
        raise SystemExit("--bytes %d is too small for %d shards" % (total, shards))
    sizes = [rest // shards] * shards
    sizes[-1] += rest - sum(sizes)
    files, layout = [], {}
    for path, data in sorted(contents.items()):
        kind = {"config.json": "config", "tokenizer.json": "tokenizer"}.get(path, "weight_index")
        files.append({"path": path, "size": len(data), "git_oid": git_blob_oid(data), "sha256": None, "kind": kind})
        layout[path] = data
    for path, size in zip(names, sizes):
        sha256 = hashlib.sha256(("%s/%s" % (commit, path)).encode()).hexdigest()
        pointer = ("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (sha256, size)).encode()
        files.append({"path": path, "size": size, "git_oid": git_blob_oid(pointer), "sha256": sha256, "kind": "weight_shard"})
        layout[path] = size
    files.sort(key=lambda item: item["path"])
    manifest = {
        "format": MANIFEST_FORMAT, "repo_id": repo_id, "requested_revision": commit, "commit": commit,
        "endpoint": "https://huggingface.co", "created": _now(), "total_bytes": total, "files": files,
        "index_file": "model.safetensors.index.json", "index_shards": names,
    }
    return manifest, layout


def _now():
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def write_atomic(path, text):
    temporary = "%s.%d.tmp" % (path, os.getpid())
    with open(temporary, "w") as handle:
        handle.write(text)
    os.replace(temporary, path)


def write_revision(directory, layout):
    os.makedirs(directory, exist_ok=True)
    for path, content in layout.items():
        full = os.path.join(directory, path)
        with open(full, "wb") as handle:
            if isinstance(content, bytes):
                handle.write(content)
            else:
                os.posix_fallocate(handle.fileno(), 0, content)


def make_stamp(directory, manifest):
    """As _checkpoint_verify.make_stamp: each file's stat, and the digest of the manifest's commit and files."""
    files = {}
    for entry in manifest["files"]:
        st = os.stat(os.path.join(directory, entry["path"]))
        files[entry["path"]] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "ino": st.st_ino}
    digest = hashlib.sha256(dumps_json({"commit": manifest["commit"], "files": manifest["files"]}).encode()).hexdigest()
    return {"format": STAMP_FORMAT, "commit": manifest["commit"], "manifest_sha256": digest, "tool_version": "1",
            "verified_at": _now(), "files": files}


def link(model_dir, name, commit):
    temporary = os.path.join(model_dir, ".%s.%d.tmp" % (name, os.getpid()))
    os.symlink(os.path.join("revisions", commit), temporary)
    os.replace(temporary, os.path.join(model_dir, name))


def fill(model_dir, repo_id, commit, total, shards, link_as=None, manifest_only=False):
    if len(commit) != 40 or any(c not in "0123456789abcdef" for c in commit):
        raise SystemExit("--commit must be 40 lowercase hex digits, got %r" % commit)
    manifest, layout = plan_revision(repo_id, commit, total, shards)
    for sub in ("revisions", "incoming", "manifests"):
        os.makedirs(os.path.join(model_dir, sub), exist_ok=True)
    write_atomic(os.path.join(model_dir, "manifests", commit + ".json"), dumps_json(manifest))
    if not manifest_only:
        directory = os.path.join(model_dir, "revisions", commit)
        write_revision(directory, layout)
        write_atomic(os.path.join(model_dir, "manifests", commit + ".stamp.json"), dumps_json(make_stamp(directory, manifest)))
        if link_as:
            link(model_dir, link_as, commit)
    return {"commit": commit, "total_bytes": total, "files": len(manifest["files"]), "staged": not manifest_only, "link": link_as}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--repo-id", default="moonshotai/Kimi-K3.1-Pro")
    parser.add_argument("--commit", required=True)
    parser.add_argument("--bytes", type=int, required=True, help="the revision's total size (the manifest's total_bytes)")
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--link", choices=("current", "previous"))
    parser.add_argument("--manifest-only", action="store_true", help="pin only: write the manifest, stage nothing")
    args = parser.parse_args(argv)
    result = fill(args.model_dir, args.repo_id, args.commit, args.bytes, args.shards, args.link, args.manifest_only)
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
