"""_checkpoint_stage: durability order, interrupted removals, and the lock taken before any state.

The durability tests spy on os.fsync, os.replace and os.rename (the real calls still run) and
check the order a power loss would test: a file's data is fsynced before it is renamed into
place and recorded, its directory after the rename, and the revision directory's new name
before the stamp. The lock tests run two real processes against one model directory.
"""

from __future__ import annotations

import fcntl
import json
import multiprocessing
import os
import time
from pathlib import Path

import checkpoint_trees as trees
import pytest
from ansible_collections.gpufleet.serving.plugins.module_utils import _checkpoint_layout as layout_mod
from ansible_collections.gpufleet.serving.plugins.module_utils import _checkpoint_space as space_mod
from ansible_collections.gpufleet.serving.plugins.module_utils import _checkpoint_stage as stage_mod
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_manifest import write_json_atomic
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_verify import make_stamp, write_stamp_atomic
from test_checkpoint_lifecycle import REPO, do_pin, do_stage, env, hub  # noqa: F401  # pylint: disable=unused-import

A = trees.COMMIT
B = trees.OTHER_COMMIT
C = "c" * 40
LOCKED = "another checkpoint run holds"


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


class Spy:
    """Records ("fsync", path), ("rename", source, target) and ("record", files) in call order."""

    def __init__(self, monkeypatch):
        self.events = []
        real_fsync, real_replace, real_rename = os.fsync, os.replace, os.rename

        def fsync(fd):
            self.events.append(("fsync", os.readlink("/proc/self/fd/%d" % fd)))
            return real_fsync(fd)

        def moved(real):
            def move(source, target, *args, **kwargs):
                source, target = os.fspath(source), os.fspath(target)
                if target.endswith(".state.json"):
                    # What the download state vouches for at this moment.
                    with open(source) as handle:
                        self.events.append(("record", frozenset(json.load(handle)["files"])))
                self.events.append(("rename", source, target))
                return real(source, target, *args, **kwargs)
            return move

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "replace", moved(real_replace))
        monkeypatch.setattr(os, "rename", moved(real_rename))

    def index(self, predicate, after=-1):
        for number, event in enumerate(self.events):
            if number > after and predicate(event):
                return number
        raise AssertionError("no such event after %d in %s" % (after, self.events))

    def fsyncs_of(self, suffix):
        return [n for n, e in enumerate(self.events) if e[0] == "fsync" and e[1].endswith("/" + suffix)]


def staged_revision(layout, commit, files=None):
    """revisions/<commit> with its manifest and stamp, as a finished stage leaves it (no Hub)."""
    layout_mod.ensure_dirs(layout)
    files, manifest = trees.build(layout.revision_dir(commit), files, commit)
    write_json_atomic(layout.manifest_path(commit), manifest)
    write_stamp_atomic(layout.stamp_path(commit), make_stamp(layout.revision_dir(commit), manifest))
    return manifest


def leftover(path, size):
    os.makedirs(path)
    Path(path, "model-00001-of-00002.safetensors").write_bytes(b"\0" * size)


def lock_is_held(layout):
    """Whether some open file description holds the model lock (flock conflicts even within one process)."""
    with open(layout.lock_path(), "a+") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        return False


# --------------------------------------------------------------------------------------
# Durability
# --------------------------------------------------------------------------------------


def test_download_fsyncs_each_file_before_its_record_and_everything_before_the_stamp(hub, env, monkeypatch):  # noqa: F811
    layout = layout_mod.Layout(env / "models" / "tiny")
    commit = hub["revs"][REPO]["A"]
    do_pin(hub, layout, REPO, commit)
    manifest = layout_mod.read_json(layout.manifest_path(commit))
    spy = Spy(monkeypatch)
    assert do_stage(hub, layout, REPO, commit)["state"] == "staged"

    incoming, revision = layout.incoming_dir(commit), layout.revision_dir(commit)
    for entry in manifest["files"]:
        name = entry["path"]
        final = os.path.join(incoming, name)
        # Once per file, not per chunk, and only here.
        assert len(spy.fsyncs_of(name)) == 1, (name, spy.fsyncs_of(name))
        synced = spy.fsyncs_of(name)[0]
        moved = spy.index(lambda e, final=final: e[0] == "rename" and e[2] == final)
        dir_synced = spy.index(lambda e, final=final: e == ("fsync", os.path.dirname(final)), after=moved)
        recorded = spy.index(lambda e, name=name: e[0] == "record" and name in e[1])
        assert synced < moved < dir_synced < recorded, name
    into_revisions = spy.index(lambda e: e[:3] == ("rename", incoming, revision))
    assert max(max(spy.fsyncs_of(e["path"])) for e in manifest["files"]) < into_revisions
    revisions_synced = spy.index(lambda e: e == ("fsync", layout.path("revisions")), after=into_revisions)
    incoming_synced = spy.index(lambda e: e == ("fsync", layout.path("incoming")), after=into_revisions)
    stamped = spy.index(lambda e: e[0] == "rename" and e[2] == layout.stamp_path(commit))
    assert revisions_synced < stamped and incoming_synced < stamped
    assert spy.index(lambda e: e == ("fsync", layout.path("manifests")), after=stamped)

    spy.events.clear()
    stage_mod.promote(layout, commit)
    swapped = spy.index(lambda e: e[0] == "rename" and e[2] == layout.link("current"))
    assert spy.index(lambda e: e == ("fsync", layout.model_dir), after=swapped)


