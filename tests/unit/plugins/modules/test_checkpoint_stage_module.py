# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.serving.checkpoint_stage through its real main(): the Hub token is a no_log option that
reaches the downloader (whose children get it in their environment), not read from the module's own
environment, and never printed."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpufleet.serving.plugins.modules import checkpoint_stage

CANARY = "hf_canarySTAGE0123456789abcdef"
COMMIT = "d" * 40


def run(capsys, monkeypatch, tmp_path, **extra):
    seen = {}

    def fake_stage(layout, commit, repo_id, options, free_bytes_of, check_mode=False):
        seen.update(options)
        return {"changed": False, "commit": commit}

    monkeypatch.setattr(checkpoint_stage, "stage", fake_stage)
    args = dict({"model_dir": str(tmp_path / "org--name"), "repo_id": "org/name", "commit": COMMIT}, **extra)
    with patch_module_args(args), pytest.raises(SystemExit) as exited:
        checkpoint_stage.main()
    out = capsys.readouterr().out
    assert exited.value.code == 0 and json.loads(out)["commit"] == COMMIT
    return seen, out


def test_the_token_option_reaches_the_downloader_and_is_never_printed(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    seen, out = run(capsys, monkeypatch, tmp_path, token=CANARY)
    assert seen["token"] == CANARY
    assert CANARY not in out


def test_a_token_in_the_modules_environment_is_not_taken(capsys, monkeypatch, tmp_path):
    # The role no longer sets the task's environment; a stray HF_TOKEN there must not become the token.
    monkeypatch.setenv("HF_TOKEN", CANARY)
    seen, _out = run(capsys, monkeypatch, tmp_path)
    assert seen["token"] is None
