"""Faults switched on at runtime: throttle, drop, corrupt, http5xx, stall; filters and counts; the CLI."""

import hashlib
import http.client
import json
import socket
import subprocess
import sys
import time
import urllib.parse

import huggingface_hub.constants
import pytest
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.errors import HfHubHTTPError
from modelhub_helpers import BIG, SHARD_1, SHARD_2, TINY, TOOLS, request, resolve_path, sha256_file


def fetch(endpoint, path, headers=None):
    return request(endpoint, "GET", path, headers)


def raw_get_timeline(endpoint, path, read_size=4096, timeout=10):
    """[(seconds since the request, bytes so far)] while reading PATH's body from a plain socket."""
    url = urllib.parse.urlsplit(endpoint)
    with socket.create_connection((url.hostname, url.port), timeout=timeout) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: hub\r\nConnection: close\r\n\r\n".encode())
        began, data, timeline = time.monotonic(), b"", []
        while b"\r\n\r\n" not in data:
            data += sock.recv(read_size)
        received = len(data.split(b"\r\n\r\n", 1)[1])
        timeline.append((time.monotonic() - began, received))
        while True:
            chunk = sock.recv(read_size)
            if not chunk:
                return timeline
            received += len(chunk)
            timeline.append((time.monotonic() - began, received))


def test_throttle_slows_file_bodies_then_stops_after_count(faults, endpoint, revs):
    path = resolve_path(TINY, revs[TINY]["A"], SHARD_1)  # 280 kB
    faults("throttle", rate=256 * 1024, path="*.safetensors", count=1)
    began = time.monotonic()
    status, _unused, throttled = fetch(endpoint, path)
    slow = time.monotonic() - began
    began = time.monotonic()
    _unused, _unused2, normal = fetch(endpoint, path)
    fast = time.monotonic() - began
    assert status == 200 and throttled == normal
    assert slow >= 280096 / (256 * 1024) and fast < slow / 3, (slow, fast)  # paced: never faster than the rate


def test_throttle_leaves_other_paths_and_heads_alone(faults, endpoint, revs):
    faults("throttle", rate=1024, path="*.safetensors")
    began = time.monotonic()
    assert fetch(endpoint, resolve_path(TINY, "main", "tokenizer.json"))[0] == 200
    assert request(endpoint, "HEAD", resolve_path(TINY, "main", SHARD_1))[0] == 200
    assert time.monotonic() - began < 2  # 21 kB at 1 kB/s would take 20 s


def test_drop_cuts_the_body_mid_file(faults, endpoint, revs):
    faults("drop", path=SHARD_1, after=100_000)
    with pytest.raises(http.client.IncompleteRead) as cut:
        fetch(endpoint, resolve_path(TINY, "main", SHARD_1))
    assert len(cut.value.partial) == 100_000


def test_drop_once_makes_huggingface_hub_retry(modelhub, faults, endpoint, revs, hub_state, hf_env):
    sha = revs[BIG]["A"]
    faults("drop", repo=BIG, path=SHARD_1, count=1, after=1_000_000)
    mark = modelhub.mark(hub_state)
    local = hf_hub_download(BIG, SHARD_1, revision=sha, local_dir=hf_env, endpoint=endpoint)
    gets = [r for r in modelhub.request_log(hub_state, mark) if r["method"] == "GET"]
    assert [(r.get("dropped", False), r["bytes"]) for r in gets] == [(True, 1_000_000), (False, (hf_env / SHARD_1).stat().st_size)]
    tree = {e.path: e for e in HfApi(endpoint=endpoint).list_repo_tree(BIG, revision=sha)}
    assert sha256_file(local) == tree[SHARD_1].lfs.sha256


def test_corrupt_keeps_size_and_headers_but_not_the_sha256(modelhub, faults, endpoint, revs, hub_state, hf_env):
    sha = revs[TINY]["A"]
    path = resolve_path(TINY, sha, SHARD_2)
    _unused, good_headers, good = fetch(endpoint, path)
    faults("corrupt", path=SHARD_2, revision="A", offset=1000, length=8)
    _unused, head, _unused2 = request(endpoint, "HEAD", path)
    assert (head["etag"], head["content-length"]) == (good_headers["etag"], good_headers["content-length"])
    _unused, _unused2, bad = fetch(endpoint, path)
    assert len(bad) == len(good)
    assert [i for i in range(len(good)) if good[i] != bad[i]] == list(range(1000, 1008))
    assert fetch(endpoint, path, {"Range": "bytes=996-1011"})[2] == bad[996:1012]  # ranges see the same bytes
    # huggingface_hub checks only the size: it accepts the corrupted shard (what the checkpoint role must catch).
    local = hf_hub_download(TINY, SHARD_2, revision=sha, local_dir=hf_env, endpoint=endpoint)
    assert sha256_file(local) == hashlib.sha256(bad).hexdigest() != head["etag"].strip('"')
    # Another revision of the same file is untouched.
    assert fetch(endpoint, resolve_path(TINY, revs[TINY]["B"], SHARD_2))[2] == (
        hub_state / "repos" / TINY / "objects" / head_etag_of(endpoint, revs[TINY]["B"], SHARD_2)).read_bytes()


def head_etag_of(endpoint, revision, filename):
    return request(endpoint, "HEAD", resolve_path(TINY, revision, filename))[1]["etag"].strip('"')


def test_corrupt_with_a_count_heals(faults, endpoint, revs):
    path = resolve_path(TINY, "main", SHARD_1)
    good = fetch(endpoint, path)[2]
    faults("corrupt", path="*00001*", count=1)
    assert fetch(endpoint, path)[2] != good
    assert fetch(endpoint, path)[2] == good


