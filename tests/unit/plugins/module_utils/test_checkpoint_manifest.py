# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_checkpoint_manifest: repo ids, git blob ids, manifests from a Hub tree listing, file kinds,
completeness rules and the manifest file helpers."""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path

import pytest
from ansible_collections.gpufleet.serving.plugins.module_utils import _checkpoint_manifest as cm
from checkpoint_trees import COMMIT, CREATED, ENDPOINT, pseudo_random

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "hub"
TREE = json.loads((FIXTURES / "tree_tiny-llama-2l_recursive.json").read_text())
REPO = "gpufleet-test/tiny-llama-2l"


def fixture_manifest():
    return cm.manifest_from_tree(REPO, "main", COMMIT, copy.deepcopy(TREE), ENDPOINT, CREATED)


def manifest_of(paths, trust=False, index=None):
    entries = [{"type": "file", "path": path, "size": 1, "oid": "a" * 40} for path in paths]
    return cm.completeness_problems(cm.manifest_from_tree(REPO, "main", COMMIT, entries, ENDPOINT, CREATED), trust, index)


# --------------------------------------------------------------------------------------
# Names
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("repo_id", ["moonshotai/Kimi-K2-Instruct", "gpt2", "a/b", "Org_1/name.v2-final",
                                     "o/" + "x" * 96, "x" * 96])
def test_valid_repo_ids(repo_id):
    assert cm.validate_repo_id(repo_id) is None


@pytest.mark.parametrize(
    ("repo_id", "reason"),
    [
        ("", "non-empty string"),
        (None, "non-empty string"),
        ("a/b/c", "more than one '/'"),
        ("/name", "empty part"),
        ("org/", "empty part"),
        ("org/na me", "outside [A-Za-z0-9._-]: ' '"),
        ("org/naïve", "outside [A-Za-z0-9._-]"),
        ("org/a--b", "'--' or '..'"),
        ("org/a..b", "'--' or '..'"),
        ("-org/name", "start or end with '-' or '.'"),
        ("org/name-", "start or end with '-' or '.'"),
        ("org/.name", "start or end with '-' or '.'"),
        ("org/" + "x" * 97, "97 characters long, at most 96"),
        ("org/name.git", "must not end with '.git'"),
    ],
)
def test_invalid_repo_ids(repo_id, reason):
    with pytest.raises(cm.CheckpointError) as raised:
        cm.validate_repo_id(repo_id)
    assert reason in str(raised.value)


@pytest.mark.parametrize(
    ("revision", "expected"),
    [(COMMIT, True), ("main", False), (COMMIT.upper(), False), (COMMIT[:39], False), (COMMIT + "0", False),
     ("g" * 40, False), (None, False), ("v1.0", False)],
)
def test_is_commit_sha(revision, expected):
    assert cm.is_commit_sha(revision) is expected


# --------------------------------------------------------------------------------------
# Git blob ids
# --------------------------------------------------------------------------------------


def test_git_blob_oid_known_values():
    # `git hash-object` of an empty file and of "hello world\n".
    assert cm.git_blob_oid_bytes(b"") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
    assert cm.git_blob_oid_bytes(b"hello world\n") == "3b18e512dba79e4c8300dd08aeb37f8e728b8dad"


def test_git_blob_oid_file_matches_bytes(tmp_path):
    data = pseudo_random("blob", 9 * 1024 * 1024 + 17)  # more than one read chunk
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    assert cm.git_blob_oid_file(str(path)) == cm.git_blob_oid_bytes(data)
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert cm.git_blob_oid_file(str(empty)) == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"


# --------------------------------------------------------------------------------------
# Manifests from the tree listing
# --------------------------------------------------------------------------------------


def test_manifest_from_fixture_listing():
    manifest = fixture_manifest()
    assert manifest["format"] == 1
    assert (manifest["repo_id"], manifest["requested_revision"], manifest["commit"]) == (REPO, "main", COMMIT)
    assert (manifest["endpoint"], manifest["created"]) == (ENDPOINT, CREATED)
    paths = [item["path"] for item in manifest["files"]]
    assert paths == sorted(paths)
    assert "original" not in paths  # directory entries are skipped
    assert len(paths) == sum(1 for entry in TREE if entry["type"] == "file") == 14
    assert manifest["total_bytes"] == sum(entry["size"] for entry in TREE if entry["type"] == "file")
    by_path = {item["path"]: item for item in manifest["files"]}
    shard = by_path["model-00001-of-00002.safetensors"]
    entry = next(entry for entry in TREE if entry["path"] == shard["path"])
    assert shard == {"path": "model-00001-of-00002.safetensors", "size": 393296, "git_oid": entry["oid"],
                     "sha256": entry["lfs"]["oid"], "kind": "weight_shard"}
    config = by_path["config.json"]
    assert config["sha256"] is None and config["kind"] == "config" and len(config["git_oid"]) == 40
    assert by_path["original/consolidated.00.pth"]["sha256"] is not None
    kinds = {item["path"]: item["kind"] for item in manifest["files"]}
    assert kinds["model.safetensors.index.json"] == "weight_index"
    assert kinds["chat_template.jinja"] == kinds["tokenizer.json"] == "tokenizer"
    assert kinds["LICENSE"] == "license" and kinds["README.md"] == "readme" and kinds[".gitattributes"] == "other"
    assert cm.completeness_problems(manifest, trust_remote_code=False) == []


def test_fixture_lfs_oids_are_pointer_blob_ids():
    """The listing's oid of an LFS file is the blob id of its pointer, so it cannot check content."""
    for entry in TREE:
        if "lfs" in entry:
            pointer = b"version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (
                entry["lfs"]["oid"].encode(), entry["lfs"]["size"])
            assert len(pointer) == entry["lfs"]["pointerSize"]
            assert cm.git_blob_oid_bytes(pointer) == entry["oid"]


