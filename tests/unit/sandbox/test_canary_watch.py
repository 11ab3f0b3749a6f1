"""tools/sandbox/canary_watch.py finds canaries on command lines and in files others can read."""

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOOL = Path(__file__).resolve().parents[3] / "tools" / "sandbox" / "canary_watch.py"
CANARY = b"canary-secret-4b7d9e2a1c"


def load_tool():
    spec = importlib.util.spec_from_file_location("canary_watch", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def secrets_file(tmp_path):
    path = tmp_path / "canaries"
    path.write_bytes(b"other-canary-00\n" + CANARY + b"\n")
    path.chmod(0o600)
    return path


def test_the_sampler_reports_a_command_line_holding_a_canary_without_the_canary_and_counts_watched_ones(tmp_path):
    out = tmp_path / "sampler.json"
    sampler = subprocess.Popen([sys.executable, str(TOOL), "sample", "--secrets", str(secrets_file(tmp_path)), "--out", str(out),
                                "--watch", "sleeper=gpufleet-sleeper-marker", "--watch", "absent=no-such-process-text", "--interval", "0.02"])
    try:
        leaker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", CANARY.decode(), "gpufleet-sleeper-marker"])
        deadline = time.monotonic() + 20
        # Until a sample has seen the leaker and another one followed (one round over /proc can take
        # seconds on a loaded machine).
        while time.monotonic() < deadline:
            if out.exists():
                state = json.loads(out.read_text())
                if state["watched"]["sleeper"] > 0 and state["samples"] > 1:
                    break
            time.sleep(0.1)
        leaker.kill()
        leaker.wait()
    finally:
        sampler.send_signal(signal.SIGTERM)
        assert sampler.wait(timeout=20) == 0
    state = json.loads(out.read_text())
    assert state["samples"] > 1
    assert state["watched"]["sleeper"] > 0 and state["watched"]["absent"] == 0
    assert [hit["pid"] for hit in state["hits"]] and {hit["pid"] for hit in state["hits"]} == {leaker.pid}
    assert "<canary 2>" in state["hits"][0]["cmdline"]
    assert CANARY.decode() not in out.read_text()


def test_scan_reads_what_others_can_read_and_finds_a_canary_across_a_chunk_boundary(tmp_path, monkeypatch, capsys):
    tool = load_tool()
    monkeypatch.setattr(tool, "CHUNK", 64)
    secrets = secrets_file(tmp_path)
    # Under /tmp (searchable by all): pytest's own base directory is closed to other users.
    base = Path(tempfile.mkdtemp(prefix="canary-watch-", dir="/tmp"))
    try:
        scan_tree(tool, secrets, base, tmp_path, capsys)
    finally:
        shutil.rmtree(base)


def scan_tree(tool, secrets, base, closed_base, capsys):
    base.chmod(0o755)
    root = base / "root"
    (root / "open").mkdir(parents=True)
    (root / "closed").mkdir(mode=0o700)
    (root / "closed").chmod(0o700)
    readable = root / "open" / "across-chunks.txt"
    readable.write_bytes(b"x" * 60 + CANARY + b"\n")
    readable.chmod(0o644)
    private = root / "open" / "root-only.env"
    private.write_bytes(CANARY)
    private.chmod(0o600)
    hidden = root / "closed" / "readable-but-hidden.txt"
    hidden.write_bytes(CANARY)
    hidden.chmod(0o644)
    clean = root / "open" / "clean.txt"
    clean.write_bytes(b"nothing here\n" * 100)
    clean.chmod(0o644)
    os.symlink(readable, root / "open" / "link")

    assert tool.main(["scan", "--secrets", str(secrets), "--world-readable", str(root)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["files"]["hits"] == [str(readable)]
    assert result["files"]["read"] == 2

    assert tool.main(["scan", "--secrets", str(secrets), "--any-file", str(root), "--exclude", str(private)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert sorted(result["files"]["hits"]) == sorted([str(readable), str(hidden)])
    assert "journal" not in result

    # The same tree below a directory others cannot search: nothing in it is world-readable.
    closed = closed_base / "closed-root"
    shutil.copytree(root, closed, symlinks=True)
    (closed_base).chmod(0o700)
    assert tool.main(["scan", "--secrets", str(secrets), "--world-readable", str(closed)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["files"] == {"read": 0, "bytes": 0, "hits": []}
