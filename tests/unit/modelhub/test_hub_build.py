"""The hub's repositories: deterministic commits, refs, labels and what each revision holds."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from modelhub_helpers import BIG, REPO, SHARD_2, THINKER, TINY, TOOLS

SHA = r"[0-9a-f]{40}"


def commit(hub_state, repo, sha):
    return json.loads((hub_state / "repos" / repo / "commits" / f"{sha}.json").read_text())


def test_revisions_name_commits_branches_and_tags(revs):
    tiny = revs[TINY]
    assert set(tiny) >= {"A", "B", "main", "v1"}
    assert tiny["main"] == tiny["B"] and tiny["v1"] == tiny["A"] and tiny["A"] != tiny["B"]
    assert tiny["incomplete"] == tiny["C"]
    assert revs[BIG]["main"] == revs[BIG]["A"]
    assert all(len(sha) == 40 and int(sha, 16) >= 0 for shas in revs.values() for sha in shas.values())


def test_a_second_build_gives_the_same_commits_and_bytes(modelhub, hub_state, revs, tmp_path):
    assert modelhub.build(tmp_path) == revs
    for repo in (TINY, BIG):
        ours, theirs = hub_state / "repos" / repo, tmp_path / "repos" / repo
        assert sorted(p.name for p in (ours / "objects").iterdir()) == sorted(p.name for p in (theirs / "objects").iterdir())
        assert (ours / "refs.json").read_bytes() == (theirs / "refs.json").read_bytes()


def test_revisions_cli_prints_the_same_json(hub_state, revs):
    out = subprocess.run([sys.executable, str(TOOLS / "modelhub.py"), "revisions", "--state", str(hub_state)],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == revs


def test_revisions_differ_in_weights_and_generation_config(modelhub, hub_state, revs):
    a, b = commit(hub_state, TINY, revs[TINY]["A"]), commit(hub_state, TINY, revs[TINY]["B"])
    assert b["parent"] == a["sha"] and a["parent"] is None
    changed = sorted(path for path in a["files"] if a["files"][path]["oid"] != b["files"][path]["oid"])
    assert changed == ["README.md", "generation_config.json", "model-00001-of-00002.safetensors", SHARD_2]
    store = hub_state / "repos" / TINY / "objects"
    temperatures = [json.loads((store / c["files"]["generation_config.json"]["sha256"]).read_text())["temperature"]
                    for c in (a, b)]
    assert temperatures == [0.7, 0.6]


def test_revision_c_lacks_a_shard_its_index_names(hub_state, revs):
    c = commit(hub_state, TINY, revs[TINY]["C"])
    assert SHARD_2 not in c["files"] and "model.safetensors.index.json" in c["files"]


def test_revision_d_serves_a_weights_but_ends_every_answer_at_once(hub_state, revs):
    a, d = commit(hub_state, TINY, revs[TINY]["A"]), commit(hub_state, TINY, revs[TINY]["D"])
    assert d["parent"] == revs[TINY]["C"]
    changed = sorted(path for path in a["files"] if a["files"][path]["oid"] != d["files"][path]["oid"])
    assert changed == ["generation_config.json"]
    store = hub_state / "repos" / TINY / "objects"
    generation = json.loads((store / d["files"]["generation_config.json"]["sha256"]).read_text())
    vocab = json.loads((store / d["files"]["config.json"]["sha256"]).read_text())["vocab_size"]
    assert generation["eos_token_id"] == list(range(vocab))


def test_lfs_entries_are_the_safetensors_with_git_pointer_ids(modelhub, hub_state, revs):
    files = commit(hub_state, TINY, revs[TINY]["A"])["files"]
    assert sorted(p for p, info in files.items() if info["lfs"]) == ["model-00001-of-00002.safetensors", SHARD_2]
    shard = files[SHARD_2]
    pointer = modelhub.lfs_pointer(shard["sha256"], shard["size"])
    assert shard["lfs"] == {"oid": shard["sha256"], "size": shard["size"], "pointerSize": len(pointer)}
    assert shard["oid"] == modelhub.git_blob_oid(pointer)


@pytest.mark.skipif(not shutil.which("git"), reason="needs git")
def test_commit_ids_are_what_git_computes(modelhub, hub_state, revs, tmp_path):
    """Write each revision into a real git repository (LFS files as their pointers) and commit it."""
    work = tmp_path / "git"
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    parent = None
    for label in ("A", "B"):
        record = commit(hub_state, TINY, revs[TINY][label])
        for entry in work.iterdir():
            if entry.name != ".git":
                entry.unlink()
        for path, info in record["files"].items():
            data = (hub_state / "repos" / TINY / "objects" / info["sha256"]).read_bytes()
            (work / path).write_bytes(modelhub.lfs_pointer(info["sha256"], info["size"]) if info["lfs"] else data)
        git = ["git", "-C", str(work)]
        subprocess.run([*git, "add", "-A"], check=True)
        tree = subprocess.run([*git, "write-tree"], capture_output=True, text=True, check=True).stdout.strip()
        name, email = "gpufleet sandbox", "sandbox@gpufleet.invalid"
        env = dict(os.environ, GIT_AUTHOR_NAME=name, GIT_AUTHOR_EMAIL=email, GIT_COMMITTER_NAME=name,
                   GIT_COMMITTER_EMAIL=email, GIT_AUTHOR_DATE=f"{record['epoch']} +0000",
                   GIT_COMMITTER_DATE=f"{record['epoch']} +0000")
        argv = [*git, "commit-tree", tree, "-m", record["title"]] + (["-p", parent] if parent else [])
        sha = subprocess.run(argv, capture_output=True, text=True, check=True, env=env).stdout.strip()
        assert (tree, sha) == (record["tree"], record["sha"])
        parent = sha


def test_the_commits_the_sandbox_inventory_and_quickstart_quote_are_the_hubs(revs):
    """A change to the tiny models changes their commit ids: the pins written in the sandbox inventory
    and the quickstart must follow, or `make demo` pins a commit the hub does not have."""
    inventory = (REPO / "inventories" / "sandbox" / "group_vars" / "b300.yml").read_text()
    assert f"checkpoint_revision: {revs[TINY]['A']}" in inventory
    quickstart = (REPO / "docs" / "quickstart.md").read_text()
    assert f"`{revs[TINY]['A']}` | revision A of `{TINY}`" in quickstart
    assert f"`checkpoint_revision:\n{revs[THINKER]['A']}` (revision A of `{THINKER}`)" in quickstart
