"""The stand-in vendor apt repositories (tools/vendor_repo), built once and served to a fleet.

Served on the fleet's bridge address, so hosts reach it exactly as a site mirror: the driver
roles get its URL and key from the inventory and cannot tell it from NVIDIA's or AMD's.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from .spec import CACHE_ROOT, FleetSpec, pidfile_argv

VENDOR_REPO_TOOL = Path(__file__).resolve().parents[2] / "vendor_repo" / "vendor_repo.py"
PORT = 8080


def source_hash() -> str:
    """Changes whenever the package data or the builder changes, so a stale build is never served."""
    digest = hashlib.sha1()
    for path in sorted(VENDOR_REPO_TOOL.parent.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(VENDOR_REPO_TOOL.parent)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def ensure_built(log) -> Path:
    out = CACHE_ROOT / f"vendor-repo-{source_hash()}"
    marker = out / ".gpufleet-build-complete"
    if not marker.exists():
        log(f"building the stand-in vendor repositories into {out}")
        subprocess.run([sys.executable, str(VENDOR_REPO_TOOL), "build", "--out", str(out)], check=True, stdout=subprocess.DEVNULL)
        marker.write_text("ok\n")
    return out


def pidfile(spec: FleetSpec) -> Path:
    return spec.state_dir / "vendor-repo.pid"


def running(spec: FleetSpec) -> bool:
    """True when the pidfile names a live server of ours (a stale pid may belong to anything now)."""
    argv = pidfile_argv(pidfile(spec))
    return any(arg.endswith(VENDOR_REPO_TOOL.name.encode()) for arg in argv) and b"_serve-foreground" in argv


def url(spec: FleetSpec) -> str:
    return f"http://{spec.gateway_ip}:{PORT}"


def up(spec: FleetSpec, log) -> str:
    if running(spec):
        return url(spec)
    root = ensure_built(log)
    subprocess.run(
        [sys.executable, str(VENDOR_REPO_TOOL), "serve", "--dir", str(root), "--bind", spec.gateway_ip,
         "--port", str(PORT), "--pidfile", str(pidfile(spec)), "--log", str(spec.state_dir / "vendor-repo.log")],
        check=True,
    )
    log(f"fleet {spec.name}: stand-in vendor repositories at {url(spec)}")
    return url(spec)


def down(spec: FleetSpec) -> None:
    if pidfile(spec).exists():
        subprocess.run([sys.executable, str(VENDOR_REPO_TOOL), "stop", "--pidfile", str(pidfile(spec))], check=False)
