"""`serve --daemon` and `stop`: a detached server, found again by its pidfile; a stale pidfile is never ours."""

import json
import signal
import subprocess
import sys

import pytest
from modelhub_helpers import TINY, TOOLS, request

CLI = [sys.executable, str(TOOLS / "modelhub.py")]


def run(*args, check=True):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, check=check, timeout=30)


@pytest.fixture
def state(hub_state, tmp_path):
    """A state directory of its own whose repos link to the session's build, as the sandbox lays it out."""
    (tmp_path / "repos").symlink_to(hub_state / "repos")
    yield tmp_path
    run("stop", "--state", str(tmp_path), check=False)


def alive(pid):
    """Running, and not a zombie waiting for a parent that is not us to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_daemon_serves_until_stopped(state, revs):
    out = run("serve", "--state", str(state), "--port", "0", "--daemon").stdout
    address = json.loads((state / "modelhub.addr").read_text())
    assert f"http://127.0.0.1:{address['port']}" in out
    assert int((state / "modelhub.pid").read_text()) == address["pid"]
    status, _unused, body = request(f"http://127.0.0.1:{address['port']}", "GET", f"/api/models/{TINY}/revision/main")
    assert status == 200 and json.loads(body)["sha"] == revs[TINY]["main"]
    assert len((state / "requests.log").read_text().splitlines()) == 1  # this state's own log
    run("stop", "--state", str(state))
    assert not (state / "modelhub.pid").exists() and not (state / "modelhub.addr").exists()
    assert not alive(address["pid"])


def test_a_stale_pidfile_is_not_taken_for_a_server(state):
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        (state / "modelhub.pid").write_text(f"{bystander.pid}\n")
        out = run("stop", "--state", str(state)).stdout
        assert "stale" in out and alive(bystander.pid)
        assert not (state / "modelhub.pid").exists()
        (state / "modelhub.pid").write_text(f"{bystander.pid}\n")
        run("serve", "--state", str(state), "--port", "0", "--daemon")
        assert alive(bystander.pid)
        assert int((state / "modelhub.pid").read_text()) != bystander.pid
    finally:
        bystander.send_signal(signal.SIGTERM)
        bystander.wait()


def test_another_states_server_is_not_ours(state, hub_state, tmp_path_factory):
    other = tmp_path_factory.mktemp("other-hub")
    (other / "repos").symlink_to(hub_state / "repos")
    run("serve", "--state", str(other), "--port", "0", "--daemon")
    try:
        other_pid = json.loads((other / "modelhub.addr").read_text())["pid"]
        (state / "modelhub.pid").write_text(f"{other_pid}\n")
        assert "stale" in run("stop", "--state", str(state)).stdout
        assert alive(other_pid)
    finally:
        run("stop", "--state", str(other))


def test_serve_refuses_a_state_without_repositories(tmp_path):
    done = run("serve", "--state", str(tmp_path), "--port", "0", "--daemon", check=False)
    assert done.returncode != 0 and "modelhub.py build" in done.stderr
