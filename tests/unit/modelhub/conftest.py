"""Fixtures for the sandbox model hub: one hub build and one in-process server per session."""

import threading

import pytest
from modelhub_helpers import load_tool


@pytest.fixture(scope="session")
def tinymodel():
    return load_tool("tinymodel")


@pytest.fixture(scope="session")
def modelhub():
    return load_tool("modelhub")


@pytest.fixture(scope="session")
def hub_state(tmp_path_factory, modelhub):
    """STATE with every repository built (under a second)."""
    state = tmp_path_factory.mktemp("hub")
    modelhub.build(state)
    return state


@pytest.fixture(scope="session")
def revs(modelhub, hub_state):
    return modelhub.revisions(hub_state)


@pytest.fixture(scope="session")
def hub_server(modelhub, hub_state):
    """The hub served from a thread on 127.0.0.1 and a free port."""
    server = modelhub.make_server(hub_state, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def endpoint(hub_server):
    return "http://127.0.0.1:%d" % hub_server.server_address[1]


@pytest.fixture
def faults(modelhub, hub_state):
    """Add faults for one test; every fault is cleared afterwards."""

    def add(kind, **options):
        return modelhub.add_fault(hub_state, kind, **options)

    modelhub.clear_faults(hub_state)
    yield add
    modelhub.clear_faults(hub_state)


@pytest.fixture
def hf_env(tmp_path, monkeypatch):
    """A private HF_HOME and no progress bars, update checks or telemetry."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_UPDATE_CHECK", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    return tmp_path
