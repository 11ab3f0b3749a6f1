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
            os.makedirs(target, mode)
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


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
    _fsync_dir(layout.model_dir)


def write_json_atomic(path, data):
    temporary = "%s.%d.tmp" % (path, os.getpid())
    with open(temporary, "w") as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    _fsync_dir(os.path.dirname(path))


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
        if COMMIT_RE.match(commit) and commit != keep_commit:
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


class ModelLock:
    """An exclusive flock on <model_dir>/.lock; a second run fails at once instead of racing."""

    def __init__(self, layout):
        self.layout = layout
        self.handle = None

    def __enter__(self):
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
