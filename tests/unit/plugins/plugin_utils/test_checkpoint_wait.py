# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The wait's decisions: the status command and its output, async_status semantics, lines, deadline, errors."""

from __future__ import annotations

import json
import subprocess

import pytest
from ansible_collections.gpufleet.serving.plugins.plugin_utils._checkpoint_wait import (
    ERROR_GRACE_SECONDS,
    MARK,
    NO_PROGRESS_YET,
    WaitState,
    format_duration,
    format_line,
    job_state,
    parse_poll_output,
    poll_command,
    progress_message,
)

# As _checkpoint_stage.ProgressWriter writes it (keys of Downloader.run's report, plus updated).
PROGRESS = {
    "state": "downloading", "bytes_done": 3145728, "bytes_total": 8388608, "bytes_verified": 0,
    "rate_bytes_per_s": 1048576.0, "elapsed_s": 3.0, "files_pending": 0, "files_running": 2,
    "message": "3.15 MB of 8.39 MB (37.5%), 1.05 MB/s, ETA 5s, elapsed 3s", "updated": "2026-12-03T12:00:00Z",
}
# async_wrapper's first write, then a module result (no "started" key), then its timeout kill.
JOB_RUNNING = {"started": True, "finished": False, "ansible_job_id": "j1.42"}
JOB_DONE = {"changed": True, "state": "staged", "bytes_downloaded": 8388608}
JOB_KILLED = {"msg": "Timeout exceeded", "failed": True, "child_pid": 43}


def run_sh(command):
    return subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, check=True).stdout


def test_the_status_command_frames_both_files_and_survives_odd_paths(tmp_path):
    odd = tmp_path / "it's a dir; $(touch pwned)"
    odd.mkdir()
    results = odd / "j1.42"
    results.write_text(json.dumps(JOB_RUNNING))
    progress = odd / "c.progress.json"
    progress.write_text(json.dumps(PROGRESS))
    files = parse_poll_output(run_sh(poll_command(str(results), str(progress))))
    assert json.loads(files["job"]) == JOB_RUNNING
    assert json.loads(files["progress"]) == PROGRESS
    assert not (tmp_path / "pwned").exists() and not list(odd.glob("pwned"))


def test_the_status_command_reports_missing_files_and_reads_a_file_without_a_final_newline(tmp_path):
    results = tmp_path / "j1.42"
    results.write_text(json.dumps(JOB_DONE))  # json.dumps writes no newline
    out = run_sh(poll_command(str(results), str(tmp_path / "gone.progress.json")))
    assert parse_poll_output(out) == {"job": json.dumps(JOB_DONE), "progress": None}
    assert parse_poll_output(run_sh(poll_command(str(tmp_path / "nope")))) == {"job": None}


def test_output_noise_outside_the_frames_is_ignored():
    out = "motd line\n%s job present\n{\"started\": 1, \"finished\": 1}\n\n%s job end\ntrailing\n" % (MARK, MARK)
    assert parse_poll_output(out) == {"job": '{"started": 1, "finished": 1}'}
    assert parse_poll_output("") == {}
    # A frame that never ends (output cut short) yields nothing for that file.
    assert parse_poll_output("%s job present\n{}\n" % MARK) == {}


@pytest.mark.parametrize(("text", "expected"), [
    (None, ("missing", None)),
    ("", ("running", None)),
    ("{not json", ("running", None)),
    ("[1, 2]", ("running", None)),
    (json.dumps(JOB_RUNNING), ("running", JOB_RUNNING)),
    (json.dumps({"started": 1}), ("running", {"started": 1})),
    (json.dumps({"started": 1, "finished": 0}), ("running", {"started": 1, "finished": 0})),
    (json.dumps({"started": 1, "finished": 1, "rc": 0}), ("finished", {"started": 1, "finished": 1, "rc": 0})),
    (json.dumps(JOB_DONE), ("finished", JOB_DONE)),
    (json.dumps(JOB_KILLED), ("finished", JOB_KILLED)),
])
def test_job_state_reads_the_results_file_as_async_status_does(text, expected):
    assert job_state(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    (json.dumps(PROGRESS), PROGRESS["message"]),
    (json.dumps({"state": "failed", "message": "x.safetensors failed 6 time(s)"}), "x.safetensors failed 6 time(s)"),
    (json.dumps({"state": "downloading"}), None),
    (json.dumps({"message": ""}), None),
    ("{torn", None),
    ("", None),
    (None, None),
    ("42", None),
])
def test_progress_message(text, expected):
    assert progress_message(text) == expected


def test_format_line_and_durations():
    assert format_line("ck-node", 7, "1 MB of 2 MB", "/m/incoming/c.log") == "ck-node [7]: 1 MB of 2 MB (log: /m/incoming/c.log)"
    assert format_line("ck-node", 1, None) == "ck-node [1]: %s" % NO_PROGRESS_YET
    assert [format_duration(s) for s in (0, 59.6, 119, 120, 7199, 7200, 172800 + 660)] == [
        "0s", "60s", "119s", "2m00s", "119m59s", "2h00m", "48h11m"]


def files_of(job, progress=None):
    return {"job": None if job is None else json.dumps(job), "progress": None if progress is None else json.dumps(progress)}


def new_state(**kwargs):
    defaults = {"host": "ck-node", "jid": "j1.42", "results_file": "/root/.ansible_async/j1.42", "interval": 0.5,
                "timeout": 100.0, "started": 1000.0, "log_file": "/m/incoming/c.log"}
    defaults.update(kwargs)
    return WaitState(**defaults)


