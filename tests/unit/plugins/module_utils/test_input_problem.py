# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one shape of a refused input that every role's validation and the plan stage print."""

from __future__ import annotations

from ansible_collections.gpufleet.serving.plugins.module_utils._input_problem import input_problem


def test_the_line_names_the_input_what_was_found_and_what_is_expected():
    problem = input_problem("port", "127.0.0.1:8000 in use by python3", "a free port", "port 8000 is already in use by python3")
    assert problem == {
        "check": "port", "found": "127.0.0.1:8000 in use by python3", "expected": "a free port",
        "message": "port 8000 is already in use by python3",
        "text": "[port] port 8000 is already in use by python3 (found 127.0.0.1:8000 in use by python3; expected a free port)",
    }
