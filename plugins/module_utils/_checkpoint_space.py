# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The room a planned checkpoint layout needs, counting what is already on the disk (private).

One formula, used by the preflight gate (module checkpoint_space), the pin step and the download
(checkpoint_stage), so that the gate and the download never disagree::

    needed    = (target size - bytes of the target already staged) + margin
    margin    = max(margin_min_bytes, margin_ratio x target size), only while bytes are missing
    available = free bytes + bytes of the revisions that are prunable now
    fits      = needed <= available

The planned layout keeps, at every moment, the served revision (``current``), its rollback copy
(``previous``, when rollback_copies is 1), the revisions in ``keep`` and the target. Every other
revision directory, and the incoming area of any other commit, is *prunable now*: the download
removes it first. So is what an interrupted removal left (``*.deleting.<pid>``, a revision or
download half deleted): it is counted whatever ``prune`` says, and the next run finishes it.
After the swap the old ``current`` becomes ``previous`` (rollback_copies 1) or is removed too
(rollback_copies 0).

``space_plan`` is pure; ``read_layout`` and ``layout_space_plan`` read the model directory (links,
revision directories, manifests) and change nothing.
"""

from __future__ import annotations

import errno
import os

from ansible_collections.gpufleet.serving.plugins.module_utils import _checkpoint_layout as layout_mod
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_manifest import (
    CheckpointError,
    is_commit_sha,
    load_manifest,
)
from ansible_collections.gpufleet.serving.plugins.module_utils._storage import (
    CRITICAL,
    describe_bytes,
    nearest_existing,
    problem,
    space_from_statvfs,
)

ROLLBACK_COPIES = (0, 1)  # the layout has one ``previous`` link
DEFAULT_MARGIN_RATIO = 0.02
DEFAULT_MARGIN_MIN_BYTES = 1024 ** 3

# Where the target's size came from: the pinned manifest and the plan stage's Hub listing are exact.
SOURCE_MANIFEST = "manifest"
SOURCE_GIVEN = "given"
SOURCE_PROFILE = "profile"

# The sentence every document quotes (README, quickstart, preflight, checkpoint).
FORMULA = ("needed = (target size - bytes of the target already staged) + margin, where the margin is "
           "max(margin_min_bytes, margin_ratio x target size) while anything is missing; "
           "available = free space + bytes of the revisions that are prunable now; "
           "the revision fits when needed <= available")


def check_rollback_copies(rollback_copies):
    if isinstance(rollback_copies, bool) or int(rollback_copies) not in ROLLBACK_COPIES:
        raise ValueError("rollback_copies must be 0 or 1 (the layout keeps one previous link), got %r" % (rollback_copies,))
    return int(rollback_copies)


def _entry(commit, sizes):
    return {"commit": commit, "bytes": int(sizes.get(commit, 0))}


def after_swap(links, target, rollback_copies, keep, present):
    """The links and kept revisions once ``target`` is promoted (``present``: commits on disk after the download)."""
    current, previous = links.get("current"), links.get("previous")
    if rollback_copies == 0:
        new_previous = None
    elif current and current != target:
        new_previous = current
    else:
        new_previous = previous if previous != target else None
    held = {target, new_previous}
    kept = sorted(c for c in set(keep) if c in present and c not in held)
    return {"current": target, "previous": new_previous, "kept": kept}


def space_plan(target, free_bytes, revisions, links, rollback_copies=1, keep=(), prune=True,
               margin_ratio=DEFAULT_MARGIN_RATIO, margin_min_bytes=DEFAULT_MARGIN_MIN_BYTES, incoming=None, deleting=None):
    """Whether the target revision fits, and every number that says why.

    ``target``: ``{"commit": 40-hex or None, "bytes": size, "source": manifest|given|profile,
    "present_bytes": bytes of it already staged}``. ``revisions``: commit -> bytes of each
    revisions/<commit> directory. ``links``: ``{"current", "previous"}``. ``incoming``: commit ->
    bytes of the incoming areas of other commits (abandoned downloads). With ``prune`` false
    nothing is prunable but ``deleting``: path -> bytes of the leftovers of interrupted removals,
    which the next run removes in any case.
    """
    rollback_copies = check_rollback_copies(rollback_copies)
    size = int(float(target["bytes"]))
    if size <= 0:
        raise ValueError("the target revision's size must be a positive number of bytes, got %r" % (target["bytes"],))
    if float(margin_ratio) < 0 or int(margin_min_bytes) < 0:
        raise ValueError("margin_ratio and margin_min_bytes must not be negative")
    commit = target.get("commit")
    revisions = dict((c, int(b)) for c, b in (revisions or {}).items())
    incoming = dict((c, int(b)) for c, b in (incoming or {}).items() if c != commit)
    keep = [c for c in keep or () if c]
    current, previous = links.get("current"), links.get("previous")
    held = {commit, current} | ({previous} if rollback_copies else set()) | set(keep)
    held.discard(None)

    present = min(int(target.get("present_bytes") or 0), size)
    missing = size - present
    margin = max(int(margin_min_bytes), int(size * float(margin_ratio))) if missing else 0
    needed = missing + margin

    unheld = sorted(c for c in revisions if c not in held)
    prunable = []
    if prune:
        prunable = [{"commit": c, "bytes": revisions[c], "was": "previous" if c == previous else "unlinked"} for c in unheld]
        prunable += [{"commit": c, "bytes": b, "was": "incoming"} for c, b in sorted(incoming.items())]
    prunable += [{"commit": layout_mod.commit_of_leftover(p) or os.path.basename(p), "bytes": int(b), "was": "deleting", "path": p}
                 for p, b in sorted((deleting or {}).items())]
    prunable_bytes = sum(item["bytes"] for item in prunable)
    available = int(free_bytes) + prunable_bytes

    staged = {
        "current": _entry(current, revisions) if current and current != commit else None,
        "previous": _entry(previous, revisions) if rollback_copies and previous and previous not in (commit, current) else None,
        "kept": [_entry(c, revisions) for c in sorted(set(keep))
                 if c in revisions and c not in (commit, current) and not (rollback_copies and c == previous)],
        "retained": [] if prune else [_entry(c, revisions) for c in unheld],
        "target": {"commit": commit, "bytes": present},
    }
    on_disk = set(revisions) - {item["commit"] for item in prunable}
    swapped = after_swap(links, commit, rollback_copies, keep, on_disk | {commit})
    # Promotion prunes (when pruning is on) what the new layout does not hold: with rollback copies 0 the old current.
    held_after = {commit, swapped["previous"]} | set(swapped["kept"])
    pruned_at_swap = sorted(c for c in on_disk if c not in held_after) if prune else []
    bytes_after = size + sum(revisions[c] for c in on_disk if c != commit and c not in pruned_at_swap)
    return {
        "target": {"commit": commit, "bytes": size, "source": target.get("source", SOURCE_PROFILE),
                   "exact": target.get("source") in (SOURCE_MANIFEST, SOURCE_GIVEN),
                   "present_bytes": present, "missing_bytes": missing},
        "rollback_copies": rollback_copies,
        "prune": bool(prune),
        "margin_bytes": margin,
        "needed_bytes": needed,
        "free_bytes": int(free_bytes),
        "prunable": prunable,
        "prunable_bytes": prunable_bytes,
        "available_bytes": available,
        "short_bytes": max(0, needed - available),
        "fits": needed <= available,
        "staged": staged,
        "staged_bytes": sum(revisions.values()),
        "after_swap": dict(swapped, bytes=bytes_after, pruned=pruned_at_swap),
    }


def _short(commit, absent="(none)"):
    return commit[:12] if commit else absent


def _size_label(plan):
    target = plan["target"]
    how = {"manifest": "exact, from its manifest", "given": "exact, from the Hub listing"}.get(target["source"], "the model profile's estimate")
    return "%s (%s)" % (describe_bytes(target["bytes"]), how)


def _staged_label(plan):
    staged = plan["staged"]
    parts = []
    for name in ("current", "previous"):
        if staged[name]:
            parts.append("%s %s %s" % (name, staged[name]["commit"][:12], describe_bytes(staged[name]["bytes"])))
    parts += ["kept %s %s" % (item["commit"][:12], describe_bytes(item["bytes"])) for item in staged["kept"]]
    parts += ["unlinked %s %s (pruning off)" % (item["commit"][:12], describe_bytes(item["bytes"])) for item in staged["retained"]]
    parts.append("target %s" % describe_bytes(staged["target"]["bytes"]))
    return ", ".join(parts)


def summary(plan, model_dir):
    """One line with every number of the plan."""
    target = plan["target"]
    pruned = ", ".join("%s %s (%s)" % (p["commit"][:12], describe_bytes(p["bytes"]), p["was"]) for p in plan["prunable"]) or "none"
    return ("%s: revision %s of %s: needs %s (%s still missing + %s margin), available %s (%s free + %s prunable now: %s); "
            "already staged: %s; after the swap the layout holds %s (current %s, previous %s%s), rollback copies %d"
            % (model_dir, _short(target["commit"], "(not pinned yet)"), _size_label(plan), describe_bytes(plan["needed_bytes"]),
               describe_bytes(target["missing_bytes"]), describe_bytes(plan["margin_bytes"]),
               describe_bytes(plan["available_bytes"]), describe_bytes(plan["free_bytes"]), describe_bytes(plan["prunable_bytes"]),
               pruned, _staged_label(plan), describe_bytes(plan["after_swap"]["bytes"]),
               _short(plan["after_swap"]["current"], "the target"), _short(plan["after_swap"]["previous"]),
               "".join(", kept %s" % c[:12] for c in plan["after_swap"]["kept"]), plan["rollback_copies"]))


def ways_out(plan):
    """What would make the plan fit, best first; each says what it costs."""
    staged, needed, available = plan["staged"], plan["needed_bytes"], plan["available_bytes"]
    hints = []
    previous = staged["previous"]
    if previous and available + previous["bytes"] >= needed:
        hints.append("set the rollback copies to 0 (deploy_rollback_copies: 0): previous %s is then pruned before the "
                     "download and there is no rollback copy until the next upgrade" % previous["commit"][:12])
    kept = sum(item["bytes"] for item in staged["kept"])
    if kept:
        hints.append("drop revisions from checkpoint_keep_revisions (they hold %s)" % describe_bytes(kept))
    retained = sum(item["bytes"] for item in staged["retained"])
    if retained:
        hints.append("turn pruning back on (checkpoint_prune: true frees %s)" % describe_bytes(retained))
    hints.append("free %s on the volume or use a larger one" % describe_bytes(plan["short_bytes"]))
    return hints


def refusal(plan, model_dir):
    """The message of a plan that does not fit: the check, needed vs available, what is staged, the way out."""
    target = plan["target"]
    return ("not enough space in %s for revision %s of %s: needs %s (%s still missing + %s margin), available %s "
            "(%s free + %s prunable now); already staged: %s; %s missing. Nothing was downloaded or removed. Way out: %s"
            % (model_dir, _short(target["commit"], "(not pinned yet)"), _size_label(plan), describe_bytes(plan["needed_bytes"]),
               describe_bytes(target["missing_bytes"]), describe_bytes(plan["margin_bytes"]),
               describe_bytes(plan["available_bytes"]), describe_bytes(plan["free_bytes"]),
               describe_bytes(plan["prunable_bytes"]), _staged_label(plan), describe_bytes(plan["short_bytes"]),
               "; or ".join(ways_out(plan))))


# --------------------------------------------------------------------------------------
# Reading the model directory (read-only)
# --------------------------------------------------------------------------------------


def tree_bytes(path):
    """Bytes of the regular files under ``path`` (symlinks not followed); 0 when it is missing."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return 0
        raise
    if not os.path.isdir(path) or os.path.islink(path):
        return st.st_size if os.path.isfile(path) and not os.path.islink(path) else 0
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            info = os.lstat(full)
            if not os.path.islink(full):
                total += info.st_size
    return total