def test_a_running_job_prints_one_numbered_line_per_poll_with_the_last_known_progress():
    state = new_state()
    first = state.observe(1000.1, files_of(JOB_RUNNING))
    assert (first.kind, first.line) == ("running", "ck-node [1]: %s (log: /m/incoming/c.log)" % NO_PROGRESS_YET)
    second = state.observe(1000.6, files_of(JOB_RUNNING, PROGRESS))
    assert second.line == "ck-node [2]: %s (log: /m/incoming/c.log)" % PROGRESS["message"]
    # The progress file is rewritten by rename; a poll that misses it repeats the last message.
    third = state.observe(1001.1, files_of(JOB_RUNNING))
    assert third.line.startswith("ck-node [3]: " + PROGRESS["message"])
    assert state.polls == 3 and state.last_message == PROGRESS["message"]


def test_a_finished_job_ends_the_wait_with_its_data_and_no_line():
    state = new_state()
    done = state.observe(1000.1, files_of(JOB_DONE))
    assert (done.kind, done.data, done.line) == ("finished", JOB_DONE, None)
    killed = new_state().observe(1000.1, files_of(JOB_KILLED))
    assert (killed.kind, killed.data["msg"]) == ("finished", "Timeout exceeded")


def test_a_vanished_job_fails_at_once_naming_host_job_file_and_last_progress():
    state = new_state()
    state.observe(1000.1, files_of(JOB_RUNNING, PROGRESS))
    gone = state.observe(1010.0, files_of(None))
    assert gone.kind == "failed"
    for part in ("ck-node:", "j1.42 vanished", "/root/.ansible_async/j1.42 does not exist", "2 poll(s) in 10s",
                 "last progress: " + PROGRESS["message"], "log: /m/incoming/c.log"):
        assert part in gone.msg


def test_polls_start_interval_apart_and_the_last_sleep_stops_at_the_deadline():
    state = new_state(interval=0.5, timeout=10.0, started=1000.0)
    assert state.delay(1000.0, 1000.05) == pytest.approx(0.45)
    assert state.delay(1000.0, 1000.7) == 0.0  # a slow poll: the next one starts at once
    assert state.delay(1009.8, 1009.9) == pytest.approx(0.1)  # not past the deadline
    assert state.delay(1009.9, 1010.0) is None
    assert state.delay(1009.9, 1012.0) is None


def test_early_polls_come_sooner_so_a_short_download_is_seen_within_a_second_of_its_end():
    state = new_state(interval=30.0, timeout=1000.0, started=1000.0)
    gaps = []
    for _poll in range(9):
        state.observe(1000.0, files_of(JOB_RUNNING))
        gaps.append(state.gap())
    assert gaps == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    # The next poll starts one gap after the last one started, whatever the poll itself took.
    assert state.delay(1100.0, 1101.0) == pytest.approx(29.0)
    # An interval below the first gap is kept from the first poll on.
    short = new_state(interval=0.1)
    short.observe(1000.0, files_of(JOB_RUNNING))
    assert short.gap() == 0.1


def test_the_deadline_message_names_host_job_timeout_polls_and_last_progress():
    state = new_state(timeout=172800 + 660)
    state.observe(1000.1, files_of(JOB_RUNNING, PROGRESS))
    msg = state.deadline_message(1000.0 + 172800 + 660)
    for part in ("ck-node:", "j1.42 did not finish", "deadline of 48h11m", "1 poll(s) in 48h11m",
                 "last progress: " + PROGRESS["message"], "hold the model's lock", "log: /m/incoming/c.log"):
        assert part in msg
    assert "last progress: none yet" in new_state(log_file=None).deadline_message(1100.0)
    assert "results file: /root/.ansible_async/j1.42" in new_state(log_file=None).deadline_message(1100.0)


def test_status_errors_are_retried_for_the_grace_period_then_fail():
    state = new_state()
    state.observe(1000.0, files_of(JOB_RUNNING, PROGRESS))
    first = state.error(1001.0, "ssh: connect to host 10.232.5.11 port 22: Connection refused")
    assert first.kind == "running" and "status not readable, retrying: ssh: connect" in first.line
    assert state.error(1001.0 + ERROR_GRACE_SECONDS - 0.1, "again").kind == "running"
    last = state.error(1001.0 + ERROR_GRACE_SECONDS, "exit status 1: cat: permission denied")
    assert last.kind == "failed"
    for part in ("ck-node:", "could not read the status of the download job j1.42 for 2m00s", "4 poll(s)",
                 "last error: exit status 1: cat: permission denied", "last progress: " + PROGRESS["message"]):
        assert part in last.msg


def test_a_good_poll_resets_the_error_grace():
    state = new_state()
    state.error(1000.0, "boom")
    state.observe(1000.0 + ERROR_GRACE_SECONDS - 1, files_of(JOB_RUNNING))
    assert state.error(1000.0 + ERROR_GRACE_SECONDS + 1, "boom").kind == "running"


def test_garbled_output_counts_as_an_error_and_one_poll():
    state = new_state()
    outcome = state.observe(1000.0, {})
    assert outcome.kind == "running" and "printed no job status" in outcome.line and state.polls == 1
    assert state.observe(1000.0 + ERROR_GRACE_SECONDS, {}).kind == "failed"


@pytest.mark.parametrize(("interval", "timeout"), [(0, 10), (-1, 10), (1, 0)])
def test_intervals_and_timeouts_must_be_positive(interval, timeout):
    with pytest.raises(ValueError, match="must be more than 0 seconds"):
        new_state(interval=interval, timeout=timeout)
