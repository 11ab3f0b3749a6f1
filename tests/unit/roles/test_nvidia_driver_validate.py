# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The nvidia_driver role's CUDA repository from the host's architecture: the real expressions of
roles/nvidia_driver/tasks/validate.yml rendered for x86_64 and for aarch64 (GB300's Grace trays,
NVIDIA's ``sbsa`` repository). The sandbox boots x86_64 hosts only, so this is where aarch64 is tested."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

ROLE = Path(__file__).resolve().parents[3] / "roles" / "nvidia_driver"
TASKS = yaml.safe_load((ROLE / "tasks" / "validate.yml").read_text())
ROLE_VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
BASE = "https://developer.download.nvidia.com/compute/cuda/repos"
FACTS = {
    "debian12": {"distribution": "Debian", "distribution_version": "12.12", "distribution_major_version": "12"},
    "ubuntu2404": {"distribution": "Ubuntu", "distribution_version": "24.04", "distribution_major_version": "24"},
}


def task(name):
    return next(t for t in TASKS if t["name"] == name)


def render(expression, variables):
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(expression))


def selection(architecture, distribution="debian12", repo_url=""):
    """The role's variables after its repository tasks, for a host of ``architecture``."""
    variables = dict(ROLE_VARS, inventory_hostname="tray-1", nvidia_driver_repo_url=repo_url, nvidia_driver_repo_key_url="",
                     ansible_facts=dict(FACTS[distribution], architecture=architecture))
    work_out = task("Work out the repository and the packages to pin")["ansible.builtin.set_fact"]
    for key in ("__nvidia_driver_distribution", "__nvidia_driver_arch_dir"):
        variables[key] = render(work_out[key], variables)
    settle = task("Settle the repository URLs")["ansible.builtin.set_fact"]
    for key in ("__nvidia_driver_repo", "__nvidia_driver_key"):
        variables[key] = render(settle[key], variables).strip()
    return variables


def passes(task_name, variables):
    """Whether the named assert task's conditions all hold (its task vars applied)."""
    entry = task(task_name)
    scoped = dict(variables)
    for key, value in (entry.get("vars") or {}).items():
        scoped[key] = render(value, scoped)
    that = entry["ansible.builtin.assert"]["that"]
    return all(render("{{ %s }}" % condition, scoped) for condition in ([that] if isinstance(that, str) else that))


@pytest.mark.parametrize(("architecture", "distribution", "directory"), [
    ("x86_64", "debian12", "debian12/x86_64"),
    ("aarch64", "debian12", "debian12/sbsa"),
    ("aarch64", "ubuntu2404", "ubuntu2404/sbsa"),
])
def test_the_repository_follows_the_host_s_architecture(architecture, distribution, directory):
    variables = selection(architecture, distribution)
    assert variables["__nvidia_driver_repo"] == "%s/%s/" % (BASE, directory)
    assert variables["__nvidia_driver_key"] == "%s/%s/3bf863cc.pub" % (BASE, directory)
    assert passes("Require a distribution and architecture NVIDIA publishes for", variables)


def test_a_site_mirror_of_the_other_architecture_is_refused_on_a_grace_tray():
    x86_mirror = "http://mirror.example/nvidia/cuda/repos/debian12/x86_64/"
    sbsa_mirror = "http://mirror.example/nvidia/cuda/repos/debian12/sbsa/"
    assert not passes("Refuse a mirror of the other CPU architecture", selection("aarch64", repo_url=x86_mirror))
    assert passes("Refuse a mirror of the other CPU architecture", selection("aarch64", repo_url=sbsa_mirror))
    assert selection("aarch64", repo_url=sbsa_mirror)["__nvidia_driver_repo"] == sbsa_mirror
    assert not passes("Refuse a mirror of the other CPU architecture", selection("x86_64", repo_url=sbsa_mirror))


def test_an_architecture_nvidia_does_not_publish_for_is_refused():
    variables = selection("ppc64le")
    assert variables["__nvidia_driver_arch_dir"] == ""
    assert not passes("Require a distribution and architecture NVIDIA publishes for", variables)
