# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The deployment's stages, written once: playbooks/deploy.yml runs them in this order (a unit test
holds it to that), the plan role checks their inputs in it, the drift report files findings under them.
"""

from __future__ import annotations

from ansible_collections.gpufleet.serving.plugins.module_utils._profiles import DRIVER_STAGES

# Each is a role of this collection and the tag of its step in playbooks/deploy.yml.
DEPLOY_STAGES = ("preflight", "nvidia_driver", "rocm", "interconnect", "checkpoint", "vllm", "sglang", "verify")
# The stages only one of which runs: the driver stack by the hardware's vendor, the engine by the deployment.
DRIVER_STAGE_NAMES = tuple(stage for stage in DRIVER_STAGES.values() if stage)
ENGINES = ("vllm", "sglang")


def deployment_stages(vendor, engine):
    """The stages a deployment on ``vendor``'s hardware serving with ``engine`` runs, in order."""
    if vendor not in DRIVER_STAGES:
        raise ValueError("unknown vendor %r; known: %s" % (vendor, ", ".join(sorted(DRIVER_STAGES))))
    if engine not in ENGINES:
        raise ValueError("unknown engine %r; known: %s" % (engine, ", ".join(ENGINES)))
    skipped = (set(DRIVER_STAGE_NAMES) - {DRIVER_STAGES[vendor]}) | (set(ENGINES) - {engine})
    return [stage for stage in DEPLOY_STAGES if stage not in skipped]
