# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The space plan: one formula for the gate and the download, counting what is already staged."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ansible_collections.gpufleet.serving.plugins.module_utils import _checkpoint_layout as layout_mod
from ansible_collections.gpufleet.serving.plugins.module_utils import _checkpoint_space as space_mod
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_space import (
    FORMULA,
    checkpoint_space,
    layout_space_plan,
    refusal,
    space_plan,
)

REPO = Path(__file__).resolve().parents[4]
KIMI = 1_700_000_000_000
FREE_384 = 3_779_600_000_000  # a 3.84 TB ext4 (no reserved blocks) as root sees it empty
A, B, P, K = "a" * 40, "b" * 40, "c" * 40, "d" * 40
GIB = 1024 ** 3


def target(commit, size=KIMI, source="manifest", present=0):
    return {"commit": commit, "bytes": size, "source": source, "present_bytes": present}


def test_first_deploy_on_an_empty_disk_needs_the_revision_plus_the_margin():
    plan = space_plan(target(A, source="profile"), FREE_384, {}, {"current": None, "previous": None})
    assert plan["margin_bytes"] == 34_000_000_000 and plan["needed_bytes"] == 1_734_000_000_000
    assert plan["available_bytes"] == FREE_384 and plan["fits"] and plan["short_bytes"] == 0
    assert plan["target"]["exact"] is False and plan["target"]["missing_bytes"] == KIMI
    assert plan["after_swap"] == {"current": A, "previous": None, "kept": [], "bytes": KIMI, "pruned": []}


def test_a_rerun_with_the_target_current_needs_nothing():
    plan = space_plan(target(A, present=KIMI), FREE_384 - KIMI, {A: KIMI}, {"current": A, "previous": None})
    assert plan["needed_bytes"] == 0 and plan["margin_bytes"] == 0 and plan["fits"]
    assert plan["staged"]["target"] == {"commit": A, "bytes": KIMI} and plan["staged"]["current"] is None


def test_upgrade_keeps_previous_with_one_rollback_copy_and_is_refused_on_384_tb():
    links = {"current": A, "previous": P}
    plan = space_plan(target(B), FREE_384 - 2 * KIMI, {A: KIMI, P: KIMI}, links, rollback_copies=1)
    assert not plan["fits"] and plan["prunable"] == [] and plan["available_bytes"] == 379_600_000_000
    assert plan["needed_bytes"] == 1_734_000_000_000 and plan["short_bytes"] == 1_354_400_000_000
    assert plan["staged"]["current"] == {"commit": A, "bytes": KIMI} and plan["staged"]["previous"] == {"commit": P, "bytes": KIMI}
    # After the swap A is the rollback copy and P is pruned.
    assert plan["after_swap"] == {"current": B, "previous": A, "kept": [], "bytes": 2 * KIMI, "pruned": [P]}
    message = refusal(plan, "/srv/models/moonshotai--Kimi-K3.1-Pro")
    assert message.startswith("not enough space in /srv/models/moonshotai--Kimi-K3.1-Pro for revision bbbbbbbbbbbb of "
                              "1,700,000,000,000 bytes (1.70 TB / 1.55 TiB) (exact, from its manifest): needs 1,734,000,000,000 bytes")
    assert "available 379,600,000,000 bytes (379.60 GB / 353.53 GiB) (379,600,000,000 bytes" in message
    assert "already staged: current aaaaaaaaaaaa 1,700,000,000,000 bytes" in message and "previous cccccccccccc" in message
    assert "Way out: set the rollback copies to 0 (deploy_rollback_copies: 0)" in message


def test_the_same_upgrade_without_rollback_copies_counts_previous_as_prunable():
    links = {"current": A, "previous": P}
    plan = space_plan(target(B), FREE_384 - 2 * KIMI, {A: KIMI, P: KIMI}, links, rollback_copies=0)
    assert plan["fits"] and plan["prunable"] == [{"commit": P, "bytes": KIMI, "was": "previous"}]
    assert plan["available_bytes"] == FREE_384 - KIMI and plan["staged"]["previous"] is None
    assert plan["after_swap"] == {"current": B, "previous": None, "kept": [], "bytes": KIMI, "pruned": [A]}


