# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_checkpoint_verify on real small checkpoints written to tmp_path: hashing, per-file checks,
whole-tree verification (extra files, weight index, completeness), stamps and the fast path,
and the module result built from the checkpoint role's layout."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
from ansible_collections.gpufleet.serving.plugins.module_utils import _checkpoint_manifest as cm
from ansible_collections.gpufleet.serving.plugins.module_utils import _checkpoint_verify as cv
from checkpoint_trees import COMMIT, OTHER_COMMIT, SHARD_1, SHARD_2, build, corrupt_same_size, manifest_for, pseudo_random, tiny_files


def kinds(result):
    return [(item["path"], item["kind"]) for item in result["problems"]]


def entry_of(manifest, path):
    return next(item for item in manifest["files"] if item["path"] == path)


# --------------------------------------------------------------------------------------
# hash_file
# --------------------------------------------------------------------------------------


def test_hash_file_computes_both_digests_in_one_pass(tmp_path):
    data = pseudo_random("hash", 3 * 1024 + 5)
    path = tmp_path / "f"
    path.write_bytes(data)
    both = cv.hash_file(str(path), want_sha256=True, want_git_oid=True, chunk=1024)
    assert both == {"sha256": hashlib.sha256(data).hexdigest(), "git_oid": cm.git_blob_oid_bytes(data), "size": len(data)}
    assert cv.hash_file(str(path)) == {"sha256": both["sha256"], "git_oid": None, "size": len(data)}
    assert cv.hash_file(str(path), want_sha256=False, want_git_oid=True)["sha256"] is None


def test_hash_file_of_an_empty_file(tmp_path):
    path = tmp_path / "empty"
    path.write_bytes(b"")
    result = cv.hash_file(str(path), want_git_oid=True)
    assert result == {"sha256": hashlib.sha256(b"").hexdigest(), "git_oid": "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391", "size": 0}


def test_hash_file_raises_for_a_missing_file(tmp_path):
    with pytest.raises(OSError):
        cv.hash_file(str(tmp_path / "nope"))


# --------------------------------------------------------------------------------------
# verify_file
# --------------------------------------------------------------------------------------


def test_verify_file_ok_for_lfs_and_plain_files(tmp_path):
    _files, manifest = build(tmp_path)
    assert cv.verify_file(str(tmp_path), entry_of(manifest, SHARD_1)) is None
    assert cv.verify_file(str(tmp_path), entry_of(manifest, "config.json")) is None
    assert cv.verify_file(str(tmp_path), entry_of(manifest, "assets/notes.txt")) is None


def test_same_size_corruption_names_the_file_and_both_hashes(tmp_path):
    files, manifest = build(tmp_path)
    corrupt_same_size(str(tmp_path / SHARD_2))
    problem = cv.verify_file(str(tmp_path), entry_of(manifest, SHARD_2))
    expected = hashlib.sha256(files[SHARD_2][0]).hexdigest()
    found = hashlib.sha256((tmp_path / SHARD_2).read_bytes()).hexdigest()
    assert problem["kind"] == "hash_mismatch" and problem["path"] == SHARD_2
    assert (problem["expected"], problem["found"]) == (expected, found)
    assert problem["message"] == "%s: sha256 is %s, expected %s" % (SHARD_2, found, expected)


def test_non_lfs_files_are_checked_by_git_blob_id(tmp_path):
    _files, manifest = build(tmp_path)
    (tmp_path / "config.json").write_bytes((tmp_path / "config.json").read_bytes().replace(b"64", b"65"))
    problem = cv.verify_file(str(tmp_path), entry_of(manifest, "config.json"))
    assert problem["kind"] == "hash_mismatch"
    assert problem["message"].startswith("config.json: git blob id is %s, expected %s" % (
        cm.git_blob_oid_file(str(tmp_path / "config.json")), entry_of(manifest, "config.json")["git_oid"]))


def test_missing_file(tmp_path):
    _files, manifest = build(tmp_path)
    os.unlink(str(tmp_path / SHARD_1))
    problem = cv.verify_file(str(tmp_path), entry_of(manifest, SHARD_1))
    assert problem == {"check": "files", "path": SHARD_1, "kind": "missing", "expected": 300000, "found": None,
                       "message": "%s: missing (expected a file of 300000 bytes)" % SHARD_1}


