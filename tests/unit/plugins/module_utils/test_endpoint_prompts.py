# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the checks send (_endpoint_prompts.py): the long-context prompt, token estimates and budgets."""

from __future__ import annotations

from ansible_collections.gpufleet.serving.plugins.module_utils import _endpoint_prompts as prompts


def test_long_prompt_and_estimates():
    prompt = prompts.long_prompt(1000)
    assert abs(len(prompt) - 4000) < 120 and prompt.endswith("Answer with the number only.")
    assert prompts.estimate_tokens("abcd" * 10) == 10


def test_budgets_kept_inside_max_model_len():
    messages = [{"role": "user", "content": "x" * 400}]
    assert prompts.token_budgets(2048, 8192, None, messages) == (2048, 8192, None)
    assert prompts.token_budgets(64, 32, None, messages) == (64, 64, None)
    room = 1000 - prompts.estimate_prompt_tokens(messages)
    assert prompts.token_budgets(2048, 8192, 1000, messages) == (
        room, room, "max_tokens lowered from 2048 to %d to fit max_model_len 1000" % room)
    # Too little room to clamp to: the budgets stay and the server answers with its own error.
    assert prompts.token_budgets(2048, 8192, 100, messages) == (2048, 8192, None)
