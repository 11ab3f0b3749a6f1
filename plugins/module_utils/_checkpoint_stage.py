# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Stage a pinned revision: resume, check space, download, verify, and move it into revisions/ (private).

Promotion to ``current`` is a separate step (``promote``) so that callers can stage on every
host of a batch before any of them switches.

Every step that changes the layout takes the model's lock first, then finishes what an
interrupted removal left (``*.deleting.<pid>``), and only then reads the links, the staged
state and the prune lists: a second run on the same host is refused at once (the lock names
its holder) instead of acting on lists that the first run is about to change. Check mode
takes no lock and changes nothing.

Durability, in the order a power loss can test it: each file's data is fsynced before it is
recorded as verified (by the download, or here when a resumed file is hashed or trusted from an
older record); the revision directory is renamed into revisions/ and both directories are
fsynced; only then is the stamp written (itself fsynced, renamed, its directory fsynced).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.gpufleet.serving.plugins.module_utils import _checkpoint_layout as layout_mod
from ansible_collections.gpufleet.serving.plugins.module_utils import _checkpoint_space as space_mod
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_download import Downloader, DownloadError, plan_batches
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_manifest import CheckpointError, load_manifest
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_peer import FleetSources, fleet_origin_workers
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_verify import (
    _matches_record,
    load_stamp,
    make_stamp,
    stamp_usable,
    verify_file,
    verify_tree,
    write_stamp_atomic,
)
from ansible_collections.gpufleet.serving.plugins.module_utils._storage import describe_bytes, nearest_existing


def load_pinned_manifest(layout, commit):
    path = layout.manifest_path(commit)
    if not os.path.isfile(path):
        raise CheckpointError("no manifest for %s at %s: pin the revision first (checkpoint_pin)" % (commit, path))
    manifest = load_manifest(path)
    if manifest.get("commit") != commit:
        raise CheckpointError("%s is the manifest of %s, not of %s" % (path, manifest.get("commit"), commit))
    return manifest


def staged_state(layout, manifest, trust_remote_code, workers, deep=False):
    """Verification of revisions/<commit> when it exists (fast unless ``deep``), else None."""
    commit = manifest["commit"]
    directory = layout.revision_dir(commit)
    if not os.path.isdir(directory):
        return None
    stamp = load_stamp(layout.stamp_path(commit))
    if stamp is None:
        return {"ok": False, "problems": [{"path": directory, "kind": "unstamped",
                                           "message": "%s has no verification stamp" % directory}]}
    return verify_tree(directory, manifest, deep=deep, stamp=stamp, workers=workers,
                       trust_remote_code=trust_remote_code)


def _record_entry(path):
    """The record of a verified file whose data is already fsynced (``synced``: a record without it
    comes from a version that did not fsync, and the file is fsynced before it is trusted)."""
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "synced": True}


def _locked(layout, check_mode):
    """The model lock for a run that changes something; check mode reads without it."""
    return contextlib.nullcontext() if check_mode else layout_mod.ModelLock(layout)


