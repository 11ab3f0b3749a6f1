# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The checkpoint_wait action's loop against a fake host: a temporary directory whose files a fake job rewrites.

The status commands run in a real /bin/sh; only the connection, async_status and the clock are faked. The
clock advances by the sleeps the action asks for, so thousands of polls take milliseconds.
"""

from __future__ import annotations

import json
import subprocess
from unittest.mock import MagicMock

import pytest
from ansible.errors import AnsibleConnectionFailure
from ansible_collections.gpufleet.serving.plugins.action import checkpoint_wait as action_mod

JID = "j470.1234"
RESULT = {"changed": True, "state": "staged", "bytes_downloaded": 8388608, "retries": 0, "files_resumed": 0}


class FakeHost:
    """The host's files and a job that finishes (or not) after a number of polls."""

    def __init__(self, root, finish_after=None, result=None):
        self.async_dir = root / "async"
        self.async_dir.mkdir()
        self.results_file = self.async_dir / JID
        self.incoming = root / "incoming"
        self.incoming.mkdir()
        self.progress_file = self.incoming / "c.progress.json"
        self.log_file = self.incoming / "c.log"
        self.finish_after = finish_after
        self.result = result or RESULT
        self.polls = 0
        self.commands = []
        self.failures = {}  # poll number -> exception to raise or (rc, stderr)
        self.results_file.write_text(json.dumps({"started": True, "finished": False, "ansible_job_id": JID}))

    def low_level(self, cmd, sudoable=True, **_kwargs):
        self.commands.append(cmd)
        if not cmd.startswith("rm -f"):
            self.polls += 1
            self._advance()
            failure = self.failures.get(self.polls)
            if isinstance(failure, Exception):
                raise failure
            if failure is not None:
                return {"rc": failure[0], "stdout": "", "stderr": failure[1]}
        done = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, check=False)
        return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}

    def _advance(self):
        """The job's side: progress once per poll, then its result (as async_wrapper writes it)."""
        if self.finish_after is not None and self.polls > self.finish_after:
            self.results_file.write_text(json.dumps(self.result))
            if self.progress_file.exists():
                self.progress_file.unlink()  # the stage module removes it once the revision is staged
            return
        done = min(8388608, self.polls * 4096)
        self.progress_file.write_text(json.dumps({"state": "downloading", "message": "%d B of 8388608 B, 1 kB/s, ETA %ds" % (
            done, 8388608 - done)}))

    def async_status(self, module_name, module_args, task_vars, **_kwargs):
        """async_status as the module answers once the job ended (it never runs while the job runs here)."""
        assert module_name == "ansible.legacy.async_status"
        path = self.async_dir / module_args["jid"]
        assert str(self.async_dir) == module_args["_async_dir"]
        if not path.exists():
            return {"failed": True, "msg": "could not find job", "finished": True, "started": True}
        data = json.loads(path.read_text())
        data.update(finished=True, ansible_job_id=module_args["jid"])
        return data


class Clock:
    def __init__(self):
        self.now = 5000.0
        self.sleeps = []

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def lines(monkeypatch):
    printed = []
    monkeypatch.setattr(action_mod.display, "display", lambda msg, *a, **k: printed.append(msg))
    return printed


def make_action(host, monkeypatch, check_mode=False, **args):
    task = MagicMock()
    task.async_val = 0
    task.check_mode = check_mode
    task.action = "gpufleet.serving.checkpoint_wait"
    task.args = dict({"jid": JID, "results_file": str(host.results_file), "progress_file": str(host.progress_file),
                      "log_file": str(host.log_file), "interval": 0.2, "timeout": 3600}, **args)
    task.args = {key: value for key, value in task.args.items() if value is not None}
    connection = MagicMock()
    connection._shell.tmpdir = "/tmp/unused"
    action = action_mod.ActionModule(task, connection, MagicMock(), loader=None, templar=None, shared_loader_obj=None)
    clock = Clock()
    monkeypatch.setattr(action, "_clock", clock.monotonic)
    monkeypatch.setattr(action, "_sleep", clock.sleep)
    monkeypatch.setattr(action, "_low_level_execute_command", host.low_level)
    monkeypatch.setattr(action, "_execute_module", host.async_status)
    monkeypatch.setattr(action, "_remote_expand_user", lambda path, **kw: str(host.async_dir) if path.startswith("~") else path)
    return action, clock, connection


def test_a_long_download_is_waited_for_in_one_task_with_a_line_per_poll(tmp_path, monkeypatch, lines):
    host = FakeHost(tmp_path, finish_after=1500)
    action, clock, _conn = make_action(host, monkeypatch)
    result = action.run(task_vars={"inventory_hostname": "ck-node"})
    assert not result.get("failed"), result
    assert {k: result[k] for k in RESULT} == RESULT
    assert result["polls"] == 1501 and result["ansible_job_id"] == JID
    # One line per running poll, numbered, with the progress message and the log.
    assert len(lines) == 1500
    assert lines[0] == "ck-node [1]: 4096 B of 8388608 B, 1 kB/s, ETA 8384512s (log: %s)" % host.log_file
    assert lines[-1].startswith("ck-node [1500]: 6144000 B of 8388608 B")
    # Polls start interval apart (the early gaps, 0.5 s and up, exceed 0.2 s); the clock only moves by
    # sleeping, so every sleep is the interval.
    assert len(clock.sleeps) == 1500 and all(s == pytest.approx(0.2) for s in clock.sleeps)
    assert result["wait_seconds"] == pytest.approx(300.0)
    assert result["last_progress"].startswith("6144000 B")
    # The finished job's results file is removed, as async polling does after the result is read.
    assert host.commands[-1].startswith("rm -f -- ") and not host.results_file.exists()


