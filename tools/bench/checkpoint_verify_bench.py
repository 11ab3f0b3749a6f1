#!/usr/bin/env python3
# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Benchmark of checkpoint verification (_checkpoint_verify.verify_tree) against sha256sum.

1. Deep verification. A synthetic checkpoint of ``--files`` equal files of random bytes
   (``--size-gb`` in total, decimal GB) is written with its manifest. The baseline is
   ``sha256sum`` over the same files (one process, sequential), run in the same round as
   verify_tree(deep=True) with 1, 2 and 4 workers. The cold round drops the page cache
   before each run (root only: ``sync; echo 3 > /proc/sys/vm/drop_caches``). The warm round
   reads from the page cache.
   In the warm round, ``openssl dgst -sha256`` (one process) is shown for reference. Debian's
   sha256sum does not use the CPU's SHA instructions, but OpenSSL (and so Python's hashlib)
   does.
2. The nightly fast path. ``--small-files`` small files get a stamp from a full verification.
   verify_tree(deep=False, stamp) is timed against verify_tree(deep=True), with the median of
   ``--repeats`` warm runs. The fast path on the large checkpoint is timed as well.

Figures are printed, never asserted. Everything is written under a fresh directory in ``--dir``
(default: the system temporary directory), which is removed at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COLLECTIONS = REPO / ".collections"
LINK = COLLECTIONS / "ansible_collections" / "gpufleet" / "serving"
if not LINK.exists():
    LINK.parent.mkdir(parents=True, exist_ok=True)
    LINK.symlink_to("../../..")
sys.path.insert(0, str(COLLECTIONS))

from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_manifest import (  # noqa: E402
    git_blob_oid_bytes,
    manifest_from_tree,
)
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_verify import make_stamp, verify_tree  # noqa: E402

COMMIT = "b" * 40
WRITE_CHUNK = 16 * 1024 * 1024
SMALL_TEXT = {
    "config.json": b'{"architectures": ["LlamaForCausalLM"]}\n',
    "tokenizer.json": b'{"version": "1.0"}\n',
}


def drop_caches():
    """Drop the page cache; True when it worked (root on Linux)."""
    subprocess.run(["sync"], check=False)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as handle:
            handle.write("3\n")
    except OSError:
        return False
    return True


def write_random_file(path, size):
    """Write ``size`` random bytes; returns their sha256."""
    digest = hashlib.sha256()
    with open(path, "wb") as handle:
        left = size
        while left:
            block = os.urandom(min(WRITE_CHUNK, left))
            digest.update(block)
            handle.write(block)
            left -= len(block)
        handle.flush()
        os.fsync(handle.fileno())
    return digest.hexdigest()


def lfs_entry(path, size, sha256):
    pointer = b"version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (sha256.encode(), size)
    return {"type": "file", "path": path, "size": size, "oid": git_blob_oid_bytes(pointer),
            "lfs": {"oid": sha256, "size": size, "pointerSize": len(pointer)}}


def build_checkpoint(directory, count, size):
    """Random safetensors shards plus their index, config and tokenizer; returns (manifest, shard paths)."""
    os.makedirs(directory)
    entries = []
    shards = []
    for number in range(1, count + 1):
        rel = "model-%05d-of-%05d.safetensors" % (number, count)
        sha256 = write_random_file(os.path.join(directory, rel), size)
        entries.append(lfs_entry(rel, size, sha256))
        shards.append(rel)
    text = dict(SMALL_TEXT)
    if count > 1:
        text["model.safetensors.index.json"] = (
            '{"weight_map": {%s}}\n' % ", ".join('"t%d": "%s"' % (n, rel) for n, rel in enumerate(shards))).encode()
    for rel, content in text.items():
        with open(os.path.join(directory, rel), "wb") as handle:
            handle.write(content)
        entries.append({"type": "file", "path": rel, "size": len(content), "oid": git_blob_oid_bytes(content)})
    manifest = manifest_from_tree("gpufleet-bench/synthetic", "main", COMMIT, entries, "http://127.0.0.1", "now")
    return manifest, shards


def timed(function):
    started = time.perf_counter()
    value = function()
    return time.perf_counter() - started, value


def run_sha256sum(directory, shards, manifest):
    out = subprocess.run(["sha256sum", *shards], cwd=directory, check=True, capture_output=True, text=True).stdout
    expected = {item["path"]: item["sha256"] for item in manifest["files"]}
    for line in out.splitlines():
        digest, rel = line.split(None, 1)
        if expected[rel.lstrip("*")] != digest:
            raise SystemExit("sha256sum disagrees with the manifest on %s" % rel)


def run_verify(directory, manifest, workers):
    result = verify_tree(directory, manifest, deep=True, workers=workers)
    if not result["ok"]:
        raise SystemExit("verify_tree found problems: %s" % result["problems"][:3])
    return result


def run_openssl(directory, shards):
    subprocess.run(["openssl", "dgst", "-sha256", *shards], cwd=directory, check=True, capture_output=True)


