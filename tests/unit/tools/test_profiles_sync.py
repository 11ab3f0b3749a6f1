# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""tools/profiles_sync.py: what lists the profiles is written from the data, and the tree is in step."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SPEC = importlib.util.spec_from_file_location("profiles_sync", REPO / "tools" / "profiles_sync.py")
profiles_sync = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(profiles_sync)

SPEC_TEXT = """---
argument_specs:
  main:
    options:
      nvidia_driver_hardware_profile:
        description:
          - Which node.
        type: str
        choices: [b300]
      nvidia_driver_mode:
        type: str
        choices: [a, b]
"""


def test_the_tree_is_in_step_with_the_profiles():
    stale = [path for path, (current, wanted) in profiles_sync.planned_files().items() if current != wanted]
    assert stale == [], "run tools/profiles_sync.py"


def test_a_driver_role_offers_its_vendors_profiles_and_other_choices_stay():
    synced = profiles_sync.sync_argument_specs(SPEC_TEXT, "nvidia_driver")
    assert "        choices: [b300, gb300, h200]\n" in synced
    assert "        choices: [a, b]\n" in synced
    assert "choices: [b300, cpu_sandbox, gb300, h200, mi355x]" in profiles_sync.sync_argument_specs(SPEC_TEXT, "preflight")


def test_the_docs_table_has_a_column_per_hardware_profile():
    header = profiles_sync.hardware_table().splitlines()[0]
    assert header == "| key | b300 | gb300 | h200 | mi355x | cpu_sandbox |"
