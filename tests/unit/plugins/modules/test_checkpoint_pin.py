# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.serving.checkpoint_pin through its real main(): the Hub token is a no_log option handed to
the Hub client in-process, never an environment variable, and the options are the shared Hub spec."""

from __future__ import annotations

import json
import os

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_hub import hub_argument_spec
from ansible_collections.gpufleet.serving.plugins.modules import checkpoint_pin, checkpoint_plan

CANARY = "hf_canaryTOKEN0123456789abcdef"
COMMIT = "c" * 40


def test_the_token_reaches_the_hub_client_in_process_only(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    seen = {}

    class RecordingApi:
        def __init__(self, endpoint=None, token=None):
            seen.update(endpoint=endpoint, token=token, env=os.environ.get("HF_TOKEN"))

    def fake_pin(api, fetch_text, layout, *args, **kwargs):
        return {"changed": False, "commit": COMMIT}

    monkeypatch.setattr(checkpoint_pin, "HfApi", RecordingApi)
    monkeypatch.setattr(checkpoint_pin, "pin", fake_pin)
    args = {"model_dir": str(tmp_path / "org--name"), "repo_id": "org/name", "revision": COMMIT, "token": CANARY}
    with patch_module_args(args), pytest.raises(SystemExit) as exited:
        checkpoint_pin.main()
    out = capsys.readouterr().out
    assert exited.value.code == 0 and json.loads(out)["commit"] == COMMIT
    assert seen == {"endpoint": None, "token": CANARY, "env": None}
    assert "HF_TOKEN" not in os.environ
    assert CANARY not in out  # no_log: never echoed in the invocation or the result


def test_both_hub_modules_take_the_shared_options_with_the_token_hidden():
    spec = hub_argument_spec()
    assert spec["token"]["no_log"] is True
    assert spec is not hub_argument_spec()  # callers extend their own copy
    for module in (checkpoint_pin, checkpoint_plan):
        assert "gpufleet.serving.checkpoint_hub" in module.DOCUMENTATION
