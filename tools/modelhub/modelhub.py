#!/usr/bin/env python3
"""The sandbox model hub: a Hugging Face Hub stand-in for pinned downloads (test tooling, never shipped).

    modelhub.py build     --state DIR
    modelhub.py revisions --state DIR
    modelhub.py serve     --state DIR [--bind ADDR] [--port PORT] [--daemon] [--pidfile FILE] [--log FILE]
    modelhub.py stop      --state DIR [--pidfile FILE]
    modelhub.py fault     --state DIR KIND [--path GLOB] [--revision REV] [--repo REPO] [--count K] [options]
    modelhub.py fault     --state DIR --list | --clear
    modelhub.py requests  --state DIR [--since N]
    modelhub.py mark      --state DIR

`build` makes repositories of tiny real models (tools/modelhub/tinymodel.py) under DIR/repos, with
deterministic git commit ids, branches and tags. `serve` answers the subset of the Hub HTTP API that
huggingface_hub uses for a pinned download (tree listing, revision info, HEAD/GET resolve with Range)
with plain HTTP only: never a Xet header. Faults (throttle, drop, corrupt, http5xx, stall) are read
from DIR/faults.json at every request, so they switch on and off without a restart. Every request is
appended to DIR/requests.log as one JSON line. See README.md.

Stdlib only, except `build` (numpy, safetensors, tokenizers through tinymodel.py).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import fnmatch
import hashlib
import http.server
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_PORT = 8090
DEFAULT_REPO = "gpufleet-test/tiny-kimi"
BIG_REPO = "gpufleet-test/tiny-big"
THINKER_REPO = "gpufleet-test/tiny-thinker"
# The thinking model's reasoning length: above the verify stage's first two budgets (2048, 4096),
# within its ceiling (8192).
THINKING_STEPS = 5000
LFS_PATTERNS = ("*.safetensors",)
GITATTRIBUTES = "".join(f"{pattern} filter=lfs diff=lfs merge=lfs -text\n" for pattern in LFS_PATTERNS)
AUTHOR = "gpufleet sandbox <sandbox@gpufleet.invalid>"
BASE_EPOCH = 1767225600  # 2026-01-01T00:00:00Z; revision N of a repo is dated N days later
CHUNK = 64 * 1024
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
SHA_RE = re.compile(r"^[0-9a-f]{40}$")
FAULT_KINDS = ("throttle", "drop", "corrupt", "http5xx", "stall")
BODY_FAULTS = ("throttle", "drop", "corrupt", "stall")


# --------------------------------------------------------------------------- git object ids

def git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def git_tree_oid(blobs: dict[str, str]) -> str:
    """Tree id of {path: blob oid}, nested directories included (git sorts a tree as if named 'name/')."""
    entries: dict[str, object] = {}
    for path, oid in blobs.items():
        head, _, rest = path.partition("/")
        if rest:
            entries.setdefault(head, {})[rest] = oid  # type: ignore[index]
        else:
            entries[head] = oid
    body = b""
    for name in sorted(entries, key=lambda n: n + "/" if isinstance(entries[n], dict) else n):
        value = entries[name]
        mode, oid = (b"40000", git_tree_oid(value)) if isinstance(value, dict) else (b"100644", value)
        body += mode + b" " + name.encode() + b"\0" + bytes.fromhex(oid)
    return hashlib.sha1(b"tree %d\0" % len(body) + body).hexdigest()


def git_commit_oid(tree: str, parent: str | None, epoch: int, message: str) -> str:
    lines = [f"tree {tree}"] + ([f"parent {parent}"] if parent else [])
    lines += [f"author {AUTHOR} {epoch} +0000", f"committer {AUTHOR} {epoch} +0000", "", message]
    body = ("\n".join(lines) + "\n").encode()
    return hashlib.sha1(b"commit %d\0" % len(body) + body).hexdigest()


def iso_date(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


# --------------------------------------------------------------------------- build

@dataclass(frozen=True)
class RevisionPlan:
    label: str
    title: str
    seed: int = 1
    temperature: float = 0.7
    big: bool = False
    without: tuple[str, ...] = ()  # files left out: an incomplete checkpoint
    # generation_config.json names every token id as an end of sequence: the engine serves the model,
    # and every answer ends before its first token (empty), which the chat check fails.
    eos_every_token: bool = False
    thinking_steps: int = 0  # tinymodel's thinking model: this many reasoning tokens, then an answer


@dataclass(frozen=True)
class RepoPlan:
    repo_id: str
    revisions: tuple[RevisionPlan, ...]
    branches: dict = field(default_factory=dict)
    tags: dict = field(default_factory=dict)


PLANS = (
    RepoPlan(
        DEFAULT_REPO,
        (
            RevisionPlan("A", "Tiny model, seed 1", seed=1, temperature=0.7),
            RevisionPlan("B", "New weights (seed 2), temperature 0.6", seed=2, temperature=0.6),
            RevisionPlan("C", "Drop the second shard (incomplete on purpose)", seed=2, temperature=0.6,
                         without=("model-00002-of-00002.safetensors",)),
            RevisionPlan("D", "A's weights; every token ends an answer (serves, answers empty)", seed=1,
                         temperature=0.7, eos_every_token=True),
        ),
        branches={"main": "B", "incomplete": "C"},
        tags={"v1": "A"},
    ),
    RepoPlan(BIG_REPO, (RevisionPlan("A", "Bigger tiny model: shards of about 4 MB", seed=3, big=True),),
             branches={"main": "A"}, tags={"v1": "A"}),
    RepoPlan(THINKER_REPO, (RevisionPlan("A", f"Thinks {THINKING_STEPS} tokens, then answers", seed=4,
                                         thinking_steps=THINKING_STEPS),),
             branches={"main": "A"}, tags={"v1": "A"}),
)


def front_matter(text: str) -> dict:
    """The model card's YAML front matter; only the flat `key: value` and `- item` lists tinymodel writes."""
    if not text.startswith("---\n"):
        return {}
    data: dict = {}
    key = None
    for line in text[4:].split("\n---", 1)[0].splitlines():
        if line.startswith("- ") and key:
            data.setdefault(key, []).append(line[2:].strip())
        elif ":" in line:
            key, _, value = line.partition(":")
            key, value = key.strip(), value.strip()
            if value:
                data[key] = value
    return data


