# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The stage list is written once: deploy.yml, drift_check.yml and the drift report follow it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible_collections.gpufleet.serving.plugins.module_utils._deploy_stages import DEPLOY_STAGES, deployment_stages
from ansible_collections.gpufleet.serving.plugins.plugin_utils._drift_report import STAGES

REPO = Path(__file__).resolve().parents[4]


def _stage_steps(tasks):
    """The stage roles the tasks include, in order (blocks flattened), with each step's first tag."""
    steps = []
    for task in tasks:
        if "block" in task:
            steps += _stage_steps(task["block"])
            continue
        role = (task.get("ansible.builtin.include_role") or {}).get("name", "")
        short = role.rsplit(".", 1)[-1]
        if short in DEPLOY_STAGES and not (task.get("ansible.builtin.include_role") or {}).get("tasks_from"):
            steps.append((short, (task.get("tags") or [None])[0]))
    return steps


def test_deploy_runs_the_stages_in_the_written_order_each_under_its_tag():
    play = yaml.safe_load((REPO / "playbooks" / "deploy.yml").read_text())[0]
    steps = _stage_steps(play["tasks"])
    # The gate runs twice (again once the driver is in); the rest once, each tagged with its own name.
    first_seen = list(dict.fromkeys(role for role, _tag in steps))
    assert first_seen == list(DEPLOY_STAGES)
    assert all(tag == role for role, tag in steps)


def test_drift_check_runs_every_stage_in_the_same_order():
    play = yaml.safe_load((REPO / "playbooks" / "drift_check.yml").read_text())[1]
    tags = [task["tags"][0] for task in play["tasks"] if task.get("tags")]
    stage_tags = [tag for tag in tags if tag in DEPLOY_STAGES]
    assert list(dict.fromkeys(stage_tags))[:len(DEPLOY_STAGES)] == list(DEPLOY_STAGES)
    assert STAGES[:len(DEPLOY_STAGES)] == DEPLOY_STAGES


@pytest.mark.parametrize(("vendor", "engine", "expected"), [
    ("nvidia", "vllm", ["preflight", "nvidia_driver", "interconnect", "checkpoint", "vllm", "verify"]),
    ("amd", "vllm", ["preflight", "rocm", "interconnect", "checkpoint", "vllm", "verify"]),
    ("nvidia", "sglang", ["preflight", "nvidia_driver", "interconnect", "checkpoint", "sglang", "verify"]),
    ("cpu", "vllm", ["preflight", "interconnect", "checkpoint", "vllm", "verify"]),
])
def test_a_deployment_runs_its_vendors_driver_stage_and_its_engine(vendor, engine, expected):
    assert deployment_stages(vendor, engine) == expected


def test_unknown_vendor_or_engine_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="unknown vendor 'intel'; known: amd, cpu, nvidia"):
        deployment_stages("intel", "vllm")
    with pytest.raises(ValueError, match="unknown engine 'trtllm'; known: vllm, sglang"):
        deployment_stages("nvidia", "trtllm")
