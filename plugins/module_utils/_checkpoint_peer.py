# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fleet staging: hosts fetch a pinned revision's files from each other over the backend network (private).

The peer file service is a read-only HTTP server (the standard library's, no new dependency on the
host) that answers only for files this host has verified: a stamped revision under ``revisions/``
or a file the running download recorded as verified under ``incoming/``. Every request carries
this run's token (``Authorization: Bearer``); the server keeps only its sha256. Files are served
with range requests, so a transfer cut off mid-file resumes from the next source at the byte where
it stopped.

The downloading side (``FleetSources``) polls every peer's status about once a second in a thread of
its own and tells the download scheduler, per batch of files, where to fetch it:

- from a peer that holds it verified (the one this host has the fewest transfers running from, ties
  spread by a hash so that requesters fan out over the holders);
- from the origin (the Hub or site mirror) when no live peer holds it and this host is the batch's
  owner: ownership is assigned once, by size, over the staging hosts, so the origin sends each file
  about once per site; when the owner is unreachable or failed, ownership moves to the live hosts;
- otherwise it waits: the owner is fetching it, and will serve it once it is verified.

Nothing from a peer is trusted: the scheduler verifies each file against the pinned manifest, as it
does for the origin, and a peer whose file fails is named and not asked for that file again.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import signal
import socket
import threading
import time
import urllib.error
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ansible.module_utils.urls import open_url
from ansible_collections.gpufleet.serving.plugins.module_utils import _checkpoint_layout as layout_mod
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_manifest import CheckpointError, load_manifest
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_verify import _matches_record, load_stamp, stamp_usable

API = "/v1"
_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
_RANGE_RE = re.compile(r"^bytes=(\d+)-(\d*)$")
CHUNK = 1024 * 1024


def token_digest(token):
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def authorized(header, digest):
    """Whether an Authorization header carries the token whose sha256 is ``digest`` (constant time)."""
    if not header or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(token_digest(header[len("Bearer ") :].strip()), digest)


def parse_range(header, size):
    """(start, end exclusive) for a single ``bytes=N-`` or ``bytes=N-M`` range, (0, size) without one,
    or None when the range cannot be satisfied."""
    if not header:
        return 0, size
    match = _RANGE_RE.match(header.strip())
    if not match:
        return None
    start = int(match.group(1))
    end = int(match.group(2)) + 1 if match.group(2) else size
    if start >= size or end <= start:
        return None
    return start, min(end, size)


# --------------------------------------------------------------------------------------
# What this host can serve
# --------------------------------------------------------------------------------------


class PeerCatalog:
    """The verified files of this host's revisions, read from the layout at each request (no cache:
    the download records files while the server runs)."""

    def __init__(self, layout):
        self.layout = layout

    def manifest(self, commit):
        if not _COMMIT_RE.match(commit or ""):
            return None
        try:
            return load_manifest(self.layout.manifest_path(commit))
        except CheckpointError:
            return None

    def verified(self, commit, manifest=None):
        """{manifest path: absolute path} of the files of ``commit`` verified on this host."""
        manifest = manifest or self.manifest(commit)
        if manifest is None:
            return {}
        revision = self.layout.revision_dir(commit)
        stamp = load_stamp(self.layout.stamp_path(commit))
        if stamp is not None and stamp_usable(stamp, manifest) and os.path.isdir(revision):
            return self._matching(revision, manifest, stamp["files"])
        state = layout_mod.read_json(self.layout.incoming_state(commit)) or {}
        if state.get("commit") != commit:
            return {}
        return self._matching(self.layout.incoming_dir(commit), manifest, state.get("files") or {})

    @staticmethod
    def _matching(directory, manifest, records):
        found = {}
        for entry in manifest["files"]:
            record = records.get(entry["path"])
            if record is None:
                continue
            path = os.path.join(directory, entry["path"])
            try:
                st = os.stat(path)
            except OSError:
                continue
            # The download's records hold size and mtime; a stamp's add ctime and inode.
            if st.st_size == entry["size"] and _matches_record(st, record):
                found[entry["path"]] = path
        return found

    def status(self, commit):
        """What a peer needs to decide: verified files, the download's state and its sources."""
        manifest = self.manifest(commit)
        if manifest is None:
            return {"commit": commit, "state": "unknown", "verified": []}
        verified = self.verified(commit, manifest)
        progress = layout_mod.read_json(self.layout.progress_file(commit)) or {}
        if len(verified) == len(manifest["files"]):
            state = "present"
            if not progress:
                progress = {"sources": (load_stamp(self.layout.stamp_path(commit)) or {}).get("staged_from") or {}}
        else:
            state = progress.get("state") or "waiting"
        return {
            "commit": commit,
            "state": state,
            "verified": sorted(verified),
            "bytes_total": manifest["total_bytes"],
            "bytes_verified": sum(e["size"] for e in manifest["files"] if e["path"] in verified),
            "bytes_done": progress.get("bytes_done"),
            "rate_bytes_per_s": progress.get("rate_bytes_per_s"),
            "sources": progress.get("sources") or {},
        }


