# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Waiting for a background (``async``, ``poll: 0``) download: the decisions of the wait, without I/O.

The ``gpufleet.serving.checkpoint_wait`` action plugin runs one loop on the controller and, per
poll, one read-only shell command on the host (``poll_command``) that prints the async job's
results file and the download's progress JSON. Everything it decides comes from here:

- ``parse_poll_output``: the two files out of the command's output;
- ``job_state``: running, finished or missing, with ``async_status``'s reading of the results file;
- ``progress_message``: the progress file's ``message`` line (bytes, rate, ETA);
- ``WaitState``: poll count, last progress, the deadline, how long to sleep (early polls closer
  together, then one per interval), when to give up on a
  host whose status cannot be read, and the messages of each failure.
"""

from __future__ import annotations

import json
import shlex

MARK = "@@gpufleet.checkpoint_wait"
# A host whose status cannot be read for this long (network bounce, sshd restart) fails the wait.
ERROR_GRACE_SECONDS = 120.0
NO_PROGRESS_YET = "waiting for the first progress report"
# The first gap between polls; each later gap doubles up to the interval. A download that ends within
# seconds (a re-run, a small revision) is seen within about a second of its end, not an interval later,
# and a multi-hour one still polls at the interval after a handful of early polls (about 15 ms each).
FIRST_POLL_GAP_SECONDS = 0.5


def poll_command(results_file, progress_file=None):
    """One POSIX shell command that prints each file framed by marker lines; it reads and never writes.

    Output per file: ``MARK <name> present`` + its content + ``MARK <name> end``, or ``MARK <name> missing``.
    """
    parts = []
    for name, path in (("job", results_file), ("progress", progress_file)):
        if not path:
            continue
        quoted = shlex.quote(path)
        parts.append(
            f"if [ -e {quoted} ]; then echo '{MARK} {name} present'; cat -- {quoted} 2>/dev/null; echo; "
            f"echo '{MARK} {name} end'; else echo '{MARK} {name} missing'; fi")
    return "; ".join(parts)


def parse_poll_output(stdout):
    """{name: text, or None when the file was missing} for every file the output frames."""
    files, current, lines = {}, None, []
    for line in (stdout or "").splitlines():
        if line.startswith(MARK + " "):
            words = line[len(MARK) + 1:].split()
            if len(words) != 2:
                continue
            name, what = words
            if what == "missing":
                files[name] = None
            elif what == "present":
                current, lines = name, []
            elif what == "end" and name == current:
                files[name] = "\n".join(lines).strip()
                current = None
            continue
        if current is not None:
            lines.append(line)
    return files


def job_state(text):
    """("missing" | "running" | "finished", the job's data) as ``async_status`` reads its results file.

    ``text`` is None when the file does not exist. An empty or unparsable file is a job that has not
    written its result yet (async_wrapper writes the file by rename, so a torn file does not occur).
    """
    if text is None:
        return "missing", None
    try:
        data = json.loads(text)
    except ValueError:
        return "running", None
    if not isinstance(data, dict):
        return "running", None
    if "started" not in data:
        # The module's own result (or async_wrapper's "Timeout exceeded"): the job ended.
        return "finished", data
    if "finished" not in data:
        return "running", data
    return ("finished" if data["finished"] else "running"), data


def progress_message(text):
    """The progress file's ``message`` (bytes done of total, percent, rate, ETA), or None."""
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    message = data.get("message")
    return str(message) if message else None


def format_duration(seconds):
    seconds = int(round(max(0.0, float(seconds))))
    if seconds < 120:
        return "%ds" % seconds
    if seconds < 7200:
        return "%dm%02ds" % (seconds // 60, seconds % 60)
    return "%dh%02dm" % (seconds // 3600, (seconds % 3600) // 60)


def format_line(host, poll, message, log_file=None):
    """The progress line: ``host [poll]: message (log: path)``."""
    line = "%s [%d]: %s" % (host, poll, message or NO_PROGRESS_YET)
    if log_file:
        line += " (log: %s)" % log_file
    return line


class Outcome:
    """What one poll decided: ``kind`` is running, finished or failed; ``line`` is printed when set."""

    def __init__(self, kind, line=None, msg=None, data=None):
        self.kind = kind
        self.line = line
        self.msg = msg
        self.data = data

    def __repr__(self):
        return "Outcome(%r, line=%r, msg=%r)" % (self.kind, self.line, self.msg)


class WaitState:
    """The state of one wait. Times are seconds of a monotonic clock the caller passes in."""

    def __init__(self, host, jid, results_file, interval, timeout, started, log_file=None,
                 error_grace=ERROR_GRACE_SECONDS):
        if float(interval) <= 0:
            raise ValueError("interval must be more than 0 seconds, got %r" % (interval,))
        if float(timeout) <= 0:
            raise ValueError("timeout must be more than 0 seconds, got %r" % (timeout,))
        self.host = host
        self.jid = jid
        self.results_file = results_file
        self.log_file = log_file
        self.interval = float(interval)
        self.timeout = float(timeout)
        self.started = float(started)
        self.deadline = self.started + self.timeout
        self.error_grace = float(error_grace)
        self.polls = 0
        self.last_message = None
        self.first_error_at = None
        self.last_error = None

    def _last_progress(self):
        return self.last_message or "none yet"

    def _where(self):
        return "log: %s" % self.log_file if self.log_file else "results file: %s" % self.results_file

    def observe(self, now, files):
        """A poll whose command ran: ``files`` as ``parse_poll_output`` returns them."""
        self.polls += 1
        if "job" not in files:
            return self.error(now, "the status command printed no job status", counted=True)
        self.first_error_at = self.last_error = None
        state, data = job_state(files["job"])
        message = progress_message(files.get("progress"))
        if message:
            self.last_message = message
        if state == "finished":
            return Outcome("finished", data=data)
        if state == "missing":
            return Outcome("failed", msg=(
                "%s: the download job %s vanished: %s does not exist (the host rebooted, or the async directory was "
                "cleaned) after %d poll(s) in %s; last progress: %s; %s"
                % (self.host, self.jid, self.results_file, self.polls, format_duration(now - self.started),
                   self._last_progress(), self._where())))
        return Outcome("running", line=format_line(self.host, self.polls, self.last_message, self.log_file))

    def error(self, now, error, counted=False):
        """A poll whose command could not run or failed (connection error, non-zero exit status)."""
        if not counted:
            self.polls += 1
        if self.first_error_at is None:
            self.first_error_at = now
        self.last_error = str(error).strip() or "no error text"
        if now - self.first_error_at >= self.error_grace:
            return Outcome("failed", msg=(
                "%s: could not read the status of the download job %s for %s (%d poll(s)); last error: %s; "
                "last progress: %s; the job may still run on the host and hold the model's lock (%s)"
                % (self.host, self.jid, format_duration(now - self.first_error_at), self.polls, self.last_error,
                   self._last_progress(), self._where())))
        return Outcome("running", line="%s [%d]: status not readable, retrying: %s" % (self.host, self.polls, self.last_error))

    def gap(self):
        """Seconds from the start of the last poll to the start of the next one: 0.5, 1, 2, ... up to ``interval``."""
        return min(self.interval, FIRST_POLL_GAP_SECONDS * 2 ** min(max(self.polls - 1, 0), 32))

    def delay(self, poll_started, now):
        """Seconds to sleep before the next poll (``gap`` after the last one started), or None past the deadline."""
        if now >= self.deadline:
            return None
        return max(0.0, min(poll_started + self.gap(), self.deadline) - now)

    def deadline_message(self, now):
        return ("%s: the download job %s did not finish within the wait's deadline of %s (%d poll(s) in %s); last "
                "progress: %s; it may still run on the host and hold the model's lock (%s)"
                % (self.host, self.jid, format_duration(self.timeout), self.polls, format_duration(now - self.started),
                   self._last_progress(), self._where()))