def test_broken_symlink_is_missing_and_a_good_symlink_is_followed(tmp_path):
    _files, manifest = build(tmp_path / "rev")
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    os.rename(str(tmp_path / "rev" / SHARD_1), str(blobs / "abc"))
    os.symlink(str(blobs / "abc"), str(tmp_path / "rev" / SHARD_1))
    assert cv.verify_file(str(tmp_path / "rev"), entry_of(manifest, SHARD_1)) is None
    os.unlink(str(blobs / "abc"))
    problem = cv.verify_file(str(tmp_path / "rev"), entry_of(manifest, SHARD_1))
    assert problem["kind"] == "missing" and "a broken symlink" in problem["message"]


def test_size_mismatch_is_reported_without_hashing(tmp_path, monkeypatch):
    _files, manifest = build(tmp_path)
    with open(str(tmp_path / SHARD_1), "ab") as handle:
        handle.write(b"x")

    def no_hashing(*_args, **_kwargs):
        raise AssertionError("a file of the wrong size must not be hashed")

    monkeypatch.setattr(cv, "hash_file", no_hashing)
    problem = cv.verify_file(str(tmp_path), entry_of(manifest, SHARD_1))
    assert (problem["kind"], problem["expected"], problem["found"]) == ("size_mismatch", 300000, 300001)
    assert problem["message"] == "%s: size is 300001 bytes, expected 300000" % SHARD_1


def test_a_directory_in_place_of_a_file(tmp_path):
    _files, manifest = build(tmp_path)
    os.unlink(str(tmp_path / "config.json"))
    (tmp_path / "config.json").mkdir()
    problem = cv.verify_file(str(tmp_path), entry_of(manifest, "config.json"))
    assert (problem["kind"], problem["found"]) == ("not_a_file", "directory")
    assert problem["message"] == "config.json: is a directory, not a regular file"


def test_unreadable_file(tmp_path, monkeypatch):
    _files, manifest = build(tmp_path)

    def denied(path, **_kwargs):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(cv, "hash_file", denied)
    problem = cv.verify_file(str(tmp_path), entry_of(manifest, SHARD_1))
    assert problem["kind"] == "unreadable" and "Permission denied" in problem["message"]


# --------------------------------------------------------------------------------------
# verify_tree
# --------------------------------------------------------------------------------------


def test_good_tree(tmp_path):
    files, manifest = build(tmp_path)
    result = cv.verify_tree(str(tmp_path), manifest, deep=True)
    assert result["ok"] is True and result["problems"] == []
    assert result["files_total"] == result["files_hashed"] == len(files)
    assert result["bytes_hashed"] == manifest["total_bytes"]
    assert result["files_trusted_by_stamp"] == 0 and result["extra_files"] == []
    assert result["stamp_used"] is False and result["seconds"] >= 0


def test_tree_with_every_kind_of_damage(tmp_path):
    _files, manifest = build(tmp_path)
    os.unlink(str(tmp_path / "tokenizer.json"))
    corrupt_same_size(str(tmp_path / SHARD_1))
    with open(str(tmp_path / SHARD_2), "ab") as handle:
        handle.write(b"tail")
    (tmp_path / "stray.bin").write_bytes(b"x")
    (tmp_path / "assets" / "extra.txt").write_bytes(b"y")
    result = cv.verify_tree(str(tmp_path), manifest)
    assert result["ok"] is False
    assert kinds(result) == [
        ("assets/extra.txt", "extra"),
        (SHARD_1, "hash_mismatch"),
        (SHARD_2, "size_mismatch"),
        ("stray.bin", "extra"),
        ("tokenizer.json", "missing"),
    ]
    assert result["extra_files"] == ["assets/extra.txt", "stray.bin"]
    assert result["problems"][0]["message"] == "assets/extra.txt: not part of revision %s" % COMMIT
    assert result["files_hashed"] == len(manifest["files"]) - 2  # neither the missing nor the wrong-size file


