"""The sandbox model hub (tools/modelhub), built once and served to a fleet on its bridge address.

Hosts reach it as `http://<gateway>:<port>` (HF_ENDPOINT), as a site would reach a Hub mirror. The
repositories are built once into the cache; each fleet's hub has its own state directory (faults,
request log, pidfile) whose `repos` links to that build, so faults and logs never mix across fleets.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

from .spec import CACHE_ROOT, FleetSpec

MODELHUB_TOOL = Path(__file__).resolve().parents[2] / "modelhub" / "modelhub.py"
# The build's bytes depend on these libraries' versions as much as on the tool's source.
BUILD_LIBRARIES = ("numpy", "safetensors", "tokenizers")


def source_hash() -> str:
    """Changes whenever the builder or its libraries change, so a stale build is never served."""
    digest = hashlib.sha1()
    for path in sorted(MODELHUB_TOOL.parent.glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    for library in BUILD_LIBRARIES:
        try:
            digest.update(f"{library}=={importlib.metadata.version(library)}".encode())
        except importlib.metadata.PackageNotFoundError:
            digest.update(f"{library} missing".encode())
    return digest.hexdigest()[:12]


def ensure_built(log) -> Path:
    """CACHE/modelhub-<hash>: a hub state directory whose `repos` holds every test repository."""
    out = CACHE_ROOT / f"modelhub-{source_hash()}"
    marker = out / ".gpufleet-build-complete"
    if marker.exists():
        return out
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    # Fleets brought up at the same time build once: the second waits here, then finds the marker.
    with open(CACHE_ROOT / ".modelhub-build.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not marker.exists():
            log(f"building the sandbox model hub's repositories into {out}")
            subprocess.run([sys.executable, str(MODELHUB_TOOL), "build", "--state", str(out)], check=True,
                           stdout=subprocess.DEVNULL)
            marker.write_text("ok\n")
    return out


def state_dir(spec: FleetSpec) -> Path:
    return spec.state_dir / "modelhub"


def url(spec: FleetSpec) -> str:
    return f"http://{spec.gateway_ip}:{spec.model_hub_port}"


def _tool():
    loaded = sys.modules.get("gpufleet_modelhub")
    if loaded is None:
        module_spec = importlib.util.spec_from_file_location("gpufleet_modelhub", MODELHUB_TOOL)
        loaded = importlib.util.module_from_spec(module_spec)
        sys.modules["gpufleet_modelhub"] = loaded  # dataclasses look their module up while it loads
        module_spec.loader.exec_module(loaded)  # stdlib only at import time
    return loaded


def running(spec: FleetSpec) -> bool:
    """True when this fleet's hub runs on the spec's address and port (a stale pid may belong to anything)."""
    state = state_dir(spec)
    try:
        pid = int((state / "modelhub.pid").read_text().strip())
        address = json.loads((state / "modelhub.addr").read_text())
    except (OSError, ValueError):
        return False
    return (_tool().is_hub_server(pid, state) and address.get("pid") == pid
            and (address.get("bind"), address.get("port")) == (spec.gateway_ip, spec.model_hub_port))


def status(spec: FleetSpec) -> dict | None:
    if not spec.model_hub:
        return None
    return {"url": url(spec), "state": str(state_dir(spec)), "running": running(spec)}


def up(spec: FleetSpec, log) -> str:
    # A running hub is kept only while it serves the current build: a changed tools/modelhub means
    # a new build, and a hub left on the old one would serve repositories that no longer exist.
    built = ensure_built(log)
    state = state_dir(spec)
    state.mkdir(parents=True, exist_ok=True)
    link = state / "repos"
    current = link.is_symlink() and link.resolve() == (built / "repos").resolve()
    if current and running(spec):
        return url(spec)
    if not current:
        if link.is_dir() and not link.is_symlink():
            shutil.rmtree(link)
        link.unlink(missing_ok=True)
        link.symlink_to(built / "repos")
    # `serve --daemon` stops an earlier server of this state first (e.g. one on another port).
    subprocess.run([sys.executable, str(MODELHUB_TOOL), "serve", "--state", str(state), "--bind", spec.gateway_ip,
                    "--port", str(spec.model_hub_port), "--daemon"], check=True, stdout=subprocess.DEVNULL)
    log(f"fleet {spec.name}: sandbox model hub at {url(spec)} (state {state})")
    return url(spec)


def down(spec: FleetSpec) -> None:
    if (state_dir(spec) / "modelhub.pid").exists():
        subprocess.run([sys.executable, str(MODELHUB_TOOL), "stop", "--state", str(state_dir(spec))], check=False,
                       stdout=subprocess.DEVNULL)
