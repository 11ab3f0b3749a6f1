# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Download a pinned revision's files with huggingface_hub under a watchdog (private).

huggingface_hub only checks sizes and resumes only inside one process, and an Xet transfer can
stall for hours without an error. So each file is fetched by its own child process running
``hf_hub_download`` into a private work directory; the parent watches the bytes on disk and
kills a child that made no progress for ``stall_seconds``, retries with exponential back-off
(optionally with Xet disabled), and verifies every finished file against the manifest before it
moves into the incoming revision. Verified files are recorded (size, mtime) so that a run that
was killed goes on where it stopped without re-fetching or re-hashing them.

Durability: a verified file is fsynced (once, by the verifying thread, so in parallel) before it
is renamed into place, its directory is fsynced after the rename, and only then is it recorded:
a record never vouches for data that a power loss could still take away.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.gpufleet.serving.plugins.module_utils import _checkpoint_layout as layout_mod
from ansible_collections.gpufleet.serving.plugins.module_utils._redact import redact

# The child gets its arguments as one JSON argv item and the token only through HF_TOKEN.
CHILD_CODE = r"""
import json, signal, sys
try:  # die with the parent (PR_SET_PDEATHSIG): a killed run leaves no orphan downloads behind
    import ctypes
    ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)
except Exception:
    pass
args = json.loads(sys.argv[1])
filename = None
try:
    from huggingface_hub import hf_hub_download
    for filename in args["filenames"]:
        path = hf_hub_download(repo_id=args["repo_id"], filename=filename, revision=args["revision"],
                               local_dir=args["local_dir"])
        print(json.dumps({"done": filename, "path": path}), flush=True)
except BaseException as exc:  # report every failure as data for the parent
    print(json.dumps({"error_type": type(exc).__name__, "message": str(exc)[:4000], "filename": filename}), flush=True)
    sys.exit(3)
"""

# Small files share one child (one interpreter start instead of one per file); large ones get their own
# so that the watchdog and the retries act per file.
SMALL_FILE_BYTES = 16 * 1024 * 1024


def plan_batches(entries, small_file_bytes=SMALL_FILE_BYTES):
    """Lists of entries, one per child: every large file alone, the small ones together."""
    small = [e for e in entries if int(e["size"]) < small_file_bytes]
    large = [[e] for e in entries if int(e["size"]) >= small_file_bytes]
    return ([small] if small else []) + large


# Errors that no retry fixes: the pin or the repository is wrong, or access is denied.
FATAL_ERRORS = ("RepositoryNotFoundError", "RevisionNotFoundError", "EntryNotFoundError",
                "GatedRepoError", "DisabledRepoError", "LocalEntryNotFoundError")


class DownloadError(Exception):
    """The download could not complete; the message says which file and why."""


def backoff_seconds(attempt, base, cap):
    """Delay before retry number ``attempt`` (1-based): base, 2*base, 4*base, ... at most cap."""
    return min(float(cap), float(base) * (2 ** max(0, attempt - 1)))


def si_bytes(value):
    """Decimal units, as download rates and disk sizes are quoted: 1.70 TB, 1.2 GB/s."""
    amount = float(value)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(amount) < 1000 or unit == "TB":
            return ("%d %s" % (amount, unit)) if unit == "B" else ("%.2f %s" % (amount, unit))
        amount /= 1000.0
    return "%.2f PB" % amount


def format_progress(done, total, rate, elapsed):
    """One line for the operator: bytes done of total, percent, rate and ETA."""
    percent = (100.0 * done / total) if total else 100.0
    line = "%s of %s (%.1f%%)" % (si_bytes(done), si_bytes(total), percent)
    if rate and rate > 0:
        line += ", %s/s" % si_bytes(rate)
        remaining = max(0, total - done)
        line += ", ETA %s" % format_duration(remaining / rate)
    else:
        line += ", rate unknown"
    return line + ", elapsed %s" % format_duration(elapsed)