def test_extra_files_under_ignored_directories_and_without_check_extra(tmp_path):
    _files, manifest = build(tmp_path)
    cache = tmp_path / ".cache" / "huggingface" / "download"
    cache.mkdir(parents=True)
    (cache / "x.incomplete").write_bytes(b"partial")
    (tmp_path / "assets" / ".cache").mkdir()  # only the top level is ignored
    (tmp_path / "assets" / ".cache" / "f").write_bytes(b"z")
    result = cv.verify_tree(str(tmp_path), manifest)
    assert kinds(result) == [("assets/.cache/f", "extra")]
    relaxed = cv.verify_tree(str(tmp_path), manifest, check_extra=False)
    assert relaxed["ok"] is True and relaxed["extra_files"] == ["assets/.cache/f"]
    strict = cv.verify_tree(str(tmp_path), manifest, ignore=())
    assert [path for path, _kind in kinds(strict)] == [".cache/huggingface/download/x.incomplete", "assets/.cache/f"]


def test_a_symlinked_directory_is_extra_and_not_followed(tmp_path):
    _files, manifest = build(tmp_path / "rev")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big").write_bytes(b"x")
    os.symlink(str(outside), str(tmp_path / "rev" / "linked"))
    result = cv.verify_tree(str(tmp_path / "rev"), manifest)
    assert kinds(result) == [("linked", "extra")]


def test_missing_directory(tmp_path):
    _files, manifest = build(tmp_path / "rev")
    result = cv.verify_tree(str(tmp_path / "elsewhere"), manifest)
    assert result["ok"] is False and kinds(result) == [(".", "missing")]
    assert result["problems"][0]["message"] == "%s does not exist" % (tmp_path / "elsewhere")


def test_workers_give_the_same_result(tmp_path):
    files = tiny_files()
    for number in range(3, 9):
        files["extra-%d.safetensors" % number] = (pseudo_random("s%d" % number, 50_000 + number), True)
    _files, manifest = build(tmp_path, files)
    corrupt_same_size(str(tmp_path / "extra-5.safetensors"))
    corrupt_same_size(str(tmp_path / "config.json"), offset=3)
    os.unlink(str(tmp_path / "extra-7.safetensors"))
    results = [cv.verify_tree(str(tmp_path), manifest, deep=True, workers=workers) for workers in (1, 2, 4, 16)]
    for result in results[1:]:
        for key in ("ok", "problems", "files_total", "files_hashed", "bytes_hashed", "extra_files"):
            assert result[key] == results[0][key], key
    assert kinds(results[0]) == [("config.json", "hash_mismatch"), ("extra-5.safetensors", "hash_mismatch"),
                                 ("extra-7.safetensors", "missing")]


def test_unparseable_weight_index(tmp_path):
    files = tiny_files()
    files["model.safetensors.index.json"] = (b"{truncated", False)
    _files, manifest = build(tmp_path, files)
    result = cv.verify_tree(str(tmp_path), manifest)
    assert kinds(result) == [("model.safetensors.index.json", "index_unreadable")]
    problem = result["problems"][0]
    assert problem["check"] == "index" and problem["message"].startswith("model.safetensors.index.json: cannot read the weight map")


def test_weight_index_without_a_weight_map(tmp_path):
    files = tiny_files()
    files["model.safetensors.index.json"] = (b'{"weight_map": ["not", "a", "dict"]}', False)
    _files, manifest = build(tmp_path, files)
    result = cv.verify_tree(str(tmp_path), manifest)
    assert kinds(result) == [("model.safetensors.index.json", "index_unreadable")]
    assert "weight_map is missing or not an object" in result["problems"][0]["message"]


def test_weight_index_naming_a_shard_the_revision_lacks(tmp_path):
    files = tiny_files()
    index = {"weight_map": {"a": SHARD_1, "b": SHARD_2, "c": "model-00003-of-00002.safetensors"}}
    files["model.safetensors.index.json"] = (json.dumps(index).encode(), False)
    _files, manifest = build(tmp_path, files)
    result = cv.verify_tree(str(tmp_path), manifest)
    assert result["problems"] == [{
        "check": "completeness", "path": "model-00003-of-00002.safetensors", "kind": "incomplete", "expected": None,
        "found": None,
        "message": "the weight index names model-00003-of-00002.safetensors, which the revision does not have"}]


