# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The on-disk layout of staged checkpoints and the atomic moves between its states (private).

Per model, under the checkpoint root::

    <model_dir>/
      revisions/<commit>/        complete, verified revisions (exactly the repository's files)
      current -> revisions/<c>   what engines serve (relative symlink)
      previous -> revisions/<c>  the rollback copy
      incoming/<commit>/         a download in progress; renamed into revisions/ when verified
      incoming/<commit>.state.json   per-file verification records of that download
      incoming/<commit>.progress.json / .log   progress for the operator
      incoming/<commit>.work/    per-file temporary download directories
      manifests/<commit>.json    the manifest pinned from the Hub (offline truth)
      manifests/<commit>.stamp.json  sizes and mtimes recorded by the last full verification
      rollback.json              the last rollback (keeps a second rollback run a no-op)
      .lock                      one checkpoint run at a time

A revision directory only ever appears under revisions/ by rename from incoming/ after its
verification, and ``current`` only ever points into revisions/ at a revision with a stamp,
swapped by rename(2), so no reader ever sees a half-written checkpoint.

Durability: a rename is only as durable as its directory, and a file's data only once it is
fsynced. Every file is fsynced before it is recorded as verified, and each rename here is
followed by an fsync of the directories it changed (``rename_durable``, ``swap_link``), so a
power loss never leaves a record or a stamp that vouches for data still in the page cache.

A directory is removed by renaming it to ``<name>.deleting.<pid>`` first; a run killed in the
middle of the removal leaves that name behind, and the next run (under the lock) finishes it
(``deletion_leftovers``, ``resume_deletions``).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import time

COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
# What remove_tree renames a directory to before it deletes it.
DELETING_RE = re.compile(r"\.deleting\.[0-9]+$")
LINK_NAMES = ("current", "previous")


class LayoutError(Exception):
    """A layout state that the requested step must not act on."""


def model_dir_name(repo_id):
    """Directory name for a repository: ``org/name`` becomes ``org--name`` (as the HF cache does)."""
    return repo_id.replace("/", "--")


class Layout:
    """Paths of one model's directory; no filesystem access."""

    def __init__(self, model_dir):
        self.model_dir = os.path.abspath(model_dir)

    def path(self, *parts):
        return os.path.join(self.model_dir, *parts)

    def revision_dir(self, commit):
        return self.path("revisions", commit)

    def incoming_dir(self, commit):
        return self.path("incoming", commit)

    def incoming_state(self, commit):
        return self.path("incoming", commit + ".state.json")

    def progress_file(self, commit):
        return self.path("incoming", commit + ".progress.json")

    def log_file(self, commit):
        return self.path("incoming", commit + ".log")

    def work_dir(self, commit):
        return self.path("incoming", commit + ".work")

    def manifest_path(self, commit):
        return self.path("manifests", commit + ".json")

    def stamp_path(self, commit):
        return self.path("manifests", commit + ".stamp.json")

    def link(self, name):
        return self.path(name)

    def rollback_record(self):
        return self.path("rollback.json")

    def lock_path(self):
        return self.path(".lock")


def ensure_dirs(layout, mode=0o755):
    """Create the model directory and its fixed subdirectories; returns the ones created."""
    created = []
    for sub in ("", "revisions", "incoming", "manifests"):
        target = layout.path(sub) if sub else layout.model_dir
        if not os.path.isdir(target):
            # exist_ok: a concurrent run may create it between the test and the call.
            os.makedirs(target, mode, exist_ok=True)
            created.append(target)
    return created


def link_commit(layout, name):
    """The commit a ``current``/``previous`` link points at, or None when absent.

    Raises LayoutError when the link exists but does not point at ``revisions/<commit>``:
    something other than this collection changed it, and guessing would be wrong.
    """
    link = layout.link(name)
    if not os.path.islink(link):
        if os.path.lexists(link):
            raise LayoutError("%s exists but is not a symlink" % link)
        return None
    target = os.readlink(link)
    parts = os.path.normpath(target).split(os.sep)
    if len(parts) != 2 or parts[0] != "revisions" or not COMMIT_RE.match(parts[1]):
        raise LayoutError("%s points at %r, expected revisions/<40-hex commit>" % (link, target))
    return parts[1]


def link_state(layout):
    """``{"current": commit|None, "previous": commit|None}``; an odd link raises LayoutError."""
    return dict((name, link_commit(layout, name)) for name in LINK_NAMES)


def revision_commits(layout):
    """Commits present under revisions/, sorted by the directories' mtime (oldest first)."""
    base = layout.path("revisions")
    try:
        names = [n for n in os.listdir(base) if COMMIT_RE.match(n) and os.path.isdir(os.path.join(base, n))]
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return []
        raise
    return sorted(names, key=lambda n: (os.stat(os.path.join(base, n)).st_mtime, n))


def fsync_dir(path):
    """fsync a directory, so that the names created, renamed or removed in it survive a power loss."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path):
    """fsync a file's data and inode (written by any process: the page cache is per inode)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def rename_durable(source, target):
    """rename(2), then fsync the target's directory (and the source's, when it is another one)."""
    os.rename(source, target)
    fsync_dir(os.path.dirname(target))
    if os.path.dirname(source) != os.path.dirname(target):
        fsync_dir(os.path.dirname(source))


def makedirs_durable(path, base):
    """Create ``path`` (under the existing directory ``base``) and fsync the parent of each directory created."""
    missing = []
    current = path
    while not os.path.isdir(current) and current != base:
        missing.append(current)
        current = os.path.dirname(current)
    for directory in reversed(missing):
        os.makedirs(directory, exist_ok=True)
        fsync_dir(os.path.dirname(directory))


def swap_link(layout, name, commit):
    """Point ``name`` at revisions/<commit> atomically: a new symlink renamed over the old one."""
    if not COMMIT_RE.match(commit or ""):
        raise LayoutError("refusing to point %s at %r: not a 40-hex commit" % (name, commit))
    if not os.path.isdir(layout.revision_dir(commit)):
        raise LayoutError("refusing to point %s at %s: no such revision directory" % (name, layout.revision_dir(commit)))
    temporary = layout.path(".%s.%d.tmp" % (name, os.getpid()))
    if os.path.lexists(temporary):
        os.unlink(temporary)
    os.symlink(os.path.join("revisions", commit), temporary)
    os.replace(temporary, layout.link(name))
    fsync_dir(layout.model_dir)


def write_json_atomic(path, data):
    temporary = "%s.%d.tmp" % (path, os.getpid())
    with open(temporary, "w") as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    fsync_dir(os.path.dirname(path))


def read_json(path):
    """Parsed JSON, or None when the file is missing or not valid JSON."""
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def plan_promotion(links, commit):
    """What promoting ``commit`` changes: ``{"current": c, "previous": p}`` after, and whether anything moves.

    The old ``current`` becomes ``previous``; promoting what is already current moves nothing.
    """
    if links.get("current") == commit:
        return {"changed": False, "current": commit, "previous": links.get("previous")}
    return {"changed": True, "current": commit, "previous": links.get("current") or links.get("previous")}


def plan_rollback(links, record):
    """What rolling back changes, given the link state and the last rollback record.

    ``current`` and ``previous`` swap, so a later roll-forward is the same step. A second run
    right after a rollback (the record says we already went from previous to current) is a no-op.
    """
    current, previous = links.get("current"), links.get("previous")
    if record and record.get("to") == current and record.get("from") == previous:
        return {"changed": False, "current": current, "previous": previous}
    if not previous:
        raise LayoutError("there is no previous revision to roll back to (current is %s)" % (current or "unset"))
    return {"changed": True, "current": previous, "previous": current}


def prune_candidates(layout, keep):
    """Revision directories not in ``keep`` (the linked commits plus any the caller pins)."""
    return [c for c in revision_commits(layout) if c not in set(keep)]


def stale_incoming(layout, keep_commit=None):
    """Incoming entries (directories and their state/progress/log/work files) of other commits."""
    base = layout.path("incoming")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    stale = []
    for name in names:
        commit = name.split(".", 1)[0]
        # Interrupted deletions are deletion_leftovers, counted and removed once, not here again.
        if COMMIT_RE.match(commit) and commit != keep_commit and not DELETING_RE.search(name):
            stale.append(os.path.join(base, name))
    return stale


def remove_tree(path):
    """Remove a file, symlink or directory tree; a missing path is fine."""
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
    elif os.path.isdir(path):
        # Rename first so a crash mid-delete never leaves a half tree under its real name.
        doomed = "%s.deleting.%d" % (path, os.getpid())
        os.rename(path, doomed)
        shutil.rmtree(doomed)


def deletion_leftovers(layout):
    """Paths that an interrupted remove_tree left (``*.deleting.<pid>``) in the model directory,
    revisions/ and incoming/, sorted."""
    found = []
    for sub in ("", "revisions", "incoming"):
        base = layout.path(sub) if sub else layout.model_dir
        try:
            names = os.listdir(base)
        except OSError:
            continue
        found.extend(os.path.join(base, name) for name in names if DELETING_RE.search(name))
    return sorted(found)


def commit_of_leftover(path):
    """The commit a leftover belonged to (``<commit>[.work].deleting.<pid>``), or None."""
    commit = os.path.basename(path).split(".", 1)[0]
    return commit if COMMIT_RE.match(commit) else None


def resume_deletions(layout, paths=None):
    """Finish the removals an interrupted run left; returns the paths removed. Call it under ModelLock."""
    done = []
    for path in deletion_leftovers(layout) if paths is None else paths:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.unlink(path)
        else:
            continue
        done.append(path)
    return done


class ModelLock:
    """An exclusive flock on <model_dir>/.lock; a second run fails at once instead of racing.

    Every step that changes the layout takes it before it reads any state (links, revisions,
    prune lists), so that what it acts on cannot change under it.
    """

    def __init__(self, layout):
        self.layout = layout
        self.handle = None

    def __enter__(self):
        if not os.path.isdir(self.layout.model_dir):
            raise LayoutError("no model directory at %s: pin the revision first (checkpoint_pin)" % self.layout.model_dir)
        self.handle = open(self.layout.lock_path(), "a+")
        try:
            fcntl.flock(self.handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.handle.seek(0)
            holder = self.handle.read().strip() or "unknown"
            self.handle.close()
            raise LayoutError("another checkpoint run holds %s (%s); wait for it or stop it" % (self.layout.lock_path(), holder)) from None
        self.handle.seek(0)
        self.handle.truncate()
        self.handle.write("pid %d since %s\n" % (os.getpid(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())))
        self.handle.flush()
        return self

    def __exit__(self, *exc_info):
        if self.handle is not None:
            fcntl.flock(self.handle.fileno(), fcntl.LOCK_UN)
            self.handle.close()
        return False
