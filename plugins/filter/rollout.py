# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters for the rollout role (logic in plugins/plugin_utils/_rollout.py)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.serving.plugins.plugin_utils._rollout import batch_report, engine_label, restore_problems


def rollout_batch_report(play_hosts, serial, active, outcomes, finished, started, max_fail_percentage=100):
    try:
        return batch_report(play_hosts, serial, active, outcomes, finished, started, max_fail_percentage)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def rollout_restore_problems(state):
    return restore_problems(state)


def rollout_engine_label(engine, version=None):
    return engine_label(engine, version)


class FilterModule:
    def filters(self):
        return {
            "rollout_batch_report": rollout_batch_report,
            "rollout_restore_problems": rollout_restore_problems,
            "rollout_engine_label": rollout_engine_label,
        }