def test_index_in_a_subdirectory_is_relative_to_it(tmp_path):
    files = tiny_files()
    files["te/model-1.safetensors"] = (b"a" * 10, True)
    files["te/model-2.safetensors"] = (b"b" * 10, True)
    weight_map = {"x": "model-1.safetensors", "y": "model-2.safetensors"}
    files["te/model.safetensors.index.json"] = (json.dumps({"weight_map": weight_map}).encode(), False)
    _files, manifest = build(tmp_path, files)
    assert cv.verify_tree(str(tmp_path), manifest)["ok"] is True


def test_completeness_problems_are_part_of_the_tree_result(tmp_path):
    files = tiny_files()
    del files["config.json"]
    _files, manifest = build(tmp_path, files)
    result = cv.verify_tree(str(tmp_path), manifest, trust_remote_code=True)
    assert [(item["check"], item["path"], item["kind"]) for item in result["problems"]] == [
        ("completeness", None, "incomplete"), ("completeness", "config.json", "incomplete")]
    assert result["problems"][0]["message"] == "remote code is trusted but the revision ships no code files"


# --------------------------------------------------------------------------------------
# Stamps and the fast path
# --------------------------------------------------------------------------------------


def stamped(tmp_path, files=None):
    files, manifest = build(tmp_path / "rev", files)
    assert cv.verify_tree(str(tmp_path / "rev"), manifest, deep=True)["ok"]
    return manifest, cv.make_stamp(str(tmp_path / "rev"), manifest)


def test_make_stamp(tmp_path):
    manifest, stamp = stamped(tmp_path)
    assert stamp["format"] == 1 and stamp["commit"] == COMMIT and stamp["tool_version"] == "1"
    assert stamp["manifest_sha256"] == cv.manifest_digest(manifest)
    assert stamp["verified_at"].endswith("Z") and "T" in stamp["verified_at"]
    assert sorted(stamp["files"]) == [item["path"] for item in manifest["files"]]
    st = os.stat(str(tmp_path / "rev" / SHARD_1))
    assert stamp["files"][SHARD_1] == {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns,
                                       "ino": st.st_ino}


def test_make_stamp_refuses_a_missing_file(tmp_path):
    _files, manifest = build(tmp_path)
    os.unlink(str(tmp_path / SHARD_1))
    with pytest.raises(cm.CheckpointError, match="cannot stamp"):
        cv.make_stamp(str(tmp_path), manifest)


def test_fast_path_trusts_the_stamp(tmp_path, monkeypatch):
    manifest, stamp = stamped(tmp_path)

    def no_hashing(*_args, **_kwargs):
        raise AssertionError("nothing should be hashed")

    monkeypatch.setattr(cv, "hash_file", no_hashing)
    result = cv.verify_tree(str(tmp_path / "rev"), manifest, stamp=stamp)
    assert result["ok"] is True and result["stamp_used"] is True
    assert result["files_trusted_by_stamp"] == len(manifest["files"])
    assert result["files_hashed"] == result["bytes_hashed"] == 0


def test_a_touched_file_is_hashed_again(tmp_path):
    manifest, stamp = stamped(tmp_path)
    path = str(tmp_path / "rev" / SHARD_2)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    result = cv.verify_tree(str(tmp_path / "rev"), manifest, stamp=stamp)
    assert result["ok"] is True
    assert (result["files_hashed"], result["bytes_hashed"]) == (1, 200_000)
    assert result["files_trusted_by_stamp"] == len(manifest["files"]) - 1


