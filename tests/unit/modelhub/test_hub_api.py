"""huggingface_hub 2.4 against the hub: tree, revision info, pinned downloads, Range, errors, request log."""

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import huggingface_hub
import pytest
from huggingface_hub import HfApi, hf_hub_download, snapshot_download
from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError
from modelhub_helpers import BIG, SHARD_1, SHARD_2, TINY, TOOLS, git_blob_sha1, request, resolve_path, sha256_file


def test_huggingface_hub_is_the_pinned_version():
    assert huggingface_hub.__version__ == "2.4.0"


def test_tree_lists_files_with_git_and_lfs_ids(endpoint, revs, hub_state):
    entries = HfApi(endpoint=endpoint).list_repo_tree(TINY, revision=revs[TINY]["A"], recursive=True)
    files = {entry.path: entry for entry in entries}
    assert set(files) >= {"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json",
                          "special_tokens_map.json", SHARD_1, SHARD_2, "model.safetensors.index.json", "LICENSE",
                          "README.md", "configuration_tiny.py", ".gitattributes"}
    for path, entry in files.items():
        assert re.fullmatch(r"[0-9a-f]{40}", entry.blob_id)
        assert entry.xet_hash is None
        if path.endswith(".safetensors"):
            assert entry.lfs.size == entry.size and entry.lfs.pointer_size > 0
            assert re.fullmatch(r"[0-9a-f]{64}", entry.lfs.sha256)
        else:
            assert entry.lfs is None
    status, _unused, body = request(endpoint, "GET", resolve_path(TINY, revs[TINY]["A"], "config.json"))
    assert status == 200 and files["config.json"].blob_id == git_blob_sha1(body)
    assert files["config.json"].size == len(body)


def test_tree_json_is_what_the_hub_sends(endpoint, revs):
    status, headers, body = request(endpoint, "GET", f"/api/models/{TINY}/tree/{revs[TINY]['A']}?recursive=true&expand=false")
    assert status == 200 and headers["content-type"].startswith("application/json")
    entry = next(e for e in json.loads(body) if e["path"] == SHARD_1)
    assert set(entry) == {"type", "oid", "size", "path", "lfs"} and entry["type"] == "file"
    assert set(entry["lfs"]) == {"oid", "size", "pointerSize"}


@pytest.mark.parametrize(("revision", "label"), [("main", "B"), ("v1", "A"), ("A", "A"), ("refs/heads/main", "B")])
def test_model_info_resolves_branches_tags_and_shas(endpoint, revs, revision, label):
    wanted = revs[TINY][label]
    info = HfApi(endpoint=endpoint).model_info(TINY, revision=revs[TINY][revision] if revision == "A" else revision)
    assert info.sha == wanted and info.id == TINY
    assert {s.rfilename for s in info.siblings} >= {"config.json", SHARD_1, SHARD_2}
    assert info.card_data.license == "other"


def test_model_info_with_files_metadata_and_refs(endpoint, revs):
    api = HfApi(endpoint=endpoint)
    info = api.model_info(TINY, revision="main", files_metadata=True)
    shard = next(s for s in info.siblings if s.rfilename == SHARD_1)
    assert shard.lfs.sha256 and shard.size == shard.lfs.size
    refs = api.list_repo_refs(TINY)
    assert {(b.name, b.target_commit) for b in refs.branches} >= {("main", revs[TINY]["B"])}
    assert {(t.name, t.target_commit) for t in refs.tags} == {("v1", revs[TINY]["A"])}
    assert [c.commit_id for c in api.list_repo_commits(TINY, revision="main")] == [revs[TINY]["B"], revs[TINY]["A"]]


def test_errors_carry_the_hub_error_codes(endpoint, revs):
    api = HfApi(endpoint=endpoint)
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("gpufleet-test/no-such-model")
    with pytest.raises(RevisionNotFoundError):
        api.model_info(TINY, revision="no-such-branch")
    with pytest.raises(RevisionNotFoundError):
        api.list_repo_tree(TINY, revision="0" * 40).__next__()
    cases = [
        ("/gpufleet-test/nope/resolve/main/config.json", "RepoNotFound"),
        (resolve_path(TINY, "1" * 40, "config.json"), "RevisionNotFound"),
        (resolve_path(TINY, "main", "missing.json"), "EntryNotFound"),
        (resolve_path(TINY, revs[TINY]["C"], SHARD_2), "EntryNotFound"),
    ]
    for path, code in cases:
        for method in ("HEAD", "GET"):
            status, headers, _unused = request(endpoint, method, path)
            assert (status, headers.get("x-error-code")) == (404, code), (method, path)
    assert request(endpoint, "GET", resolve_path(TINY, "main", "missing.json"))[1]["x-repo-commit"] == revs[TINY]["B"]
    status, headers, _unused = request(endpoint, "GET", "/api/agent-harnesses")
    assert status == 404 and "x-error-code" not in headers


def test_a_shard_missing_from_a_revision_is_entry_not_found(endpoint, revs, hf_env):
    with pytest.raises(EntryNotFoundError):
        hf_hub_download(TINY, SHARD_2, revision=revs[TINY]["C"], local_dir=hf_env, endpoint=endpoint)


def test_head_answers_like_the_hub_without_xet(endpoint, revs, hub_state):
    sha = revs[TINY]["A"]
    tree = {e.path: e for e in HfApi(endpoint=endpoint).list_repo_tree(TINY, revision=sha)}
    for path, etag in ((SHARD_1, tree[SHARD_1].lfs.sha256), ("tokenizer.json", tree["tokenizer.json"].blob_id)):
        status, headers, body = request(endpoint, "HEAD", resolve_path(TINY, "v1", path))
        assert status == 200 and body == b""
        assert headers["x-repo-commit"] == sha
        assert headers["etag"] == f'"{etag}"'
        assert int(headers["content-length"]) == tree[path].size
        assert not [name for name in headers if "xet" in name] and "link" not in headers


