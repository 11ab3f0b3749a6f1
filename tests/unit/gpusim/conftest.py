"""Fixtures for the gpusim tests (helpers live in gpusim_helpers.py so test modules can import them)."""

import pytest
from gpusim_helpers import PROFILES, install, load_gpusim


@pytest.fixture(scope="session")
def gpusim():
    return load_gpusim()


@pytest.fixture(scope="session")
def healthy(tmp_path_factory):
    """One fault-free installed host per profile, shared by read-only tests."""
    return {p: install(tmp_path_factory.mktemp(p), p, f"node-{p}") for p in PROFILES}


@pytest.fixture
def fresh(tmp_path):
    """Factory for a private host a test may inject faults into."""
    def make(profile, *extra, hostname=None):
        hostname = hostname or f"node-{profile}"
        return install(tmp_path / hostname, profile, hostname, *extra)
    return make
