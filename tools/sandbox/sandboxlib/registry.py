"""The sandbox's OCI registry: Debian's docker-registry (the CNCF distribution registry) on the bridge.

Hosts pull engine images from it by digest, over plain HTTP, as an air-gapped site pulls from its
mirror (`container_runtime_insecure_registries`). Its storage is a controller cache shared by every
fleet, so an image built and pushed once (tools/sandbox/engine_images.py) serves every scenario;
each fleet runs its own server on its gateway address, so stopping one fleet's registry (the
"registry down" case) leaves the others serving.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from .spec import CACHE_ROOT, REGISTRY_PORT, FleetSpec, pidfile_argv

REGISTRY_BINARY = Path("/usr/bin/docker-registry")
STORAGE = Path(os.environ.get("GPUFLEET_REGISTRY_STORAGE", str(CACHE_ROOT / "registry")))


def pidfile(spec: FleetSpec) -> Path:
    return spec.state_dir / "registry.pid"


def address(spec: FleetSpec) -> str:
    return f"{spec.gateway_ip}:{REGISTRY_PORT}"


def running(spec: FleetSpec) -> bool:
    """True when the pidfile names a live docker-registry serving this fleet's configuration."""
    argv = pidfile_argv(pidfile(spec))
    return bool(argv) and argv[0].endswith(b"docker-registry") and str(config_path(spec)).encode() in argv


def config_path(spec: FleetSpec) -> Path:
    return spec.state_dir / "registry.yml"


def config_text(spec: FleetSpec) -> str:
    return (
        "version: 0.1\n"
        "log:\n  level: warn\n"
        "storage:\n"
        f"  filesystem:\n    rootdirectory: {STORAGE}\n"
        "  delete:\n    enabled: false\n"
        f"http:\n  addr: {address(spec)}\n"
        "  headers:\n    X-Content-Type-Options: [nosniff]\n"
    )


def status(spec: FleetSpec) -> dict | None:
    if not spec.registry:
        return None
    return {"address": address(spec), "storage": str(STORAGE), "running": running(spec)}


def up(spec: FleetSpec, log) -> str:
    if running(spec):
        return address(spec)
    if not REGISTRY_BINARY.exists():
        raise RuntimeError(f"fleet {spec.name}: {REGISTRY_BINARY} is missing (apt-get install docker-registry)")
    STORAGE.mkdir(parents=True, exist_ok=True)
    spec.state_dir.mkdir(parents=True, exist_ok=True)
    config_path(spec).write_text(config_text(spec))
    with open(spec.state_dir / "registry.log", "ab") as log_file:
        # A session of its own: the server outlives this command, like the hosts.
        server = subprocess.Popen([str(REGISTRY_BINARY), "serve", str(config_path(spec))], stdin=subprocess.DEVNULL,
                                  stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
    pidfile(spec).write_text(f"{server.pid}\n")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and server.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection((spec.gateway_ip, REGISTRY_PORT), timeout=0.5):
            break
        time.sleep(0.1)
    else:
        raise RuntimeError(f"fleet {spec.name}: the registry did not start; see {spec.state_dir / 'registry.log'}")
    log(f"fleet {spec.name}: OCI registry at http://{address(spec)} (storage {STORAGE})")
    return address(spec)


def down(spec: FleetSpec) -> None:
    if running(spec):
        pid = int(pidfile(spec).read_text().strip())
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
            time.sleep(0.1)
    pidfile(spec).unlink(missing_ok=True)
