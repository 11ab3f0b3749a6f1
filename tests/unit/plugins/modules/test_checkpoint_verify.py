# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.serving.checkpoint_verify run through its real main() on checkpoints in tmp_path.

The layout is the checkpoint role's: ``<model>/revisions/<commit>/``, ``<model>/current`` (a
relative symlink), ``<model>/manifests/<commit>.json`` and ``<commit>.stamp.json``.  Module
arguments go in through ansible-core's ``ansible.module_utils.testing.patch_module_args``;
exit_json/fail_json print the result and exit, so each test reads the JSON the module printed.
"""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible_collections.gpufleet.serving.plugins.module_utils import _checkpoint_manifest as cm
from ansible_collections.gpufleet.serving.plugins.module_utils import _checkpoint_verify as cv
from ansible_collections.gpufleet.serving.plugins.modules import checkpoint_verify
from checkpoint_trees import COMMIT, SHARD_1, SHARD_2, build, corrupt_same_size


def run_module(capsys, **args):
    with patch_module_args(args), pytest.raises(SystemExit) as exited:
        checkpoint_verify.main()
    result = json.loads(capsys.readouterr().out)
    return exited.value.code, result


@pytest.fixture(name="model")
def model_fixture(tmp_path):
    model = tmp_path / "kimi-k3.1-pro"
    revision = model / "revisions" / COMMIT
    _files, manifest = build(revision)
    (model / "manifests").mkdir()
    cm.write_manifest_atomic(str(model / "manifests" / ("%s.json" % COMMIT)), manifest)
    cv.write_stamp_atomic(str(model / "manifests" / ("%s.stamp.json" % COMMIT)), cv.make_stamp(str(revision), manifest))
    os.symlink("revisions/%s" % COMMIT, str(model / "current"))
    return model


def test_fast_verification_of_current(capsys, model):
    code, result = run_module(capsys, path=str(model / "current"))
    assert code == 0
    assert result["changed"] is False and result["healthy"] is True
    assert result["problems"] == [] and result["details"] == []
    assert result["mode"] == "fast" and result["stamp_status"] == "used" and result["commit"] == COMMIT
    assert result["files_trusted_by_stamp"] == result["files_total"] == 9
    assert result["files_hashed"] == 0 and result["bytes_hashed"] == 0
    assert result["real_path"].endswith("/revisions/" + COMMIT)
    assert result["manifest"].endswith("/kimi-k3.1-pro/manifests/%s.json" % COMMIT)
    assert isinstance(result["seconds"], float)
    assert "uid" not in result and "state" not in result  # no path key, so no file attributes were added


def test_deep_verification_finds_same_size_corruption(capsys, model):
    corrupt_same_size(str(model / "revisions" / COMMIT / SHARD_2))
    code, fast = run_module(capsys, path=str(model / "current"))
    assert code == 0 and fast["files_hashed"] == 1  # the rewrite changed mtime/ctime: hashed, found
    code, result = run_module(capsys, path=str(model / "current"), deep=True, workers=2)
    assert code == 0
    assert result["healthy"] is False and result["mode"] == "deep" and result["stamp_status"] == "ignored"
    assert result["files_hashed"] == 9 and result["files_trusted_by_stamp"] == 0
    assert [item["kind"] for item in result["details"]] == ["hash_mismatch"]
    message = result["problems"][0]
    detail = result["details"][0]
    assert message == "%s: sha256 is %s, expected %s" % (SHARD_2, detail["found"], detail["expected"])
    assert fast["problems"] == result["problems"]


def test_check_mode_behaves_the_same(capsys, model):
    os.unlink(str(model / "revisions" / COMMIT / SHARD_1))
    _code, normal = run_module(capsys, path=str(model / "current"))
    code, checked = run_module(capsys, path=str(model / "current"), _ansible_check_mode=True)
    assert code == 0
    for key in ("changed", "healthy", "problems", "commit", "mode", "files_total", "files_hashed", "stamp_status"):
        assert checked[key] == normal[key], key
    assert [item["kind"] for item in checked["details"]] == ["missing"]


def test_the_module_writes_nothing(capsys, model):
    before = {path: os.stat(os.path.join(root, path)).st_mtime_ns
              for root, _dirs, names in os.walk(str(model)) for path in names}
    run_module(capsys, path=str(model / "current"), deep=True)
    after = {path: os.stat(os.path.join(root, path)).st_mtime_ns
             for root, _dirs, names in os.walk(str(model)) for path in names}
    assert before == after


def test_missing_manifest_is_unhealthy_not_a_crash(capsys, model):
    os.unlink(str(model / "manifests" / ("%s.json" % COMMIT)))
    code, result = run_module(capsys, path=str(model / "current"))
    assert code == 0 and result["healthy"] is False
    assert [item["kind"] for item in result["details"]] == ["manifest_missing"]
    assert result["problems"][0].startswith("manifest %s does not exist" % result["manifest"])


def test_explicit_manifest_and_stamp(capsys, model, tmp_path):
    os.rename(str(model / "manifests" / ("%s.json" % COMMIT)), str(tmp_path / "pinned.json"))
    os.rename(str(model / "manifests" / ("%s.stamp.json" % COMMIT)), str(tmp_path / "pinned.stamp"))
    code, result = run_module(capsys, path=str(model / "revisions" / COMMIT), manifest=str(tmp_path / "pinned.json"),
                              stamp=str(tmp_path / "pinned.stamp"))
    assert code == 0 and result["healthy"] is True and result["stamp_status"] == "used"
    assert result["files_trusted_by_stamp"] == 9


def test_trust_remote_code_without_code_files(capsys, model):
    code, result = run_module(capsys, path=str(model / "current"), trust_remote_code=True)
    assert code == 0 and result["healthy"] is False
    assert result["problems"] == ["remote code is trusted but the revision ships no code files"]


def test_fail_on_unhealthy_keeps_the_facts(capsys, model):
    (model / "revisions" / COMMIT / "stray.txt").write_text("x")
    code, result = run_module(capsys, path=str(model / "current"), fail_on_unhealthy=True)
    assert code == 1 and result["failed"] is True and result["changed"] is False
    assert result["msg"] == "Checkpoint %s failed verification with 1 problem(s): stray.txt: not part of revision %s" % (
        result["real_path"], COMMIT)
    assert result["extra_files"] == ["stray.txt"] and result["files_total"] == 9


def test_a_missing_revision_directory(capsys, model):
    os.rename(str(model / "revisions" / COMMIT), str(model / "gone"))
    code, result = run_module(capsys, path=str(model / "current"))
    assert code == 0 and result["healthy"] is False
    assert [item["kind"] for item in result["details"]] == ["missing"]
    assert result["problems"][0].endswith("/revisions/%s does not exist" % COMMIT)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"path": "relative/current"}, "path must be absolute"),
        ({"path": "/models/current", "workers": 0}, "workers must be at least 1"),
        ({}, "missing required arguments: path"),
        ({"path": "/models/current", "deep": "sometimes"}, "deep"),
    ],
)
def test_invalid_arguments(capsys, args, message):
    code, result = run_module(capsys, **args)
    assert code == 1 and result["failed"] is True
    assert message in result["msg"]


# --------------------------------------------------------------------------------------
# The drift check's opt-in deep verification
# --------------------------------------------------------------------------------------


def _drift_check_deep(**variables):
    """What playbooks/drift_check.yml passes as checkpoint_verify_deep, rendered with ``variables``."""
    playbook = yaml.safe_load((Path(__file__).resolve().parents[4] / "playbooks" / "drift_check.yml").read_text())
    play = [p for p in playbook if p.get("vars", {}).get("gpufleet_drift_report")][0]
    verify = [t for t in play["tasks"] if t["name"] == "Checkpoint verification"][0]["block"][0]
    assert verify["ansible.builtin.include_role"]["tasks_from"] == "verify"
    assert verify["vars"]["checkpoint_verify_deep"] == "{{ __drift_check_deep_verify }}"
    templar = Templar(loader=DataLoader(), variables=variables)
    return templar.template(trust_as_template(play["vars"]["__drift_check_deep_verify"]))


def test_drift_check_is_fast_unless_deep_verification_is_asked_for():
    today = datetime.datetime.now().strftime("%a")
    other = (datetime.datetime.now() + datetime.timedelta(days=3)).strftime("%A")
    assert _drift_check_deep() is False
    assert _drift_check_deep(drift_check_deep_verify=True) is True
    assert _drift_check_deep(drift_check_deep_verify="true") is True
    assert _drift_check_deep(drift_check_deep_verify=False, drift_check_deep_verify_weekday="") is False
    # The weekly schedule: deep on that day only (names or their three-letter form, any case).
    assert _drift_check_deep(drift_check_deep_verify_weekday=today) is True
    assert _drift_check_deep(drift_check_deep_verify_weekday=today.upper()) is True
    assert _drift_check_deep(drift_check_deep_verify_weekday=other) is False
