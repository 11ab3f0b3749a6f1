# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Hardware and model profiles: one schema per kind, and the roles' argument specs agree with them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible_collections.gpufleet.serving.plugins.module_utils._profiles import (
    AMD_BASE,
    HARDWARE_KEYS,
    HARDWARE_PROFILES,
    MODEL_PROFILES,
    NVIDIA_BASE,
    ProfileError,
    get_profile,
    gpu_health_expectations,
    gpu_target_names,
    profile_names,
    profiles_of_vendor,
    raw_parameter_bytes,
)

REPO = Path(__file__).resolve().parents[4]


@pytest.mark.parametrize("table", [HARDWARE_PROFILES, MODEL_PROFILES], ids=["hardware", "model"])
def test_every_profile_of_a_kind_has_the_same_keys(table):
    key_sets = {name: frozenset(profile) for name, profile in table.items()}
    assert len(set(key_sets.values())) == 1, key_sets


def test_hardware_profiles_state_what_the_deployment_guides_say():
    b300, gb300, mi355x = (HARDWARE_PROFILES[n] for n in ("b300", "gb300", "mi355x"))
    assert (b300["vendor"], b300["gpu_count"], b300["gpu_link_type"], b300["tensor_parallel_size"], b300["nodes_per_replica"]) == (
        "nvidia", 8, "NV18", 8, 1)
    assert (gb300["architecture"], gb300["gpu_count"], gb300["tensor_parallel_size"], gb300["nodes_per_replica"]) == (
        "aarch64", 4, 8, 2)
    assert (mi355x["vendor"], mi355x["gpu_link_type"], mi355x["fabric_must_be_completed"], mi355x["min_rocm_version"]) == (
        "amd", "XGMI", False, "7.0")
    h200 = HARDWARE_PROFILES["h200"]
    # 8 x 141 GB does not hold 1.7 TB: two nodes, TP8 within each, two pipeline stages across them.
    assert (h200["gpu_count"], h200["nodes_per_replica"], h200["tensor_parallel_size"], h200["pipeline_parallel_size"]) == (8, 2, 8, 2)
    assert h200["gpu_count"] * h200["min_memory_mib_per_gpu"] * 2**20 < MODEL_PROFILES["kimi-k3.1-pro"]["checkpoint_bytes"]


@pytest.mark.parametrize("name", gpu_target_names())
def test_one_replica_of_every_gpu_target_holds_the_checkpoint_on_all_its_gpus(name):
    profile = HARDWARE_PROFILES[name]
    # One replica's GPU memory must hold the checkpoint, or the profile could never pass preflight.
    replica_bytes = profile["gpu_count"] * profile["nodes_per_replica"] * profile["min_memory_mib_per_gpu"] * 2**20
    assert replica_bytes > MODEL_PROFILES["kimi-k3.1-pro"]["checkpoint_bytes"]
    assert profile["gpu_count"] * profile["nodes_per_replica"] == profile["tensor_parallel_size"] * profile["pipeline_parallel_size"]


def test_platforms_are_their_vendor_base_plus_what_differs():
    assert set(NVIDIA_BASE) <= HARDWARE_KEYS and set(AMD_BASE) <= HARDWARE_KEYS
    for name in profiles_of_vendor("nvidia"):
        differing = {key for key in NVIDIA_BASE if HARDWARE_PROFILES[name][key] != NVIDIA_BASE[key]}
        assert differing <= {"architecture", "nvidia_fabric_manager", "nvidia_nvlsm", "nvidia_imex", "vllm_multinode_env",
                             "vllm_device_allow", "interconnect_imex", "interconnect_multi_node_min_busbw_gbps",
                             "pipeline_parallel_size", "nodes_per_replica"}, name
    assert profiles_of_vendor("amd") == ["mi355x"] and profiles_of_vendor("nvidia") == ["b300", "gb300", "h200"]
    assert gpu_target_names() == ["b300", "gb300", "h200", "mi355x"]


def test_gpu_health_expectations_are_the_profile_keys_the_probe_checks():
    assert gpu_health_expectations(HARDWARE_PROFILES["b300"]) == {
        "expected_gpu_count": 8, "expected_link_type": "NV18", "require_fabric_completed": True,
        "min_memory_mib": 262144, "min_driver_version": "580.0"}
    assert gpu_health_expectations(HARDWARE_PROFILES["mi355x"])["expected_link_type"] == "XGMI"
    assert gpu_health_expectations(get_profile("hardware", "gb300", {"gpu_count": 2}))["expected_gpu_count"] == 2


@pytest.mark.parametrize(
    ("role", "option", "kind"),
    [("preflight", "preflight_hardware_profile", "hardware"), ("preflight", "preflight_model_profile", "model")],
)
def test_role_argument_specs_offer_exactly_the_known_profiles(role, option, kind):
    spec = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())
    assert spec["argument_specs"]["main"]["options"][option]["choices"] == profile_names(kind)


def test_overrides_replace_only_existing_keys():
    profile = get_profile("hardware", "b300", {"min_driver_version": "575.0"})
    assert profile["min_driver_version"] == "575.0" and profile["name"] == "b300"
    assert HARDWARE_PROFILES["b300"]["min_driver_version"] == "580.0"  # the table is not modified
    with pytest.raises(ProfileError, match="has no key"):
        get_profile("hardware", "b300", {"gpu_cuont": 4})


def test_unknown_names_list_the_known_ones():
    with pytest.raises(ProfileError, match="unknown hardware profile 'h100'; known: %s" % ", ".join(profile_names("hardware"))):
        get_profile("hardware", "h100")
    with pytest.raises(ProfileError, match="profile kind must be one of"):
        profile_names("gpu")


def test_raw_parameter_storage_of_2_8t_parameters():
    assert [raw_parameter_bytes(2.8e12, bits) for bits in (16, 8, 4)] == [5.6e12, 2.8e12, 1.4e12]
    with pytest.raises(ProfileError, match="bits must be"):
        raw_parameter_bytes(2.8e12, 3)


def test_the_docs_model_table_has_a_column_for_every_model_profile():
    header = next(line for line in (REPO / "docs" / "profiles.md").read_text().splitlines()
                  if line.startswith("| key | kimi-k3.1-pro"))
    assert sorted(cell.strip() for cell in header.strip("|").split("|")[1:]) == profile_names("model")
