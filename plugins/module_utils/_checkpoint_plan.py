# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Plan a pin without making it: the checkpoint_plan module's decisions (private).

The plan stage runs before anything on a host changes, so it cannot use the Hub client that the
checkpoint role installs later. It asks the Hub's JSON API directly (``get_json`` is passed in:
the module uses Ansible's URL helper, the tests a stand-in), applies the same rules as
``checkpoint_pin`` (:mod:`_checkpoint_hub`: the pin request, the licence, remote code) and reports
every problem instead of stopping at the first. It reads the model directory's manifests and
writes nothing.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.serving.plugins.module_utils import _checkpoint_layout as layout_mod
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_hub import (
    license_file,
    license_problem,
    pin_request_problems,
    remote_code_record_problem,
    repository_known,
)
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_manifest import (
    CheckpointError,
    completeness_problems,
    is_commit_sha,
    manifest_from_tree,
)
from ansible_collections.gpufleet.serving.plugins.module_utils._input_problem import input_problem

DEFAULT_ENDPOINT = "https://huggingface.co"
# Pages of a long tree listing (the Hub pages at 1,000 entries); a bound, so a broken Link loop ends.
MAX_TREE_PAGES = 1000
_NEXT_LINK = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')


def quote_path_part(text):
    """``text`` percent-encoded for one URL path segment (``/`` included), as huggingface_hub does."""
    safe = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
    return "".join(ch if ch in safe else "".join("%%%02X" % b for b in ch.encode("utf-8")) for ch in str(text))


def revision_url(endpoint, repo_id, revision):
    return "%s/api/models/%s/revision/%s" % (endpoint, repo_id, quote_path_part(revision))


def tree_url(endpoint, repo_id, commit):
    return "%s/api/models/%s/tree/%s?recursive=true" % (endpoint, repo_id, commit)


def next_page(headers):
    """The URL of the next page of a paged listing (``Link: <url>; rel="next"``), or None."""
    match = _NEXT_LINK.search((headers or {}).get("link") or "")
    return match.group(1) if match else None


def answer_problem(status, headers, error, repo_id, revision, endpoint, has_token):
    """The input problem that a failed Hub answer means (404, 401, an unreachable endpoint)."""
    code = (headers or {}).get("x-error-code") or ""
    token_hint = "the token in checkpoint_hf_token may not grant access" if has_token else "no checkpoint_hf_token is set"
    if status == 404 and code == "RevisionNotFound":
        return input_problem(
            "revision", "%s, which %s does not have" % (revision, endpoint), "a commit of %s on the Hub or the site mirror" % repo_id,
            "revision %s not found in %s at %s" % (revision, repo_id, endpoint))
    if status in (401, 403) or (status == 404 and code in ("RepoNotFound", "GatedRepo", "")):
        return input_problem(
            "repo_id", "%s answered %s%s for %s" % (endpoint, status, (" " + code) if code else "", repo_id),
            "a repository this host may read",
            "repository %s not found at %s (or it is private or gated and %s)" % (repo_id, endpoint, token_hint))
    if status is None:
        return input_problem(
            "endpoint", "%s unreachable (%s)" % (endpoint, error), "a Hub endpoint or site mirror this host reaches",
            "cannot reach the Hub at %s from this host: %s" % (endpoint, error))
    return input_problem(
        "endpoint", "%s answered %s for %s@%s" % (endpoint, status, repo_id, revision), "a JSON answer (200)",
        "the Hub at %s answered %s for %s@%s: %s" % (endpoint, status, repo_id, revision, error or "no detail"))


def list_tree(get_json, url):
    """Every entry of a (paged) recursive tree listing; returns (entries, status, headers, error)."""
    entries = []
    for _page in range(MAX_TREE_PAGES):
        status, headers, data, error = get_json(url)
        if status != 200:
            return None, status, headers, error
        if not isinstance(data, list):
            return None, status, headers, "the tree listing is not a JSON list"
        entries.extend(data)
        url = next_page(headers)
        if not url:
            return entries, status, headers, None
    return None, 200, {}, "the tree listing has more than %d pages" % MAX_TREE_PAGES


