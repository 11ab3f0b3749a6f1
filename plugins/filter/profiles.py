# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters over the hardware and model profiles (plugins/module_utils/_profiles.py holds the data)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.serving.plugins.module_utils._profiles import (
    ProfileError,
    get_profile,
    profile_names,
    raw_parameter_bytes,
)


def _call(function, *args):
    try:
        return function(*args)
    except ProfileError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def hardware_profile(name, overrides=None):
    return _call(get_profile, "hardware", name, overrides)


def model_profile(name, overrides=None):
    return _call(get_profile, "model", name, overrides)


def profile_names_filter(kind):
    return _call(profile_names, kind)


def raw_parameter_bytes_filter(parameters, bits=16):
    return _call(raw_parameter_bytes, parameters, bits)


class FilterModule:
    def filters(self):
        return {
            "hardware_profile": hardware_profile,
            "model_profile": model_profile,
            "profile_names": profile_names_filter,
            "raw_parameter_bytes": raw_parameter_bytes_filter,
        }
