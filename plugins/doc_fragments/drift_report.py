# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Options of the drift report callback, shared by gpufleet.serving.drift_report and the copy the drift check
playbook loads by itself (playbooks/callback_plugins/gpufleet_drift_report.py)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  report_dir:
    description:
      - Directory of the report. Relative paths are taken from the current directory (the project
        directory under ansible-runner); C(~) is expanded.
      - Empty means C(<artifact dir>/drift_report) under ansible-runner (which sets E(AWX_ISOLATED_DATA_DIR)),
        else C(reports/drift).
    type: str
    default: ""
    env:
      - name: GPUFLEET_DRIFT_REPORT_DIR
    ini:
      - section: callback_drift_report
        key: report_dir
"""