def test_uppercase_hex_is_normalised():
    entry = {"type": "file", "path": "w.safetensors", "size": 3, "oid": "A" * 40,
             "lfs": {"oid": "B" * 64, "size": 3, "pointerSize": 130}}
    manifest = cm.manifest_from_tree(REPO, COMMIT, COMMIT, [entry], ENDPOINT, CREATED)
    assert manifest["files"][0]["git_oid"] == "a" * 40 and manifest["files"][0]["sha256"] == "b" * 64


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/etc/passwd", "absolute"),
        ("../outside", "'..'"),
        ("weights/../../outside", "'..'"),
        ("weights\\model.bin", "backslash"),
        ("", "empty"),
        (None, "empty or not a string"),
        ("a//b", "empty or '.' component"),
        ("./config.json", "empty or '.' component"),
        ("dir/", "empty or '.' component"),
        ("a\0b", "NUL"),
    ],
)
def test_unsafe_paths_are_refused(path, reason):
    entries = [{"type": "file", "path": path, "size": 1, "oid": "a" * 40}]
    with pytest.raises(cm.CheckpointError) as raised:
        cm.manifest_from_tree(REPO, "main", COMMIT, entries, ENDPOINT, CREATED)
    assert "unsafe path" in str(raised.value) and reason in str(raised.value)


def test_duplicate_paths_are_refused():
    entries = [{"type": "file", "path": "config.json", "size": 1, "oid": "a" * 40}] * 2
    with pytest.raises(cm.CheckpointError, match="duplicate path 'config.json'"):
        cm.manifest_from_tree(REPO, "main", COMMIT, entries, ENDPOINT, CREATED)


def test_file_and_directory_of_the_same_name_are_refused():
    entries = [{"type": "file", "path": "a", "size": 1, "oid": "a" * 40},
               {"type": "file", "path": "a/b", "size": 1, "oid": "b" * 40}]
    with pytest.raises(cm.CheckpointError, match="both as a file and as a directory"):
        cm.manifest_from_tree(REPO, "main", COMMIT, entries, ENDPOINT, CREATED)


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ({"type": "file", "path": "x", "size": -1, "oid": "a" * 40}, "non-negative integer"),
        ({"type": "file", "path": "x", "size": "10", "oid": "a" * 40}, "non-negative integer"),
        ({"type": "file", "path": "x", "size": True, "oid": "a" * 40}, "non-negative integer"),
        ({"type": "file", "path": "x", "size": 1, "oid": "xyz"}, "40-digit hex git blob id"),
        ({"type": "file", "path": "x", "size": 1, "oid": "a" * 40, "lfs": {"oid": "a" * 40, "size": 1}}, "64-digit hex sha256"),
        ({"type": "file", "path": "x", "size": 1, "oid": "a" * 40, "lfs": {"oid": "a" * 64, "size": 2}}, "two sizes"),
        ({"type": "file", "path": "x", "size": 1, "oid": "a" * 40, "lfs": "a" * 64}, "lfs must be an object"),
        ({"type": "submodule", "path": "x", "size": 1, "oid": "a" * 40}, "unknown type 'submodule'"),
        ("config.json", "must be an object"),
    ],
)
def test_malformed_entries_are_refused(entry, reason):
    with pytest.raises(cm.CheckpointError) as raised:
        cm.manifest_from_tree(REPO, "main", COMMIT, [entry], ENDPOINT, CREATED)
    assert reason in str(raised.value)


