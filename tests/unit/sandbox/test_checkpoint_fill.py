"""tools/sandbox/checkpoint_fill.py writes revisions the collection reads as its own."""

import json
import os
import subprocess
import sys
from pathlib import Path

from ansible_collections.gpufleet.serving.plugins.module_utils import _checkpoint_layout as layout_mod
from ansible_collections.gpufleet.serving.plugins.module_utils import _checkpoint_space as space_mod
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_manifest import completeness_problems, load_manifest
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_verify import load_stamp, stamp_usable, verify_tree

TOOL = Path(__file__).resolve().parents[3] / "tools" / "sandbox" / "checkpoint_fill.py"
A, B = "a1" * 20, "b2" * 20


def fill(model_dir, *args):
    done = subprocess.run([sys.executable, str(TOOL), "--model-dir", str(model_dir), *args], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_a_filled_revision_has_a_valid_manifest_a_usable_stamp_and_verifies_fast(tmp_path):
    model_dir = tmp_path / "moonshotai--Kimi-K3.1-Pro"
    assert fill(model_dir, "--commit", A, "--bytes", "10000000", "--shards", "8", "--link", "current")["files"] == 11
    manifest = load_manifest(str(model_dir / "manifests" / (A + ".json")))
    assert manifest["total_bytes"] == 10_000_000 == sum(f["size"] for f in manifest["files"])
    assert len([f for f in manifest["files"] if f["kind"] == "weight_shard"]) == 8
    assert completeness_problems(manifest, trust_remote_code=False) == []
    stamp = load_stamp(str(model_dir / "manifests" / (A + ".stamp.json")))
    assert stamp_usable(stamp, manifest)
    assert verify_tree(str(model_dir / "revisions" / A), manifest, deep=False, stamp=stamp)["ok"]
    # The shards are zeros: a deep verification must not pass them.
    assert not verify_tree(str(model_dir / "revisions" / A), manifest, deep=True)["ok"]
    assert os.readlink(model_dir / "current") == "revisions/" + A


def test_the_space_plan_reads_filled_revisions_and_a_pinned_only_manifest(tmp_path):
    model_dir = tmp_path / "m"
    fill(model_dir, "--commit", A, "--bytes", "4000000", "--shards", "4", "--link", "current")
    assert fill(model_dir, "--commit", B, "--bytes", "5000000", "--manifest-only")["staged"] is False
    assert not (model_dir / "revisions" / B).exists()
    plan = space_mod.layout_space_plan(layout_mod.Layout(str(model_dir)), B, free_bytes=10 ** 7, margin_min_bytes=0, margin_ratio=0)
    assert plan["target"]["source"] == "manifest" and plan["target"]["bytes"] == 5_000_000
    assert plan["staged"]["current"] == {"commit": A, "bytes": 4_000_000}
    assert plan["needed_bytes"] == 5_000_000 and plan["fits"]
