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
from ansible_collections.gpufleet.serving.plugins.module_utils import _checkpoint_space as space_mod
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_manifest import (
    CheckpointError,
    classify_path,
    completeness_problems,
    is_commit_sha,
    manifest_from_tree,
    validate_repo_id,
)
from ansible_collections.gpufleet.serving.plugins.module_utils._input_problem import input_problem

LICENSE_PREFERENCE = ("LICENSE", "LICENSE.md", "LICENSE.txt", "LICENCE", "LICENCE.md", "LICENCE.txt")


# The revision a site inventory ships before anyone pinned a reviewed commit.
PLACEHOLDER_REVISION = "0" * 40


def hub_argument_spec():
    """The options every module that asks the Hub about a pin takes (checkpoint_pin, checkpoint_plan);
    documented once in the checkpoint_hub doc fragment. A new dict per call: callers add to it."""
    return dict(
        model_dir=dict(type="path", required=True),
        repo_id=dict(type="str", required=True),
        revision=dict(type="str", required=True),
        endpoint=dict(type="str"),
        token=dict(type="str", no_log=True),
        trust_remote_code=dict(type="bool", default=False),
        license_accepted=dict(type="bool", default=False),
        timeout=dict(type="int", default=30),
    )


def pin_request_problems(repo_id, revision, trust_remote_code):
    """What must never reach the Hub, as {check, found, expected, message}: a bad repo id, no
    revision, the all-zero placeholder, or trusted remote code without a commit pin."""
    problems = []
    try:
        validate_repo_id(repo_id)
    except CheckpointError as exc:
        problems.append(input_problem(
            "repo_id", repo_id, "a Hugging Face repository id such as moonshotai/Kimi-K3.1-Pro",
            "checkpoint_repo_id is %r; expected a Hugging Face repository id such as moonshotai/Kimi-K3.1-Pro "
            "(letters, digits, '.', '_', '-', one '/'): %s" % (repo_id, exc)))
    if not revision:
        problems.append(input_problem(
            "revision", "nothing", "the 40-hex commit reviewed for this site",
            "no revision given for %s; pin a 40-hex commit (set checkpoint_revision to the commit reviewed for this site)"
            % repo_id))
    elif revision == PLACEHOLDER_REVISION:
        problems.append(input_problem(
            "revision", revision, "the 40-hex commit reviewed for this site",
            "checkpoint_revision is the all-zero placeholder %s, not a commit of %s; set it to the 40-hex commit "
            "reviewed for this site" % (revision, repo_id)))
    elif trust_remote_code and not is_commit_sha(revision):
        problems.append(input_problem(
            "trust_remote_code", revision, "a 40-hex commit",
            "revision %r of %s is a branch or tag, but remote code is trusted: --trust-remote-code runs the "
            "repository's Python code, so it is only allowed for a pinned, reviewed 40-hex commit "
            "(set checkpoint_revision to the commit you reviewed)" % (revision, repo_id)))
    return problems


def check_pin_request(repo_id, revision, trust_remote_code):
    """Refuse what must never reach the Hub (the first of :func:`pin_request_problems`)."""
    problems = pin_request_problems(repo_id, revision, trust_remote_code)
    if problems:
        raise CheckpointError(problems[0]["message"])


def remote_code_record_problem(manifest, trust_remote_code):
    """Remote code runs only from a commit pinned as that commit: a recorded manifest whose
    requested revision was a branch or tag (resolved to this commit while remote code was not
    trusted) was never reviewed as code. None when fine."""
    if not trust_remote_code or not manifest or is_commit_sha(manifest.get("requested_revision")):
        return None
    return input_problem(
        "trust_remote_code", "manifests/%s.json requested as %r" % (manifest.get("commit"), manifest.get("requested_revision")),
        "a manifest recorded for the commit pin itself",
        "remote code is trusted, but the manifest of %s records it as resolved from %r, not pinned as that commit; "
        "review the commit's code, then remove manifests/%s.json so that it is recorded again as pinned"
        % (manifest.get("commit"), manifest.get("requested_revision"), manifest.get("commit")))


def license_problem(first_download, license_accepted, repo_id, licence):
    """The licence rule: the first revision of a repository pinned under a model directory needs
    the licence accepted. None when fine."""
    if not first_download or license_accepted:
        return None
    return input_problem(
        "license", "checkpoint_license_accepted false on the first revision of %s" % repo_id,
        "checkpoint_license_accepted: true",
        "first download of %s: read its licence (%s) and set checkpoint_license_accepted: true to accept it"
        % (repo_id, licence or "the repository has no licence file"))


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


def early_space_problem(layout, manifest, free_bytes, margin_ratio, margin_min_bytes, rollback_copies=1, keep=(), prune=True):
    """Refuse at pin time, before any file is fetched, when the revision cannot fit.

    The same plan as the preflight gate and the download (_checkpoint_space): bytes of the
    revision already on disk count, and so do the revisions that are prunable now.
    """
    try:
        plan = space_mod.layout_space_plan(layout, manifest["commit"], free_bytes, rollback_copies=rollback_copies,
                                           keep=keep, prune=prune, margin_ratio=margin_ratio,
                                           margin_min_bytes=margin_min_bytes, manifest=manifest)
    except ValueError as exc:
        return str(exc)
    return None if plan["fits"] else space_mod.refusal(plan, layout.model_dir)


def pin(api, fetch_text, layout, repo_id, revision, endpoint, trust_remote_code, license_accepted,
        check_mode=False, license_max_chars=4000, free_bytes=None, margin_ratio=0.0, margin_min_bytes=0,
        rollback_copies=1, keep=(), prune=True):
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
        refusal = remote_code_record_problem(existing, trust_remote_code)
        if refusal:
            raise CheckpointError(refusal["message"])
        return _summary(result, existing, manifest_path, license_text=None)

    result["hub_requests"] = True
    entries = [tree_entry(item) for item in api.list_repo_tree(repo_id, revision=commit, recursive=True)]
    manifest = manifest_from_tree(repo_id, revision, commit, entries, endpoint,
                                  time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    if free_bytes is not None:
        refusal = early_space_problem(layout, manifest, free_bytes, margin_ratio, margin_min_bytes, rollback_copies, keep, prune)
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
    refusal = license_problem(first, license_accepted, repo_id, licence)
    if refusal:
        raise CheckpointError("%s.\n%s" % (refusal["message"], licence_text or ""))
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