def present_bytes(layout, manifest):
    """Bytes of the target already on disk: manifest files of the right size in revisions/<commit>,
    else in incoming/<commit> (the download checks their content before it trusts them)."""
    commit = manifest["commit"]
    directory = layout.revision_dir(commit)
    if not os.path.isdir(directory):
        directory = layout.incoming_dir(commit)
    total = 0
    for entry in manifest["files"]:
        path = os.path.join(directory, entry["path"])
        try:
            if os.path.isfile(path) and os.path.getsize(path) == int(entry["size"]):
                total += int(entry["size"])
        except OSError:
            continue
    return total


def stale_incoming_bytes(layout, commit):
    """commit -> bytes of the incoming entries (directories, state, progress, log, work) of other commits."""
    sizes = {}
    for path in layout_mod.stale_incoming(layout, keep_commit=commit):
        other = os.path.basename(path).split(".", 1)[0]
        sizes[other] = sizes.get(other, 0) + tree_bytes(path)
    return sizes


def read_layout(layout, commit):
    """Links, revision sizes, abandoned downloads and the target's manifest (None when not pinned here)."""
    links = layout_mod.link_state(layout) if os.path.isdir(layout.model_dir) else {"current": None, "previous": None}
    revisions = dict((c, tree_bytes(layout.revision_dir(c))) for c in layout_mod.revision_commits(layout))
    manifest = None
    if commit and os.path.isfile(layout.manifest_path(commit)):
        manifest = load_manifest(layout.manifest_path(commit))
        if manifest.get("commit") != commit:
            raise CheckpointError("%s is the manifest of %s, not of %s" % (layout.manifest_path(commit), manifest.get("commit"), commit))
    deleting = dict((path, tree_bytes(path)) for path in layout_mod.deletion_leftovers(layout))
    return {"links": links, "revisions": revisions, "incoming": stale_incoming_bytes(layout, commit), "manifest": manifest,
            "deleting": deleting}


