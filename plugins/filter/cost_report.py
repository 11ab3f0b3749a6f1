# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters for the endpoint comparison: cost per successful task and its reports (logic in
plugins/module_utils/_cost_report.py)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.serving.plugins.module_utils._cost_report import (
    CostReportError,
    build_report,
    render_html,
    render_markdown,
)


def cost_report(runs, endpoints, generated_at=None, task_checks=None):
    try:
        return build_report(endpoints, runs, generated_at, task_checks)
    except CostReportError as exc:
        raise AnsibleFilterError("cost_report: %s" % exc) from exc


def _report(report, name):
    if not isinstance(report, dict) or not isinstance(report.get("endpoints"), list):
        raise AnsibleFilterError("%s: expected the output of gpufleet.serving.cost_report" % name)
    return report


def cost_report_markdown(report):
    return render_markdown(_report(report, "cost_report_markdown"))


def cost_report_html(report):
    return render_html(_report(report, "cost_report_html"))


class FilterModule:
    def filters(self):
        return {
            "cost_report": cost_report,
            "cost_report_markdown": cost_report_markdown,
            "cost_report_html": cost_report_html,
        }
