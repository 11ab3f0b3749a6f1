# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters for engines in containers (logic in plugins/module_utils/_container.py and _sglang.py)."""

from __future__ import annotations

import base64

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.serving.plugins.module_utils._container import (
    ContainerError,
    container_drift,
    env_file_lines,
    gpu_access_mode,
    host_group_ids,
    image_problems,
    parse_image_reference,
    pull_reference,
    unit_commands,
)
from ansible_collections.gpufleet.serving.plugins.module_utils._sglang import SglangError, render_launch, secrets_config_lines
from ansible_collections.gpufleet.serving.plugins.module_utils._vllm import exec_start


def container_image_problems(reference, expected_repository=None):
    return image_problems(reference, expected_repository or None)


def container_running_drift(inspect, image, publish, network="bridge"):
    try:
        return container_drift(inspect, image, publish, network)
    except ContainerError as exc:
        raise AnsibleFilterError("container_running_drift: %s" % exc) from exc


def container_image(reference):
    try:
        return parse_image_reference(reference)
    except ContainerError as exc:
        raise AnsibleFilterError("container_image: %s" % exc) from exc


def container_image_pull_reference(reference):
    try:
        return pull_reference(reference)
    except ContainerError as exc:
        raise AnsibleFilterError("container_image_pull_reference: %s" % exc) from exc


def container_unit(spec, gpu_access, host_groups=None):
    """ExecStartPre/ExecStart/ExecStop lines (systemd-quoted) for an engine container. With
    ``host_groups`` (getent's group database) the spec's groups are joined by their host IDs."""
    try:
        spec = dict(spec, gpu_access=gpu_access_mode(gpu_access, spec.get("runtime")))
        if host_groups is not None:
            spec["groups"] = host_group_ids(spec.get("groups"), host_groups)
        commands = unit_commands(spec)
    except (ContainerError, KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("container_unit: %s" % exc) from exc
    return {
        "exec_start_pre": exec_start(commands["pre"]),
        "exec_start": exec_start(commands["start"]),
        "exec_stop": exec_start(commands["stop"]),
        "timeout_stop_sec": commands["timeout_stop_sec"],
        "argv": commands["start"],
        # What the unit publishes, for comparing a running container with it (container_running_drift).
        "image": spec.get("image"),
        "publish": list(spec.get("publish") or []),
        "network": spec.get("network") or "bridge",
    }


def container_registry_auth(entry):
    """One registry's entry of the auth file both runtimes read: base64 of user:password."""
    try:
        username, password = str(entry["username"]), str(entry["password"])
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError("container_registry_auth: an entry needs username and password") from exc
    return {"auth": base64.b64encode(("%s:%s" % (username, password)).encode()).decode()}


def container_env_lines(env):
    try:
        return env_file_lines(dict(env or {}))
    except ContainerError as exc:
        raise AnsibleFilterError("container_env_lines: %s" % exc) from exc


def sglang_launch(settings, hardware, model):
    try:
        return render_launch(hardware, model, settings)
    except (SglangError, KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("sglang_launch: cannot render the launch command: %s" % exc) from exc


def sglang_secrets_lines(api_key):
    try:
        return secrets_config_lines(api_key)
    except SglangError as exc:
        raise AnsibleFilterError("sglang_secrets_lines: %s" % exc) from exc


class FilterModule:
    def filters(self):
        return {
            "container_image_problems": container_image_problems,
            "container_image": container_image,
            "container_image_pull_reference": container_image_pull_reference,
            "container_unit": container_unit,
            "container_env_lines": container_env_lines,
            "container_registry_auth": container_registry_auth,
            "container_running_drift": container_running_drift,
            "sglang_launch": sglang_launch,
            "sglang_secrets_lines": sglang_secrets_lines,
        }