def layout_space_plan(layout, commit, free_bytes, target_bytes=None, target_source=SOURCE_PROFILE, rollback_copies=1,
                      keep=(), prune=True, margin_ratio=DEFAULT_MARGIN_RATIO, margin_min_bytes=DEFAULT_MARGIN_MIN_BYTES,
                      staged_bytes=None, manifest=None):
    """space_plan for ``commit`` on the model directory as it is now.

    The target's size is the pinned manifest's as soon as there is one (``manifest``: one about to
    be written), else ``target_bytes`` (``target_source`` says whether that is exact).
    ``staged_bytes`` replaces the bytes of the target found on disk (the download passes what it
    has verified).
    """
    commit = commit if is_commit_sha(commit or "") else None
    state = read_layout(layout, commit)
    manifest = manifest or state["manifest"]
    if manifest is not None:
        size, source = manifest["total_bytes"], SOURCE_MANIFEST
        found = present_bytes(layout, manifest)
    else:
        if target_bytes is None:
            raise ValueError("no manifest of %s under %s and no size given for it" % (commit or "the target", layout.model_dir))
        size, source = target_bytes, target_source
        found = tree_bytes(layout.revision_dir(commit)) if commit else 0
    target = {"commit": commit, "bytes": size, "source": source, "present_bytes": found if staged_bytes is None else staged_bytes}
    return space_plan(target, free_bytes, state["revisions"], state["links"], rollback_copies, keep, prune,
                      margin_ratio, margin_min_bytes, state["incoming"], state["deleting"])


