# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters for the preflight gate and the GPU health metrics (logic in plugins/module_utils)."""

from __future__ import annotations

from ansible_collections.gpufleet.serving.plugins.module_utils._metrics import gpu_health_metrics
from ansible_collections.gpufleet.serving.plugins.module_utils._preflight import (
    gpu_checks_deferred,
    preflight_findings,
)


def preflight_findings_filter(gpu_result, hardware, model, storage_result, require_nvme=True, driver_pending=False,
                              space_result=None):
    return preflight_findings(hardware, model, gpu_result, storage_result, require_nvme, driver_pending, space_result)


def preflight_gpu_checks_deferred(gpu_result, driver_pending=False):
    return gpu_checks_deferred(gpu_result, driver_pending)


class FilterModule:
    def filters(self):
        return {
            "preflight_findings": preflight_findings_filter,
            "preflight_gpu_checks_deferred": preflight_gpu_checks_deferred,
            "gpu_health_metrics": gpu_health_metrics,
        }