def format_duration(seconds):
    seconds = int(round(seconds))
    if seconds < 120:
        return "%ds" % seconds
    if seconds < 7200:
        return "%dm%02ds" % (seconds // 60, seconds % 60)
    return "%dh%02dm" % (seconds // 3600, (seconds % 3600) // 60)


def format_fleet(fleet, own_sources):
    """The fleet part of a progress line: hosts done, origin bytes so far, this host's bytes per source."""
    parts = ["fleet: %d of %d hosts staged" % (fleet["hosts_done"], fleet["hosts_total"]),
             "origin %s so far" % si_bytes(fleet["origin_bytes"]),
             "fleet ETA %s" % (format_duration(fleet["eta_s"]) if fleet.get("eta_s") is not None else "unknown")]
    if own_sources:
        parts.append("here from " + ", ".join("%s %s" % (name, si_bytes(amount)) for name, amount in sorted(own_sources.items())))
    return ", ".join(parts)


def tree_bytes(path):
    """Bytes of all regular files under ``path`` (0 when it does not exist)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # a file renamed away mid-walk
                total += os.lstat(os.path.join(root, name)).st_size
    return total


class RateWindow:
    """Transfer rate over the last ``window`` seconds of samples."""

    def __init__(self, window=10.0):
        self.window = window
        self.samples = []

    def add(self, when, done):
        self.samples.append((when, done))
        while len(self.samples) > 2 and when - self.samples[0][0] > self.window:
            self.samples.pop(0)

    def rate(self):
        if len(self.samples) < 2:
            return None
        (t0, b0), (t1, b1) = self.samples[0], self.samples[-1]
        return (b1 - b0) / (t1 - t0) if t1 > t0 else None


class _Job:
    """One download attempt of one or more files in a child process."""

    def __init__(self, entries, work_dir, attempt, disable_xet):
        self.entries = entries
        self.label = entries[0]["path"] + (" (+%d small files)" % (len(entries) - 1) if len(entries) > 1 else "")
        self.size = sum(int(e["size"]) for e in entries)
        self.work_dir = work_dir
        self.attempt = attempt
        self.disable_xet = disable_xet
        self.process = None
        self.started = None
        self.last_bytes = 0
        self.last_progress = None
        self.output = None
        self.source = "origin"

    def poll(self):
        return self.process.poll()

    def kill(self):
        with contextlib.suppress(OSError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


class _PeerJob(_Job):
    """One transfer of one or more files from a peer's file service, in a thread.

    The partial file stays in a directory of its own per file (``work_dir``) when the transfer
    fails, so that the next source, peer or origin, resumes it at the byte where it stopped.
    """

    def __init__(self, entries, work_dir, attempt, disable_xet, peer, client, commit, lock_for):
        super().__init__(entries, work_dir, attempt, disable_xet)
        self.source = peer
        self.client = client
        self.commit = commit
        # lock_for(path): the file's lock, the same for every transfer of it (see PeerClient.fetch).
        self.lock_for = lock_for
        self.current_lock = None
        self.cancelled = threading.Event()
        self.finished = {}
        self.error = None
        self.thread = None

    def start(self):
        os.makedirs(self.work_dir, exist_ok=True)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.started = self.last_progress = time.monotonic()
        self.last_bytes = tree_bytes(self.work_dir)

    def _run(self):
        from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_peer import PeerError
        for entry in self.entries:
            target = os.path.join(self.work_dir, entry["path"])
            try:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                lock = self.current_lock = self.lock_for(entry["path"])
                with lock:
                    if os.path.exists(target) and os.path.getsize(target) > int(entry["size"]):
                        os.unlink(target)
                if not os.path.exists(target) or os.path.getsize(target) < int(entry["size"]):
                    self.client.fetch(self.commit, entry["path"], target, self.cancelled, lock)
                if self.cancelled.is_set():
                    return
                if os.path.getsize(target) != int(entry["size"]):
                    raise PeerError("%s: %s: the transfer ended at %d of %d bytes"
                                    % (self.source, entry["path"], os.path.getsize(target), int(entry["size"])))
            except (PeerError, OSError) as exc:
                self.error = {"error_type": "PeerError", "message": str(exc), "filename": entry["path"]}
                return
            self.finished[entry["path"]] = target

    def poll(self):
        if self.thread.is_alive():
            return None
        return 0 if self.error is None else 1

    def kill(self):
        # The thread may sit in a read until the socket times out; once cancelled it writes nothing more,
        # so the scheduler does not wait for it.
        lock = self.current_lock
        if lock is None:
            self.cancelled.set()
        else:
            with lock:
                self.cancelled.set()
        self.thread.join(timeout=0.5)


class Downloader:
    """Fetch manifest entries into ``incoming_dir`` with bounded parallel children.

    ``verify`` is a callable(entry, path) -> problem dict or None (the manifest check);
    ``record`` is a callable(entry, path) called for each verified file once its data and its
    name in ``incoming_dir`` are on disk (fsynced); ``report`` gets progress dicts about once
    per ``report_interval`` seconds.
    """

    def __init__(self, repo_id, commit, incoming_dir, work_root, verify, record, report,
                 endpoint=None, token=None, workers=4, stall_seconds=120, retries=5,
                 backoff_base=2.0, backoff_cap=60.0, disable_xet=False, xet_fallback=True,
                 python=None, hf_home=None, report_interval=1.0, poll_interval=0.2,
                 deadline_seconds=None, log=None, small_file_bytes=SMALL_FILE_BYTES, sources=None, peer_workers=4):
        self.repo_id = repo_id
        self.commit = commit
        self.incoming_dir = incoming_dir
        self.work_root = work_root
        self.verify = verify
        self.record = record
        self.report = report
        self.endpoint = endpoint
        self.token = token
        self.workers = max(1, int(workers))
        self.stall_seconds = float(stall_seconds)
        self.retries = int(retries)
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.disable_xet = disable_xet
        self.xet_fallback = xet_fallback
        self.python = python or sys.executable
        self.hf_home = hf_home
        self.report_interval = report_interval
        self.poll_interval = poll_interval
        self.deadline_seconds = deadline_seconds
        self.events = []
        self.bytes_downloaded = 0
        self.log = log
        self.small_file_bytes = small_file_bytes
        # Fleet staging (_checkpoint_peer.FleetSources): where each batch comes from; None: all from the origin.
        self.sources = sources
        self.peer_workers = max(1, int(peer_workers))
        self._excluded = {}
        self._part_locks = {}
        self.source_bytes = {}
        self.refused_peers = []

    # -- child processes ---------------------------------------------------------------

    def _child_env(self, disable_xet):
        env = dict(os.environ)
        env.update({
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_UPDATE_CHECK": "1",
            "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1" if not self.token else "0",
        })
        env.pop("HF_HUB_OFFLINE", None)
        if self.endpoint:
            env["HF_ENDPOINT"] = self.endpoint
        if self.token:
            env["HF_TOKEN"] = self.token
        if self.hf_home:
            env["HF_HOME"] = self.hf_home
        if disable_xet:
            env["HF_HUB_DISABLE_XET"] = "1"
        return env

    def _start(self, job):
        if os.path.isdir(job.work_dir):
            layout_mod.remove_tree(job.work_dir)
        os.makedirs(job.work_dir)
        args = {"repo_id": self.repo_id, "filenames": [e["path"] for e in job.entries], "revision": self.commit,
                "local_dir": job.work_dir}
        job.process = subprocess.Popen(
            [self.python, "-c", CHILD_CODE, json.dumps(args)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self._child_env(job.disable_xet),
            start_new_session=True, close_fds=True,
        )
        # Drain the pipes in threads so a chatty child never blocks on a full pipe.
        job.output = {"stdout": [], "stderr": []}
        for stream_name in ("stdout", "stderr"):
            thread = threading.Thread(target=self._drain, args=(getattr(job.process, stream_name), job.output[stream_name]))
            thread.daemon = True
            thread.start()
        job.started = job.last_progress = time.monotonic()
        job.last_bytes = 0

    @staticmethod
    def _drain(stream, sink):
        for line in iter(stream.readline, b""):
            sink.append(line.decode("utf-8", "replace"))
            del sink[:-200]
        stream.close()

    @staticmethod
    def _kill(job):
        job.kill()

    def _child_result(self, job):
        """(files the child finished as {path: local path}, the error dict or None)."""
        if isinstance(job, _PeerJob):
            return dict(job.finished), (dict(job.error) if job.error else None)
        finished, error = {}, None
        for line in list(job.output["stdout"]):
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if "done" in item:
                finished[item["done"]] = item["path"]
            elif "error_type" in item:
                error = item
        if error is None and job.process.returncode != 0:
            error = {"error_type": "ChildFailed", "message": "".join(job.output["stderr"][-20:]).strip()}
        if error is not None:
            error["message"] = redact(error.get("message", ""), self.token)
        return finished, error

    # -- the scheduler -----------------------------------------------------------------

    def run(self, entries, bytes_already_done, bytes_total):
        """Download ``entries``; returns a summary or raises DownloadError."""
        pending = [(batch, 1, self.disable_xet) for batch in plan_batches(entries, self.small_file_bytes)]
        retry_at = {}
        running = []
        verifying = []
        done_bytes = int(bytes_already_done)
        started = time.monotonic()
        rate = RateWindow()
        last_report = 0.0
        failures = {}
        executor = ThreadPoolExecutor(max_workers=self.workers)
        slot = 0
        try:
            while pending or running or verifying:
                now = time.monotonic()
                if self.deadline_seconds and now - started > self.deadline_seconds:
                    raise DownloadError("the download did not finish within %s" % format_duration(self.deadline_seconds))
                # Start children while there are free slots and batches whose back-off has passed.
                ready = [item for item in pending if retry_at.get(item[0][0]["path"], 0) <= now]
                for item in ready:
                    origin_running = sum(1 for job in running if job.source == "origin")
                    if origin_running >= self.workers and len(running) - origin_running >= self.peer_workers:
                        break
                    source = self._source_for(item[0], running, now)
                    if source[0] == "wait":
                        continue
                    if source[0] == "origin" and origin_running >= self.workers:
                        continue
                    if source[0] == "peer" and len(running) - origin_running >= self.peer_workers:
                        continue
                    pending.remove(item)
                    slot += 1
                    if source[0] == "peer":
                        job = _PeerJob(item[0], self._peer_work_dir(item[0]), item[1], item[2], source[1],
                                       self.sources.client(source[1]), self.commit,
                                       lambda path: self._part_locks.setdefault(path, threading.Lock()))
                        job.start()
                    else:
                        job = _Job(item[0], os.path.join(self.work_root, "%d" % slot), item[1], item[2])
                        self._start(job)
                    running.append(job)
                    # Without peers the lines read as before fleet staging (operators and the tests grep them).
                    self._event("start", job.label, "attempt %d%s%s%s" % (
                        job.attempt, " from %s" % job.source if self.sources is not None else "",
                        ", Xet disabled" if job.disable_xet and job.source == "origin" else "",
                        ", resuming after %s" % si_bytes(job.last_bytes) if job.source != "origin" and job.last_bytes else ""))
                # Watch children: progress, exit, stall.
                in_flight = 0
                for job in list(running):
                    current = tree_bytes(job.work_dir)
                    if current > job.last_bytes:
                        job.last_bytes = current
                        job.last_progress = now
                    code = job.poll()
                    if code is None and now - job.last_progress > self.stall_seconds:
                        self._kill(job)
                        running.remove(job)
                        self._event("stall", job.label, "no progress for %ds at %s; attempt %d killed"
                                    % (self.stall_seconds, si_bytes(job.last_bytes), job.attempt))
                        self._finish(job, verifying, executor, pending, retry_at, failures,
                                     "stalled: no progress for %ds" % self.stall_seconds, xet_off=self.xet_fallback)
                        continue
                    if code is None:
                        in_flight += min(current, job.size)
                        continue
                    running.remove(job)
                    self._finish(job, verifying, executor, pending, retry_at, failures, None)
                # Collect verifications.
                for item in list(verifying):
                    job, entry, path, future = item
                    if not future.done():
                        in_flight += int(entry["size"])
                        continue
                    verifying.remove(item)
                    problem = future.result()
                    if problem:
                        os.unlink(path)
                        if job.source != "origin":
                            # Never asked for this file again; another holder or the origin sends it.
                            self._exclude(entry["path"], job.source, None)
                            self.refused_peers.append({"peer": job.source, "path": entry["path"], "problem": problem["message"]})
                            self._event("corrupt", entry["path"], "from peer %s, refused: %s" % (job.source, problem["message"]))
                            pending.append(([entry], job.attempt + 1, job.disable_xet))
                            continue
                        self._event("corrupt", entry["path"], problem["message"])
                        retry = _Job([entry], job.work_dir, job.attempt, job.disable_xet)
                        self._retry(retry, [entry], pending, retry_at, failures, problem["message"], fatal_after=2)
                        continue
                    final = os.path.join(self.incoming_dir, entry["path"])
                    parent = os.path.dirname(final)
                    layout_mod.makedirs_durable(parent, self.incoming_dir)
                    # The data was fsynced by _verify_durable; the new name is durable once its directory is.
                    os.replace(path, final)
                    layout_mod.fsync_dir(parent)
                    self.record(entry, final)
                    done_bytes += int(entry["size"])
                    self.bytes_downloaded += int(entry["size"])
                    self.source_bytes[job.source] = self.source_bytes.get(job.source, 0) + int(entry["size"])
                    self._event("verified", entry["path"], si_bytes(entry["size"]) + (" from %s" % job.source if self.sources is not None else ""))
                rate.add(now, done_bytes + in_flight)
                if now - last_report >= self.report_interval:
                    last_report = now
                    progress = {
                        "state": "downloading",
                        "bytes_done": done_bytes + in_flight,
                        "bytes_total": bytes_total,
                        "bytes_verified": done_bytes,
                        "rate_bytes_per_s": rate.rate(),
                        "elapsed_s": now - started,
                        "files_pending": sum(len(item[0]) for item in pending),
                        "files_running": sum(len(job.entries) for job in running) + len(verifying),
                        "sources": dict(self.source_bytes),
                        "message": format_progress(done_bytes + in_flight, bytes_total, rate.rate(), now - started),
                    }
                    if self.sources is not None:
                        progress["fleet"] = self.sources.fleet_progress(progress)
                        progress["message"] += "; " + format_fleet(progress["fleet"], self.source_bytes)
                    self.report(progress)
                time.sleep(self.poll_interval)
        finally:
            for job in running:
                self._kill(job)
            executor.shutdown(wait=True)
        return {"seconds": time.monotonic() - started, "bytes_downloaded": self.bytes_downloaded,
                "events": self.events[-200:], "retries": sum(failures.values()), "source_bytes": dict(self.source_bytes),
                "refused_peers": list(self.refused_peers)}

    # -- fleet staging -----------------------------------------------------------------

    def _source_for(self, batch, running, now):
        if self.sources is None:
            return "origin", None
        path = batch[0]["path"]
        excluded = set(peer for peer, until in self._excluded.get(path, {}).items() if until is None or until > now)
        running_from = {}
        for job in running:
            running_from[job.source] = running_from.get(job.source, 0) + 1
        return self.sources.source_for(batch, excluded, running_from)

    def _exclude(self, path, peer, seconds):
        """Do not ask ``peer`` for ``path`` again (``seconds`` None: never, after a corrupt file)."""
        until = None if seconds is None else time.monotonic() + seconds
        self._excluded.setdefault(path, {})[peer] = until

    def _peer_work_dir(self, batch):
        # One directory per file: a partial transfer is found there by the next source.
        return os.path.join(self.work_root, "peer", batch[0]["path"].replace("/", "%2F"))

    def _finish(self, job, verifying, executor, pending, retry_at, failures, stall_reason, xet_off=False):
        """A child ended (or was killed): verify what it finished, retry the rest."""
        finished, error = self._child_result(job)
        for entry in job.entries:
            if entry["path"] in finished:
                verifying.append((job, entry, finished[entry["path"]],
                                  executor.submit(self._verify_durable, entry, finished[entry["path"]])))
        rest = [entry for entry in job.entries if entry["path"] not in finished]
        if isinstance(job, _PeerJob):
            # A peer that failed is left alone for this batch for a while; no back-off for the other sources.
            if rest:
                reason = stall_reason or (error or {}).get("message") or "ended without finishing %s" % rest[0]["path"]
                self._exclude(rest[0]["path"], job.source, max(self.stall_seconds, 5.0))
                self._event("peer_error", rest[0]["path"], reason)
                pending.append((rest, job.attempt + 1, job.disable_xet))
            return
        # Partial files of the attempt are useless to the next child (huggingface_hub resumes only in-process).
        layout_mod.remove_tree(job.work_dir if not finished else os.path.join(job.work_dir, ".cache"))
        if not rest:
            return
        reason = stall_reason
        if reason is None:
            error = error or {"error_type": "ChildFailed", "message": "ended without finishing %s" % rest[0]["path"]}
            reason = "%s: %s" % (error.get("error_type"), error.get("message", ""))
            self._event("error", (error.get("filename") or rest[0]["path"]), reason)
            if error.get("error_type") in FATAL_ERRORS:
                raise DownloadError("%s: %s" % (error.get("filename") or rest[0]["path"], reason))
        self._retry(job, rest, pending, retry_at, failures, reason, xet_off=xet_off)

    def _verify_durable(self, entry, path):
        """The manifest check, then (for a good file) one fsync of its data before anyone records it."""
        problem = self.verify(entry, path)
        if problem is None:
            layout_mod.fsync_file(path)
        return problem

    def _retry(self, job, rest, pending, retry_at, failures, reason, xet_off=False, fatal_after=None):
        path = rest[0]["path"]
        failures[path] = failures.get(path, 0) + 1
        limit = self.retries if fatal_after is None else min(self.retries, fatal_after)
        if failures[path] > limit:
            raise DownloadError("%s failed %d time(s); last: %s" % (path, failures[path], reason))
        delay = backoff_seconds(failures[path], self.backoff_base, self.backoff_cap)
        retry_at[path] = time.monotonic() + delay
        pending.append((rest, job.attempt + 1, job.disable_xet or xet_off))
        self._event("retry", path, "in %.1fs (failure %d of at most %d)" % (delay, failures[path], limit))

    def _event(self, kind, path, detail):
        event = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "event": kind, "path": path,
                 "detail": redact(detail, self.token)}
        self.events.append(event)
        if self.log is not None:
            self.log("%s %s: %s" % (kind, path, event["detail"]))