def test_resumed_files_are_fsynced_before_they_are_recorded(tmp_path, monkeypatch):
    layout = layout_mod.Layout(tmp_path / "model")
    layout_mod.ensure_dirs(layout)
    files, manifest = trees.build(layout.incoming_dir(A))
    shard_1, shard_2 = (os.path.join(layout.incoming_dir(A), name) for name in (trees.SHARD_1, trees.SHARD_2))
    # A record from a version that did not fsync (no "synced"), and a complete file nobody recorded.
    st = os.stat(shard_1)
    layout_mod.write_json_atomic(layout.incoming_state(A), {"commit": A, "files": {
        trees.SHARD_1: {"size": st.st_size, "mtime_ns": st.st_mtime_ns}}})
    spy = Spy(monkeypatch)
    records, to_download, rehashed = stage_mod.resume_scan(layout, manifest, workers=2)
    assert to_download == [] and rehashed == len(files) - 1
    assert set(records) == set(files) and all(record["synced"] for record in records.values())
    assert ("fsync", shard_1) in spy.events and ("fsync", shard_2) in spy.events
    assert all(len(spy.fsyncs_of(name)) == 1 for name in files)


# --------------------------------------------------------------------------------------
# Interrupted removals (*.deleting.<pid>)
# --------------------------------------------------------------------------------------


def test_interrupted_removals_are_counted_then_finished_by_the_next_run(tmp_path):
    layout = layout_mod.Layout(tmp_path / "model")
    staged_revision(layout, A)
    layout_mod.swap_link(layout, "current", A)
    half_revision = layout.path("revisions", B + ".deleting.4242")
    half_work = layout.path("incoming", A + ".work.deleting.77")
    leftover(half_revision, 5000)
    leftover(half_work, 100)
    assert layout_mod.deletion_leftovers(layout) == sorted([half_revision, half_work])
    # Counted once each, as prunable now, even with pruning off; never seen as a revision or a download.
    for prune in (True, False):
        plan = space_mod.layout_space_plan(layout, A, 0, prune=prune, margin_min_bytes=0, margin_ratio=0)
        deleting = [item for item in plan["prunable"] if item["was"] == "deleting"]
        assert sorted((item["path"], item["bytes"]) for item in deleting) == sorted([(half_revision, 5000), (half_work, 100)])
        assert plan["prunable_bytes"] == 5100
    assert layout_mod.revision_commits(layout) == [A] and layout_mod.stale_incoming(layout, keep_commit=C) == []

    # Check mode reports them and removes nothing.
    checked = stage_mod.promote(layout, A, check_mode=True)
    assert checked["would_resume_deletions"] == sorted([half_revision, half_work]) and checked["changed"]
    assert os.path.isdir(half_revision) and os.path.isdir(half_work)
    # The next run finishes them, under the lock, and says so.
    promoted = stage_mod.promote(layout, A)
    assert promoted["resumed_deletions"] == sorted([half_revision, half_work]) and promoted["changed"]
    assert layout_mod.deletion_leftovers(layout) == [] and os.path.isdir(layout.revision_dir(A))
    assert not stage_mod.promote(layout, A)["changed"]


def test_stage_finishes_interrupted_removals_first(tmp_path):
    layout = layout_mod.Layout(tmp_path / "model")
    staged_revision(layout, A)
    half = layout.path("revisions", B + ".deleting.9")
    leftover(half, 10)
    staged = stage_mod.stage(layout, A, trees.REPO_ID, {}, lambda path: 10 ** 9)
    assert staged["state"] == "present" and staged["resumed_deletions"] == [half] and staged["changed"]
    assert not os.path.exists(half)


# --------------------------------------------------------------------------------------
# The lock comes first
# --------------------------------------------------------------------------------------


