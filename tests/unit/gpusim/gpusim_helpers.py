"""Helpers for the gpusim tests: install the simulator into tmp roots and run its tools as subprocesses."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
GPUSIM = REPO / "tools" / "gpusim" / "gpusim.py"
FIXTURES = REPO / "tests" / "fixtures"
PROFILES = ("b300", "gb300", "mi355x", "consumer")


def load_gpusim():
    """The simulator as a module, for feeding its pure renderers the values of real captures."""
    spec = importlib.util.spec_from_file_location("gpusim", GPUSIM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class SimHost:
    """A tmp directory standing in for one mock host's root filesystem."""

    def __init__(self, root, profile):
        self.root, self.profile = root, profile

    def env(self, **extra):
        return dict(os.environ, GPUSIM_ROOT=str(self.root), **extra)

    def run(self, tool, *args, env=None):
        """env: extra environment variables for this one call (e.g. NCCL_DEBUG)."""
        # Call through the installed symlink so dispatch on argv[0] is exercised.
        return subprocess.run([sys.executable, str(self.root / "usr" / "bin" / tool), *args],
                              capture_output=True, text=True, env=self.env(**(env or {})), check=False)

    def admin(self, *args):
        return subprocess.run([sys.executable, str(self.root / "usr/local/lib/gpusim/gpusim.py"), *args],
                              capture_output=True, text=True, env=self.env(), check=False)

    def fault(self, *args):
        result = self.admin("fault", "add", *args)
        assert result.returncode == 0, result.stderr
        return self


def install(root, profile, hostname="node-0", *extra):
    result = subprocess.run([sys.executable, str(GPUSIM), "install", "--root", str(root), "--profile", profile,
                             "--hostname", hostname, *extra], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return SimHost(root, profile)


def fixture_text(relative):
    return (FIXTURES / relative).read_text()