def test_range_requests(endpoint, revs):
    path = resolve_path(TINY, revs[TINY]["A"], SHARD_1)
    _unused, headers, whole = request(endpoint, "GET", path)
    size = len(whole)
    assert headers["accept-ranges"] == "bytes"
    for header, start, end in (("bytes=1000-", 1000, size - 1), ("bytes=10-19", 10, 19), ("bytes=-100", size - 100, size - 1),
                               (f"bytes=5-{size + 50}", 5, size - 1)):
        status, headers, body = request(endpoint, "GET", path, {"Range": header})
        assert status == 206, header
        assert headers["content-range"] == f"bytes {start}-{end}/{size}"
        assert body == whole[start:end + 1] and int(headers["content-length"]) == len(body)
    status, headers, _unused = request(endpoint, "GET", path, {"Range": f"bytes={size}-"})
    assert status == 416 and headers["content-range"] == f"bytes */{size}"


def download_and_check(endpoint, revision_sha, local_dir, repo=TINY):
    path = snapshot_download(repo, revision=revision_sha, local_dir=local_dir, endpoint=endpoint)
    tree = {e.path: e for e in HfApi(endpoint=endpoint).list_repo_tree(repo, revision=revision_sha, recursive=True)}
    for name, entry in tree.items():
        local = Path(path) / name
        assert local.stat().st_size == entry.size
        if entry.lfs:
            assert sha256_file(local) == entry.lfs.sha256
        else:
            assert git_blob_sha1(local.read_bytes()) == entry.blob_id
    return Path(path)


def test_snapshot_download_of_a_and_b(endpoint, revs, hf_env):
    a = download_and_check(endpoint, revs[TINY]["A"], hf_env / "a")
    b = download_and_check(endpoint, revs[TINY]["B"], hf_env / "b")
    assert sha256_file(a / SHARD_1) != sha256_file(b / SHARD_1)
    assert json.loads((a / "generation_config.json").read_text())["temperature"] == 0.7
    assert json.loads((b / "generation_config.json").read_text())["temperature"] == 0.6
    result = HfApi(endpoint=endpoint).verify_repo_checksums(TINY, revision=revs[TINY]["A"], local_dir=a)
    assert not result.mismatches and not result.missing_paths


def test_snapshot_download_by_branch_fills_the_cache(endpoint, revs, hf_env):
    path = snapshot_download(TINY, revision="main", endpoint=endpoint, cache_dir=hf_env / "cache")
    assert Path(path).name == revs[TINY]["B"]
    ref = hf_env / "cache" / "models--gpufleet-test--tiny-kimi" / "refs" / "main"
    assert ref.read_text() == revs[TINY]["B"]


def test_hf_hub_download_pinned_and_a_repeat_makes_no_request(modelhub, endpoint, revs, hub_state, hf_env):
    sha = revs[TINY]["A"]
    before = modelhub.mark(hub_state)
    local = hf_hub_download(TINY, SHARD_2, revision=sha, local_dir=hf_env / "one", endpoint=endpoint)
    made = modelhub.request_log(hub_state, before)
    assert [(r["method"], r["status"]) for r in made] == [("HEAD", 200), ("GET", 200)]
    assert made[1]["bytes"] == Path(local).stat().st_size and made[1]["range"] is None
    download_and_check(endpoint, sha, hf_env / "all")
    mark = modelhub.mark(hub_state)
    snapshot_download(TINY, revision=sha, local_dir=hf_env / "all", endpoint=endpoint)
    assert modelhub.request_log(hub_state, mark) == []


def test_request_log_and_mark_through_the_cli(endpoint, hub_state):
    cli = [sys.executable, str(TOOLS / "modelhub.py")]
    mark = int(subprocess.run([*cli, "mark", "--state", str(hub_state)], capture_output=True, text=True, check=True).stdout)
    request(endpoint, "GET", resolve_path(TINY, "main", "config.json"), {"Range": "bytes=0-9"})
    out = subprocess.run([*cli, "requests", "--state", str(hub_state), "--since", str(mark)], capture_output=True,
                         text=True, check=True).stdout
    entries = [json.loads(line) for line in out.splitlines()]
    assert len(entries) == 1
    entry = entries[0]
    assert {k: entry[k] for k in ("method", "path", "range", "status", "bytes")} == {
        "method": "GET", "path": resolve_path(TINY, "main", "config.json"), "range": "bytes=0-9", "status": 206, "bytes": 10}
    assert isinstance(entry["time"], float)


def test_hf_cli_download_with_hf_endpoint(endpoint, revs, hf_env):
    """The `hf` CLI (what a playbook runs) with HF_ENDPOINT in its environment."""
    hf = Path(sys.executable).with_name("hf")
    if not hf.exists():
        pytest.skip("no hf CLI beside this Python")
    env = dict(os.environ, HF_ENDPOINT=endpoint)  # hf-xet is installed: only our headers keep it out
    target = hf_env / "cli"
    done = subprocess.run([str(hf), "download", BIG, "--revision", revs[BIG]["A"], "--local-dir", str(target)],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    index = json.loads((target / "model.safetensors.index.json").read_text())
    for shard in set(index["weight_map"].values()):
        assert (target / shard).stat().st_size > 3_000_000
    assert hashlib.sha256((target / SHARD_1).read_bytes()).hexdigest() != hashlib.sha256((target / SHARD_2).read_bytes()).hexdigest()