def free_bytes_at(path, statvfs=os.statvfs):
    """Free bytes for the service's writes on the filesystem of ``path`` (or its nearest existing parent)."""
    return space_from_statvfs(statvfs(nearest_existing(path)[0]))["free_bytes"]


def checkpoint_space(params, statvfs=os.statvfs):
    """The checkpoint_space module's result: ``healthy``, ``problems``, ``summary`` and the plan as ``space``."""
    layout = layout_mod.Layout(params["model_dir"])
    result = {"changed": False, "healthy": True, "problems": [], "model_dir": layout.model_dir}
    source = SOURCE_GIVEN if params.get("target_bytes_exact") else SOURCE_PROFILE
    try:
        plan = layout_space_plan(
            layout, params.get("commit") or "", free_bytes_at(layout.model_dir, statvfs), params.get("target_bytes"), source,
            params.get("rollback_copies", 1), params.get("keep") or (), params.get("prune", True),
            params.get("free_space_margin_ratio", DEFAULT_MARGIN_RATIO),
            params.get("free_space_margin_min_bytes", DEFAULT_MARGIN_MIN_BYTES))
    except (OSError, ValueError, CheckpointError, layout_mod.LayoutError) as exc:
        result["healthy"] = False
        result["problems"].append(problem(CRITICAL, "space_unknown", "cannot plan the space in %s: %s" % (layout.model_dir, exc)))
        return result
    result.update({"space": plan, "summary": summary(plan, layout.model_dir)})
    if not plan["fits"]:
        result["healthy"] = False
        result["problems"].append(problem(CRITICAL, "insufficient_space", refusal(plan, layout.model_dir)))
    return result
