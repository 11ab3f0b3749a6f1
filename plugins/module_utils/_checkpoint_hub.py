# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pin a revision: resolve it on the Hub, build its manifest, read its licence and index (private).

Only this step talks to the Hub's API; everything after it works from the manifest offline.
huggingface_hub is imported by the caller (it lives in the checkpoint role's venv on the host)
and passed in, so the decisions here are testable with a stand-in API object.
"""

from __future__ import annotations

import json
import os
import time

from ansible_collections.gpufleet.serving.plugins.module_utils import _checkpoint_layout as layout_mod
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_manifest import (
    CheckpointError,
    classify_path,
    completeness_problems,
    is_commit_sha,
    manifest_from_tree,
    validate_repo_id,
)
from ansible_collections.gpufleet.serving.plugins.module_utils._storage import describe_bytes

LICENSE_PREFERENCE = ("LICENSE", "LICENSE.md", "LICENSE.txt", "LICENCE", "LICENCE.md", "LICENCE.txt")


def check_pin_request(repo_id, revision, trust_remote_code):
    """Refuse what must never reach the Hub: a bad repo id, or trusted remote code without a commit pin."""
    validate_repo_id(repo_id)
    if not revision:
        raise CheckpointError("no revision given for %s; pin a 40-hex commit" % repo_id)
    if trust_remote_code and not is_commit_sha(revision):
        raise CheckpointError(
            "revision %r of %s is a branch or tag, but remote code is trusted: --trust-remote-code runs the "
            "repository's Python code, so it is only allowed for a pinned, reviewed 40-hex commit "
            "(set checkpoint_revision to the commit you reviewed)" % (revision, repo_id))


def tree_entry(item):
    """A huggingface_hub RepoFile/RepoFolder as the Hub tree API's JSON entry."""
    if not hasattr(item, "blob_id"):
        return {"type": "directory", "path": item.path}
    entry = {"type": "file", "path": item.path, "size": item.size, "oid": item.blob_id}
    lfs = getattr(item, "lfs", None)
    if lfs:
        entry["lfs"] = {"oid": lfs["sha256"], "size": lfs["size"], "pointerSize": lfs.get("pointer_size")}
    return entry


def license_file(manifest):
    """The repository's licence file (a conventional name first), or None."""
    licences = [f["path"] for f in manifest["files"] if classify_path(f["path"]) == "license" and "/" not in f["path"]]
    for name in LICENSE_PREFERENCE:
        if name in licences:
            return name
    return licences[0] if licences else None


def weight_index_file(manifest):
    indexes = [f["path"] for f in manifest["files"] if classify_path(f["path"]) == "weight_index"]
    return sorted(indexes, key=lambda p: (p.count("/"), p))[0] if indexes else None


def index_weight_map(text, path):
    try:
        data = json.loads(text)
        weight_map = data["weight_map"]
        if not isinstance(weight_map, dict):
            raise TypeError("weight_map is not an object")
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError("the weight index %s cannot be read: %s" % (path, exc)) from None
    return weight_map


def repository_known(layout, repo_id):
    """Whether any manifest of this repository was pinned here before (its licence was accepted then)."""
    base = layout.path("manifests")
    try:
        names = os.listdir(base)
    except OSError:
        return False
    for name in names:
        if name.endswith(".json") and not name.endswith(".stamp.json"):
            data = layout_mod.read_json(os.path.join(base, name))
            if data and data.get("repo_id") == repo_id:
                return True
    return False


def early_space_problem(layout, manifest, free_bytes, margin_ratio, margin_min_bytes):
    """Refuse at pin time, before any file is fetched, when the revision cannot fit.

    Counts bytes already in incoming/<commit> (a resumed download) as available; the download
    step repeats the check precisely, file by file.
    """
    commit = manifest["commit"]
    if os.path.isdir(layout.revision_dir(commit)):
        return None
    partial = 0
    incoming = layout.incoming_dir(commit)
    for entry in manifest["files"]:
        path = os.path.join(incoming, entry["path"])
        if os.path.isfile(path) and os.path.getsize(path) == entry["size"]:
            partial += entry["size"]
    plan = layout_mod.space_plan(manifest["files"], set(), free_bytes + partial, margin_ratio, margin_min_bytes)
    if plan["fits"]:
        return None
    return ("not enough space in %s for revision %s of %s: %s to download plus a %s margin, while current and "
            "previous stay; %s free, %s missing. Nothing was downloaded."
            % (layout.model_dir, commit, manifest["repo_id"], describe_bytes(plan["remaining_bytes"] - partial),
               describe_bytes(plan["margin_bytes"]), describe_bytes(free_bytes), describe_bytes(plan["missing_bytes"])))


def pin(api, fetch_text, layout, repo_id, revision, endpoint, trust_remote_code, license_accepted,
        check_mode=False, license_max_chars=4000, free_bytes=None, margin_ratio=0.0, margin_min_bytes=0):
    """Resolve ``revision``, write ``manifests/<commit>.json`` and return what the role shows.

    ``api`` offers ``model_info(repo_id, revision=)`` and ``list_repo_tree(repo_id, revision=,
    recursive=True)``; ``fetch_text(path, commit)`` returns a small file's text at the commit.
    A commit whose manifest is already here is answered without any request.
    """
    check_pin_request(repo_id, revision, trust_remote_code)
    result = {"changed": False, "repo_id": repo_id, "requested_revision": revision, "hub_requests": False}
    commit = revision if is_commit_sha(revision) else None
    if commit is None:
        result["hub_requests"] = True
        commit = api.model_info(repo_id, revision=revision).sha
    result["commit"] = commit
    manifest_path = layout.manifest_path(commit)
    existing = layout_mod.read_json(manifest_path)
    if existing and existing.get("repo_id") == repo_id and existing.get("commit") == commit:
        return _summary(result, existing, manifest_path, license_text=None)

    result["hub_requests"] = True
    entries = [tree_entry(item) for item in api.list_repo_tree(repo_id, revision=commit, recursive=True)]
    manifest = manifest_from_tree(repo_id, revision, commit, entries, endpoint,
                                  time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    if free_bytes is not None:
        refusal = early_space_problem(layout, manifest, free_bytes, margin_ratio, margin_min_bytes)
        if refusal:
            raise CheckpointError(refusal)
    index_path = weight_index_file(manifest)
    weight_map = index_weight_map(fetch_text(index_path, commit), index_path) if index_path else None
    if weight_map is not None:
        manifest["index_file"] = index_path
        manifest["index_shards"] = sorted(set(weight_map.values()))
    problems = completeness_problems(manifest, trust_remote_code, weight_map)
    if problems:
        raise CheckpointError("revision %s of %s is incomplete on the Hub: %s"
                              % (commit, repo_id, "; ".join(p["message"] for p in problems)))

    licence = license_file(manifest)
    licence_text = fetch_text(licence, commit)[:license_max_chars] if licence else None
    first = not repository_known(layout, repo_id)
    result.update({"license_file": licence, "first_download": first})
    if first and not license_accepted:
        raise CheckpointError(
            "first download of %s: read its licence (%s) and set checkpoint_license_accepted: true to accept it.\n%s"
            % (repo_id, licence or "the repository has no licence file", licence_text or ""))
    if not check_mode:
        layout_mod.ensure_dirs(layout)
        layout_mod.write_json_atomic(manifest_path, manifest)
    result["changed"] = True
    return _summary(result, manifest, manifest_path, license_text=licence_text)


def _summary(result, manifest, manifest_path, license_text):
    result.update({
        "manifest_path": manifest_path,
        "total_bytes": manifest["total_bytes"],
        "files": len(manifest["files"]),
        "shards": len([f for f in manifest["files"] if f.get("kind") == "weight_shard"]),
        "license_text": license_text,
    })
    result.setdefault("license_file", license_file(manifest))
    return result
