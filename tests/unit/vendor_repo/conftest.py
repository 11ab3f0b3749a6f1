"""Fixtures for the stand-in vendor repository tests: one build and one server per session."""

import pytest
from vendor_repo_helpers import free_port, load_vendor_repo


@pytest.fixture(scope="session")
def vendor_repo():
    return load_vendor_repo()


@pytest.fixture(scope="session")
def repo(tmp_path_factory, vendor_repo):
    """The repositories built once into a tmp dir (about 2 s)."""
    out = tmp_path_factory.mktemp("vendor-repo")
    vendor_repo.build(out)
    return out


@pytest.fixture(scope="session")
def server(repo, tmp_path_factory, vendor_repo):
    """`serve` on 127.0.0.1 and a free port; yields the base URL."""
    state = tmp_path_factory.mktemp("vendor-repo-server")
    pidfile, port = state / "server.pid", free_port()
    vendor_repo.serve(repo, "127.0.0.1", port, pidfile, state / "server.log")
    yield f"http://127.0.0.1:{port}"
    vendor_repo.stop(pidfile)
