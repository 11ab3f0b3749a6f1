#!/usr/bin/env python3
# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Watch a sandbox host for canary secrets (test tooling, standard library only).

The canaries are read from a root-only file, one per line, so that they are on no command line,
this tool's own included.

  canary_watch.py sample --secrets FILE --out FILE [--watch NAME=TEXT ...] [--interval 0.1]
      Reads every process's /proc/<pid>/cmdline each interval until SIGTERM and keeps in --out
      (JSON, rewritten about once a second): the number of samples, each command line that held
      a canary (the canary itself replaced by its number), and per --watch how many samples saw a
      command line containing TEXT (proof that the sampling overlapped, say, a download).

  canary_watch.py scan --secrets FILE [--journal] [--world-readable DIR ...] [--any-file DIR ...]
                       [--exclude PATH ...]
      Prints JSON: how many bytes of the journal (journalctl -o export) and how many files were
      read, and every journal field or file that holds a canary. --world-readable reads the files
      a user other than root can read (o+r, every directory above o+x); --any-file every file.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import stat
import subprocess
import sys
import time

CHUNK = 1 << 20


def load_secrets(path):
    with open(path, "rb") as handle:
        secrets = [line.strip() for line in handle.read().splitlines() if line.strip()]
    if not secrets:
        raise SystemExit("%s holds no canary" % path)
    return secrets


def redact(data, secrets):
    for number, secret in enumerate(secrets, 1):
        data = data.replace(secret, b"<canary %d>" % number)
    return data


def read_cmdlines(own_pid):
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == own_pid:
            continue
        try:
            with open("/proc/%s/cmdline" % name, "rb") as handle:
                yield int(name), handle.read()
        except OSError:
            continue  # the process ended between listdir and open


def write_json(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
        handle.write("\n")
    os.replace(tmp, path)


def sample(args):
    secrets = load_secrets(args.secrets)
    watches = dict(item.split("=", 1) for item in args.watch)
    state = {"samples": 0, "started": time.time(), "hits": [], "watched": {name: 0 for name in watches},
             "watched_examples": {name: [] for name in watches}}
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    last_write = 0.0
    own_pid = os.getpid()
    while not stop:
        seen = set()
        for pid, raw in read_cmdlines(own_pid):
            # Arguments joined by spaces, as ps shows them: markers may span arguments.
            cmdline = raw.replace(b"\0", b" ")
            if any(secret in cmdline for secret in secrets):
                text = redact(cmdline, secrets).decode("utf-8", "replace")[:2000]
                if len(state["hits"]) < 100:
                    state["hits"].append({"pid": pid, "cmdline": text, "time": time.time()})
            for name, marker in watches.items():
                if marker.encode() in cmdline:
                    seen.add(name)
                    examples = state["watched_examples"][name]
                    text = redact(cmdline, secrets).decode("utf-8", "replace")[:300]
                    if len(examples) < 5 and text not in examples:
                        examples.append(text)
        for name in seen:
            state["watched"][name] += 1
        state["samples"] += 1
        now = time.time()
        if now - last_write >= 1.0:
            state["last"] = now
            write_json(args.out, state)
            last_write = now
        time.sleep(args.interval)
    state["last"] = time.time()
    write_json(args.out, state)
    return 0


def file_holds(path, secrets):
    """Whether the file holds a canary, reading it in chunks that overlap by the longest canary."""
    overlap = max(len(s) for s in secrets) - 1
    tail = b""
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(CHUNK)
            if not chunk:
                return False
            data = tail + chunk
            if any(secret in data for secret in secrets):
                return True
            tail = data[-overlap:] if overlap else b""


def walk_files(root, world_readable, excludes):
    """Regular files under root (no symbolic links followed, /proc, /sys and /dev skipped)."""
    if not os.path.isdir(root):
        return
    if world_readable:
        path = root
        while True:
            if not os.stat(path).st_mode & stat.S_IXOTH:
                return  # root or a directory above it is closed to others
            if path == os.path.dirname(path):
                break
            path = os.path.dirname(path)
    for top, dirs, files in os.walk(root):
        if world_readable:
            # A directory others cannot search hides everything below it.
            dirs[:] = [d for d in dirs if os.lstat(os.path.join(top, d)).st_mode & stat.S_IXOTH]
        dirs[:] = [d for d in dirs if os.path.join(top, d) not in excludes and os.path.join(top, d) not in ("/proc", "/sys", "/dev")]
        for name in files:
            path = os.path.join(top, name)
            if path in excludes:
                continue
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISREG(info.st_mode):
                continue
            if world_readable and not info.st_mode & stat.S_IROTH:
                continue
            yield path, info.st_size


def scan(args):
    secrets = load_secrets(args.secrets)
    excludes = {os.path.abspath(p) for p in args.exclude} | {os.path.abspath(args.secrets)}
    result = {"files": {"read": 0, "bytes": 0, "hits": []}}
    if args.journal:
        done = subprocess.run(["journalctl", "--no-pager", "-o", "export"], capture_output=True, check=False)
        hits = sorted({redact(line, secrets).decode("utf-8", "replace")[:500]
                       for line in done.stdout.splitlines() if any(s in line for s in secrets)})
        result["journal"] = {"rc": done.returncode, "bytes": len(done.stdout), "hits": hits}
    for roots, world_readable in ((args.world_readable, True), (args.any_file, False)):
        for root in roots:
            for path, size in walk_files(os.path.abspath(root), world_readable, excludes):
                try:
                    held = file_holds(path, secrets)
                except OSError:
                    continue
                result["files"]["read"] += 1
                result["files"]["bytes"] += size
                if held:
                    result["files"]["hits"].append(path)
    json.dump(result, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sampler = sub.add_parser("sample")
    sampler.add_argument("--secrets", required=True)
    sampler.add_argument("--out", required=True)
    sampler.add_argument("--watch", action="append", default=[], help="NAME=TEXT")
    sampler.add_argument("--interval", type=float, default=0.1)
    scanner = sub.add_parser("scan")
    scanner.add_argument("--secrets", required=True)
    scanner.add_argument("--journal", action="store_true")
    scanner.add_argument("--world-readable", action="append", default=[])
    scanner.add_argument("--any-file", action="append", default=[])
    scanner.add_argument("--exclude", action="append", default=[])
    args = parser.parse_args(argv)
    return sample(args) if args.command == "sample" else scan(args)


if __name__ == "__main__":
    sys.exit(main())