@pytest.mark.parametrize("status", [500, 503])
def test_http5xx_answers_with_the_status(faults, endpoint, status):
    faults("http5xx", status=status, path="config.json")
    assert fetch(endpoint, resolve_path(TINY, "main", "config.json"))[0] == status
    assert request(endpoint, "HEAD", resolve_path(TINY, "main", "config.json"))[0] == status
    assert fetch(endpoint, resolve_path(TINY, "main", "tokenizer.json"))[0] == 200


def test_http5xx_on_a_file_get_fails_huggingface_hub(faults, endpoint, revs, hf_env):
    faults("http5xx", method="GET", path=SHARD_1)
    with pytest.raises(HfHubHTTPError) as failed:
        hf_hub_download(TINY, SHARD_1, revision=revs[TINY]["A"], local_dir=hf_env, endpoint=endpoint)
    assert failed.value.response.status_code == 503


def test_http5xx_once_on_head_is_retried(modelhub, faults, endpoint, revs, hub_state, hf_env):
    faults("http5xx", method="HEAD", path="config.json", count=1)
    mark = modelhub.mark(hub_state)
    hf_hub_download(TINY, "config.json", revision=revs[TINY]["A"], local_dir=hf_env, endpoint=endpoint)
    made = [(r["method"], r["status"]) for r in modelhub.request_log(hub_state, mark)]
    assert made == [("HEAD", 503), ("HEAD", 200), ("GET", 200)]


def test_http5xx_on_api_calls(faults, endpoint):
    faults("http5xx", on="api", status=500, count=1)
    assert fetch(endpoint, resolve_path(TINY, "main", "config.json"))[0] == 200  # files are not in scope
    with pytest.raises(HfHubHTTPError) as failed:
        HfApi(endpoint=endpoint).model_info(TINY)
    assert failed.value.response.status_code == 500
    assert HfApi(endpoint=endpoint).model_info(TINY).sha


def test_stall_sends_some_bytes_then_hangs_then_continues(faults, endpoint, revs):
    faults("stall", path=SHARD_1, after=50_000, seconds=1.5)
    path = resolve_path(TINY, "main", SHARD_1)
    timeline = raw_get_timeline(endpoint, path)
    before = max(t for t, n in timeline if n <= 50_000)
    after = min(t for t, n in timeline if n > 50_000)
    assert after - before >= 1.0
    assert timeline[-1][1] == int(request(endpoint, "HEAD", path)[1]["content-length"])


def test_stall_then_close(faults, endpoint):
    faults("stall", path=SHARD_1, after=10_000, seconds=0.3, then="close")
    with pytest.raises(http.client.IncompleteRead) as cut:
        fetch(endpoint, resolve_path(TINY, "main", SHARD_1))
    assert len(cut.value.partial) == 10_000


def test_stall_once_makes_huggingface_hub_time_out_and_retry(modelhub, faults, endpoint, revs, hub_state, hf_env, monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DOWNLOAD_TIMEOUT", 0.5)
    faults("stall", path=SHARD_1, after=1000, seconds=2, count=1)
    mark = modelhub.mark(hub_state)
    local = hf_hub_download(TINY, SHARD_1, revision=revs[TINY]["B"], local_dir=hf_env, endpoint=endpoint)
    assert sha256_file(local) == head_etag_of(endpoint, revs[TINY]["B"], SHARD_1)
    gets = [r for r in modelhub.request_log(hub_state, mark) if r["method"] == "GET"]
    assert gets[-1]["status"] == 200 and gets[-1].get("fault") is None and len(gets) == 1
    time.sleep(1.6)  # the stalled request is logged when its stall ends and it finds the client gone
    stalled = [r for r in modelhub.request_log(hub_state, mark) if r.get("fault") == ["stall"]]
    assert len(stalled) == 1 and stalled[0]["aborted"] and stalled[0]["stalled"] == 2


def test_revision_filter_applies_to_one_commit_only(faults, endpoint, revs):
    faults("http5xx", revision=revs[TINY]["A"])
    assert fetch(endpoint, resolve_path(TINY, "v1", "config.json"))[0] == 503
    assert fetch(endpoint, resolve_path(TINY, "main", "config.json"))[0] == 200
    assert fetch(endpoint, resolve_path(BIG, "main", "config.json"))[0] == 200


def test_fault_cli_adds_lists_and_clears(hub_state, endpoint, revs, faults):
    cli = [sys.executable, str(TOOLS / "modelhub.py"), "fault", "--state", str(hub_state)]

    def run(*args):
        return subprocess.run([*cli, *args], capture_output=True, text=True, check=True).stdout

    added = json.loads(run("drop", "--path", "*.safetensors", "--revision", "B", "--after", "64K", "--count", "2"))
    assert (added["revision"], added["after"], added["count"]) == (revs[TINY]["B"], 65536, 2)
    run("throttle", "--rate", "1M", "--repo", BIG)
    for _unused in range(2):
        with pytest.raises(http.client.IncompleteRead):
            fetch(endpoint, resolve_path(TINY, "main", SHARD_1))
    assert fetch(endpoint, resolve_path(TINY, "main", SHARD_1))[0] == 200  # the count is used up
    listed = json.loads(run("--list"))
    assert [(f["kind"], f["applied"]) for f in listed] == [("drop", 2), ("throttle", 0)]
    run("--clear")
    assert json.loads(run("--list")) == []
    bad = subprocess.run([*cli, "throttle"], capture_output=True, text=True, check=False)
    assert bad.returncode != 0 and "--rate" in bad.stderr
