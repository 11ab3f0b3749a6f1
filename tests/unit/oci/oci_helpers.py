# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Helpers for the tools/oci/ociimage.py tests: the module, a sample tree, and a real registry.

The registry is Debian's ``docker-registry`` package (CNCF distribution 2.8), started per test
session on a free 127.0.0.1 port with its storage in a temp dir. Its access log (one line per
request, Apache style) is kept so tests can count what the registry received.
"""

import http.client
import importlib.util
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
OCIIMAGE = REPO / "tools" / "oci" / "ociimage.py"
# GPUFLEET_DOCKER_REGISTRY: another distribution registry binary (tests of the skip use a missing path).
REGISTRY_BIN = os.environ.get("GPUFLEET_DOCKER_REGISTRY", "/usr/bin/docker-registry")
REGISTRY_MISSING = (f"{REGISTRY_BIN} not found: the push tests need Debian's docker-registry package "
                    "(the CNCF distribution registry): apt-get install docker-registry")
ACCESS_LINE = re.compile(r'"(?P<method>[A-Z]+) (?P<path>\S+) HTTP/1\.[01]" (?P<status>\d{3}) ')


def load_ociimage():
    spec = importlib.util.spec_from_file_location("ociimage", OCIIMAGE)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("ociimage", module)
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_tree(root: Path) -> Path:
    """A small root filesystem with every kind of entry a layer must carry."""
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "etc" / "ssh").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "usr" / "bin" / "tool").write_text("#!/bin/sh\necho tool\n")
    os.chmod(root / "usr" / "bin" / "tool", 0o755)
    (root / "usr" / "bin" / "setuid").write_bytes(b"\x7fELF not really")
    os.chmod(root / "usr" / "bin" / "setuid", 0o4755)
    (root / "etc" / "hostname").write_text("fleet\n")
    os.chmod(root / "etc" / "hostname", 0o600)
    (root / "etc" / "ssh" / "ssh_config").write_text("Host *\n")
    os.symlink("tool", root / "usr" / "bin" / "relative-link")
    os.symlink("/etc/hostname", root / "etc" / "absolute-link")
    os.symlink("does/not/exist", root / "dangling")
    os.link(root / "usr" / "bin" / "tool", root / "usr" / "bin" / "tool-hardlink")
    long_dir = root / ("d" * 60) / ("e" * 60)
    long_dir.mkdir(parents=True)
    (long_dir / "long-name-over-100-chars.txt").write_text("long\n")
    (root / "etc" / "ünïcode-名前").write_text("utf-8 name\n")
    (root / "big.bin").write_bytes(os.urandom(3 * 1024 * 1024 + 7))
    os.mkfifo(root / "fifo")
    if os.geteuid() == 0:
        os.chown(root / "etc" / "hostname", 1234, 5678)
        os.chown(root / "empty", 42, 43)
        os.lchown(root / "usr" / "bin" / "relative-link", 7, 8)
    return root


class Registry:
    def __init__(self, root: Path):
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.netloc = f"127.0.0.1:{self.port}"
        self.storage = root / "storage"
        self.config = root / "config.yml"
        self.log = root / "registry.log"
        self.proc = None

    def config_text(self) -> str:
        return (
            "version: 0.1\n"
            "log:\n"
            "  level: info\n"
            "storage:\n"
            "  filesystem:\n"
            f"    rootdirectory: {self.storage}\n"
            "  delete:\n"
            "    enabled: true\n"
            "http:\n"
            f"  addr: 127.0.0.1:{self.port}\n"
            "  secret: gpufleet-unit-tests\n"
        )

    def start(self) -> None:
        self.storage.mkdir(parents=True)
        self.config.write_text(self.config_text())
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([REGISTRY_BIN, "serve", str(self.config)], stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                if self.get("/v2/")[0] == 200:
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"docker-registry did not come up on {self.url}:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def get(self, path: str, headers=None, method: str = "GET"):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, resp.headers, resp.read()
        finally:
            conn.close()

    def access_log(self, after: int = 0, until=None, timeout: float = 10.0) -> list:
        """(method, path, status) of the requests the registry answered, from its access log, skipping
        the first ``after``. The registry writes a line once it has answered, so a test that reads right
        after its last request waits (up to ``timeout``) until ``until(lines)`` holds."""
        deadline = time.monotonic() + timeout
        while True:
            out = []
            for line in self.log.read_text(errors="replace").splitlines():
                match = ACCESS_LINE.search(line)
                if match:
                    out.append((match["method"], match["path"], int(match["status"])))
            out = out[after:]
            if until is None or until(out) or time.monotonic() > deadline:
                return out
            time.sleep(0.05)