def test_a_failed_download_fails_with_the_modules_message(tmp_path, monkeypatch, lines):
    failure = {"failed": True, "msg": "download of a/b@c failed: model-00001.safetensors failed 6 time(s)"}
    host = FakeHost(tmp_path, finish_after=3, result=failure)
    action, _clock, _conn = make_action(host, monkeypatch)
    result = action.run(task_vars={"inventory_hostname": "ck-node"})
    assert result["failed"] and result["msg"] == failure["msg"]
    assert result["polls"] == 4 and len(lines) == 3


def test_the_deadline_fails_naming_host_job_and_last_progress_and_keeps_the_job(tmp_path, monkeypatch, lines):
    host = FakeHost(tmp_path, finish_after=None)
    action, clock, _conn = make_action(host, monkeypatch, interval=1, timeout=30)
    result = action.run(task_vars={"inventory_hostname": "ck-node"})
    assert result["failed"]
    assert result["msg"].startswith("ck-node: the download job %s did not finish within the wait's deadline of 30s" % JID)
    # Polls at 0, 0.5, then one a second from 1.5 to 29.5: 32, the last one's progress in the message.
    assert "last progress: 131072 B of 8388608 B" in result["msg"] and str(host.log_file) in result["msg"]
    assert result["polls"] == 32 and clock.now == pytest.approx(5030.0)
    assert host.results_file.exists()  # a job that may still run is not touched
    assert not any(cmd.startswith("rm ") for cmd in host.commands)


def test_a_vanished_job_fails_at_once(tmp_path, monkeypatch, lines):
    host = FakeHost(tmp_path, finish_after=None)
    action, _clock, _conn = make_action(host, monkeypatch)
    original = host.low_level

    def remove_on_third(cmd, **kwargs):
        if host.polls == 2:
            host.results_file.unlink()
        return original(cmd, **kwargs)

    monkeypatch.setattr(action, "_low_level_execute_command", remove_on_third)
    result = action.run(task_vars={"inventory_hostname": "ck-node"})
    assert result["failed"] and "ck-node: the download job %s vanished" % JID in result["msg"]
    assert result["polls"] == 3 and len(lines) == 2


def test_connection_errors_are_retried_and_the_connection_reset(tmp_path, monkeypatch, lines):
    host = FakeHost(tmp_path, finish_after=6)
    host.failures[2] = AnsibleConnectionFailure("Failed to connect to the host via ssh: Connection refused")
    host.failures[3] = (1, "cat: /root/.ansible_async: Permission denied")
    action, _clock, connection = make_action(host, monkeypatch)
    result = action.run(task_vars={"inventory_hostname": "ck-node"})
    assert not result.get("failed"), result
    assert result["polls"] == 7 and connection.reset.call_count == 1
    assert "ck-node [2]: status not readable, retrying: Failed to connect to the host via ssh" in lines[1]
    assert "ck-node [3]: status not readable, retrying: exit status 1: cat: /root/.ansible_async" in lines[2]


def test_an_unreadable_status_fails_after_the_grace_period(tmp_path, monkeypatch, lines):
    host = FakeHost(tmp_path, finish_after=None)
    for poll in range(2, 10000):
        host.failures[poll] = AnsibleConnectionFailure("host unreachable")
    action, clock, _conn = make_action(host, monkeypatch, interval=10)
    result = action.run(task_vars={"inventory_hostname": "ck-node"})
    assert result["failed"] and "could not read the status of the download job" in result["msg"]
    # Polls at 0, 0.5, 1.5, 3.5, 7.5, 15.5, then every 10 s; the first error (0.5 s) is 120 s old at 125.5 s.
    assert "last error: host unreachable" in result["msg"] and result["polls"] == 17
    assert clock.now == pytest.approx(5000.0 + 125.5)


def test_check_mode_skips_without_touching_the_host(tmp_path, monkeypatch, lines):
    host = FakeHost(tmp_path)
    action, _clock, _conn = make_action(host, monkeypatch, check_mode=True)
    result = action.run(task_vars={"inventory_hostname": "ck-node"})
    assert result["skipped"] and "check mode" in result["msg"]
    assert host.commands == [] and lines == []


def test_without_results_file_the_job_is_found_in_the_async_dir(tmp_path, monkeypatch, lines):
    host = FakeHost(tmp_path, finish_after=0)
    action, _clock, _conn = make_action(host, monkeypatch, results_file=None, progress_file=None, log_file=None)
    result = action.run(task_vars={"inventory_hostname": "ck-node"})
    assert not result.get("failed"), result
    assert result["polls"] == 1 and result["state"] == "staged" and lines == []
    assert str(host.results_file) in host.commands[0] and "progress" not in host.commands[0]


def test_a_results_file_of_another_job_is_refused(tmp_path, monkeypatch, lines):
    host = FakeHost(tmp_path)
    action, _clock, _conn = make_action(host, monkeypatch, results_file=str(host.async_dir / "other.1"))
    result = action.run(task_vars={"inventory_hostname": "ck-node"})
    assert result["failed"] and "is not the results file of job %s" % JID in result["msg"]
    assert host.commands == []


@pytest.mark.parametrize("args", [{"interval": 0}, {"timeout": -5}])
def test_non_positive_interval_or_timeout_is_refused(tmp_path, monkeypatch, lines, args):
    host = FakeHost(tmp_path)
    action, _clock, _conn = make_action(host, monkeypatch, **args)
    result = action.run(task_vars={"inventory_hostname": "ck-node"})
    assert result["failed"] and "must be more than 0 seconds" in result["msg"] and host.commands == []