def test_kept_revisions_stay_and_unlinked_ones_are_prunable_unless_pruning_is_off():
    revisions = {A: 10, P: 20, K: 30, "e" * 40: 40}
    links = {"current": A, "previous": P}
    plan = space_plan(target(B, 100), 0, revisions, links, keep=[K], margin_min_bytes=0, margin_ratio=0.1,
                      incoming={"f" * 40: 5, B: 7})
    assert [(p["commit"], p["was"]) for p in plan["prunable"]] == [("e" * 40, "unlinked"), ("f" * 40, "incoming")]
    assert plan["available_bytes"] == 45 and plan["needed_bytes"] == 110 and not plan["fits"]
    assert plan["staged"]["kept"] == [{"commit": K, "bytes": 30}]
    assert plan["after_swap"]["kept"] == [K] and plan["after_swap"]["pruned"] == [P]
    off = space_plan(target(B, 100), 0, revisions, links, keep=[K], prune=False, margin_min_bytes=0)
    assert off["prunable"] == [] and off["staged"]["retained"] == [{"commit": "e" * 40, "bytes": 40}]
    assert off["after_swap"]["pruned"] == [] and "turn pruning back on" in refusal(off, "/m")
    assert "drop revisions from checkpoint_keep_revisions" in refusal(plan, "/m")


def test_margin_has_a_minimum_and_only_applies_while_bytes_are_missing():
    plan = space_plan(target(B, 100, present=40), 61 + GIB, {}, {}, margin_ratio=0.5)
    assert plan["target"]["missing_bytes"] == 60 and plan["margin_bytes"] == GIB and plan["needed_bytes"] == 60 + GIB
    assert plan["fits"]
    assert space_plan(target(B, 100, present=100), 0, {}, {})["needed_bytes"] == 0


def test_rolling_forward_to_previous_needs_nothing_and_swaps_the_links():
    plan = space_plan(target(P, present=KIMI), 0, {A: KIMI, P: KIMI}, {"current": A, "previous": P})
    assert plan["fits"] and plan["needed_bytes"] == 0
    assert plan["after_swap"]["current"] == P and plan["after_swap"]["previous"] == A


@pytest.mark.parametrize(("change", "message"), [
    ({"rollback_copies": 2}, "rollback_copies must be 0 or 1"),
    ({"rollback_copies": True}, "rollback_copies must be 0 or 1"),
    ({"margin_ratio": -1}, "must not be negative"),
])
def test_bad_inputs_are_refused(change, message):
    with pytest.raises(ValueError, match=message):
        space_plan(target(B), 0, {}, {}, **change)
    with pytest.raises(ValueError, match="positive number of bytes"):
        space_plan(target(B, 0), 0, {}, {})


def _revision(layout, commit, size, manifest=True):
    os.makedirs(layout.revision_dir(commit))
    Path(layout.revision_dir(commit), "model.safetensors").write_bytes(b"\0" * size)
    if manifest:
        os.makedirs(layout.path("manifests"), exist_ok=True)
        layout_mod.write_json_atomic(layout.manifest_path(commit), {
            "format": 1, "repo_id": "o/n", "commit": commit, "total_bytes": size,
            "files": [{"path": "model.safetensors", "size": size, "git_oid": "1" * 40, "sha256": "2" * 64}]})


