# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters for the vllm role (logic in plugins/module_utils/_vllm.py)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.serving.plugins.module_utils._vllm import (
    VllmError,
    compare_versions,
    compile_cache_key,
    dist_info_alias,
    env_file_lines,
    exec_start,
    input_problems,
    ip_address_allow,
    ip_address_allow_line,
    journal_hints,
    render_service,
)


def vllm_service(settings, hardware, model):
    try:
        service = render_service(hardware, model, settings)
    except (KeyError, TypeError, ValueError, VllmError) as exc:
        raise AnsibleFilterError("vllm_service: cannot render the engine's command line: %s" % exc) from exc
    service["exec_start"] = exec_start(service["argv"])
    service["env_lines"] = env_file_lines(service["env"])
    return service


def vllm_env_lines(env):
    """KEY="value" lines of an EnvironmentFile, for the root-only secrets file (values never in a fact)."""
    try:
        return env_file_lines(dict(env or {}))
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("vllm_env_lines: %s" % exc) from exc


def vllm_ip_address_allow(host, nnodes, master_addr, peers=None):
    try:
        return ip_address_allow(host, nnodes, master_addr, peers)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("vllm_ip_address_allow: %s" % exc) from exc


def vllm_ip_address_allow_line(entries):
    try:
        return ip_address_allow_line(entries)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("vllm_ip_address_allow_line: %s" % exc) from exc


def vllm_input_problems(settings, hardware, model, facts=None):
    return input_problems(hardware, model, settings, facts)


def vllm_journal_hints(lines):
    return journal_hints(lines or [])


def vllm_version_compare(left, right):
    try:
        return compare_versions(left, right)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def vllm_compile_cache_key(version, hardware_name, tensor_parallel_size, revision):
    return compile_cache_key(version, hardware_name, tensor_parallel_size, revision)


def vllm_dist_info(alias, version):
    found = dist_info_alias(alias, version)
    return None if found is None else {"dir": found[0], "metadata": found[1]}


class FilterModule:
    def filters(self):
        return {
            "vllm_service": vllm_service,
            "vllm_input_problems": vllm_input_problems,
            "vllm_env_lines": vllm_env_lines,
            "vllm_journal_hints": vllm_journal_hints,
            "vllm_version_compare": vllm_version_compare,
            "vllm_compile_cache_key": vllm_compile_cache_key,
            "vllm_dist_info": vllm_dist_info,
            "vllm_ip_address_allow": vllm_ip_address_allow,
            "vllm_ip_address_allow_line": vllm_ip_address_allow_line,
        }