# --------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------


class _PeerHandler(BaseHTTPRequestHandler):
    server_version = "gpufleet-peer/1"
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        pass  # the server counts what it serves; request lines would only repeat the paths

    def _reply(self, code, body=b"", content_type="application/json"):
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self):  # noqa: N802 (the http.server naming)
        self.do_GET()

    def do_GET(self):  # noqa: N802
        server = self.server
        if not authorized(self.headers.get("Authorization"), server.token_digest):
            server.count("refused", self.client_address[0], 0)
            self._reply(401, b'{"error": "unauthorized"}')
            return
        parts = urllib.parse.urlsplit(self.path).path.split("/", 4)
        # /v1/status/<commit> or /v1/file/<commit>/<path>
        if len(parts) >= 4 and "/" + parts[1] == API and parts[2] == "status" and len(parts) == 4:
            body = json.dumps(server.catalog.status(parts[3])).encode("utf-8")
            self._reply(200, body)
            return
        if len(parts) == 5 and "/" + parts[1] == API and parts[2] == "file":
            self._send_file(parts[3], urllib.parse.unquote(parts[4]))
            return
        self._reply(404, b'{"error": "not found"}')

    def _send_file(self, commit, rel):
        server = self.server
        path = server.catalog.verified(commit).get(rel)
        if path is None:
            self._reply(404, b'{"error": "not verified here"}')
            return
        try:
            handle = open(path, "rb")  # noqa: SIM115 (a missing file is answered before the with)
        except OSError:
            self._reply(404, b'{"error": "gone"}')
            return
        with handle:
            size = os.fstat(handle.fileno()).st_size
            span = parse_range(self.headers.get("Range"), size)
            if span is None:
                self.send_response(416)
                self.send_header("Content-Range", "bytes */%d" % size)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            start, end = span
            partial = bool(self.headers.get("Range"))
            self.send_response(206 if partial else 200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(end - start))
            if partial:
                self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end - 1, size))
            self.end_headers()
            if self.command == "HEAD":
                return
            self.wfile.flush()
            sent = 0
            try:
                # sendfile: the bytes go from the page cache to the socket without passing through Python.
                sent = self.connection.sendfile(handle, offset=start, count=end - start)
            finally:
                server.count("served", self.client_address[0], sent)


class PeerServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, layout, address, port, digest):
        self.catalog = PeerCatalog(layout)
        self.token_digest = digest
        self.lock = threading.Lock()
        self.stats = {"served": {}, "refused": {}}
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self.address_family = family
        super().__init__((address, port), _PeerHandler)

    def count(self, kind, client, amount):
        with self.lock:
            bucket = self.stats[kind]
            bucket[client] = bucket.get(client, 0) + (amount if kind == "served" else 1)


def process_start_ticks(pid):
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat), or None."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            data = handle.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: the fields start after the last ')'.
    return int(data.rsplit(")", 1)[1].split()[19])