def test_bad_repo_commit_or_listing_are_refused():
    with pytest.raises(cm.CheckpointError, match="repo id"):
        cm.manifest_from_tree("a/b/c", "main", COMMIT, [], ENDPOINT, CREATED)
    with pytest.raises(cm.CheckpointError, match="commit must be a full 40-digit"):
        cm.manifest_from_tree(REPO, "main", "main", [], ENDPOINT, CREATED)
    with pytest.raises(cm.CheckpointError, match="must be a JSON list"):
        cm.manifest_from_tree(REPO, "main", COMMIT, {"error": "Revision not found"}, ENDPOINT, CREATED)


# --------------------------------------------------------------------------------------
# Kinds
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("config.json", "config"),
        ("text_encoder/config.json", "config"),
        ("generation_config.json", "generation_config"),
        ("tokenizer.json", "tokenizer"),
        ("tokenizer_config.json", "tokenizer"),
        ("special_tokens_map.json", "tokenizer"),
        ("tokenizer.model", "tokenizer"),
        ("tiktoken.model", "tokenizer"),
        ("vocab.json", "tokenizer"),
        ("vocab.txt", "tokenizer"),
        ("merges.txt", "tokenizer"),
        ("added_tokens.json", "tokenizer"),
        ("cl100k_base.tiktoken", "tokenizer"),
        ("chat_template.jinja", "tokenizer"),
        ("chat_template.json", "tokenizer"),
        ("preprocessor_config.json", "processor"),
        ("processor_config.json", "processor"),
        ("video_preprocessor_config.json", "processor"),
        ("model.safetensors.index.json", "weight_index"),
        ("pytorch_model.bin.index.json", "weight_index"),
        ("model-00001-of-00064.safetensors", "weight_shard"),
        ("pytorch_model.bin", "weight_shard"),
        ("original/consolidated.00.pth", "weight_shard"),
        ("adapter.pt", "weight_shard"),
        ("kimi-q4_k_m.gguf", "weight_shard"),
        ("modeling_deepseek.py", "code"),
        ("tokenization_kimi.py", "code"),
        ("LICENSE", "license"),
        ("LICENSE.md", "license"),
        ("licence.txt", "license"),
        ("COPYING", "license"),
        ("README.md", "readme"),
        ("readme.txt", "readme"),
        (".gitattributes", "other"),
        ("figures/benchmark.png", "other"),
        ("params.json", "other"),
    ],
)
def test_classify_path(path, kind):
    assert cm.classify_path(path) == kind
    assert kind in cm.FILE_KINDS


# --------------------------------------------------------------------------------------
# Completeness
# --------------------------------------------------------------------------------------

SERVABLE = ["config.json", "tokenizer.json", "model.safetensors"]


def test_a_minimal_servable_revision_is_complete():
    assert manifest_of(SERVABLE) == []


def test_kimi_style_tiktoken_tokenizer_with_remote_code_is_complete():
    paths = ["config.json", "tiktoken.model", "tokenizer_config.json", "tokenization_kimi.py", "modeling_deepseek.py",
             "model-1-of-2.safetensors", "model-2-of-2.safetensors", "model.safetensors.index.json"]
    assert manifest_of(paths, trust=True) == []


def test_missing_config():
    problems = manifest_of(["tokenizer.json", "model.safetensors", "text_encoder/config.json"])
    assert problems == [{"check": "completeness", "path": "config.json",
                         "message": "the revision has no config.json in its top directory"}]


def test_missing_tokenizer_vocabulary():
    problems = manifest_of(["config.json", "tokenizer_config.json", "special_tokens_map.json", "model.safetensors"])
    assert [(item["check"], item["path"]) for item in problems] == [("completeness", None)]
    assert "no tokenizer vocabulary" in problems[0]["message"]


@pytest.mark.parametrize("vocabulary", ["tokenizer.model", "vocab.json", "o200k_base.tiktoken", "spiece.model"])
def test_other_vocabularies_count(vocabulary):
    assert manifest_of(["config.json", vocabulary, "model.safetensors"]) == []


def test_no_weights():
    problems = manifest_of(["config.json", "tokenizer.json"])
    assert [item["message"] for item in problems] == [
        "the revision has no weight files (.safetensors, .bin, .pt, .pth or .gguf)"]


