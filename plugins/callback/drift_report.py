# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Drift report callback: the per-host findings of playbooks/drift_check.yml as JSON and Markdown."""

from __future__ import annotations

DOCUMENTATION = r"""
name: drift_report
type: aggregate
short_description: Per-host drift report of a check-mode run (what would change, what is unhealthy)
description:
  - Collects, per host, the results of plays that set the play variable C(gpufleet_drift_report=true)
    (C(playbooks/drift_check.yml) does) - what would change (task, module, loop item, kind, diff), which
    results report C(healthy=false) and their problems, failed tasks that are not ignored, and unreachable
    hosts. Skipped and unchanged results are left out.
  - Writes C(hosts/<host>.json), C(hosts/<host>.md), C(summary.json) and C(summary.md) to O(report_dir),
    at the start of every later play (so the drift check's last play can read the verdict with the
    P(gpufleet.serving.drift_report#lookup) lookup) and again at the end of the run.
  - Results hidden by C(no_log) are named (task, module) without any value, item label, diff or message.
  - In runs without such a play it writes nothing, so it can stay enabled for every playbook.
  - See C(docs/drift_check.md) for the report format and the exit codes of the drift check.
version_added: 0.1.0
author:
  - gpufleet.serving contributors (@gpufleet)
notes:
  - C(playbooks/drift_check.yml) loads this callback by itself (a subclass beside it, in
    C(playbooks/callback_plugins/), that stands down when this one is enabled), so the nightly
    command works with any configuration. Other playbooks that set C(gpufleet_drift_report) need it in
    C(callbacks_enabled) (E(ANSIBLE_CALLBACKS_ENABLED)), as C(docs/ansible.cfg.recommended) does.
extends_documentation_fragment:
  - gpufleet.serving.drift_report
"""

import datetime
import json
import os
import uuid

from ansible import context
from ansible.playbook.handler import Handler
from ansible.plugins.callback import CallbackBase
from ansible_collections.gpufleet.serving.plugins.plugin_utils._drift_report import (
    RUN_ENV,
    DriftCollector,
    resolve_report_dir,
    write_reports,
)


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _task_info(task):
    no_log = task.no_log
    return {
        "name": task.name or None,
        "action": getattr(task, "resolved_action", None) or task.action,
        "role": task._role.get_name() if task._role else None,
        "tags": [str(tag) for tag in (task.tags or [])],
        "no_log": no_log if isinstance(no_log, bool) else False,
        "handler": isinstance(task, Handler),
    }


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpufleet.serving.drift_report"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._collector = DriftCollector()
        self._run = None
        self._collecting = False
        self._used = False

    def v2_playbook_on_start(self, playbook):
        report_dir = resolve_report_dir(self.get_option("report_dir"), os.environ, os.getcwd())
        self._run = {
            "run_id": "%s-%s" % (datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ"), uuid.uuid4().hex[:12]),
            "started_at": _now(),
            "playbook": getattr(playbook, "_file_name", None),
            "check_mode": bool(context.CLIARGS.get("check", False)),
            "report_dir": report_dir,
        }
        # The lookup runs in worker processes forked from this one: the environment is how it finds
        # this run's report and tells it from an older run's.
        os.environ[RUN_ENV] = json.dumps({"run_id": self._run["run_id"], "report_dir": report_dir})

    def v2_playbook_on_play_start(self, play):
        if self._used:
            self._write(complete=False)
        play_vars = play.get_vars() or {}
        self._collecting = play_vars.get("gpufleet_drift_report") is True
        self._used = self._used or self._collecting

    def _write(self, complete):
        if self._run is None:
            return None
        self._run["generated_at"] = _now()
        try:
            return write_reports(self._collector, self._run, complete)
        except OSError as exc:
            self._display.error("drift_report: cannot write the report to %s: %s" % (self._run["report_dir"], exc))
            return None

    def _record(self, event, result, ignore_errors=False):
        if self._collecting:
            self._collector.record(event, result._host.get_name(), _task_info(result._task), result._result, ignore_errors)

    def v2_runner_on_start(self, host, task):
        if self._collecting:
            self._collector.host(host.get_name())

    def v2_runner_on_ok(self, result):
        self._record("ok", result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record("failed", result, ignore_errors)

    def v2_runner_on_unreachable(self, result):
        self._record("unreachable", result)

    def v2_playbook_on_stats(self, stats):
        if not self._used:
            return
        summary = self._write(complete=True)
        if summary is not None:
            self._display.display("DRIFT REPORT: %s\n  %s" % (summary["message"], os.path.join(self._run["report_dir"], "summary.md")))