def test_the_layout_is_read_from_links_revisions_incoming_and_manifests(tmp_path):
    layout = layout_mod.Layout(str(tmp_path / "model"))
    _revision(layout, A, 1000)
    _revision(layout, P, 2000)
    layout_mod.swap_link(layout, "current", A)
    layout_mod.swap_link(layout, "previous", P)
    os.makedirs(layout.incoming_dir(K))
    Path(layout.incoming_dir(K), "part").write_bytes(b"x" * 300)
    # B is pinned (manifest) and half downloaded: its manifest's size is exact, its bytes present count.
    layout_mod.write_json_atomic(layout.manifest_path(B), {
        "format": 1, "repo_id": "o/n", "commit": B, "total_bytes": 500,
        "files": [{"path": "x.safetensors", "size": 200, "git_oid": "1" * 40, "sha256": "2" * 64},
                  {"path": "y.safetensors", "size": 300, "git_oid": "3" * 40, "sha256": "4" * 64}]})
    os.makedirs(layout.incoming_dir(B))
    Path(layout.incoming_dir(B), "x.safetensors").write_bytes(b"x" * 200)
    Path(layout.incoming_dir(B), "y.safetensors").write_bytes(b"y" * 10)
    plan = layout_space_plan(layout, B, 0, target_bytes=10 ** 9, rollback_copies=0, margin_min_bytes=0, margin_ratio=0)
    assert plan["target"] == {"commit": B, "bytes": 500, "source": "manifest", "exact": True, "present_bytes": 200,
                              "missing_bytes": 300}
    assert [(p["commit"], p["bytes"], p["was"]) for p in plan["prunable"]] == [(P, 2000, "previous"), (K, 300, "incoming")]
    assert plan["fits"] and plan["staged_bytes"] == 3000
    # Not pinned here yet: the given size, nothing staged.
    unpinned = layout_space_plan(layout, "e" * 40, 0, target_bytes=700, target_source="given", margin_min_bytes=0, margin_ratio=0)
    assert unpinned["target"]["source"] == "given" and unpinned["target"]["exact"] and unpinned["target"]["missing_bytes"] == 700
    with pytest.raises(ValueError, match="no size given"):
        layout_space_plan(layout, "e" * 40, 0)


class _Statvfs:
    f_frsize = f_bsize = 4096
    f_blocks = f_bfree = f_bavail = 1000
    f_files = f_ffree = f_favail = 10
    f_flag = 0


def test_the_module_result_is_healthy_or_names_the_problem(tmp_path):
    params = {"model_dir": str(tmp_path / "not-yet"), "commit": "", "target_bytes": 1000.0,
              "free_space_margin_min_bytes": 0, "free_space_margin_ratio": 0.0}
    result = checkpoint_space(params, statvfs=lambda path: _Statvfs())
    assert result["healthy"] and result["changed"] is False and result["space"]["free_bytes"] == 4_096_000
    assert "needs 1,000 bytes" in result["summary"]
    refused = checkpoint_space(dict(params, target_bytes=5e6), statvfs=lambda path: _Statvfs())
    assert not refused["healthy"] and refused["problems"][0]["code"] == "insufficient_space"
    os.makedirs(tmp_path / "odd")
    os.symlink("/elsewhere", tmp_path / "odd" / "current")
    odd = checkpoint_space(dict(params, model_dir=str(tmp_path / "odd")), statvfs=lambda path: _Statvfs())
    assert odd["problems"][0]["code"] == "space_unknown" and "expected revisions/<40-hex commit>" in odd["problems"][0]["message"]


@pytest.mark.parametrize("doc", ["README.md", "docs/quickstart.md", "docs/preflight.md", "docs/checkpoint.md"])
def test_every_document_quotes_the_one_formula(doc):
    assert FORMULA in (REPO / doc).read_text().replace("\n", " ")


def test_no_other_space_formula_is_left():
    assert not hasattr(layout_mod, "space_plan")
    assert space_mod.space_plan is space_plan


def test_a_kept_previous_stays_without_rollback_copies():
    plan = space_plan(target(B, 100), 0, {A: 10, P: 20}, {"current": A, "previous": P}, rollback_copies=0, keep=[P],
                      margin_min_bytes=0)
    assert plan["prunable"] == [] and plan["staged"]["kept"] == [{"commit": P, "bytes": 20}]
    assert plan["after_swap"]["kept"] == [P] and plan["after_swap"]["pruned"] == [A]