def test_every_state_read_of_a_changing_run_happens_under_the_lock(tmp_path, monkeypatch):
    layout = layout_mod.Layout(tmp_path / "model")
    staged_revision(layout, A)
    staged_revision(layout, B)
    layout_mod.swap_link(layout, "current", A)
    layout_mod.swap_link(layout, "previous", B)
    seen = []

    def watched(module, name):
        real = getattr(module, name)

        def call(*args, **kwargs):
            seen.append((name, lock_is_held(layout)))
            return real(*args, **kwargs)
        monkeypatch.setattr(module, name, call)

    for name in ("link_state", "prune_candidates", "stale_incoming", "deletion_leftovers", "read_json"):
        watched(layout_mod, name)
    watched(stage_mod, "staged_state")
    watched(space_mod, "layout_space_plan")

    stage_mod.stage(layout, A, trees.REPO_ID, {}, lambda path: 10 ** 9)
    stage_mod.promote(layout, A)
    stage_mod.rollback(layout)
    names = set(name for name, _held in seen)
    assert {"link_state", "prune_candidates", "stale_incoming", "deletion_leftovers", "staged_state", "read_json"} <= names
    assert [name for name, held in seen if not held] == []

    # Check mode changes nothing and so takes no lock (a probe must not fail because a run is going on).
    seen.clear()
    with layout_mod.ModelLock(layout):
        assert stage_mod.promote(layout, B, check_mode=True)["current"] == B
        assert stage_mod.stage(layout, A, trees.REPO_ID, {}, lambda path: 10 ** 9, check_mode=True)["state"] == "present"


def _promote_in_child(model_dir, commit, outcome, pause=None):
    """A second process: promote ``commit``; with ``pause`` (ready, go), stop on the first state read until go exists."""
    layout = layout_mod.Layout(model_dir)
    if pause:
        real = stage_mod.staged_state

        def paused(*args, **kwargs):
            Path(pause[0]).touch()
            deadline = time.monotonic() + 30
            while not os.path.exists(pause[1]) and time.monotonic() < deadline:
                time.sleep(0.02)
            return real(*args, **kwargs)
        stage_mod.staged_state = paused
    try:
        result = {"ok": True, "result": stage_mod.promote(layout, commit)}
    except Exception as exc:  # pylint: disable=broad-except
        result = {"ok": False, "error": "%s: %s" % (type(exc).__name__, exc)}
    Path(outcome).write_text(json.dumps(result, default=str))


def test_two_concurrent_runs_one_is_refused_and_neither_deletes_the_others_revision(tmp_path):
    layout = layout_mod.Layout(tmp_path / "model")
    staged_revision(layout, A)
    staged_revision(layout, B)
    layout_mod.swap_link(layout, "current", A)
    ready, go = str(tmp_path / "ready"), str(tmp_path / "go")
    upgrade_out, rerun_out = str(tmp_path / "upgrade.json"), str(tmp_path / "rerun.json")
    fork = multiprocessing.get_context("fork")
    # Run 1 upgrades to B and stops while it reads the state; run 2 re-deploys A (B is unlinked to it).
    upgrade = fork.Process(target=_promote_in_child, args=(layout.model_dir, B, upgrade_out, (ready, go)))
    upgrade.start()
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(ready) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert os.path.exists(ready), "the upgrading run did not start"
        rerun = fork.Process(target=_promote_in_child, args=(layout.model_dir, A, rerun_out))
        rerun.start()
        rerun.join(30)
    finally:
        Path(go).touch()
        upgrade.join(30)
    rerun_result = json.loads(Path(rerun_out).read_text())
    upgrade_result = json.loads(Path(upgrade_out).read_text())
    # The second run is refused at once, naming the lock and its holder; the first one finishes.
    assert not rerun_result["ok"]
    assert LOCKED in rerun_result["error"] and layout.lock_path() in rerun_result["error"]
    assert "pid %d" % upgrade.pid in rerun_result["error"]
    assert upgrade_result["ok"], upgrade_result
    assert layout_mod.link_state(layout) == {"current": B, "previous": A}
    assert os.path.isdir(layout.revision_dir(A)) and os.path.isdir(layout.revision_dir(B))
    assert stage_mod.staged_state(layout, layout_mod.read_json(layout.manifest_path(B)), False, 2)["ok"]


def test_a_run_without_a_model_directory_is_told_to_pin_first(tmp_path):
    with pytest.raises(layout_mod.LayoutError, match="no model directory at .*: pin the revision first"):
        stage_mod.promote(layout_mod.Layout(tmp_path / "absent"), A)
