# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The drift report callback for the playbooks in this directory, whatever the configuration.

Ansible loads callback plugins from a ``callback_plugins`` directory beside the playbook it runs, from
a checkout as from an installed collection (``ansible-playbook gpufleet.serving.drift_check``). A
collection's callback loads only when ``callbacks_enabled`` names it, and drift_check.yml cannot work
without it; this subclass needs no enabling. Where gpufleet.serving.drift_report is enabled as well,
this one stands down, so a run never writes two reports.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: gpufleet_drift_report
type: aggregate
short_description: gpufleet.serving.drift_report for playbooks/drift_check.yml, enabled by being there
description:
  - The P(gpufleet.serving.drift_report#callback) callback, loaded by Ansible for the playbooks of this
    directory without C(callbacks_enabled). Disabled when C(callbacks_enabled) names
    C(gpufleet.serving.drift_report).
version_added: 0.1.0
author:
  - gpufleet.serving contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.serving.drift_report
"""

from ansible import constants as C
from ansible_collections.gpufleet.serving.plugins.callback.drift_report import CallbackModule as DriftReportCallback

ENABLED_NAME = "gpufleet.serving.drift_report"


class CallbackModule(DriftReportCallback):
    CALLBACK_NAME = "gpufleet_drift_report"
    CALLBACK_NEEDS_ENABLED = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.disabled = ENABLED_NAME in (C.CALLBACKS_ENABLED or [])
