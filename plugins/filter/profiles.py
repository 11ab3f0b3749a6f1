# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters over the hardware and model profiles (plugins/module_utils/_profiles.py holds the data)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.serving.plugins.module_utils._deploy_stages import deployment_stages
from ansible_collections.gpufleet.serving.plugins.module_utils._profiles import (
    ProfileError,
    get_profile,
    gpu_health_expectations,
    profile_names,
    raw_parameter_bytes,
)


def _call(function, *args):
    try:
        return function(*args)
    except (ProfileError, ValueError) as exc:
        raise AnsibleFilterError(str(exc)) from exc


def hardware_profile(name, overrides=None):
    return _call(get_profile, "hardware", name, overrides)


def model_profile(name, overrides=None):
    return _call(get_profile, "model", name, overrides)


def profile_names_filter(kind):
    return _call(profile_names, kind)


def gpu_health_expectations_filter(name, overrides=None):
    return _call(lambda: gpu_health_expectations(get_profile("hardware", name, overrides)))


def deploy_stages_filter(hardware_name, engine="vllm", overrides=None):
    return _call(lambda: deployment_stages(get_profile("hardware", hardware_name, overrides)["vendor"], engine))


def raw_parameter_bytes_filter(parameters, bits=16):
    return _call(raw_parameter_bytes, parameters, bits)


class FilterModule:
    def filters(self):
        return {
            "hardware_profile": hardware_profile,
            "model_profile": model_profile,
            "profile_names": profile_names_filter,
            "gpu_health_expectations": gpu_health_expectations_filter,
            "deploy_stages": deploy_stages_filter,
            "raw_parameter_bytes": raw_parameter_bytes_filter,
        }
