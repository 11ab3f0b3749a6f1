# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Small checkpoints on disk with the Hub tree listing and manifest that match them.

A listing is built the way the Hub builds it: small text files carry their git blob id; weights
are LFS files, whose ``oid`` is the blob id of the LFS pointer and whose ``lfs.oid`` is the
content's sha256.
"""

from __future__ import annotations

import hashlib
import json
import os

from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_manifest import (
    git_blob_oid_bytes,
    manifest_from_tree,
)

COMMIT = "0123456789abcdef0123456789abcdef01234567"
OTHER_COMMIT = "89abcdef0123456789abcdef0123456789abcdef"
REPO_ID = "gpufleet-test/tiny-llama-2l"
CREATED = "2026-12-02T10:00:00Z"
ENDPOINT = "http://127.0.0.1:8088"


def pseudo_random(seed, size):
    """Deterministic bytes that look random (no repeated blocks)."""
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(b"%s:%d" % (seed.encode(), counter)).digest()
        counter += 1
    return bytes(out[:size])


SHARD_1 = "model-00001-of-00002.safetensors"
SHARD_2 = "model-00002-of-00002.safetensors"
INDEX = {"metadata": {"total_size": 0}, "weight_map": {"model.embed_tokens.weight": SHARD_1, "lm_head.weight": SHARD_2}}


def tiny_files():
    """path -> (content, stored in LFS) for a servable two-shard checkpoint."""
    return {
        ".gitattributes": (b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n", False),
        "config.json": (json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 64}).encode(), False),
        "generation_config.json": (b'{"eos_token_id": 2}\n', False),
        "tokenizer.json": (b'{"version": "1.0", "model": {"type": "BPE"}}\n', False),
        "tokenizer_config.json": (b'{"tokenizer_class": "PreTrainedTokenizerFast"}\n', False),
        SHARD_1: (pseudo_random("shard1", 300_000), True),
        SHARD_2: (pseudo_random("shard2", 200_000), True),
        "model.safetensors.index.json": (json.dumps(INDEX).encode(), False),
        "assets/notes.txt": (b"nested file\n", False),
    }


def listing(files):
    """The Hub tree listing (recursive) for ``files`` (path -> (content, lfs))."""
    entries = []
    directories = set()
    for path in sorted(files):
        content, lfs = files[path]
        parts = path.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            directory = "/".join(parts[:depth])
            if directory not in directories:
                directories.add(directory)
                entries.append({"type": "directory", "oid": git_blob_oid_bytes(directory.encode()), "size": 0,
                                "path": directory})
        if lfs:
            sha256 = hashlib.sha256(content).hexdigest()
            pointer = b"version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (sha256.encode(), len(content))
            entries.append({"type": "file", "oid": git_blob_oid_bytes(pointer), "size": len(content), "path": path,
                            "lfs": {"oid": sha256, "size": len(content), "pointerSize": len(pointer)}})
        else:
            entries.append({"type": "file", "oid": git_blob_oid_bytes(content), "size": len(content), "path": path})
    return entries


def manifest_for(files, commit=COMMIT):
    return manifest_from_tree(REPO_ID, "main", commit, listing(files), ENDPOINT, CREATED)


def write_tree(directory, files):
    for path, (content, _lfs) in files.items():
        full = os.path.join(str(directory), path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as handle:
            handle.write(content)


def build(directory, files=None, commit=COMMIT):
    """Write a checkpoint into ``directory``; returns (files, manifest)."""
    files = tiny_files() if files is None else files
    write_tree(directory, files)
    return files, manifest_for(files, commit)


def corrupt_same_size(path, offset=1000):
    """Flip one byte in place: same size, different content."""
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))
