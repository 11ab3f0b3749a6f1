# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Lookup: the verdict the drift_report callback collected in this run."""

from __future__ import annotations

DOCUMENTATION = r"""
name: drift_report
short_description: The drift check's fleet summary, as the drift_report callback collected it in this run
description:
  - Returns the fleet summary that the P(gpufleet.serving.drift_report#callback) callback wrote for the
    current run, checked to belong to this run (never an older run's file).
  - Fails when the callback is not enabled in this run, naming how to enable it.
  - With the term C(run), returns only C(run_id) and C(report_dir) (the drift check's guard uses it to
    fail before any host is touched when the callback is missing).
version_added: 0.1.0
author:
  - gpufleet.serving contributors (@gpufleet)
options:
  _terms:
    description: C(summary) (the default) or C(run).
    type: list
    elements: str
    required: false
"""

EXAMPLES = r"""
- name: Fail when anything drifted or is unhealthy
  ansible.builtin.fail:
    msg: "{{ __summary.message }}"
  vars:
    __summary: "{{ lookup('gpufleet.serving.drift_report') }}"
  when: not __summary.clean
"""

RETURN = r"""
_raw:
  description:
    - The summary (C(summary.json)) - C(clean), C(message), C(hosts) (per host C(status), C(changes),
      C(problems), C(failed)), C(totals), C(run_id), C(report_dir), C(complete) - or, for C(run), the run.
  type: list
  elements: dict
"""

import json
import os

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase
from ansible_collections.gpufleet.serving.plugins.plugin_utils._drift_report import RUN_ENV, read_summary


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        what = terms[0] if terms else "summary"
        if what not in ("summary", "run"):
            raise AnsibleError("gpufleet.serving.drift_report: term is %r; expected 'summary' or 'run'" % (what,))
        raw = os.environ.get(RUN_ENV)
        if not raw:
            raise AnsibleError(
                "gpufleet.serving.drift_report: the drift_report callback is not enabled in this run; add "
                "gpufleet.serving.drift_report to callbacks_enabled (ANSIBLE_CALLBACKS_ENABLED), as "
                "docs/ansible.cfg.recommended does"
            )
        try:
            run = json.loads(raw)
        except ValueError as exc:
            raise AnsibleError("gpufleet.serving.drift_report: %s is not JSON: %s" % (RUN_ENV, exc)) from None
        if what == "run":
            return [run]
        try:
            return [read_summary(run)]
        except ValueError as exc:
            raise AnsibleError("gpufleet.serving.drift_report: %s" % exc) from None
