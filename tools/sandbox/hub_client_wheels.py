#!/usr/bin/env python3
"""Wheelhouse of the checkpoint role's Hub client for sandbox hosts, which have no internet.

    hub_client_wheels.py [--version 2.4.0] [--cache DIR] [--json]

Downloads huggingface_hub and its dependencies for the hosts' Python (CPython 3.11, x86_64 manylinux)
once, into a cache directory that CI runs and later sessions reuse, completing it in a temporary
directory first so an interrupted download is never taken for a complete wheelhouse. The role then
installs with `--no-index --find-links`, exactly as an air-gapped site does.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DEFAULT_CACHE = Path(os.environ.get("GPUFLEET_WHEEL_CACHE", "/var/cache/gpufleet-wheelhouse"))
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")


def build(version: str, cache: Path) -> Path:
    target = cache / f"hub-client-{version}"
    if (target / ".complete").exists():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".hub-client-{version}.", dir=cache))
    try:
        argv = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                "--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp", "--dest", str(scratch),
                f"huggingface_hub=={version}"]
        for platform in PLATFORMS:
            argv += ["--platform", platform]
        subprocess.run(argv, check=True)
        (scratch / ".complete").write_text(f"huggingface_hub=={version}\n")
        if target.exists():
            shutil.rmtree(target)
        scratch.rename(target)
    finally:
        if scratch.exists():
            shutil.rmtree(scratch)
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default="2.4.0")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    path = build(args.version, args.cache)
    wheels = sorted(p.name for p in path.glob("*.whl"))
    print(json.dumps({"path": str(path), "wheels": wheels}) if args.json else path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