def deep_round(directory, manifest, shards, cold, workers_list, repeats):
    """One round: sha256sum, openssl when warm (and installed), then verify_tree per worker count;
    list of (label, seconds, bytes).  Warm verify_tree runs take the median of ``repeats``."""
    shard_bytes = sum(item["size"] for item in manifest["files"] if item["path"] in set(shards))
    rows = []
    if cold:
        drop_caches()
    seconds, _value = timed(lambda: run_sha256sum(directory, shards, manifest))
    rows.append(("sha256sum (1 process, sequential)", seconds, shard_bytes))
    if not cold and shutil.which("openssl"):
        seconds, _value = timed(lambda: run_openssl(directory, shards))
        rows.append(("openssl dgst -sha256 (1 process, sequential; reference only)", seconds, shard_bytes))
    for workers in workers_list:
        if cold:
            drop_caches()
            seconds, result = timed(lambda workers=workers: run_verify(directory, manifest, workers))
        else:
            seconds = median_time(lambda workers=workers: run_verify(directory, manifest, workers), repeats)
            result = {"bytes_hashed": manifest["total_bytes"]}
        rows.append(("verify_tree deep, workers=%d" % workers, seconds, result["bytes_hashed"]))
    return rows


def print_rows(title, rows):
    base = rows[0][2] / rows[0][1]
    print("\n%s\n" % title)
    print("| run | seconds | GB/s | x sha256sum |")
    print("|---|---:|---:|---:|")
    for label, seconds, count in rows:
        rate = count / seconds
        print("| %s | %.2f | %.2f | %.2f |" % (label, seconds, rate / 1e9, rate / base))


def median_time(function, repeats):
    times = []
    for _number in range(repeats):
        seconds, _value = timed(function)
        times.append(seconds)
    return statistics.median(times)


def fast_path(base, small_files, small_size, repeats, big_dir, big_manifest):
    directory = os.path.join(base, "small")
    manifest, _shards = build_checkpoint(directory, small_files, small_size)
    run_verify(directory, manifest, 4)
    stamp = make_stamp(directory, manifest)
    fast = verify_tree(directory, manifest, stamp=stamp)
    if not fast["ok"] or fast["files_hashed"]:
        raise SystemExit("the fast path did not trust the stamp: %s" % fast)
    deep_s = median_time(lambda: verify_tree(directory, manifest, deep=True), repeats)
    fast_s = median_time(lambda: verify_tree(directory, manifest, stamp=stamp), repeats)
    big_stamp = make_stamp(big_dir, big_manifest)
    big_deep_s = median_time(lambda: verify_tree(big_dir, big_manifest, deep=True), 1)
    big_fast_s = median_time(lambda: verify_tree(big_dir, big_manifest, stamp=big_stamp), repeats)
    count = len(manifest["files"])
    print("\nNightly fast path (warm cache, median of %d runs; workers=4)\n" % repeats)
    print("| tree | files | deep s | fast s (stamp) | fast / deep |")
    print("|---|---:|---:|---:|---:|")
    print("| %d small files of %d KiB | %d | %.3f | %.4f | %.4f |"
          % (small_files, small_size // 1024, count, deep_s, fast_s, fast_s / deep_s))
    print("| the large checkpoint | %d | %.2f | %.4f | %.5f |"
          % (len(big_manifest["files"]), big_deep_s, big_fast_s, big_fast_s / big_deep_s))


def environment(directory):
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
            handle.seek(0)
            sha_ni = " sha_ni" in handle.read()
    except OSError:
        sha_ni = False
    coreutils = subprocess.run(["sha256sum", "--version"], capture_output=True, text=True, check=False).stdout.split("\n")[0]
    fs = subprocess.run(["df", "--output=fstype,source", directory], capture_output=True, text=True, check=False).stdout.split()
    print("environment: %s, %d CPUs (sha_ni: %s), Python %s, %s, %s, kernel %s, filesystem %s, load average %s"
          % (cpu, os.cpu_count() or 0, "yes" if sha_ni else "no", platform.python_version(), ssl.OPENSSL_VERSION,
             coreutils, platform.release(), " on ".join(fs[-2:]) if len(fs) >= 2 else "unknown", load_average()))


def load_average():
    """The 1-minute load average: other work on the machine makes every figure noisier."""
    try:
        return "%.2f" % os.getloadavg()[0]
    except OSError:
        return "unknown"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--size-gb", type=float, default=4.0, help="total size of the large checkpoint (decimal GB)")
    parser.add_argument("--files", type=int, default=8, help="number of equal files in the large checkpoint")
    parser.add_argument("--dir", default=None, help="parent of the work directory (default: the temporary directory)")
    parser.add_argument("--workers", default="1,2,4", help="worker counts for verify_tree, comma-separated")
    parser.add_argument("--small-files", type=int, default=1000)
    parser.add_argument("--small-kib", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    args = parser.parse_args()
    workers_list = [int(value) for value in args.workers.split(",")]

    base = tempfile.mkdtemp(prefix="checkpoint-bench-", dir=args.dir)
    try:
        environment(base)
        size = int(args.size_gb * 1e9 / args.files)
        big = os.path.join(base, "large")
        seconds, (manifest, shards) = timed(lambda: build_checkpoint(big, args.files, size))
        print("generated %d files of %d bytes (%.2f GB) in %.1f s under %s"
              % (args.files, size, size * args.files / 1e9, seconds, base))
        can_drop = drop_caches()
        print("page cache drop: %s" % ("yes (root)" if can_drop else "not possible (not root); the cold round is warm"))
        cold = deep_round(big, manifest, shards, True, workers_list, 1)
        print_rows("Deep verification, cold cache (page cache dropped before each run)", cold)
        run_verify(big, manifest, max(workers_list))  # warm the cache
        warm = deep_round(big, manifest, shards, False, workers_list, 3)
        print_rows("Deep verification, warm cache (verify_tree: median of 3 runs)", warm)
        fast_path(base, args.small_files, args.small_kib * 1024, args.repeats, big, manifest)
        print("\nload average at the end: %s" % load_average())
    finally:
        if args.keep:
            print("kept %s" % base)
        else:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
