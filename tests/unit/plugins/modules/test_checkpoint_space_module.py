# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.serving.checkpoint_space run through its real main() on a model directory under tmp_path.

The free space is this machine's real statvfs, so sizes are chosen far below or far above any disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpufleet.serving.plugins.modules import checkpoint_space

FILL = Path(__file__).resolve().parents[4] / "tools" / "sandbox" / "checkpoint_fill.py"
A = "a" * 40
B = "b" * 40
HUGE = 10 ** 18


def run_module(capsys, **args):
    with patch_module_args(args), pytest.raises(SystemExit) as exited:
        checkpoint_space.main()
    return exited.value.code, json.loads(capsys.readouterr().out)


def test_a_first_deployment_plans_the_given_size_and_changes_nothing(capsys, tmp_path):
    model_dir = tmp_path / "org--name"
    code, result = run_module(capsys, model_dir=str(model_dir), commit=A, target_bytes=1000.0, _ansible_check_mode=True)
    assert code == 0 and result["changed"] is False and result["healthy"] is True and result["problems"] == []
    assert result["space"]["target"] == {"commit": A, "bytes": 1000, "source": "profile", "exact": False,
                                         "present_bytes": 0, "missing_bytes": 1000}
    assert result["space"]["margin_bytes"] == 1024 ** 3 and "the model profile's estimate" in result["summary"]
    assert not model_dir.exists()


def test_a_staged_target_needs_nothing_and_a_huge_one_is_refused(capsys, tmp_path):
    model_dir = tmp_path / "org--name"
    subprocess.run([sys.executable, str(FILL), "--model-dir", str(model_dir), "--commit", A, "--bytes", "100000",
                    "--shards", "2", "--link", "current"], check=True, capture_output=True)
    before = sorted(os.listdir(model_dir))
    code, result = run_module(capsys, model_dir=str(model_dir), commit=A, target_bytes=5.0)
    assert code == 0 and result["healthy"] and result["space"]["needed_bytes"] == 0
    assert result["space"]["target"]["source"] == "manifest" and result["space"]["target"]["bytes"] == 100000
    code, result = run_module(capsys, model_dir=str(model_dir), commit=B, target_bytes=float(HUGE), target_bytes_exact=True,
                              rollback_copies=0)
    assert code == 0 and not result["healthy"]
    assert [p["code"] for p in result["problems"]] == ["insufficient_space"]
    assert "(exact, from the Hub listing)" in result["problems"][0]["message"]
    assert result["space"]["staged"]["current"]["commit"] == A
    assert sorted(os.listdir(model_dir)) == before


def test_rollback_copies_other_than_0_or_1_are_refused_by_the_argument_spec(capsys, tmp_path):
    code, result = run_module(capsys, model_dir=str(tmp_path), target_bytes=1.0, rollback_copies=2)
    assert code == 1 and "rollback_copies" in result["msg"]