def test_several_shards_need_an_index():
    problems = manifest_of(["config.json", "tokenizer.json", "model-1-of-2.safetensors", "model-2-of-2.safetensors"])
    assert [(item["path"], item["message"]) for item in problems] == [
        ("model.safetensors.index.json",
         "the top directory holds 2 .safetensors shards but no .safetensors.index.json that maps tensors to them")]


def test_one_shard_of_each_format_needs_no_index():
    assert manifest_of(["config.json", "tokenizer.json", "model.safetensors", "pytorch_model.bin",
                        "original/consolidated.00.pth", "original/consolidated.01.pth"]) == []


def test_index_naming_a_shard_not_in_the_manifest():
    paths = ["config.json", "tokenizer.json", "model-1-of-2.safetensors", "model.safetensors.index.json"]
    index = {"embed": "model-1-of-2.safetensors", "layers.0": "model-2-of-2.safetensors",
             "lm_head": "model-2-of-2.safetensors", "bad": 3}
    problems = manifest_of(paths, index=index)
    assert [(item["path"], item["message"]) for item in problems] == [
        (None, "the weight index maps 'bad' to 3, which is not a file name"),
        ("model-2-of-2.safetensors", "the weight index names model-2-of-2.safetensors, which the revision does not have"),
    ]


def test_trusted_remote_code_needs_code_files():
    problems = manifest_of(SERVABLE, trust=True)
    assert problems == [{"check": "completeness", "path": None,
                         "message": "remote code is trusted but the revision ships no code files"}]
    assert manifest_of(SERVABLE + ["modeling_x.py"], trust=True) == []


# --------------------------------------------------------------------------------------
# Manifest files
# --------------------------------------------------------------------------------------


def test_write_and_load_manifest(tmp_path):
    manifest = fixture_manifest()
    path = tmp_path / "manifests" / ("%s.json" % COMMIT)
    path.parent.mkdir()
    cm.write_manifest_atomic(str(path), manifest)
    assert cm.load_manifest(str(path)) == manifest
    text = path.read_text()
    assert text == json.dumps(manifest, sort_keys=True, indent=1) + "\n"
    assert text.startswith('{\n "commit": ')
    assert os.listdir(str(path.parent)) == [path.name]  # no temporary file left behind
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)
    # Rewriting replaces the file in place.
    manifest["created"] = "2026-12-03T00:00:00Z"
    cm.write_manifest_atomic(str(path), manifest)
    assert cm.load_manifest(str(path))["created"] == "2026-12-03T00:00:00Z"


def test_write_refuses_an_invalid_manifest_and_leaves_nothing(tmp_path):
    manifest = fixture_manifest()
    manifest["files"][0]["path"] = "../escape"
    with pytest.raises(cm.CheckpointError, match="unsafe path"):
        cm.write_manifest_atomic(str(tmp_path / "m.json"), manifest)
    assert os.listdir(str(tmp_path)) == []


def test_a_failed_write_removes_its_temporary_file(tmp_path, monkeypatch):
    def broken_replace(*_args):
        raise OSError("disk on fire")

    monkeypatch.setattr(cm.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk on fire"):
        cm.write_manifest_atomic(str(tmp_path / "m.json"), fixture_manifest())
    assert os.listdir(str(tmp_path)) == []


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "does not exist"),
        ("{not json", "is not valid JSON"),
        ("[]", "must be a JSON object"),
        ('{"format": 2}', "unsupported manifest format 2"),
        ('{"format": 1, "commit": "main", "files": []}', "manifest commit must be"),
        ('{"format": 1, "commit": "%s", "files": {}}' % COMMIT, "files must be a list"),
        ('{"format": 1, "commit": "%s", "files": [{"path": "x", "size": 1}]}' % COMMIT, "neither a sha256 nor a git_oid"),
        ('{"format": 1, "commit": "%s", "files": [{"path": "x", "size": 1, "sha256": "zz"}]}' % COMMIT, "sha256 must be"),
    ],
)
def test_load_manifest_errors(tmp_path, content, reason):
    path = tmp_path / "m.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(cm.CheckpointError) as raised:
        cm.load_manifest(str(path))
    assert str(path) in str(raised.value) and reason in str(raised.value)


def test_load_manifest_fills_in_missing_kinds(tmp_path):
    path = tmp_path / "m.json"
    sha = hashlib.sha256(b"x").hexdigest()
    path.write_text(json.dumps({"format": 1, "commit": COMMIT, "files": [{"path": "a.safetensors", "size": 1, "sha256": sha}]}))
    assert cm.load_manifest(str(path))["files"][0]["kind"] == "weight_shard"
