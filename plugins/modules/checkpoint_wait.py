#!/usr/bin/python
# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Documentation only: the action plugin plugins/action/checkpoint_wait.py does the work on the controller.

from __future__ import annotations

DOCUMENTATION = r"""
module: checkpoint_wait
short_description: Wait for a background checkpoint download, printing its progress, and return its result
version_added: 0.1.0
description:
  - Waits in one task for a job started with C(async) and C(poll) 0, normally M(gpufleet.serving.checkpoint_stage),
    however long it runs. The loop runs on the controller inside this action, so no task file includes itself and
    no recursion limit applies.
  - Each poll is one read-only shell command over the task's connection that reads the job's results file (as
    M(ansible.builtin.async_status) reads it) and O(progress_file). No Python starts on the host for a poll;
    M(ansible.builtin.async_status) runs once, after the job ended, to return the job's result, and the results
    file is removed then.
  - "Polls start O(interval) seconds apart. After each poll that finds the job running, a line
    C(<host> [<poll>]: <message>) is printed, followed by C(log:) and O(log_file) in parentheses when it is set, where C(<message>) is the progress file's
    C(message) (bytes done of total, percent, rate, ETA), the last one seen when the file cannot be read."
  - Returns the job's result; it fails with the job's message when the job failed. It fails naming the host, the
    job and the last progress when O(timeout) passes first, when the results file disappears, or when the status
    cannot be read for 120 seconds in a row (connection errors are retried until then, and the connection is
    reset after each).
  - Stopping the playbook (Ctrl-C) stops the wait only; the job goes on on the host.
author:
  - gpufleet.serving contributors (@gpufleet)
options:
  jid:
    description: The job id, C(ansible_job_id) of the registered result of the C(async) task.
    type: str
    required: true
  results_file:
    description:
      - The job's results file, C(results_file) of the registered result of the C(async) task; its name must be O(jid).
      - Defaults to O(jid) in the shell's C(async_dir) (C(~/.ansible_async)), as M(ansible.builtin.async_status) finds it.
    type: str
  progress_file:
    description: JSON file the job rewrites with its progress; its C(message) key is printed. Optional.
    type: str
  log_file:
    description: The job's log on the host, named in each progress line and in failures so that an operator can follow it.
    type: str
  interval:
    description: Seconds from the start of one poll to the start of the next (fractions allowed, more than 0).
    type: float
    default: 30.0
  timeout:
    description:
      - Seconds the wait may take in all. Make it longer than the job's own C(async) limit, so that the job's
        "Timeout exceeded" result is read before the wait gives up.
    type: float
    required: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.conn
  - ansible.builtin.action_common_attributes.flow
attributes:
  action:
    support: full
  async:
    support: none
  become:
    support: full
  bypass_host_loop:
    support: none
  check_mode:
    support: full
    details: Skips; no background download runs in check mode.
  connection:
    support: full
  delegation:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
seealso:
  - module: gpufleet.serving.checkpoint_stage
  - module: ansible.builtin.async_status
"""

EXAMPLES = r"""
- name: Start the download in the background
  gpufleet.serving.checkpoint_stage:
    model_dir: /srv/models/moonshotai--Kimi-K3.1-Pro
    repo_id: moonshotai/Kimi-K3.1-Pro
    commit: 0123456789abcdef0123456789abcdef01234567
    deadline_seconds: 172800
  async: 173400
  poll: 0
  register: stage_job

- name: Report progress every 30 seconds until the download ends
  gpufleet.serving.checkpoint_wait:
    jid: "{{ stage_job.ansible_job_id }}"
    results_file: "{{ stage_job.results_file }}"
    progress_file: /srv/models/moonshotai--Kimi-K3.1-Pro/incoming/0123456789abcdef0123456789abcdef01234567.progress.json
    log_file: /srv/models/moonshotai--Kimi-K3.1-Pro/incoming/0123456789abcdef0123456789abcdef01234567.log
    interval: 30
    timeout: 173460
  register: stage_result
"""

RETURN = r"""
ansible_job_id:
  description: The job waited for.
  returned: always
  type: str
polls:
  description: Status reads made.
  returned: when the wait ran
  type: int
last_progress:
  description: The last progress message read, or null when none was.
  returned: when the wait ran
  type: str
poll_seconds:
  description: Seconds spent in the status reads in all (the rest of the wait was sleep).
  returned: when the wait ran
  type: float
wait_seconds:
  description: Seconds the wait took.
  returned: when the wait ran
  type: float
msg:
  description: Why the wait or the job failed.
  returned: failure
  type: str
"""