def plan_revision(get_json, layout, repo_id, revision, trust_remote_code, license_accepted, endpoint=None, has_token=False):
    """Resolve ``revision`` of ``repo_id`` and check it as checkpoint_pin would, without writing.

    ``get_json(url)`` returns ``(status, headers, data, error)``: the HTTP status (None when no
    answer came), the headers with lower-case names, the decoded JSON (None when not JSON) and an
    error text. A commit whose manifest is recorded under ``layout`` is answered from it, without
    any request (as the pin is). Returns the result of the checkpoint_plan module: ``healthy``,
    ``problems``, ``commit``, ``total_bytes``, ``files``, ``first_download``, ``license_file``,
    ``manifest_recorded`` and ``hub_requests``.
    """
    endpoint = (endpoint or DEFAULT_ENDPOINT).rstrip("/")
    result = {"changed": False, "repo_id": repo_id, "requested_revision": revision, "endpoint": endpoint, "commit": None,
              "total_bytes": None, "files": None, "first_download": None, "license_file": None,
              "manifest_recorded": False, "hub_requests": False}
    problems = pin_request_problems(repo_id, revision, trust_remote_code)
    if any(problem["check"] in ("repo_id", "revision") for problem in problems):
        return _finish(result, problems)

    commit = revision if is_commit_sha(revision) else None
    manifest = None
    if commit:
        recorded = layout_mod.read_json(layout.manifest_path(commit))
        if recorded and recorded.get("repo_id") == repo_id and recorded.get("commit") == commit:
            manifest = recorded
            result["manifest_recorded"] = True
    if manifest is None:
        result["hub_requests"] = True
        if commit is None:
            status, headers, data, error = get_json(revision_url(endpoint, repo_id, revision))
            commit = data.get("sha") if status == 200 and isinstance(data, dict) else None
            if not is_commit_sha(commit):
                problems.append(answer_problem(status, headers, error or "no commit in the answer", repo_id, revision,
                                               endpoint, has_token))
                return _finish(result, problems)
        entries, status, headers, error = list_tree(get_json, tree_url(endpoint, repo_id, commit))
        if entries is None:
            problems.append(answer_problem(status, headers, error, repo_id, commit, endpoint, has_token))
            return _finish(result, problems)
        try:
            manifest = manifest_from_tree(repo_id, revision, commit, entries, endpoint, "")
        except CheckpointError as exc:
            problems.append(input_problem("revision", "an unusable tree listing of %s" % commit, "a listing of files",
                                          "the tree listing of %s@%s cannot be used: %s" % (repo_id, commit, exc)))
            return _finish(result, problems)

    result["commit"] = commit
    result["total_bytes"] = manifest["total_bytes"]
    result["files"] = len(manifest["files"])
    # Without the weight index (the pin reads it), what the listing alone shows is missing.
    for missing in completeness_problems(manifest, trust_remote_code):
        problems.append(input_problem("revision", "%s@%s lacks %s" % (repo_id, commit, missing["path"] or "a required file"),
                                      "a servable revision", "revision %s of %s is incomplete: %s"
                                      % (commit, repo_id, missing["message"])))
    if result["manifest_recorded"]:
        record = remote_code_record_problem(manifest, trust_remote_code)
        if record:
            problems.append(record)
    licence = license_file(manifest)
    first = not repository_known(layout, repo_id)
    result.update({"license_file": licence, "first_download": first})
    refusal = license_problem(first, license_accepted, repo_id, licence)
    if refusal:
        problems.append(refusal)
    return _finish(result, problems)


def _finish(result, problems):
    result["problems"] = problems
    result["healthy"] = not problems
    return result
