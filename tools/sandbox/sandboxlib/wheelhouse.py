"""The controller's wheelhouse cache (tools/wheelhouse), served read-only to a fleet on its bridge.

Hosts have no internet; the vllm role installs with `--no-index --find-links http://<gateway>:8081/<dir>/`
(and apt reads the OS packages from `<dir>/debs`), exactly as an air-gapped site installs from a
mirror. The server is Python's http.server (directory listings are what pip's --find-links reads).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from .spec import WHEELHOUSE_PORT, FleetSpec, pidfile_argv

WHEEL_CACHE = Path(os.environ.get("GPUFLEET_WHEEL_CACHE", "/var/cache/gpufleet-wheelhouse"))


def pidfile(spec: FleetSpec) -> Path:
    return spec.state_dir / "wheelhouse.pid"


def url(spec: FleetSpec) -> str:
    return f"http://{spec.gateway_ip}:{WHEELHOUSE_PORT}"


def running(spec: FleetSpec) -> bool:
    """True when the pidfile names a live http.server of ours on the fleet's address (a stale pid may be anything)."""
    argv = pidfile_argv(pidfile(spec))
    return b"http.server" in argv and spec.gateway_ip.encode() in argv and str(WHEELHOUSE_PORT).encode() in argv


def status(spec: FleetSpec) -> dict | None:
    if not spec.wheelhouse:
        return None
    return {"url": url(spec), "directory": str(WHEEL_CACHE), "running": running(spec)}


def up(spec: FleetSpec, log) -> str:
    if running(spec):
        return url(spec)
    WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
    spec.state_dir.mkdir(parents=True, exist_ok=True)
    with open(spec.state_dir / "wheelhouse.log", "ab") as log_file:
        # A session of its own: the server outlives this command, like the hosts.
        server = subprocess.Popen(
            [sys.executable, "-m", "http.server", "--bind", spec.gateway_ip, "--directory", str(WHEEL_CACHE), str(WHEELHOUSE_PORT)],
            stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
    pidfile(spec).write_text(f"{server.pid}\n")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and server.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection((spec.gateway_ip, WHEELHOUSE_PORT), timeout=0.5):
            break
        time.sleep(0.1)
    if server.poll() is not None:
        raise RuntimeError(f"fleet {spec.name}: the wheelhouse server exited; see {spec.state_dir / 'wheelhouse.log'}")
    log(f"fleet {spec.name}: wheelhouse {WHEEL_CACHE} at {url(spec)}")
    return url(spec)


def down(spec: FleetSpec) -> None:
    if running(spec):
        pid = int(pidfile(spec).read_text().strip())
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    pidfile(spec).unlink(missing_ok=True)