def test_corruption_with_the_old_mtime_put_back_is_still_found(tmp_path):
    """Writing changes ctime, which userspace cannot set back: the stamp no longer matches."""
    manifest, stamp = stamped(tmp_path)
    path = str(tmp_path / "rev" / SHARD_1)
    st = os.stat(path)
    corrupt_same_size(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_mtime_ns == stamp["files"][SHARD_1]["mtime_ns"]
    if os.stat(path).st_ctime_ns == st.st_ctime_ns:
        pytest.skip("this filesystem's ctime granularity hides the rewrite")
    result = cv.verify_tree(str(tmp_path / "rev"), manifest, stamp=stamp)
    assert kinds(result) == [(SHARD_1, "hash_mismatch")] and result["files_hashed"] == 1


def test_a_size_and_mtime_only_stamp_is_honoured(tmp_path):
    manifest, stamp = stamped(tmp_path)
    for record in stamp["files"].values():
        del record["ctime_ns"], record["ino"]
    result = cv.verify_tree(str(tmp_path / "rev"), manifest, stamp=stamp)
    assert result["files_trusted_by_stamp"] == len(manifest["files"]) and result["files_hashed"] == 0


def test_size_change_is_found_even_with_a_stamp(tmp_path):
    manifest, stamp = stamped(tmp_path)
    with open(str(tmp_path / "rev" / SHARD_1), "ab") as handle:
        handle.write(b"x")
    result = cv.verify_tree(str(tmp_path / "rev"), manifest, stamp=stamp)
    assert kinds(result) == [(SHARD_1, "size_mismatch")]


def test_deep_ignores_the_stamp(tmp_path):
    manifest, stamp = stamped(tmp_path)
    result = cv.verify_tree(str(tmp_path / "rev"), manifest, deep=True, stamp=stamp)
    assert result["stamp_used"] is False and result["files_trusted_by_stamp"] == 0
    assert result["files_hashed"] == len(manifest["files"]) and result["bytes_hashed"] == manifest["total_bytes"]


def test_a_stamp_for_another_commit_or_manifest_is_not_used(tmp_path):
    manifest, stamp = stamped(tmp_path)
    other_commit = dict(stamp, commit=OTHER_COMMIT)
    result = cv.verify_tree(str(tmp_path / "rev"), manifest, stamp=other_commit)
    assert result["stamp_used"] is False and result["files_hashed"] == len(manifest["files"])
    changed = json.loads(json.dumps(manifest))
    entry_of(changed, SHARD_1)["sha256"] = "0" * 64  # same sizes, other expected content
    result = cv.verify_tree(str(tmp_path / "rev"), changed, stamp=stamp)
    assert result["stamp_used"] is False and kinds(result) == [(SHARD_1, "hash_mismatch")]


def test_stamp_files(tmp_path):
    _manifest, stamp = stamped(tmp_path)
    path = tmp_path / "manifests" / ("%s.stamp.json" % COMMIT)
    path.parent.mkdir()
    assert cv.load_stamp(str(path)) is None
    cv.write_stamp_atomic(str(path), stamp)
    assert cv.load_stamp(str(path)) == stamp
    assert path.read_text() == json.dumps(stamp, sort_keys=True, indent=1) + "\n"
    for corrupt in ("{", "[]", '{"format": 9, "commit": "x", "files": {}}', '{"format": 1, "commit": "x"}'):
        path.write_text(corrupt)
        assert cv.load_stamp(str(path)) is None, corrupt


# --------------------------------------------------------------------------------------
# The module's result on the checkpoint role's layout
# --------------------------------------------------------------------------------------


def layout(tmp_path, commit=COMMIT, files=None, stamp=True):
    """<root>/kimi/{revisions/<commit>, current -> revisions/<commit>, manifests/<commit>.json[, .stamp.json]}."""
    model = tmp_path / "kimi"
    revision = model / "revisions" / commit
    files, manifest = build(revision, files, commit)
    (model / "manifests").mkdir()
    cm.write_manifest_atomic(str(model / "manifests" / ("%s.json" % commit)), manifest)
    if stamp:
        cv.write_stamp_atomic(str(model / "manifests" / ("%s.stamp.json" % commit)), cv.make_stamp(str(revision), manifest))
    os.symlink("revisions/%s" % commit, str(model / "current"))
    return model, manifest


def test_module_result_through_the_current_symlink(tmp_path):
    model, manifest = layout(tmp_path)
    result = cv.checkpoint_verify(str(model / "current"))
    assert result["healthy"] is True and result["problems"] == [] and result["details"] == []
    assert result["changed"] is False and result["mode"] == "fast" and result["stamp_status"] == "used"
    assert result["real_path"] == os.path.realpath(str(model / "revisions" / COMMIT))
    assert result["manifest"] == os.path.join(os.path.realpath(str(model)), "manifests", COMMIT + ".json")
    assert result["stamp"] == os.path.join(os.path.realpath(str(model)), "manifests", COMMIT + ".stamp.json")
    assert result["commit"] == COMMIT
    assert result["files_trusted_by_stamp"] == result["files_total"] == len(manifest["files"])


def test_module_result_deep_and_damaged(tmp_path):
    model, manifest = layout(tmp_path)
    corrupt_same_size(str(model / "revisions" / COMMIT / SHARD_1))
    result = cv.checkpoint_verify(str(model / "current"), deep=True, workers=2)
    assert result["healthy"] is False and result["mode"] == "deep" and result["stamp_status"] == "ignored"
    assert result["files_hashed"] == len(manifest["files"])
    assert len(result["problems"]) == 1 and result["problems"][0].startswith("%s: sha256 is " % SHARD_1)
    assert result["details"][0]["kind"] == "hash_mismatch"


@pytest.mark.parametrize(("stamp", "status"), [(False, "missing"), ("corrupt", "unusable")])
def test_module_result_without_a_usable_stamp_hashes_everything(tmp_path, stamp, status):
    model, manifest = layout(tmp_path, stamp=bool(stamp))
    if stamp == "corrupt":
        (model / "manifests" / ("%s.stamp.json" % COMMIT)).write_text("{")
    result = cv.checkpoint_verify(str(model / "current"))
    assert result["healthy"] is True and result["stamp_status"] == status
    assert result["files_hashed"] == len(manifest["files"])


def test_module_result_missing_manifest(tmp_path):
    model, _manifest = layout(tmp_path)
    os.unlink(str(model / "manifests" / ("%s.json" % COMMIT)))
    result = cv.checkpoint_verify(str(model / "current"))
    assert result["healthy"] is False and result["commit"] is None
    assert [(item["check"], item["kind"]) for item in result["details"]] == [("manifest", "manifest_missing")]
    assert "does not exist; the revision cannot be verified without it" in result["problems"][0]


def test_module_result_directory_not_named_by_a_commit(tmp_path):
    _files, _manifest = build(tmp_path / "snapshot")
    result = cv.checkpoint_verify(str(tmp_path / "snapshot"))
    assert [item["kind"] for item in result["details"]] == ["manifest_unknown"]
    assert "whose name is not a commit sha; pass manifest" in result["problems"][0]


def test_module_result_with_an_explicit_manifest_and_a_commit_mismatch(tmp_path):
    model, manifest = layout(tmp_path)
    elsewhere = tmp_path / "m.json"
    cm.write_manifest_atomic(str(elsewhere), manifest)
    assert cv.checkpoint_verify(str(model / "current"), manifest_path=str(elsewhere))["healthy"] is True
    other = manifest_for(tiny_files(), OTHER_COMMIT)
    cm.write_manifest_atomic(str(elsewhere), other)
    result = cv.checkpoint_verify(str(model / "current"), manifest_path=str(elsewhere))
    assert [item["kind"] for item in result["details"]] == ["commit_mismatch"]
    assert result["stamp"] == str(tmp_path / ("%s.stamp.json" % OTHER_COMMIT))


def test_module_result_never_raises(tmp_path, monkeypatch):
    model, _manifest = layout(tmp_path)

    def explode(*_args, **_kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(cv, "verify_tree", explode)
    result = cv.checkpoint_verify(str(model / "current"))
    assert result["healthy"] is False and result["details"][0]["kind"] == "internal_error"
    assert "RuntimeError('boom')" in result["problems"][0]


def test_summary_message_shows_the_first_five():
    result = {"real_path": "/m/revisions/x", "problems": ["p%d" % number for number in range(7)]}
    assert cv.summary_message(result, "/m/current") == (
        "Checkpoint /m/revisions/x failed verification with 7 problem(s): p0; p1; p2; p3; p4; and 2 more")