def serve(layout, address, port, token, serve_seconds, run_file, ready=None, stop_event=None):
    """Serve this host's verified files until SIGTERM or ``serve_seconds``; returns the counts.

    ``run_file`` records the pid (with its start time, so that a reused pid is never signalled) once
    the socket listens; it is removed on the way out.
    """
    try:
        server = PeerServer(layout, address, port, token_digest(token))
    except OSError as exc:
        raise CheckpointError("cannot listen on %s port %d for peers: %s" % (address, port, exc)) from None
    stop = stop_event or threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, lambda *_args: stop.set())
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    started = time.time()
    try:
        thread.start()
        pid = os.getpid()
        layout_mod.makedirs_durable(os.path.dirname(run_file), os.path.dirname(os.path.dirname(run_file)) or "/")
        layout_mod.write_json_atomic(
            run_file,
            {
                "pid": pid,
                "start_ticks": process_start_ticks(pid),
                "address": address,
                "port": port,
                "model_dir": layout.model_dir,
                "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            },
        )
        if ready is not None:
            ready.set()
        stop.wait(serve_seconds)
    finally:
        server.shutdown()
        server.server_close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        with contextlib.suppress(OSError):
            os.unlink(run_file)
    with server.lock:
        stats = json.loads(json.dumps(server.stats))
    return {"seconds": round(time.time() - started, 1), "bytes_served": stats["served"], "requests_refused": stats["refused"], "timed_out": not stop.is_set()}


def listening_on(port, proc_net=("/proc/net/tcp", "/proc/net/tcp6")):
    """Whether any socket listens on TCP ``port`` (read from /proc/net/tcp*, state 0A)."""
    for path in proc_net:
        try:
            with open(path) as handle:
                lines = handle.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False


def stop(run_file, port, check_mode=False, timeout=10.0):
    """Stop the peer file service that ``run_file`` names; returns the module result.

    ``changed`` when a server ran. Fails when something still listens on ``port`` afterwards, so a
    run never ends with the service (or anything posing as it) reachable.
    """
    record = layout_mod.read_json(run_file)
    running = False
    if record and isinstance(record.get("pid"), int):
        ticks = process_start_ticks(record["pid"])
        running = ticks is not None and ticks == record.get("start_ticks")
    result = {"changed": running, "was_running": running, "pid": record.get("pid") if running else None}
    if check_mode:
        result["listening"] = listening_on(port)
        result["changed"] = running or result["listening"]
        return result
    if running:
        pid = record["pid"]
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and process_start_ticks(pid) == record.get("start_ticks"):
            time.sleep(0.1)
        if process_start_ticks(pid) == record.get("start_ticks"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            result["killed"] = True
    with contextlib.suppress(OSError):
        os.unlink(run_file)
    # A listener closes with its process; give the kernel a moment before judging.
    deadline = time.monotonic() + 5.0
    while listening_on(port) and time.monotonic() < deadline:
        time.sleep(0.1)
    result["listening"] = listening_on(port)
    return result


# --------------------------------------------------------------------------------------
# The downloading side
# --------------------------------------------------------------------------------------


class PeerError(Exception):
    """A peer did not deliver (unreachable, refused, cut off); the message says which and why."""


class PeerClient:
    """Requests to one peer's file service."""

    def __init__(self, name, url, token, timeout):
        self.name = name
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def _open(self, path, headers=None):
        # No proxy: the peers are on the backend network, and a site proxy must never see the run's token.
        return open_url(self.url + path, headers=dict(headers or {}, Authorization="Bearer " + self.token),
                        timeout=self.timeout, use_proxy=False, follow_redirects="none")

    def status(self, commit):
        try:
            with self._open("%s/status/%s" % (API, commit)) as response:
                return json.loads(response.read().decode("utf-8"))
        except (OSError, ValueError, urllib.error.URLError) as exc:
            raise PeerError("%s: status: %s" % (self.name, exc)) from None

    def fetch(self, commit, rel, target, cancelled, lock, on_bytes=None):
        """Append the rest of ``rel`` to ``target`` (resuming at its size). Raises PeerError.

        ``lock`` is the file's, shared with any earlier transfer of it: a cancelled transfer whose read
        returns late must not append after the next one has taken the file's size as its offset.
        """
        with lock:
            offset = os.path.getsize(target) if os.path.exists(target) else 0
        headers = {"Range": "bytes=%d-" % offset} if offset else {}
        try:
            with self._open("%s/file/%s/%s" % (API, commit, urllib.parse.quote(rel)), headers) as response:
                if offset and response.status != 206:
                    raise PeerError("%s: %s: asked for bytes from %d, got status %d" % (self.name, rel, offset, response.status))
                # read1: whatever has arrived, at most CHUNK; read(CHUNK) would wait for the whole MiB, and
                # the download's watchdog, which watches the bytes on disk, would see a slow peer as stalled.
                read = getattr(response, "read1", response.read)
                with open(target, "ab") as handle:
                    while True:
                        chunk = read(CHUNK)
                        if not chunk:
                            break
                        with lock:
                            if cancelled.is_set():
                                return
                            handle.write(chunk)
                            handle.flush()
                        if on_bytes is not None:
                            on_bytes(len(chunk))
        except urllib.error.HTTPError as exc:
            raise PeerError("%s: %s: HTTP %d" % (self.name, rel, exc.code)) from None
        except (OSError, urllib.error.URLError) as exc:
            raise PeerError("%s: %s: %s" % (self.name, rel, exc)) from None


def fleet_origin_workers(workers, members):
    """Origin transfers at a time on each of ``members`` staging hosts: about one host's ``workers`` for
    the whole fleet, at least one per host. The origin link is what limits a staged fleet; more transfers
    than one host would run only split it, so every file would complete near the end and the fan-out
    (a file is served once verified) would start late instead of overlapping the origin's work."""
    return max(1, -(-int(workers) // max(1, int(members))))


def assign_owners(batches, members):
    """{path: member} for every path of every batch: each batch goes to the member with the fewest bytes
    so far, largest batches first, ties by name. Every host computes the same map from the same inputs
    (the whole manifest's batches, not what each host still misses)."""
    members = sorted(members)
    if not members:
        return {}
    load = dict((member, 0) for member in members)
    owners = {}
    for batch in sorted(batches, key=lambda b: (-sum(int(e["size"]) for e in b), b[0]["path"])):
        member = min(members, key=lambda m: (load[m], m))
        for entry in batch:
            owners[entry["path"]] = member
        load[member] += sum(int(e["size"]) for e in batch)
    return owners


def spread_key(me, path, peer):
    """A stable pseudo-random order of holders per requester and file, so requesters fan out."""
    return hashlib.sha256(("%s\0%s\0%s" % (me, path, peer)).encode("utf-8")).hexdigest()


def choose_source(batch, me, members, owners, statuses, excluded, running_from, owner_alive):
    """Where to fetch ``batch`` now: ("peer", name), ("origin", None) or ("wait", owner).

    ``statuses``: {peer: status dict or None when unreachable}; ``excluded``: peers not to ask for
    this batch (they failed it); ``running_from``: {peer: transfers running from it};
    ``owner_alive(name)``: whether that member can still fetch from the origin.
    """
    paths = [entry["path"] for entry in batch]
    holders = [
        peer for peer, status in sorted(statuses.items()) if peer != me and peer not in excluded and status and set(paths) <= set(status.get("verified") or ())
    ]
    if holders:
        first = paths[0]
        return "peer", min(holders, key=lambda peer: (running_from.get(peer, 0), spread_key(me, first, peer)))
    owner = owners.get(paths[0], me)
    if owner == me:
        return "origin", None
    if owner not in excluded and owner_alive(owner):
        return "wait", owner
    # The owner is gone (or served this batch corrupted): its batches are spread over the live members
    # by a hash of the path, which every host computes alike once their views of who is live agree.
    live = [m for m in sorted(set(members) | set([me])) if m == me or (m not in excluded and owner_alive(m))]
    successor = live[int(spread_key("", paths[0], ""), 16) % len(live)]
    return ("origin", None) if successor == me else ("wait", successor)


class FleetSources:
    """The other staging hosts, their statuses (polled in a thread) and the source rule for each batch."""

    def __init__(self, me, peers, token, commit, batches, timeout=10.0, poll_interval=1.0, idle_grace=None):
        self.me = me
        self.commit = commit
        self.clients = dict((p["name"], PeerClient(p["name"], p["url"], token, timeout)) for p in peers if p["name"] != me)
        self.members = sorted(set([p["name"] for p in peers] + [me]))
        self.owners = assign_owners(batches, self.members)
        self.poll_interval = poll_interval
        self.statuses = dict((name, None) for name in self.clients)
        self.failures = dict((name, 0) for name in self.clients)
        self.errors = {}
        self.seen_alive = set()
        self.started = time.monotonic()
        # A member that never answered within this long is counted gone (it was never started).
        self.idle_grace = idle_grace if idle_grace is not None else 3 * timeout
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None

    def start(self):
        self.poll_once()
        self._thread = threading.Thread(target=self._poll_loop, daemon=True)
        self._thread.start()

    def close(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _poll_loop(self):
        while not self._stop.wait(self.poll_interval):
            self.poll_once()

    def poll_once(self):
        for name, client in self.clients.items():
            try:
                status = client.status(self.commit)
            except PeerError as exc:
                with self.lock:
                    self.failures[name] += 1
                    self.errors[name] = str(exc)
                    # One late answer (a busy, slow link) does not make a holder forget what it holds.
                    if self.failures[name] >= 3:
                        self.statuses[name] = None
                continue
            with self.lock:
                self.statuses[name] = status
                self.failures[name] = 0
                self.seen_alive.add(name)

    def owner_alive(self, name):
        """Whether a member can still fetch its batches: it answers (or answered lately) and did not fail."""
        if name == self.me:
            return True
        with self.lock:
            status = self.statuses.get(name)
            failures = self.failures.get(name, 0)
        if status is not None and failures < 3:
            if status.get("state") == "waiting":
                # Serving, but its download never started (it failed before, or was never asked to).
                return time.monotonic() - self.started < self.idle_grace
            return status.get("state") != "failed"
        # Every member's service listens before any download starts: three polls unanswered is gone.
        return failures < 3

    def source_for(self, batch, excluded, running_from):
        with self.lock:
            statuses = dict(self.statuses)
        return choose_source(batch, self.me, self.members, self.owners, statuses, excluded, running_from, self.owner_alive)

    def client(self, name):
        return self.clients[name]

    def fleet_progress(self, own):
        """Bytes verified per host, origin bytes so far over all hosts, and hosts done."""
        with self.lock:
            statuses = dict(self.statuses)
        hosts = {
            self.me: {
                "bytes_verified": own.get("bytes_verified"),
                "bytes_total": own.get("bytes_total"),
                "state": "downloading",
                "sources": own.get("sources") or {},
            }
        }
        for name, status in statuses.items():
            if status is None:
                hosts[name] = {"state": "unreachable"}
                continue
            hosts[name] = {
                "bytes_verified": status.get("bytes_verified"),
                "bytes_total": status.get("bytes_total"),
                "state": status.get("state"),
                "sources": status.get("sources") or {},
            }
        hosts[self.me]["rate_bytes_per_s"] = own.get("rate_bytes_per_s")
        for name, status in statuses.items():
            if status is not None:
                hosts[name]["rate_bytes_per_s"] = status.get("rate_bytes_per_s")
        origin = sum(int((h.get("sources") or {}).get("origin", 0) or 0) for h in hosts.values())
        done = sum(1 for h in hosts.values() if h.get("state") == "present")
        return {"hosts": hosts, "origin_bytes": origin, "hosts_done": done, "hosts_total": len(hosts), "eta_s": fleet_eta(hosts.values())}


def fleet_eta(hosts):
    """Seconds until the slowest host still fetching is done at its current rate (None when unknown)."""
    eta = 0.0
    for host in hosts:
        if host.get("state") in ("present", "unreachable", "failed"):
            continue
        remaining = max(0, int(host.get("bytes_total") or 0) - int(host.get("bytes_verified") or 0))
        rate = host.get("rate_bytes_per_s")
        if remaining and not rate:
            return None
        if remaining:
            eta = max(eta, remaining / rate)
    return eta
