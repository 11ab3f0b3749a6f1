# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The plan of a pin against the sandbox model hub served in-process: every refusal at once, the
exact size of the revision, no request for a recorded commit and nothing written."""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from ansible_collections.gpufleet.serving.plugins.module_utils import _checkpoint_layout as layout_mod
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_hub import (
    PLACEHOLDER_REVISION,
    check_pin_request,
    license_problem,
    pin_request_problems,
    remote_code_record_problem,
)
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_manifest import CheckpointError
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_plan import (
    answer_problem,
    next_page,
    plan_revision,
    quote_path_part,
)

REPO = "gpufleet-test/tiny-kimi"
TOOLS = Path(__file__).resolve().parents[4] / "tools" / "modelhub"
ELSEWHERE = "0123456789abcdef0123456789abcdef01234567"


def _load_modelhub():
    sys.path.insert(0, str(TOOLS))
    spec = importlib.util.spec_from_file_location("gpufleet_modelhub_for_plan", TOOLS / "modelhub.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    pytest.importorskip("safetensors")
    modelhub = _load_modelhub()
    state = tmp_path_factory.mktemp("hub")
    modelhub.build(state)
    server = modelhub.make_server(state, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield {"state": state, "endpoint": "http://127.0.0.1:%d" % server.server_address[1], "revs": modelhub.revisions(state),
           "modelhub": modelhub}
    server.shutdown()
    server.server_close()


def urllib_get_json(calls):
    def get_json(url):
        calls.append(url)
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return response.status, {k.lower(): v for k, v in response.headers.items()}, json.loads(response.read()), None
        except urllib.error.HTTPError as exc:
            return exc.code, {k.lower(): v for k, v in exc.headers.items()}, None, str(exc)
        except OSError as exc:
            return None, {}, None, str(exc)
    return get_json


def hub_total(hub, commit):
    """The revision's size from the hub's own commit record (not through its API)."""
    record = json.loads((Path(hub["state"]) / "repos" / REPO / "commits" / ("%s.json" % commit)).read_text())
    return sum(entry["size"] for entry in record["files"].values())


def checks(result):
    return [problem["check"] for problem in result["problems"]]


def plan(hub, layout, revision, calls=None, **kwargs):
    kwargs.setdefault("trust_remote_code", False)
    kwargs.setdefault("license_accepted", True)
    return plan_revision(urllib_get_json([] if calls is None else calls), layout, REPO, revision,
                         kwargs["trust_remote_code"], kwargs["license_accepted"], endpoint=hub["endpoint"])


def test_a_good_commit_gives_its_exact_size_and_writes_nothing(hub, tmp_path):
    layout = layout_mod.Layout(tmp_path / "models" / "tiny")
    commit = hub["revs"][REPO]["A"]
    result = plan(hub, layout, commit)
    assert result["healthy"] and result["problems"] == []
    assert result["commit"] == commit and result["total_bytes"] == hub_total(hub, commit)
    assert result["first_download"] and result["license_file"] == "LICENSE" and result["hub_requests"]
    assert not (tmp_path / "models").exists()


def test_a_branch_is_resolved_to_its_commit(hub, tmp_path):
    result = plan(hub, layout_mod.Layout(tmp_path / "m"), "main")
    assert result["healthy"] and result["commit"] == hub["revs"][REPO]["main"]


def test_placeholder_and_empty_revisions_never_reach_the_hub(hub, tmp_path):
    calls = []
    for revision in (PLACEHOLDER_REVISION, ""):
        result = plan(hub, layout_mod.Layout(tmp_path / "m"), revision, calls)
        assert checks(result) == ["revision"] and not result["healthy"]
    assert calls == []
    assert "all-zero placeholder" in pin_request_problems(REPO, PLACEHOLDER_REVISION, False)[0]["message"]
    with pytest.raises(CheckpointError, match="all-zero placeholder"):
        check_pin_request(REPO, PLACEHOLDER_REVISION, trust_remote_code=False)


def test_a_commit_the_hub_does_not_have(hub, tmp_path):
    result = plan(hub, layout_mod.Layout(tmp_path / "m"), ELSEWHERE)
    [problem] = result["problems"]
    assert problem["check"] == "revision" and "revision %s not found in %s" % (ELSEWHERE, REPO) in problem["message"]
    assert result["total_bytes"] is None


def test_every_problem_at_once_licence_and_remote_code_on_a_tag(hub, tmp_path):
    result = plan(hub, layout_mod.Layout(tmp_path / "m"), "v1", trust_remote_code=True, license_accepted=False)
    # The tag still resolves, so the licence of its revision is judged in the same run.
    assert checks(result) == ["trust_remote_code", "license"]
    assert "'v1' of gpufleet-test/tiny-kimi is a branch or tag" in result["problems"][0]["message"]
    assert "first download of gpufleet-test/tiny-kimi" in result["problems"][1]["message"]
    assert result["commit"] == hub["revs"][REPO]["v1"]


def test_a_recorded_commit_is_answered_offline_and_its_requested_revision_counts(hub, tmp_path):
    layout = layout_mod.Layout(tmp_path / "m")
    commit = hub["revs"][REPO]["B"]
    layout_mod.ensure_dirs(layout)
    manifest = {"format": 1, "repo_id": REPO, "requested_revision": "main", "commit": commit, "endpoint": hub["endpoint"],
                "created": "", "total_bytes": 7, "files": [{"path": "config.json", "size": 7, "git_oid": "a" * 40,
                                                            "sha256": None, "kind": "config"}]}
    layout_mod.write_json_atomic(layout.manifest_path(commit), manifest)
    calls = []
    result = plan(hub, layout, commit, calls, license_accepted=False)
    assert calls == [] and result["manifest_recorded"] and not result["first_download"]
    assert result["total_bytes"] == 7
    result = plan(hub, layout, commit, calls, trust_remote_code=True)
    assert "trust_remote_code" in checks(result)
    assert remote_code_record_problem(dict(manifest, requested_revision=commit), True) is None


def test_licence_rule_and_answers():
    assert license_problem(False, False, REPO, "LICENSE") is None
    assert license_problem(True, True, REPO, "LICENSE") is None
    assert license_problem(True, False, REPO, None)["check"] == "license"
    gated = answer_problem(401, {"x-error-code": "GatedRepo"}, "Unauthorized", REPO, ELSEWHERE, "https://hub", False)
    assert gated["check"] == "repo_id" and "no checkpoint_hf_token is set" in gated["message"]
    down = answer_problem(None, {}, "Connection refused", REPO, ELSEWHERE, "http://10.0.0.1:8090", True)
    assert down["check"] == "endpoint" and "Connection refused" in down["message"]
    assert next_page({"link": '<https://hub/api/models/x/tree/c?cursor=abc>; rel="next"'}) == "https://hub/api/models/x/tree/c?cursor=abc"
    assert next_page({}) is None
    assert quote_path_part("refs/heads/main") == "refs%2Fheads%2Fmain"


def test_a_paged_listing_is_followed():
    pages = {
        "https://hub/api/models/o/n/tree/%s?recursive=true" % ELSEWHERE: (
            [{"type": "file", "path": "config.json", "size": 10, "oid": "b" * 40}], {"link": '<https://hub/p2>; rel="next"'}),
        "https://hub/p2": ([{"type": "file", "path": "tokenizer.json", "size": 5, "oid": "c" * 40},
                            {"type": "file", "path": "model.safetensors", "size": 100, "oid": "d" * 40,
                             "lfs": {"oid": "e" * 64, "size": 100}}], {}),
    }

    def get_json(url):
        data, headers = pages[url]
        return 200, headers, data, None

    result = plan_revision(get_json, layout_mod.Layout("/nonexistent/gpufleet-plan-test"), "o/n", ELSEWHERE, False, True,
                           endpoint="https://hub/")
    assert result["healthy"] and result["total_bytes"] == 115 and result["files"] == 3
    # Remote code needs code files in the revision: the listing alone shows there are none.
    result = plan_revision(get_json, layout_mod.Layout("/nonexistent/gpufleet-plan-test"), "o/n", ELSEWHERE, True, True,
                           endpoint="https://hub/")
    assert checks(result) == ["revision"] and "ships no code files" in result["problems"][0]["message"]
