"""Pin, stage, promote and roll back against the sandbox model hub served in-process.

These run the real huggingface_hub (the controller venv has the pinned version) against
tools/modelhub, so every fault the Molecule scenario injects is also covered here in seconds.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
from pathlib import Path

import pytest
from ansible_collections.gpufleet.serving.plugins.module_utils import _checkpoint_layout as layout_mod
from ansible_collections.gpufleet.serving.plugins.module_utils import _checkpoint_space as space_mod
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_download import (
    backoff_seconds,
    format_progress,
    redact,
)
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_hub import check_pin_request, pin
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_manifest import CheckpointError
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_stage import promote, rollback, stage

huggingface_hub = pytest.importorskip("huggingface_hub")

REPO = "gpufleet-test/tiny-kimi"
BIG = "gpufleet-test/tiny-big"
TOOLS = Path(__file__).resolve().parents[4] / "tools" / "modelhub"


def _load_modelhub():
    sys.path.insert(0, str(TOOLS))
    spec = importlib.util.spec_from_file_location("gpufleet_modelhub_for_lifecycle", TOOLS / "modelhub.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    modelhub = _load_modelhub()
    state = tmp_path_factory.mktemp("hub")
    modelhub.build(state)
    server = modelhub.make_server(state, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield {"modelhub": modelhub, "state": state, "endpoint": "http://127.0.0.1:%d" % server.server_address[1],
           "revs": modelhub.revisions(state)}
    server.shutdown()
    server.server_close()


@pytest.fixture
def faults(hub):
    hub["modelhub"].clear_faults(hub["state"])
    yield lambda kind, **options: hub["modelhub"].add_fault(hub["state"], kind, **options)
    hub["modelhub"].clear_faults(hub["state"])


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    for name in ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_HUB_DISABLE_UPDATE_CHECK", "HF_HUB_DISABLE_TELEMETRY"):
        monkeypatch.setenv(name, "1")
    return tmp_path


def requests_since(hub, mark):
    lines = (Path(hub["state"]) / "requests.log").read_text().splitlines()
    return [json.loads(line) for line in lines[mark:]]


def mark(hub):
    path = Path(hub["state"]) / "requests.log"
    return len(path.read_text().splitlines()) if path.exists() else 0


def fetched_files(records):
    return sorted(r["path"].split("/resolve/", 1)[1].split("/", 1)[1] for r in records
                  if r["method"] == "GET" and "/resolve/" in r["path"])


def do_pin(hub, layout, repo, revision, **kwargs):
    api = huggingface_hub.HfApi(endpoint=hub["endpoint"])

    def fetch_text(path, commit):
        local = huggingface_hub.hf_hub_download(repo, path, revision=commit, endpoint=hub["endpoint"],
                                                local_dir=str(Path(layout.model_dir).parent / ".scratch"))
        return Path(local).read_text()

    kwargs.setdefault("license_accepted", True)
    return pin(api, fetch_text, layout, repo, revision, hub["endpoint"], kwargs.pop("trust_remote_code", False), **kwargs)


def do_stage(hub, layout, repo, commit, free=10 ** 12, **options):
    opts = {"endpoint": hub["endpoint"], "workers": 4, "verify_workers": 2, "stall_seconds": 5, "retries": 3,
            "backoff_base": 0.1, "backoff_cap": 0.5, "margin_ratio": 0.0, "margin_min_bytes": 0, "python": sys.executable,
            "small_file_bytes": 1024 * 1024}
    opts.update(options)
    return stage(layout, commit, repo, opts, lambda path: free)


def test_pin_stage_promote_and_rerun_without_requests(hub, env):
    layout = layout_mod.Layout(env / "models" / "tiny")
    commit_a = hub["revs"][REPO]["A"]
    pinned = do_pin(hub, layout, REPO, commit_a)
    assert pinned["changed"] and pinned["first_download"] and pinned["license_file"] == "LICENSE"
    assert "licence" in pinned["license_text"].lower() or "license" in pinned["license_text"].lower()
    staged = do_stage(hub, layout, REPO, commit_a)
    assert staged["state"] == "staged" and staged["bytes_downloaded"] == staged["total_bytes"]
    promoted = promote(layout, commit_a)
    assert promoted["changed"] and layout_mod.link_state(layout) == {"current": commit_a, "previous": None}

    before = mark(hub)
    assert not do_pin(hub, layout, REPO, commit_a)["changed"]
    assert do_stage(hub, layout, REPO, commit_a)["state"] == "present"
    assert not promote(layout, commit_a)["changed"]
    assert requests_since(hub, before) == []


def test_branch_is_resolved_but_refused_with_remote_code(hub, env):
    layout = layout_mod.Layout(env / "models" / "tiny")
    assert do_pin(hub, layout, REPO, "main")["commit"] == hub["revs"][REPO]["main"]
    with pytest.raises(CheckpointError, match="'main' of gpufleet-test/tiny-kimi is a branch or tag"):
        check_pin_request(REPO, "main", trust_remote_code=True)


def test_first_download_needs_the_licence_accepted(hub, env):
    layout = layout_mod.Layout(env / "models" / "tiny")
    with pytest.raises(CheckpointError, match="first download of gpufleet-test/tiny-kimi: read its licence"):
        do_pin(hub, layout, REPO, hub["revs"][REPO]["A"], license_accepted=False)
    assert not os.path.exists(layout.manifest_path(hub["revs"][REPO]["A"]))


def test_incomplete_revision_is_refused_at_pin_time(hub, env):
    layout = layout_mod.Layout(env / "models" / "tiny")
    with pytest.raises(CheckpointError, match="incomplete on the Hub"):
        do_pin(hub, layout, REPO, hub["revs"][REPO]["incomplete"])


def test_not_enough_space_is_refused_before_any_file(hub, env):
    layout = layout_mod.Layout(env / "models" / "tiny")
    before = mark(hub)
    with pytest.raises(CheckpointError, match=r"not enough space .* missing\. Nothing was downloaded"):
        do_pin(hub, layout, REPO, hub["revs"][REPO]["A"], free_bytes=1000, margin_min_bytes=10 ** 6)
    assert fetched_files(requests_since(hub, before)) == []


def test_corrupted_shard_is_not_staged_and_named_with_both_hashes(hub, env, faults):
    layout = layout_mod.Layout(env / "models" / "tiny")
    commit_b = hub["revs"][REPO]["B"]
    do_pin(hub, layout, REPO, commit_b)
    faults("corrupt", repo=REPO, revision=commit_b, path="model-00002-of-00002.safetensors")
    with pytest.raises(CheckpointError) as failure:
        do_stage(hub, layout, REPO, commit_b)
    assert "model-00002-of-00002.safetensors: sha256 is " in str(failure.value)
    assert str(failure.value).count("expected") >= 1
    assert not os.path.exists(layout.revision_dir(commit_b))
    with pytest.raises(CheckpointError, match="not staged"):
        promote(layout, commit_b)

    # The corruption is gone: only the bad shard is fetched again.
    hub["modelhub"].clear_faults(hub["state"])
    before = mark(hub)
    staged = do_stage(hub, layout, REPO, commit_b)
    assert staged["files_to_download"] == 1
    assert fetched_files(requests_since(hub, before)) == ["model-00002-of-00002.safetensors"]


def test_dropped_connection_is_retried(hub, env, faults):
    layout = layout_mod.Layout(env / "models" / "big")
    commit = hub["revs"][BIG]["A"]
    do_pin(hub, layout, BIG, commit)
    faults("drop", repo=BIG, path="model-00001-of-00002.safetensors", after=500000, count=1)
    assert do_stage(hub, layout, BIG, commit)["state"] == "staged"


def test_stall_fires_the_watchdog_and_the_retry_completes(hub, env, faults):
    layout = layout_mod.Layout(env / "models" / "big")
    commit = hub["revs"][BIG]["A"]
    do_pin(hub, layout, BIG, commit)
    faults("stall", repo=BIG, path="model-00002-of-00002.safetensors", after=100000, seconds=60, count=1)
    staged = do_stage(hub, layout, BIG, commit, stall_seconds=2)
    kinds = [(e["event"], e["path"]) for e in staged["events"]]
    assert ("stall", "model-00002-of-00002.safetensors") in kinds
    assert staged["retries"] == 1
    retry_start = [e for e in staged["events"] if e["event"] == "start" and "attempt 2" in e["detail"]]
    assert retry_start and "Xet disabled" in retry_start[0]["detail"]


def test_server_errors_are_retried_then_give_up(hub, env, faults):
    layout = layout_mod.Layout(env / "models" / "tiny")
    commit = hub["revs"][REPO]["A"]
    do_pin(hub, layout, REPO, commit)
    faults("http5xx", repo=REPO, path="config.json", status=503)
    with pytest.raises(CheckpointError, match=r"config.json failed 1 time\(s\)"):
        do_stage(hub, layout, REPO, commit, retries=0)
    assert layout_mod.link_state(layout)["current"] is None


def test_upgrade_then_rollback_and_a_second_rollback_is_a_noop(hub, env):
    layout = layout_mod.Layout(env / "models" / "tiny")
    commit_a, commit_b = hub["revs"][REPO]["A"], hub["revs"][REPO]["B"]
    for commit in (commit_a, commit_b):
        do_pin(hub, layout, REPO, commit)
        do_stage(hub, layout, REPO, commit)
        promote(layout, commit)
    assert layout_mod.link_state(layout) == {"current": commit_b, "previous": commit_a}
    before = mark(hub)
    assert rollback(layout)["changed"]
    assert layout_mod.link_state(layout) == {"current": commit_a, "previous": commit_b}
    assert not rollback(layout)["changed"]
    assert requests_since(hub, before) == []
    # Rolling forward is promoting B again.
    assert promote(layout, commit_b)["changed"]
    assert layout_mod.link_state(layout) == {"current": commit_b, "previous": commit_a}


def test_rollback_refuses_a_damaged_previous(hub, env):
    layout = layout_mod.Layout(env / "models" / "tiny")
    commit_a, commit_b = hub["revs"][REPO]["A"], hub["revs"][REPO]["B"]
    for commit in (commit_a, commit_b):
        do_pin(hub, layout, REPO, commit)
        do_stage(hub, layout, REPO, commit)
        promote(layout, commit)
    shard = Path(layout.revision_dir(commit_a)) / "model-00001-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-1] + b"\0")
    with pytest.raises(CheckpointError, match="previous revision .* fails verification"):
        rollback(layout)
    assert layout_mod.link_state(layout)["current"] == commit_b


def test_killed_run_resumes_without_refetching_verified_files(hub, env):
    layout = layout_mod.Layout(env / "models" / "tiny")
    commit = hub["revs"][REPO]["A"]
    do_pin(hub, layout, REPO, commit)
    # What a killed run leaves: some files verified and recorded, one complete but unrecorded,
    # one truncated, and a work directory with a partial download.
    do_stage(hub, layout, REPO, commit)
    os.rename(layout.revision_dir(commit), layout.incoming_dir(commit))
    incoming = Path(layout.incoming_dir(commit))
    state = {"commit": commit, "files": {}}
    for path in ("config.json", "tokenizer.json", "model-00001-of-00002.safetensors"):
        st = (incoming / path).stat()
        state["files"][path] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
    layout_mod.write_json_atomic(layout.incoming_state(commit), state)
    shard = incoming / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:1000])
    os.makedirs(layout.work_dir(commit) + "/7")
    os.remove(layout.stamp_path(commit))

    before = mark(hub)
    staged = do_stage(hub, layout, REPO, commit)
    assert staged["files_resumed"] == len(os.listdir(layout.revision_dir(commit))) - 1
    assert staged["files_rehashed"] == staged["files_resumed"] - 3
    assert fetched_files(requests_since(hub, before)) == ["model-00002-of-00002.safetensors"]
    assert not os.path.exists(layout.work_dir(commit))


def test_linked_revision_that_fails_verification_is_not_repaired_silently(hub, env):
    layout = layout_mod.Layout(env / "models" / "tiny")
    commit = hub["revs"][REPO]["A"]
    do_pin(hub, layout, REPO, commit)
    do_stage(hub, layout, REPO, commit)
    promote(layout, commit)
    os.remove(Path(layout.revision_dir(commit)) / "config.json")
    with pytest.raises(CheckpointError, match="linked as \\['current'\\], fails verification"):
        do_stage(hub, layout, REPO, commit)


def test_plans():
    assert layout_mod.plan_promotion({"current": "a", "previous": None}, "b") == {"changed": True, "current": "b", "previous": "a"}
    assert layout_mod.plan_promotion({"current": "b", "previous": "a"}, "b")["changed"] is False
    assert layout_mod.plan_rollback({"current": "b", "previous": "a"}, None) == {"changed": True, "current": "a", "previous": "b"}
    assert layout_mod.plan_rollback({"current": "a", "previous": "b"}, {"from": "b", "to": "a"})["changed"] is False
    with pytest.raises(layout_mod.LayoutError, match="no previous revision"):
        layout_mod.plan_rollback({"current": "a", "previous": None}, None)


def _fake_revision(layout, commit, size):
    """A revision directory that is not in the hub (an older deployment), of ``size`` bytes."""
    os.makedirs(layout.revision_dir(commit))
    Path(layout.revision_dir(commit), "model.safetensors").write_bytes(b"\0" * size)


def test_stage_counts_prunable_revisions_and_keeps_previous_with_one_rollback_copy(hub, env):
    layout = layout_mod.Layout(env / "models" / "tiny")
    commit_a, commit_b, older = hub["revs"][REPO]["A"], hub["revs"][REPO]["B"], "e" * 40
    do_pin(hub, layout, REPO, commit_a)
    do_stage(hub, layout, REPO, commit_a)
    promote(layout, commit_a)
    _fake_revision(layout, older, 5000)
    layout_mod.swap_link(layout, "previous", older)
    do_pin(hub, layout, REPO, commit_b)
    size_b = layout_mod.read_json(layout.manifest_path(commit_b))["total_bytes"]
    # A's download log is an incoming entry of another commit: prunable now, as after a swap.
    logs = sum(space_mod.stale_incoming_bytes(layout, commit_b).values())
    assert logs > 0
    free = size_b - logs - 1
    before = mark(hub)
    # One byte short: previous stays (one rollback copy), so only the log is prunable and nothing may change.
    with pytest.raises(CheckpointError, match=r"not enough space .* 1 bytes \(1 B\) missing\. Nothing was downloaded") as refused:
        do_stage(hub, layout, REPO, commit_b, free=free, rollback_copies=1)
    assert "set the rollback copies to 0" in str(refused.value)
    assert fetched_files(requests_since(hub, before)) == []
    assert os.path.isdir(layout.revision_dir(older)) and layout_mod.link_state(layout)["previous"] == older
    # No rollback copy: the old previous is pruned before the download, so the same free space is enough.
    assert os.listdir(layout.path("incoming")) == [commit_a + ".log"]
    staged = do_stage(hub, layout, REPO, commit_b, free=free, rollback_copies=0)
    assert staged["state"] == "staged" and staged["pruned_before_download"] == [older, commit_a]
    assert staged["space"]["prunable_bytes"] == 5000 + logs and staged["space"]["needed_bytes"] == size_b
    assert not os.path.exists(layout.revision_dir(older))
    assert layout_mod.link_state(layout) == {"current": commit_a, "previous": None}
    promoted = promote(layout, commit_b, rollback_copies=0)
    assert promoted["pruned"] == [commit_a]
    assert layout_mod.link_state(layout) == {"current": commit_b, "previous": None}
    assert sorted(os.listdir(layout.path("revisions"))) == [commit_b]


def test_stage_counts_the_verified_files_of_an_interrupted_download(hub, env):
    layout = layout_mod.Layout(env / "models" / "tiny")
    commit = hub["revs"][REPO]["A"]
    do_pin(hub, layout, REPO, commit)
    do_stage(hub, layout, REPO, commit)
    os.rename(layout.revision_dir(commit), layout.incoming_dir(commit))
    os.remove(layout.stamp_path(commit))
    manifest = layout_mod.read_json(layout.manifest_path(commit))
    shard = max(manifest["files"], key=lambda f: f["size"])
    os.remove(Path(layout.incoming_dir(commit)) / shard["path"])
    # Only the missing shard (plus a 10-byte margin) has to fit.
    with pytest.raises(CheckpointError, match="not enough space"):
        do_stage(hub, layout, REPO, commit, free=shard["size"] + 9, margin_min_bytes=10)
    staged = do_stage(hub, layout, REPO, commit, free=shard["size"] + 10, margin_min_bytes=10)
    assert staged["state"] == "staged"
    assert staged["space"]["target"]["missing_bytes"] == shard["size"] and staged["space"]["margin_bytes"] == 10


def test_odd_links_are_reported_not_guessed(tmp_path):
    layout = layout_mod.Layout(tmp_path)
    os.symlink("/elsewhere", layout.link("current"))
    with pytest.raises(layout_mod.LayoutError, match="expected revisions/<40-hex commit>"):
        layout_mod.link_state(layout)


def test_progress_line_and_helpers():
    line = format_progress(512 * 10 ** 9, 1700 * 10 ** 9, 1.2 * 10 ** 9, 400)
    assert line.startswith("512.00 GB of 1.70 TB (30.1%), 1.20 GB/s, ETA 16m") and "elapsed 6m40s" in line
    assert "rate unknown" in format_progress(0, 10, None, 0)
    assert [backoff_seconds(n, 2, 60) for n in (1, 2, 3, 6, 7)] == [2, 4, 8, 60, 60]
    assert redact("token hf_abc in url", "hf_abc") == "token ******** in url"