def ingest_revision(repo_dir: Path, files_dir: Path, plan: RevisionPlan, parent: str | None, index: int) -> dict:
    """Store the files of one revision as objects and write its commit record; returns the record."""
    files = {}
    for path in sorted(p for p in files_dir.rglob("*") if p.is_file()):
        relative = path.relative_to(files_dir).as_posix()
        if relative in plan.without:
            continue
        data = path.read_bytes()
        sha256 = hashlib.sha256(data).hexdigest()
        entry = {"size": len(data), "sha256": sha256, "lfs": None}
        if any(fnmatch.fnmatch(relative, pattern) for pattern in LFS_PATTERNS):
            # In git an LFS file is its pointer: the tree's oid is the pointer's blob id (as on the real Hub).
            pointer = lfs_pointer(sha256, len(data))
            entry["oid"] = git_blob_oid(pointer)
            entry["lfs"] = {"oid": sha256, "size": len(data), "pointerSize": len(pointer)}
        else:
            entry["oid"] = git_blob_oid(data)
        obj = repo_dir / "objects" / sha256
        if not obj.exists():
            obj.parent.mkdir(parents=True, exist_ok=True)
            obj.write_bytes(data)
        files[relative] = entry
    epoch = BASE_EPOCH + index * 86400
    tree = git_tree_oid({path: entry["oid"] for path, entry in files.items()})
    sha = git_commit_oid(tree, parent, epoch, plan.title)
    config = json.loads((files_dir / "config.json").read_text())
    tokenizer_config = json.loads((files_dir / "tokenizer_config.json").read_text())
    index_data = json.loads((files_dir / "model.safetensors.index.json").read_text())
    parameters = index_data["metadata"]["total_parameters"]
    record = {
        "sha": sha, "parent": parent, "label": plan.label, "title": plan.title, "epoch": epoch,
        "date": iso_date(epoch), "tree": tree, "files": files,
        "config": {"architectures": config["architectures"], "model_type": config["model_type"],
                   "tokenizer_config": {key: tokenizer_config.get(key) for key in
                                        ("bos_token", "eos_token", "pad_token", "chat_template")}},
        "card_data": front_matter((files_dir / "README.md").read_text()),
        "safetensors": {"parameters": {"F32": parameters}, "total": parameters},
    }
    (repo_dir / "commits").mkdir(parents=True, exist_ok=True)
    (repo_dir / "commits" / f"{sha}.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return record


def build_repo(repos_dir: Path, plan: RepoPlan, work: Path) -> dict:
    sys.path.insert(0, str(HERE))
    import tinymodel  # only `build` needs numpy, safetensors and tokenizers

    repo_dir = repos_dir / plan.repo_id
    labels, parent = {}, None
    for index, revision in enumerate(plan.revisions):
        files_dir = work / plan.repo_id / revision.label
        tinymodel.build(files_dir, seed=revision.seed, big=revision.big, temperature=revision.temperature,
                        name=plan.repo_id.split("/")[1], thinking_steps=revision.thinking_steps)
        (files_dir / ".gitattributes").write_text(GITATTRIBUTES)
        if revision.eos_every_token:
            generation = json.loads((files_dir / "generation_config.json").read_text())
            vocab = json.loads((files_dir / "config.json").read_text())["vocab_size"]
            generation["eos_token_id"] = list(range(vocab))
            (files_dir / "generation_config.json").write_text(tinymodel.dump_json(generation))
        parent = ingest_revision(repo_dir, files_dir, revision, parent, index)["sha"]
        labels[revision.label] = parent
    refs = {"labels": labels,
            "branches": {name: labels[label] for name, label in plan.branches.items()},
            "tags": {name: labels[label] for name, label in plan.tags.items()}}
    (repo_dir / "refs.json").write_text(json.dumps(refs, indent=1, sort_keys=True) + "\n")
    return refs


def build(state) -> dict:
    """Build every repository into STATE/repos (replaced as a whole); runtime files in STATE stay."""
    state = Path(state).resolve()
    state.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix="repos.partial-", dir=state))
    try:
        with tempfile.TemporaryDirectory(prefix="modelhub-build-") as work:
            for plan in PLANS:
                build_repo(partial, plan, Path(work))
        target = state / "repos"
        if target.is_symlink():
            target.unlink()
        elif target.exists():
            old = state / f"repos.old-{os.getpid()}"
            target.rename(old)
            shutil.rmtree(old)
        partial.rename(target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return revisions(state)


def revisions(state) -> dict:
    """{repo: {label or ref name: commit sha}} for every built repository."""
    result = {}
    repos_dir = Path(state) / "repos"
    for refs_file in sorted(repos_dir.glob("*/*/refs.json")):
        refs = json.loads(refs_file.read_text())
        result[refs_file.parent.relative_to(repos_dir).as_posix()] = {**refs["labels"], **refs["branches"], **refs["tags"]}
    if not result:
        raise SystemExit(f"modelhub: no repositories under {repos_dir}; run 'modelhub.py build --state {state}'")
    return result


# --------------------------------------------------------------------------- repositories (server side)

class Repo:
    """One built repository: its refs and commit records, read once (builds replace repos as a whole)."""

    def __init__(self, root: Path, repo_id: str):
        self.root, self.repo_id = root, repo_id
        refs = json.loads((root / "refs.json").read_text())
        self.branches, self.tags = refs["branches"], refs["tags"]
        self.commits = {path.stem: json.loads(path.read_text()) for path in (root / "commits").glob("*.json")}

    def resolve(self, revision: str) -> str | None:
        for prefix, names in (("refs/heads/", self.branches), ("refs/tags/", self.tags)):
            if revision.startswith(prefix) and revision[len(prefix):] in names:
                return names[revision[len(prefix):]]
        if revision in self.branches:
            return self.branches[revision]
        if revision in self.tags:
            return self.tags[revision]
        return revision if revision in self.commits else None

    def object_path(self, sha256: str) -> Path:
        return self.root / "objects" / sha256

    def history(self, sha: str) -> list[dict]:
        chain = []
        while sha:
            chain.append(self.commits[sha])
            sha = self.commits[sha]["parent"]
        return chain

    def last_change(self, sha: str, path: str) -> dict:
        """The oldest commit, walking back from SHA, since which PATH has had its current content."""
        commit = self.commits[sha]
        oid = commit["files"][path]["oid"]
        while commit["parent"]:
            parent = self.commits[commit["parent"]]
            if parent["files"].get(path, {}).get("oid") != oid:
                break
            commit = parent
        return commit


def tree_entry(repo: Repo, sha: str, path: str, expand: bool) -> dict:
    info = repo.commits[sha]["files"][path]
    entry = {"type": "file", "oid": info["oid"], "size": info["size"], "path": path}
    if info["lfs"]:
        entry["lfs"] = dict(info["lfs"])
    if expand:
        last = repo.last_change(sha, path)
        entry["lastCommit"] = {"id": last["sha"], "title": last["title"], "date": last["date"]}
        entry["securityFileStatus"] = {"status": "safe", "avScan": {"virusFound": False, "virusNames": None},
                                       "pickleImportScan": None}
    return entry


def tree_listing(repo: Repo, sha: str, prefix: str, recursive: bool, expand: bool) -> list[dict] | None:
    """Entries under PREFIX ('' for the root); None when PREFIX is not a directory of the commit."""
    files = repo.commits[sha]["files"]
    base = prefix.strip("/") + "/" if prefix.strip("/") else ""
    below = sorted(path for path in files if path.startswith(base))
    if base and not below:
        return None
    if recursive:
        directories = {"/".join(p[len(base):].split("/")[:i]) for p in below for i in range(1, p[len(base):].count("/") + 1)}
        children = below
    else:
        directories = {p[len(base):].split("/")[0] for p in below if "/" in p[len(base):]}
        children = [p for p in below if "/" not in p[len(base):]]
    entries = []
    for directory in sorted(directories):
        full = base + directory
        subtree = {p[len(full) + 1:]: files[p]["oid"] for p in files if p.startswith(full + "/")}
        entries.append({"type": "directory", "oid": git_tree_oid(subtree), "size": 0, "path": full})
    entries += [tree_entry(repo, sha, path, expand) for path in children]
    return sorted(entries, key=lambda entry: entry["path"])  # path order puts a directory before its contents


def model_info(repo: Repo, sha: str, blobs: bool) -> dict:
    commit = repo.commits[sha]
    siblings = []
    for path, info in sorted(commit["files"].items()):
        sibling = {"rfilename": path}
        if blobs:
            sibling.update({"size": info["size"], "blobId": info["oid"]})
            if info["lfs"]:
                sibling["lfs"] = {"sha256": info["lfs"]["oid"], "size": info["size"], "pointerSize": info["lfs"]["pointerSize"]}
        siblings.append(sibling)
    first = repo.history(sha)[-1]
    return {
        "_id": hashlib.sha1(repo.repo_id.encode()).hexdigest()[:24],
        "id": repo.repo_id,
        "modelId": repo.repo_id,
        "author": repo.repo_id.split("/")[0],
        "sha": sha,
        "lastModified": commit["date"],
        "createdAt": first["date"],
        "private": False,
        "gated": False,
        "disabled": False,
        "downloads": 0,
        "likes": 0,
        "library_name": "transformers",
        "pipeline_tag": "text-generation",
        "tags": ["transformers", "safetensors", commit["config"]["model_type"], "text-generation", "license:other"],
        "config": commit["config"],
        "cardData": commit["card_data"],
        "siblings": siblings,
        "spaces": [],
        "safetensors": commit["safetensors"],
        "usedStorage": sum(info["size"] for info in commit["files"].values()),
    }


# --------------------------------------------------------------------------- faults

def parse_size(text) -> int:
    """Bytes from '1000', '64K', '2M' (binary multiples), for CLI values."""
    text = str(text).strip()
    multiplier = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(text[-1:].upper(), 1)
    number = text[:-1] if multiplier > 1 else text
    value = int(float(number) * multiplier)
    if value < 0:
        raise ValueError(f"negative size {text!r}")
    return value


@dataclass
class HubRequest:
    """What a fault is matched against."""

    method: str
    api: bool
    repo: str | None = None
    commit: str | None = None
    path: str | None = None


@dataclass
class BodyPlan:
    rate: int | None = None
    drop_after: int | None = None
    stall_after: int | None = None
    stall_seconds: float = 0.0
    close_after_stall: bool = False
    corrupt: tuple[int, int] | None = None  # (offset in the file, length)
    applied: list = field(default_factory=list)


def fault_matches(fault: dict, request: HubRequest) -> bool:
    kind = fault["kind"]
    if kind in BODY_FAULTS:
        if request.api or request.method != "GET":
            return False
    else:
        scope = fault.get("on", "files")
        if (scope == "files" and request.api) or (scope == "api" and not request.api):
            return False
    if fault.get("method") and fault["method"] != request.method:
        return False
    if fault.get("repo") and fault["repo"] != request.repo:
        return False
    if fault.get("revision") and fault["revision"] != request.commit:
        return False
    return not (fault.get("path") and (request.path is None or not fnmatch.fnmatchcase(request.path, fault["path"])))


class FaultBook:
    """Faults from STATE/faults.json (re-read at every request) and how often each was applied.

    A fault with a count applies to the first COUNT matching requests only; the counts are kept by fault
    id in STATE/faults-applied.json, so they survive a restart and a new fault starts from zero.
    """

    def __init__(self, state: Path):
        self.path = state / "faults.json"
        self.applied_path = state / "faults-applied.json"
        self.lock = threading.Lock()
        try:
            self.applied = json.loads(self.applied_path.read_text())
        except (OSError, ValueError):
            self.applied = {}

    def current(self) -> list[dict]:
        try:
            return json.loads(self.path.read_text()).get("faults", [])
        except (OSError, ValueError):
            return []

    def take(self, request: HubRequest, kinds) -> list[dict]:
        """The first matching fault of each kind in KINDS, counted as applied."""
        taken: dict[str, dict] = {}
        with self.lock:
            faults = self.current()
            for fault in faults:
                kind = fault.get("kind")
                if kind not in kinds or kind in taken or not fault_matches(fault, request):
                    continue
                used = self.applied.get(fault["id"], 0)
                if fault.get("count") is not None and used >= fault["count"]:
                    continue
                self.applied[fault["id"]] = used + 1
                taken[kind] = fault
            if taken:
                current_ids = {fault["id"] for fault in faults}  # cleared faults' counts go
                self.applied = {fid: used for fid, used in self.applied.items() if fid in current_ids}
                _write_json_atomic(self.applied_path, self.applied)
        return list(taken.values())


def _write_json_atomic(path: Path, data) -> None:
    partial = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    partial.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    partial.replace(path)


def body_plan(faults: list[dict], body_length: int, file_size: int) -> BodyPlan:
    plan = BodyPlan()
    for fault in faults:
        kind = fault["kind"]
        plan.applied.append(kind)
        if kind == "throttle":
            plan.rate = max(1, int(fault["rate"]))
        elif kind == "drop":
            plan.drop_after = fault["after"] if fault.get("after") is not None else body_length // 2
        elif kind == "stall":
            plan.stall_after = fault["after"] if fault.get("after") is not None else body_length // 2
            plan.stall_seconds = float(fault.get("seconds", 30))
            plan.close_after_stall = fault.get("then") == "close"
        elif kind == "corrupt":
            offset = fault["offset"] if fault.get("offset") is not None else file_size // 2
            offset = min(offset, max(file_size - 1, 0))
            plan.corrupt = (offset, max(1, int(fault.get("length", 16))))
    return plan


def flip(data: bytes, position: int, corrupt: tuple[int, int] | None) -> bytes:
    """DATA (which starts at file offset POSITION) with the corrupt range's bytes inverted."""
    if not corrupt:
        return data
    start, end = max(corrupt[0], position), min(corrupt[0] + corrupt[1], position + len(data))
    if start >= end:
        return data
    buffer = bytearray(data)
    for i in range(start - position, end - position):
        buffer[i] ^= 0xFF
    return bytes(buffer)


# --------------------------------------------------------------------------- HTTP

def query_flag(query: dict, name: str) -> bool:
    """A boolean query or form parameter as httpx sends it (True -> 'true')."""
    return query.get(name, ["false"])[-1].lower() in ("1", "true")


def parse_range(header: str | None, size: int):
    """(start, end inclusive) for one 'bytes=' range; None for a full response; 'unsatisfiable' for 416."""
    if not header:
        return None
    match = re.fullmatch(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", header)
    if not match or (not match.group(1) and not match.group(2)):
        return None  # multiple or malformed ranges: RFC 9110 allows ignoring the header
    first, last = match.group(1), match.group(2)
    if not first:  # suffix range: the last N bytes
        length = int(last)
        if length == 0:
            return "unsatisfiable"
        return max(size - length, 0), size - 1
    start = int(first)
    end = min(int(last), size - 1) if last else size - 1
    if start >= size or (last and int(last) < start):
        return "unsatisfiable"
    return start, end


class HubServer(http.server.ThreadingHTTPServer):
    daemon_threads = True  # stalled transfers must not keep a stopping server alive
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, state, address):
        self.state = Path(state).resolve()
        self.repos_dir = self.state / "repos"
        self.faults = FaultBook(self.state)
        self.log_path = self.state / "requests.log"
        self.log_lock = threading.Lock()
        self.repos: dict[str, Repo] = {}
        self.repos_lock = threading.Lock()
        super().__init__(address, HubHandler)

    def repo(self, repo_id: str) -> Repo | None:
        with self.repos_lock:
            if repo_id not in self.repos:
                root = self.repos_dir / repo_id
                if not (root / "refs.json").is_file():
                    return None
                self.repos[repo_id] = Repo(root, repo_id)
            return self.repos[repo_id]

    def record(self, entry: dict) -> None:
        line = json.dumps(entry, sort_keys=True) + "\n"
        with self.log_lock, open(self.log_path, "a") as handle:
            handle.write(line)


class HubHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as huggingface_hub's connection pool expects
    server_version = "gpufleet-modelhub/1"
    timeout = 120  # idle keep-alive connections end eventually
    server: HubServer

    # ---- plumbing

    def do_GET(self):
        self.handle_hub_request()

    def do_HEAD(self):
        self.handle_hub_request()

    def do_POST(self):
        self.handle_hub_request()

    def log_request(self, code="-", size="-"):
        pass  # requests.log has every request; stderr (the server log) keeps errors only

    def send_response(self, code, message=None):
        self.entry["status"] = code
        super().send_response(code, message)

    def handle_hub_request(self):
        self.entry = {"time": round(time.time(), 3), "method": self.command, "path": self.path,
                      "range": self.headers.get("Range"), "status": None, "bytes": 0}
        self.entry_logged = False
        try:
            self.route()
        except OSError:  # the client went away (reset, broken pipe) or stopped reading (timeout)
            self.entry["aborted"] = True
            self.close_connection = True
        finally:
            self.log_entry()

    def log_entry(self):
        """Append the request to the log once, before the client can see its response complete.

        So a request that a client saw finish is always in the log when the client takes a mark.
        """
        if not self.entry_logged:
            self.entry_logged = True
            self.server.record(self.entry)

    def read_request_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def send_bytes(self, status: int, body: bytes, content_type: str, headers: dict | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if self.command == "HEAD" or not body:
            self.log_entry()
            self.end_headers()
            return
        self.end_headers()
        self.wfile.write(body[:-1])
        self.entry["bytes"] = len(body)
        self.log_entry()
        self.wfile.write(body[-1:])

    def send_json(self, data, status: int = 200, headers: dict | None = None) -> None:
        self.send_bytes(status, json.dumps(data).encode(), "application/json; charset=utf-8", headers)

    def send_hub_error(self, status: int, message: str, code: str | None = None, commit: str | None = None) -> None:
        headers = {"X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        if commit:
            headers["X-Repo-Commit"] = commit
        self.send_json({"error": message}, status, headers)

    # ---- routing

    def route(self):
        split = urllib.parse.urlsplit(self.path)
        # Split before unquoting: a revision like refs%2Fpr%2F1 is one segment.
        segments = [urllib.parse.unquote(s) for s in split.path.split("/")[1:]]
        query = urllib.parse.parse_qs(split.query)
        body = self.read_request_body() if self.command == "POST" else b""
        if len(segments) >= 4 and segments[:2] == ["api", "models"]:
            self.route_api(f"{segments[2]}/{segments[3]}", segments[4:], query, body)
        elif len(segments) >= 5 and segments[2] == "resolve" and self.command in ("GET", "HEAD"):
            self.serve_file(f"{segments[0]}/{segments[1]}", segments[3], "/".join(segments[4:]))
        else:
            self.send_hub_error(404, "Not Found")

    def lookup(self, repo_id: str, revision: str | None, request: HubRequest):
        """(repo, commit sha) or None after answering 404 with the Hub's error code."""
        org, _, name = repo_id.partition("/")
        repo = self.server.repo(repo_id) if NAME_RE.match(org) and NAME_RE.match(name) else None
        if repo is None:
            self.send_hub_error(404, f"Repository not found: {repo_id}", "RepoNotFound")
            return None
        if revision is None:
            return repo, None
        sha = repo.resolve(revision)
        if sha is None:
            self.send_hub_error(404, f"Invalid rev id: {revision}", "RevisionNotFound")
            return None
        request.commit = sha
        return repo, sha

    def http5xx_fault(self, request: HubRequest) -> bool:
        """Answer with the fault's 5xx when one applies; True when it did."""
        taken = self.server.faults.take(request, ("http5xx",))
        if not taken:
            return False
        status = int(taken[0].get("status", 503))
        self.entry["fault"] = ["http5xx"]
        self.send_json({"error": f"modelhub fault: HTTP {status}"}, status)
        return True

    def route_api(self, repo_id: str, rest: list[str], query: dict, body: bytes):
        request = HubRequest(self.command, api=True, repo=repo_id)
        action = rest[0] if rest else "revision"
        revision = rest[1] if len(rest) > 1 else ("main" if action == "revision" else None)
        known = {"revision": ("GET", "HEAD"), "tree": ("GET", "HEAD"), "commits": ("GET", "HEAD"),
                 "refs": ("GET", "HEAD"), "paths-info": ("POST",)}
        if action not in known or self.command not in known[action] or (action != "refs" and revision is None):
            self.send_hub_error(404, "Not Found")
            return
        found = self.lookup(repo_id, revision, request)
        if found is None or self.http5xx_fault(request):
            return
        repo, sha = found
        if action == "revision":
            self.send_json(model_info(repo, sha, blobs=query_flag(query, "blobs")))
        elif action == "tree":
            prefix = "/".join(rest[2:])
            listing = tree_listing(repo, sha, prefix, recursive=query_flag(query, "recursive"), expand=query_flag(query, "expand"))
            if listing is None:
                self.send_hub_error(404, f"Entry not found: {prefix}", "EntryNotFound", sha)
            else:
                self.send_json(listing)
        elif action == "paths-info":
            self.send_json(self.paths_info(repo, sha, body))
        elif action == "commits":
            self.send_json([{"id": c["sha"], "title": c["title"], "message": "", "date": c["date"],
                             "authors": [{"user": repo_id.split("/")[0]}]} for c in repo.history(sha)])
        else:
            self.send_json({kind: [{"name": name, "ref": f"refs/{ref}/{name}", "targetCommit": target}
                                   for name, target in sorted(names.items())]
                            for kind, ref, names in (("branches", "heads", repo.branches), ("tags", "tags", repo.tags))}
                           | {"converts": []})

    def paths_info(self, repo: Repo, sha: str, body: bytes) -> list[dict]:
        content_type = self.headers.get("Content-Type", "")
        if "json" in content_type:
            data = json.loads(body or b"{}")
            paths, expand = data.get("paths", []), bool(data.get("expand"))
        else:
            form = urllib.parse.parse_qs(body.decode())
            paths, expand = form.get("paths", []), query_flag(form, "expand")
        files = repo.commits[sha]["files"]
        return [tree_entry(repo, sha, path, expand) for path in paths if path in files]

    # ---- files

    def serve_file(self, repo_id: str, revision: str, path: str):
        request = HubRequest(self.command, api=False, repo=repo_id, path=path)
        found = self.lookup(repo_id, revision, request)
        if found is None:
            return
        repo, sha = found
        info = repo.commits[sha]["files"].get(path)
        if info is None:
            self.send_hub_error(404, f"Entry not found: {path}", "EntryNotFound", sha)
            return
        if self.http5xx_fault(request):
            return
        size = info["size"]
        headers = {
            "X-Repo-Commit": sha,
            # huggingface_hub takes the sha256 of an LFS file and the git blob id of any other as its ETag.
            "ETag": f'"{info["lfs"]["oid"] if info["lfs"] else info["oid"]}"',
            "Accept-Ranges": "bytes",
            "Content-Disposition": f"inline; filename*=UTF-8''{urllib.parse.quote(path.rsplit('/', 1)[-1])}",
        }
        content_type = "application/octet-stream" if info["lfs"] else "text/plain; charset=utf-8"
        wanted = parse_range(self.headers.get("Range"), size) if self.command == "GET" else None
        if wanted == "unsatisfiable":
            self.send_bytes(416, b"", content_type, {**headers, "Content-Range": f"bytes */{size}"})
            return
        start, end = wanted if wanted else (0, size - 1)
        length = end - start + 1
        self.send_response(206 if wanted else 200)
        for name, value in headers.items():
            self.send_header(name, value)
        if wanted:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(length))
        if self.command == "HEAD" or length == 0:
            self.log_entry()
            self.end_headers()
            return
        self.end_headers()
        plan = body_plan(self.server.faults.take(request, BODY_FAULTS), length, size)
        if plan.applied:
            self.entry["fault"] = plan.applied
        with open(repo.object_path(info["sha256"]), "rb") as handle:
            handle.seek(start)
            self.stream_body(handle, start, length, plan)

    def stream_body(self, handle, start: int, length: int, plan: BodyPlan) -> None:
        chunk = min(CHUNK, max(1024, plan.rate // 10)) if plan.rate else CHUNK
        sent, began, stalled = 0, time.monotonic(), False
        while sent < length:
            if plan.drop_after is not None and sent >= plan.drop_after:
                # Content-Length promised more: the client sees the connection end mid-body.
                self.entry["dropped"] = True
                self.close_connection = True
                return
            if plan.stall_after is not None and not stalled and sent >= plan.stall_after:
                stalled = True
                self.entry["stalled"] = plan.stall_seconds
                time.sleep(plan.stall_seconds)
                began += plan.stall_seconds  # no catch-up burst after the stall when throttled too
                if plan.close_after_stall:
                    self.close_connection = True
                    return
            limit = min(chunk, length - sent)
            for cut in (plan.drop_after, None if stalled else plan.stall_after):
                if cut is not None and cut > sent:
                    limit = min(limit, cut - sent)
            data = handle.read(limit)
            if not data:
                break
            if plan.rate:  # wait before a chunk, not after: the last byte leaves when the time is up, and is logged then
                delay = began + (sent + len(data)) / plan.rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            data = flip(data, start + sent, plan.corrupt)
            if sent + len(data) == length:
                self.entry["bytes"] = length
                self.log_entry()
            self.wfile.write(data)
            sent += len(data)
            self.entry["bytes"] = sent


def make_server(state, bind: str = "127.0.0.1", port: int = 0) -> HubServer:
    state = Path(state)
    if not (state / "repos").is_dir():
        raise SystemExit(f"modelhub: {state}/repos does not exist; run 'modelhub.py build --state {state}' first")
    return HubServer(state, (bind, port))


# --------------------------------------------------------------------------- serve / stop

def address_file(state) -> Path:
    return Path(state) / "modelhub.addr"


def serve_foreground(state, bind: str, port: int) -> None:
    server = make_server(state, bind, port)
    host, actual_port = server.server_address[:2]
    # Written once listening: `serve --daemon` waits for it, and port 0 becomes a known port.
    _write_json_atomic(address_file(state), {"bind": host, "port": actual_port, "pid": os.getpid()})
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.serve_forever()
    finally:
        server.server_close()


def is_hub_server(pid: int, state) -> bool:
    """True when PID is a modelhub server of STATE (a stale pid may belong to anything by now)."""
    try:
        argv = [arg.decode(errors="replace") for arg in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]
        cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return False
    if not (any(arg.endswith("modelhub.py") for arg in argv) and "serve" in argv and "--state" in argv[:-1]):
        return False
    served = argv[argv.index("--state") + 1]
    return (cwd / served).resolve() == Path(state).resolve()


def serve_daemon(state, bind: str, port: int, pidfile, log, timeout: float = 15.0) -> dict:
    state = Path(state).resolve()
    if not (state / "repos").is_dir():
        raise SystemExit(f"modelhub: {state}/repos does not exist; run 'modelhub.py build --state {state}' first")
    stop(state, pidfile, quiet=True)
    address_file(state).unlink(missing_ok=True)
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as log_handle:
        child = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "serve", "--state", str(state),
                                  "--bind", bind, "--port", str(port)],
                                 stdin=subprocess.DEVNULL, stdout=log_handle, stderr=log_handle,
                                 start_new_session=True, cwd="/")
    Path(pidfile).parent.mkdir(parents=True, exist_ok=True)
    Path(pidfile).write_text(f"{child.pid}\n")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            Path(pidfile).unlink(missing_ok=True)
            raise SystemExit(f"modelhub: server exited with {child.returncode}:\n{Path(log).read_text()[-2000:]}")
        with contextlib.suppress(OSError, ValueError):
            address = json.loads(address_file(state).read_text())
            if address["pid"] == child.pid:
                return address
        time.sleep(0.05)
    stop(state, pidfile, quiet=True)
    raise SystemExit(f"modelhub: server did not listen on {bind}:{port} within {timeout}s")


def stop(state, pidfile, quiet: bool = False) -> bool:
    """Stop the server named by PIDFILE; a missing or stale pidfile is fine."""
    path = Path(pidfile)
    try:
        pid = int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        path.unlink(missing_ok=True)
        return False
    stopped = False
    if is_hub_server(pid, state):
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            with contextlib.suppress(ChildProcessError):  # reap it when it is our own child (tests)
                os.waitpid(pid, os.WNOHANG)
            if not is_hub_server(pid, state):
                break
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)
        stopped = True
    elif not quiet:
        print(f"modelhub: pidfile {pidfile} was stale (pid {pid} is not a modelhub server of {state})")
    path.unlink(missing_ok=True)
    address_file(state).unlink(missing_ok=True)
    return stopped


# --------------------------------------------------------------------------- fault, requests, mark

def resolve_revision(state, repo_id: str, revision: str) -> str:
    if SHA_RE.match(revision):
        return revision
    known = revisions(state).get(repo_id)
    if known is None:
        raise SystemExit(f"modelhub: no repository {repo_id} in {state}")
    if revision not in known:
        raise SystemExit(f"modelhub: {repo_id} has no revision {revision!r}; known: {', '.join(sorted(known))}")
    return known[revision]


@contextlib.contextmanager
def faults_locked(state):
    with open(Path(state) / ".faults.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def add_fault(state, kind: str, **options) -> dict:
    if kind not in FAULT_KINDS:
        raise SystemExit(f"modelhub: fault kind {kind!r} is not one of {', '.join(FAULT_KINDS)}")
    if kind == "throttle" and not options.get("rate"):
        raise SystemExit("modelhub: throttle needs --rate BYTES_PER_SECOND (e.g. 256K)")
    fault = {"id": uuid.uuid4().hex, "kind": kind}
    fault.update({key: value for key, value in options.items() if value is not None})
    if fault.get("revision"):
        fault["revision"] = resolve_revision(state, fault.get("repo") or DEFAULT_REPO, fault["revision"])
    with faults_locked(state):
        path = Path(state) / "faults.json"
        try:
            faults = json.loads(path.read_text()).get("faults", [])
        except (OSError, ValueError):
            faults = []
        _write_json_atomic(path, {"faults": faults + [fault]})
    return fault


def clear_faults(state) -> None:
    with faults_locked(state):
        (Path(state) / "faults.json").unlink(missing_ok=True)


def list_faults(state) -> list[dict]:
    book = FaultBook(Path(state))
    return [{**fault, "applied": book.applied.get(fault["id"], 0)} for fault in book.current()]


def request_log(state, since: int = 0) -> list[dict]:
    try:
        lines = (Path(state) / "requests.log").read_text().splitlines()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in lines[since:] if line.strip()]


def mark(state) -> int:
    try:
        with open(Path(state) / "requests.log", "rb") as handle:
            return sum(1 for _ in handle)
    except FileNotFoundError:
        return 0


# --------------------------------------------------------------------------- CLI

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="modelhub.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def with_state(name, help_text):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--state", required=True, help="hub state directory (repos/, faults.json, requests.log)")
        return p

    with_state("build", "build the test repositories into STATE/repos")
    with_state("revisions", "print {repo: {label or ref: commit sha}} as JSON")
    p_serve = with_state("serve", "serve the hub (foreground unless --daemon)")
    p_serve.add_argument("--bind", default="127.0.0.1")
    p_serve.add_argument("--port", type=int, default=DEFAULT_PORT, help="0 picks a free port (see STATE/modelhub.addr)")
    p_serve.add_argument("--daemon", action="store_true", help="detach; return once it listens")
    p_serve.add_argument("--pidfile", help="default STATE/modelhub.pid")
    p_serve.add_argument("--log", help="with --daemon: the server's stderr, default STATE/modelhub.log")
    p_stop = with_state("stop", "stop a server started with serve --daemon")
    p_stop.add_argument("--pidfile", help="default STATE/modelhub.pid")
    p_fault = with_state("fault", "add a fault (applies from the next request), list or clear them")
    p_fault.add_argument("kind", nargs="?", choices=FAULT_KINDS)
    p_fault.add_argument("--list", action="store_true", help="print the faults with how often each was applied")
    p_fault.add_argument("--clear", action="store_true", help="remove every fault")
    p_fault.add_argument("--path", help="only files whose path in the repository matches this glob")
    p_fault.add_argument("--repo", help=f"only this repository (and where --revision is resolved; default {DEFAULT_REPO})")
    p_fault.add_argument("--revision", help="only this commit: a sha, or a label (A, B), branch or tag of --repo")
    p_fault.add_argument("--count", type=int, help="only the first COUNT matching requests (a retry then succeeds)")
    p_fault.add_argument("--method", choices=("GET", "HEAD", "POST"), help="http5xx: only this method")
    p_fault.add_argument("--on", choices=("files", "api", "all"), help="http5xx: file requests (default), API calls or both")
    p_fault.add_argument("--rate", type=parse_size, help="throttle: bytes per second (K and M suffixes)")
    p_fault.add_argument("--after", type=parse_size, help="drop/stall: bytes of the body sent first (default half)")
    p_fault.add_argument("--seconds", type=float, help="stall: how long to hang (default 30)")
    p_fault.add_argument("--then", choices=("continue", "close"), help="stall: afterwards send the rest (default) or close")
    p_fault.add_argument("--offset", type=parse_size, help="corrupt: first byte inverted (default mid-file)")
    p_fault.add_argument("--length", type=parse_size, help="corrupt: bytes inverted (default 16)")
    p_fault.add_argument("--status", type=int, choices=(500, 502, 503, 504), help="http5xx: status (default 503)")
    p_requests = with_state("requests", "print the request log, one JSON object a line")
    p_requests.add_argument("--since", type=int, default=0, help="skip the first N lines (a number printed by mark)")
    with_state("mark", "print the request log's line count")

    args = parser.parse_args(argv)
    state = Path(args.state).resolve()
    if args.command == "build":
        print(json.dumps(build(state), indent=1, sort_keys=True))
    elif args.command == "revisions":
        print(json.dumps(revisions(state), indent=1, sort_keys=True))
    elif args.command == "serve":
        if args.daemon:
            pidfile = args.pidfile or state / "modelhub.pid"
            address = serve_daemon(state, args.bind, args.port, pidfile, args.log or state / "modelhub.log")
            print(f"modelhub: serving {state} on http://{address['bind']}:{address['port']} (pid {address['pid']})")
        else:
            if args.pidfile:
                Path(args.pidfile).write_text(f"{os.getpid()}\n")
            serve_foreground(state, args.bind, args.port)
    elif args.command == "stop":
        stop(state, args.pidfile or state / "modelhub.pid")
    elif args.command == "fault":
        if args.clear:
            clear_faults(state)
        elif args.list:
            print(json.dumps(list_faults(state), indent=1, sort_keys=True))
        elif args.kind:
            options = {name: getattr(args, name) for name in ("path", "repo", "revision", "count", "method", "on", "rate",
                                                              "after", "seconds", "then", "offset", "length", "status")}
            print(json.dumps(add_fault(state, args.kind, **options), sort_keys=True))
        else:
            parser.error("fault: give a KIND, --list or --clear")
    elif args.command == "requests":
        for entry in request_log(state, args.since):
            print(json.dumps(entry, sort_keys=True))
    elif args.command == "mark":
        print(mark(state))
    return 0


if __name__ == "__main__":
    sys.exit(main())
