# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Wait for a background checkpoint download in one task: a loop on the controller, no task recursion.

Each poll is one read-only shell command over the task's connection (the job's results file and the
progress JSON); only when the job has finished does ``async_status`` run once, so that the module's
result comes back decoded exactly as Ansible decodes any async result. Decisions live in
plugin_utils/_checkpoint_wait.py.

Why a shell command and not async_status per poll: measured against a sandbox host (ssh with
ControlPersist and pipelining, 2-core controller), a poll costs about 15 ms this way, an
async_status module run about 715 ms (it starts Python on the host), and a round of the old
self-including task file (async_status, slurp, debug, wait_for, include) about 1.2 s.
"""

from __future__ import annotations

import contextlib
import posixpath
import shlex
import time

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.gpufleet.serving.plugins.plugin_utils._checkpoint_wait import (
    WaitState,
    parse_poll_output,
    poll_command,
)

display = Display()

ARGUMENT_SPEC = {
    "jid": {"type": "str", "required": True},
    "results_file": {"type": "str"},
    "progress_file": {"type": "str"},
    "log_file": {"type": "str"},
    "interval": {"type": "float", "default": 30.0},
    "timeout": {"type": "float", "required": True},
}


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False

    # Indirections so that tests run the loop without waiting.
    _clock = staticmethod(time.monotonic)
    _sleep = staticmethod(time.sleep)

    def _async_dir(self):
        return self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))

    def _poll(self, state, command):
        """Run the status command once; returns the Outcome of that poll."""
        try:
            res = self._low_level_execute_command(command, sudoable=True)
        except AnsibleError as exc:
            outcome = state.error(self._clock(), exc)
            # A broken persistent connection (ControlMaster, WinRM) is rebuilt before the next poll.
            with contextlib.suppress(Exception):  # a connection without reset, or one that cannot reset now
                self._connection.reset()
            return outcome
        if res.get("rc") != 0:
            return state.error(self._clock(), "exit status %s: %s" % (res.get("rc"), (res.get("stderr") or "").strip()[-300:]))
        return state.observe(self._clock(), parse_poll_output(res.get("stdout", "")))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        if self._task.check_mode:
            result.update(skipped=True, msg="check mode: no background download runs, so there is nothing to wait for")
            return result

        host = task_vars.get("inventory_hostname", "host")
        jid = args["jid"]
        if args["results_file"]:
            results_file = args["results_file"]
            if posixpath.basename(results_file) != jid:
                result.update(failed=True, msg="%s: results_file %s is not the results file of job %s" % (host, results_file, jid))
                return result
            async_dir = posixpath.dirname(results_file)
        else:
            async_dir = self._async_dir()
            results_file = posixpath.join(async_dir, jid)
        try:
            state = WaitState(host, jid, results_file, args["interval"], args["timeout"], self._clock(),
                              log_file=args["log_file"])
        except ValueError as exc:
            result.update(failed=True, msg="%s: %s" % (host, exc))
            return result
        command = poll_command(results_file, args["progress_file"])

        poll_seconds = 0.0
        while True:
            poll_started = self._clock()
            outcome = self._poll(state, command)
            poll_seconds += self._clock() - poll_started
            if outcome.line:
                display.display(outcome.line)
            if outcome.kind == "failed":
                result.update(failed=True, msg=outcome.msg, **self._summary(state, poll_seconds))
                return result
            if outcome.kind == "finished":
                break
            delay = state.delay(poll_started, self._clock())
            if delay is None:
                result.update(failed=True, msg=state.deadline_message(self._clock()), **self._summary(state, poll_seconds))
                return result
            self._sleep(delay)

        # The job has ended: its result, decoded the way Ansible decodes async results, then its file removed.
        final = self._execute_module(module_name="ansible.legacy.async_status", task_vars=task_vars,
                                     module_args={"jid": jid, "_async_dir": async_dir})
        if final.get("finished"):
            self._low_level_execute_command("rm -f -- %s" % shlex.quote(results_file), sudoable=True)
        else:
            final = dict(final, failed=True, msg="%s: the download job %s ended, but its result could not be read: %s"
                         % (host, jid, final.get("msg", "no message")))
        result.update(final)
        result.update(self._summary(state, poll_seconds))
        return result

    def _summary(self, state, poll_seconds):
        return {"ansible_job_id": state.jid, "polls": state.polls, "poll_seconds": round(poll_seconds, 3),
                "wait_seconds": round(self._clock() - state.started, 3), "last_progress": state.last_message}
