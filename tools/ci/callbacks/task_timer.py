"""Wall time per play and the slowest tasks of each playbook run, for the CI log.

Sandbox and CI tooling (not in the built collection): `make molecule` enables it so that the
time of each scenario can be traced to its plays and tasks when the CI budget is tight.
"""

from __future__ import annotations

import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: task_timer
type: aggregate
short_description: wall time per play and the slowest tasks of a playbook run
description: Prints, at the end of a run, each play's wall time and the run's slowest tasks.
options:
  slowest:
    description: How many of the slowest tasks to list.
    type: int
    default: 8
    env:
      - name: TASK_TIMER_SLOWEST
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "task_timer"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.started = time.monotonic()
        self.plays = []  # [name, start, end]
        self.tasks = []  # [name, start, end]

    def _close_open(self, now):
        for entries in (self.tasks, self.plays):
            if entries and entries[-1][2] is None:
                entries[-1][2] = now

    def v2_playbook_on_play_start(self, play):
        now = time.monotonic()
        self._close_open(now)
        self.plays.append([play.get_name().strip() or "(unnamed play)", now, None])

    def _task_start(self, task):
        now = time.monotonic()
        if self.tasks and self.tasks[-1][2] is None:
            self.tasks[-1][2] = now
        self.tasks.append([task.get_name().strip(), now, None])

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._task_start(task)

    def v2_playbook_on_handler_task_start(self, task):
        self._task_start(task)

    def v2_playbook_on_stats(self, stats):
        now = time.monotonic()
        self._close_open(now)
        self.set_options()
        lines = [f"TIMING run {now - self.started:.1f} s"]
        lines += [f"TIMING play {end - start:7.1f} s  {name}" for name, start, end in self.plays]
        slowest = sorted(self.tasks, key=lambda task: task[1] - task[2])[: self.get_option("slowest")]
        lines += [f"TIMING task {end - start:7.1f} s  {name}" for name, start, end in slowest]
        self._display.display("\n".join(lines))
