# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Each simulated node (tools/gpusim/profiles) is what the collection's profile of the same name expects."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from ansible_collections.gpufleet.serving.plugins.module_utils._profiles import HARDWARE_PROFILES

PROFILE_DIR = Path(__file__).resolve().parents[3] / "tools" / "gpusim" / "profiles"
SIMULATED = sorted(path.stem for path in PROFILE_DIR.glob("*.json"))


def _memory_mib(gpu_model):
    return gpu_model.get("memory_total_mib") or gpu_model.get("vram_total_mb")


def _model_name(gpu_model):
    return gpu_model.get("product_name") or gpu_model.get("market_name")


def test_every_gpu_target_but_the_data_only_ones_is_simulated():
    assert set(SIMULATED) - set(HARDWARE_PROFILES) == {"consumer"}  # the refused one has no profile


@pytest.mark.parametrize("name", [name for name in SIMULATED if name in HARDWARE_PROFILES])
def test_the_simulated_node_has_the_profiles_gpus_links_and_nics(name):
    simulated = json.loads((PROFILE_DIR / ("%s.json" % name)).read_text())
    profile = HARDWARE_PROFILES[name]
    assert simulated["vendor"] == profile["vendor"]
    assert simulated["cpu_arch"] == profile["architecture"]
    assert len(simulated["gpus"]) == profile["gpu_count"]
    assert simulated["gpu_interconnect"] == profile["gpu_link_type"]
    assert _memory_mib(simulated["gpu_model"]) >= profile["min_memory_mib_per_gpu"]
    assert re.search(profile["gpu_model_pattern"], _model_name(simulated["gpu_model"]))
    assert len(simulated["nics"]) == profile["interconnect_ib_ports"]
    assert bool(simulated.get("imex")) == profile["nvidia_imex"]