def resume_scan(layout, manifest, workers):
    """Decide per file what a previous, interrupted run left: verified, to re-check, or to fetch.

    Returns (records, to_download, rehashed). A recorded file whose size and mtime are unchanged
    is trusted; a present file of the right size without a record (finished just before a kill)
    is hashed once; anything else is removed and fetched again.
    """
    commit = manifest["commit"]
    incoming = layout.incoming_dir(commit)
    state = layout_mod.read_json(layout.incoming_state(commit)) or {}
    recorded = state.get("files", {}) if state.get("commit") == commit else {}
    records, to_hash, to_download = {}, [], []
    for entry in manifest["files"]:
        path = os.path.join(incoming, entry["path"])
        if not os.path.isfile(path):
            to_download.append(entry)
            continue
        st = os.stat(path)
        known = recorded.get(entry["path"])
        if known and known.get("size") == st.st_size == entry["size"] and known.get("mtime_ns") == st.st_mtime_ns:
            if not known.get("synced"):
                layout_mod.fsync_file(path)
                known = dict(known, synced=True)
            records[entry["path"]] = known
        elif st.st_size == entry["size"]:
            to_hash.append(entry)
        else:
            os.unlink(path)
            to_download.append(entry)
    rehashed = 0
    if to_hash:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            outcomes = list(pool.map(lambda e: (e, verify_file(incoming, e)), to_hash))
        for entry, problem in outcomes:
            rehashed += 1
            if problem:
                os.unlink(os.path.join(incoming, entry["path"]))
                to_download.append(entry)
            else:
                # Finished just before a kill: its data may still be only in the page cache.
                layout_mod.fsync_file(os.path.join(incoming, entry["path"]))
                records[entry["path"]] = _record_entry(os.path.join(incoming, entry["path"]))
    return records, to_download, rehashed


# FICLONE (linux/fs.h): the new file shares the source's extents, copy-on-write.
FICLONE = 0x40049409


def content_key(entry):
    """Files with the same key have the same bytes: sha256 for LFS files, the git blob id otherwise."""
    return (entry.get("sha256") or entry["git_oid"], int(entry["size"]))


def local_copies(layout, commit):
    """{content key: path} of the files of this model's other stamped revisions that still match their stamp."""
    found = {}
    for other in layout_mod.revision_commits(layout):
        if other == commit:
            continue
        stamp = load_stamp(layout.stamp_path(other))
        try:
            manifest = load_manifest(layout.manifest_path(other))
        except CheckpointError:
            continue
        if stamp is None or not stamp_usable(stamp, manifest):
            continue
        for entry in manifest["files"]:
            path = os.path.join(layout.revision_dir(other), entry["path"])
            try:
                st = os.stat(path)
            except OSError:
                continue
            if _matches_record(st, stamp["files"].get(entry["path"])):
                found.setdefault(content_key(entry), path)
    return found


def clone_or_copy(source, target):
    """Reflink ``source`` to ``target`` where the filesystem can (XFS, btrfs); else copy it.

    Returns "reflink" or "copy". Never a hard link: the stamps record each file's inode and ctime
    (a link changes the served file's ctime), and a rollback copy must not share a damaged block
    with the revision it backs up.
    """
    with open(source, "rb") as src, open(target, "wb") as dst:
        try:
            fcntl.ioctl(dst.fileno(), FICLONE, src.fileno())
            return "reflink"
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.ENOTTY, errno.EXDEV, errno.EINVAL, errno.ENOSYS):
                raise
        shutil.copyfileobj(src, dst, 16 * 1024 * 1024)
    return "copy"


def reuse_local(layout, commit, manifest, to_download, records, workers):
    """Take unchanged files of an upgrade from the revisions already on this host instead of fetching them.

    Copies are verified like a download; a reflink shares the extents of a file that matched its
    stamp a moment ago, so it is recorded without reading it. Returns (still to download, bytes
    reused, how: {"reflink": n, "copy": n}).
    """
    sources = local_copies(layout, commit)
    wanted = [entry for entry in to_download if content_key(entry) in sources]
    if not wanted:
        return to_download, 0, {}
    incoming = layout.incoming_dir(commit)

    def one(entry):
        final = os.path.join(incoming, entry["path"])
        layout_mod.makedirs_durable(os.path.dirname(final), incoming)
        partial = final + ".reuse"
        how = clone_or_copy(sources[content_key(entry)], partial)
        if how == "copy":
            os.replace(partial, final)
            problem = verify_file(incoming, entry)
            if problem:
                os.unlink(final)
                return entry, None
        else:
            os.replace(partial, final)
        layout_mod.fsync_file(final)
        layout_mod.fsync_dir(os.path.dirname(final))
        return entry, how

    reused, kinds, bytes_reused = set(), {}, 0
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for entry, how in pool.map(one, wanted):
            if how is None:
                continue
            records[entry["path"]] = _record_entry(os.path.join(incoming, entry["path"]))
            reused.add(entry["path"])
            kinds[how] = kinds.get(how, 0) + 1
            bytes_reused += int(entry["size"])
    return [entry for entry in to_download if entry["path"] not in reused], bytes_reused, kinds


