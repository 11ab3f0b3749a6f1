"""Helpers for the vendor repo tests: load the tool, read Packages files, play dpkg on a tmp root."""

import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
VENDOR_REPO = REPO / "tools" / "vendor_repo" / "vendor_repo.py"
GPUSIM = REPO / "tools" / "gpusim" / "gpusim.py"
NVIDIA_FLAT = [f"nvidia/cuda/repos/{d}/{a}" for d in ("debian12", "ubuntu2204", "ubuntu2404") for a in ("x86_64", "sbsa")]


def amd_dist_dirs():
    dirs = []
    for rel in ("7.0.2", "7.1.0"):
        for dist in ("bookworm", "jammy", "noble"):
            dirs += [f"amd/amdgpu/{rel}/ubuntu/dists/{dist}", f"amd/rocm/apt/{rel}/dists/{dist}"]
    return dirs


def load_vendor_repo():
    spec = importlib.util.spec_from_file_location("vendor_repo", VENDOR_REPO)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_stanzas(text):
    """Deb822 stanzas -> list of dicts (continuation lines joined with newlines)."""
    stanzas = []
    for block in text.strip().split("\n\n"):
        fields, key = {}, None
        for line in block.splitlines():
            if line.startswith((" ", "\t")) and key:
                fields[key] += "\n" + line
            else:
                key, _sep, value = line.partition(":")
                fields[key] = value.strip()
        stanzas.append(fields)
    return stanzas


class FakeDpkg:
    """Unpacks stand-in .debs into a tmp root and runs their maintainer scripts as dpkg would.

    The scripts act on $GPUSIM_ROOT, so nothing outside the tmp root is touched.
    """

    def __init__(self, root, work):
        self.root, self.work = Path(root), Path(work)
        self.installed = {}  # name -> deb path

    def env(self):
        return dict(os.environ, GPUSIM_ROOT=str(self.root))

    def _control(self, deb):
        control = self.work / deb.name
        if not control.exists():
            self.work.mkdir(parents=True, exist_ok=True)
            subprocess.run(["dpkg-deb", "-e", str(deb), str(control)], check=True)
        return control

    def script(self, deb, name, *args):
        path = self._control(deb) / name
        if not path.exists():
            return None
        result = subprocess.run(["sh", str(path), *args], env=self.env(), capture_output=True, text=True, check=False)
        assert result.returncode == 0, f"{deb.name} {name} {args}: {result.stderr}"
        return result

    def install(self, *debs):
        """Fresh install or upgrade, in the order given (callers pass dependencies first)."""
        for deb in debs:
            name = deb.name.split("_")[0]
            old = self.installed.get(name)
            old_version = ""
            if old:
                old_version = old.name.split("_")[1]
                self.script(old, "prerm", "upgrade", deb.name.split("_")[1])
            subprocess.run(["dpkg-deb", "-x", str(deb), str(self.root)], check=True)
            self.installed[name] = deb
            self.script(deb, "postinst", "configure", *([old_version] if old_version else []))

    def remove(self, name):
        deb = self.installed.pop(name)
        self.script(deb, "prerm", "remove")
        self.script(deb, "postrm", "remove")


def run_tool(root, tool, *args):
    return subprocess.run([sys.executable, str(Path(root) / "usr/bin" / tool), *args], capture_output=True, text=True,
                          env=dict(os.environ, GPUSIM_ROOT=str(root)), check=False)


def gpusim_admin(root, *args):
    return subprocess.run([sys.executable, str(Path(root) / "usr/local/lib/gpusim/gpusim.py"), *args],
                          capture_output=True, text=True, env=dict(os.environ, GPUSIM_ROOT=str(root)), check=False)


def install_gpusim(root, profile, *extra):
    result = subprocess.run([sys.executable, str(GPUSIM), "install", "--root", str(root), "--profile", profile,
                             "--hostname", f"node-{profile}", *extra], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return Path(root)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