class ProgressWriter:
    """Progress JSON (for the role's wait loop) and a log a person can follow with tail -f."""

    def __init__(self, layout, commit, token=None):
        self.progress_path = layout.progress_file(commit)
        self.log_path = layout.log_file(commit)
        self.token = token

    def __call__(self, progress):
        progress = dict(progress, updated=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        layout_mod.write_json_atomic(self.progress_path, progress)
        self.log(progress.get("message", ""))

    def log(self, line):
        with open(self.log_path, "a") as handle:
            handle.write("%s %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), line))


def stage(layout, commit, repo_id, options, free_bytes_of, check_mode=False):
    """Make revisions/<commit> exist, complete and verified. Returns the result dict for the module.

    ``options``: endpoint, token, workers, verify_workers, stall_seconds, retries, backoff_base,
    backoff_cap, disable_xet, xet_fallback, margin_ratio, margin_min_bytes, rollback_copies, keep,
    prune, trust_remote_code, deadline_seconds, python. ``free_bytes_of(path)`` gives the space
    available to the service. Before any byte is fetched the space plan (_checkpoint_space) must
    fit; the revisions it counts as prunable now are then removed, and only then does the download start.
    """
    with _locked(layout, check_mode):
        return _stage_locked(layout, commit, repo_id, options, free_bytes_of, check_mode)


def _stage_locked(layout, commit, repo_id, options, free_bytes_of, check_mode):
    """stage() once the lock is held (or, in check mode, without it)."""
    leftovers = layout_mod.deletion_leftovers(layout)
    resumed = [] if check_mode else layout_mod.resume_deletions(layout, leftovers)
    manifest = load_pinned_manifest(layout, commit)
    if manifest.get("repo_id") != repo_id:
        raise CheckpointError("manifest %s is for %s, not %s" % (layout.manifest_path(commit), manifest.get("repo_id"), repo_id))
    trust = options.get("trust_remote_code", False)
    # Finishing an interrupted removal is a change (check mode: would be one).
    result = {"changed": bool(leftovers), "commit": commit, "revision_dir": layout.revision_dir(commit),
              "total_bytes": manifest["total_bytes"], "bytes_downloaded": 0, "hub_requests": False,
              "resumed_deletions": resumed}
    if check_mode:
        result["would_resume_deletions"] = leftovers

    present = staged_state(layout, manifest, trust, options.get("verify_workers", 4))
    if present is not None and present["ok"]:
        result["state"] = "present"
        return result
    if present is not None:
        links = layout_mod.link_state(layout)
        if commit in links.values():
            raise CheckpointError("staged revision %s, which is linked as %s, fails verification: %s"
                                  % (commit, [n for n, c in links.items() if c == commit],
                                     "; ".join(p["message"] for p in present["problems"][:5])))
    if check_mode:
        plan = _space_plan(layout, commit, manifest, options, free_bytes_of)
        result.update({"changed": True, "state": "would_download" if present is None else "would_repair", "space": plan,
                       "would_prune": [item["commit"] for item in plan["prunable"]]})
        return result

    # Refuse before anything on disk changes; the plan is made again below from the verified files.
    _space_plan(layout, commit, manifest, options, free_bytes_of)
    layout_mod.ensure_dirs(layout)
    if present is not None:
        # A damaged revision nobody serves goes back to incoming/ and only its bad files are fetched again.
        layout_mod.remove_tree(layout.incoming_dir(commit))
        layout_mod.rename_durable(layout.revision_dir(commit), layout.incoming_dir(commit))
    incoming = layout.incoming_dir(commit)
    if not os.path.isdir(incoming):
        layout_mod.makedirs_durable(incoming, layout.path("incoming"))
    layout_mod.remove_tree(layout.work_dir(commit))
    records, to_download, rehashed = resume_scan(layout, manifest, options.get("verify_workers", 4))
    state = {"commit": commit, "files": records}
    layout_mod.write_json_atomic(layout.incoming_state(commit), state)
    result.update({"files_resumed": len(records), "files_rehashed": rehashed})

    verified = sum(int(f["size"]) for f in manifest["files"] if f["path"] in records)
    plan = _space_plan(layout, commit, manifest, options, free_bytes_of, staged_bytes=verified)
    result["space"] = plan
    # Prunable now: neither current, nor previous (rollback copies 1), nor kept, nor the target.
    result["pruned_before_download"] = _prune_now(layout, plan)
    # After the prune, which the plan counted on for room: local copies take space like downloads.
    to_download, bytes_reused, reuse_kinds = reuse_local(layout, commit, manifest, to_download, records,
                                                         options.get("verify_workers", 4))
    layout_mod.write_json_atomic(layout.incoming_state(commit), state)
    result.update({"files_to_download": len(to_download), "bytes_reused_locally": bytes_reused,
                   "files_reused_locally": reuse_kinds})

    writer = ProgressWriter(layout, commit, options.get("token"))
    if to_download:
        result["hub_requests"] = True
        writer.log("downloading %d file(s), %s of %s, from %s" % (
            len(to_download), describe_bytes(plan["target"]["missing_bytes"]), describe_bytes(plan["target"]["bytes"]),
            options.get("endpoint") or "the default Hub endpoint"))

        def record(entry, path):
            state["files"][entry["path"]] = _record_entry(path)
            layout_mod.write_json_atomic(layout.incoming_state(commit), state)

        sources = None
        origin_workers = int(options.get("workers", 4))
        if options.get("peers"):
            sources = FleetSources(
                options["peer_name"], options["peers"], options["peer_token"], commit,
                plan_batches(manifest["files"], options.get("small_file_bytes", 16 * 1024 * 1024)),
                timeout=min(float(options.get("stall_seconds", 120)), 30.0),
                idle_grace=max(60.0, float(options.get("stall_seconds", 120))))
            sources.start()
            origin_workers = fleet_origin_workers(origin_workers, len(sources.members))
            writer.log("fleet staging over %d host(s): %d origin transfer(s) at a time here" % (len(sources.members), origin_workers))
        downloader = Downloader(
            repo_id, commit, incoming, layout.work_dir(commit), verify=verify_file_at, record=record, report=writer,
            endpoint=options.get("endpoint"), token=options.get("token"), workers=origin_workers,
            stall_seconds=options.get("stall_seconds", 120), retries=options.get("retries", 5),
            backoff_base=options.get("backoff_base", 2.0), backoff_cap=options.get("backoff_cap", 60.0),
            disable_xet=options.get("disable_xet", False), xet_fallback=options.get("xet_fallback", True),
            python=options.get("python"), hf_home=layout.path(".hf-home"),
            deadline_seconds=options.get("deadline_seconds"), log=writer.log,
            small_file_bytes=options.get("small_file_bytes", 16 * 1024 * 1024), sources=sources,
            peer_workers=options.get("peer_workers", 4))
        already = sum(int(f["size"]) for f in manifest["files"] if f["path"] in records)
        try:
            summary = downloader.run(to_download, already, manifest["total_bytes"])
        except DownloadError as exc:
            writer({"state": "failed", "message": str(exc), "events": downloader.events[-20:],
                    "sources": dict(downloader.source_bytes)})
            raise CheckpointError("download of %s@%s failed: %s" % (repo_id, commit, exc)) from None
        finally:
            if sources is not None:
                sources.close()
        result.update({"bytes_downloaded": summary["bytes_downloaded"], "download_seconds": summary["seconds"],
                       "retries": summary["retries"], "events": summary["events"],
                       "bytes_by_source": summary["source_bytes"], "refused_peers": summary["refused_peers"]})
        result["hub_requests"] = summary["source_bytes"].get("origin", 0) > 0 or not options.get("peers")

    # Every file is verified and recorded; this pass checks completeness and extra files.
    final = verify_tree(incoming, manifest, deep=False, stamp=state, workers=options.get("verify_workers", 4),
                        trust_remote_code=trust)
    if not final["ok"]:
        raise CheckpointError("revision %s is not complete after download: %s"
                              % (commit, "; ".join(p["message"] for p in final["problems"][:10])))
    # Every file was fsynced before it was recorded; the directory's new name is durable before the stamp vouches for it.
    layout_mod.rename_durable(incoming, layout.revision_dir(commit))
    stamp = make_stamp(layout.revision_dir(commit), manifest)
    # Where this run's bytes came from (peers report it to each other as the fleet's origin traffic).
    stamp["staged_from"] = result.get("bytes_by_source") or {}
    stamp["download_seconds"] = result.get("download_seconds")
    write_stamp_atomic(layout.stamp_path(commit), stamp)
    for leftover in (layout.incoming_state(commit), layout.progress_file(commit), layout.work_dir(commit)):
        layout_mod.remove_tree(leftover)
    writer.log("revision %s staged and verified" % commit)
    result.update({"changed": True, "state": "staged"})
    return result


def _space_plan(layout, commit, manifest, options, free_bytes_of, staged_bytes=None):
    """The shared space plan for this download; refuses (nothing changed yet) when it does not fit."""
    try:
        plan = space_mod.layout_space_plan(
            layout, commit, free_bytes_of(nearest_existing(layout.model_dir)[0]), manifest["total_bytes"],
            space_mod.SOURCE_MANIFEST, options.get("rollback_copies", 1), options.get("keep") or (),
            options.get("prune", True), options.get("margin_ratio", space_mod.DEFAULT_MARGIN_RATIO),
            options.get("margin_min_bytes", space_mod.DEFAULT_MARGIN_MIN_BYTES), staged_bytes=staged_bytes)
    except ValueError as exc:
        raise CheckpointError(str(exc)) from None
    if not plan["fits"]:
        raise CheckpointError(space_mod.refusal(plan, layout.model_dir))
    return plan


def _prune_now(layout, plan):
    """Remove what the plan counted as prunable now (revision directories with their stamps, abandoned downloads)."""
    pruned = []
    for item in plan["prunable"]:
        if item["was"] == "deleting":
            # Left by an interrupted removal (the run resumes those under the lock before it plans).
            layout_mod.resume_deletions(layout, [item["path"]])
            continue
        if item["was"] == "incoming":
            for path in layout_mod.stale_incoming(layout, keep_commit=plan["target"]["commit"]):
                if os.path.basename(path).split(".", 1)[0] == item["commit"]:
                    layout_mod.remove_tree(path)
        else:
            layout_mod.remove_tree(layout.revision_dir(item["commit"]))
            layout_mod.remove_tree(layout.stamp_path(item["commit"]))
        pruned.append(item["commit"])
    if any(item["was"] == "previous" for item in plan["prunable"]):
        # rollback copies 0: no previous link is left pointing at a removed revision.
        layout_mod.remove_tree(layout.link("previous"))
    return pruned


def verify_file_at(entry, path):
    """Check one downloaded file (at ``path``, anywhere) against its manifest entry."""
    suffix = entry["path"]
    directory = path[:-len(suffix)] if path.endswith(suffix) else None
    if directory is None:
        return {"path": entry["path"], "kind": "missing", "message": "%s was not where the download put it (%s)" % (entry["path"], path)}
    return verify_file(directory, entry)


def promote(layout, commit, prune=True, keep=(), check_mode=False, trust_remote_code=False, workers=4, rollback_copies=1):
    """Make revisions/<commit> ``current`` (old current -> ``previous``, or pruned with ``rollback_copies`` 0), then prune the rest."""
    rollback_copies = space_mod.check_rollback_copies(rollback_copies)
    with _locked(layout, check_mode):
        leftovers = layout_mod.deletion_leftovers(layout)
        resumed = [] if check_mode else layout_mod.resume_deletions(layout, leftovers)
        manifest = load_pinned_manifest(layout, commit)
        present = staged_state(layout, manifest, trust_remote_code, workers)
        if present is None:
            raise CheckpointError("revision %s is not staged under %s; refusing to make it current" % (commit, layout.revision_dir(commit)))
        if not present["ok"]:
            raise CheckpointError("revision %s fails verification; refusing to make it current: %s"
                                  % (commit, "; ".join(p["message"] for p in present["problems"][:5])))
        links = layout_mod.link_state(layout)
        plan = layout_mod.plan_promotion(links, commit)
        if rollback_copies == 0:
            plan = dict(plan, previous=None, changed=plan["changed"] or links.get("previous") is not None)
        result = {"changed": plan["changed"] or bool(leftovers), "current": plan["current"], "previous": plan["previous"],
                  "before": links, "pruned": [], "resumed_deletions": resumed}
        if check_mode:
            result["would_resume_deletions"] = leftovers
        keep_set = set([plan["current"], plan["previous"]] + list(keep)) - set([None])
        doomed = layout_mod.prune_candidates(layout, keep_set) if prune else []
        stale = layout_mod.stale_incoming(layout, keep_commit=commit) if prune else []
        if doomed or stale:
            result["changed"] = True
        result["pruned"] = doomed
        result["pruned_incoming"] = stale
        if check_mode:
            return result
        if plan["changed"]:
            # previous first: a crash between the two swaps leaves both links on served-before revisions.
            if plan["previous"] and plan["previous"] != links.get("previous"):
                layout_mod.swap_link(layout, "previous", plan["previous"])
            layout_mod.swap_link(layout, "current", commit)
            if plan["previous"] is None and links.get("previous") is not None:
                # rollback copies 0: no previous link, and (below) no rollback copy kept.
                layout_mod.remove_tree(layout.link("previous"))
                layout_mod.fsync_dir(layout.model_dir)
        for old in doomed:
            layout_mod.remove_tree(layout.revision_dir(old))
            layout_mod.remove_tree(layout.stamp_path(old))
        for path in stale:
            layout_mod.remove_tree(path)
    return result


def rollback(layout, check_mode=False, trust_remote_code=False, workers=4):
    """Swap ``current`` and ``previous`` after checking ``previous`` still verifies; no download."""
    with _locked(layout, check_mode):
        links = layout_mod.link_state(layout)
        record = layout_mod.read_json(layout.rollback_record())
        plan = layout_mod.plan_rollback(links, record)
        result = {"changed": plan["changed"], "current": plan["current"], "previous": plan["previous"], "before": links}
        if not plan["changed"]:
            return result
        manifest = load_pinned_manifest(layout, plan["current"])
        present = staged_state(layout, manifest, trust_remote_code, workers)
        if not present or not present["ok"]:
            raise CheckpointError("previous revision %s fails verification, so rolling back to it would serve a damaged "
                                  "checkpoint: %s" % (plan["current"], "; ".join(p["message"] for p in (present or {}).get("problems", [])[:5])))
        if check_mode:
            return result
        layout_mod.swap_link(layout, "current", plan["current"])
        layout_mod.swap_link(layout, "previous", plan["previous"])
        layout_mod.write_json_atomic(layout.rollback_record(), {
            "from": links["current"], "to": plan["current"], "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    return result
