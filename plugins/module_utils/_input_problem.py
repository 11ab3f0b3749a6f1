# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One shape for a refused input, shared by every role's validation and the plan stage (private).

``{"check", "found", "expected", "message", "text"}``: ``check`` names the input, ``found`` what
it is, ``expected`` what it must be, ``message`` says why in a sentence, and ``text`` is the line
the roles print (``[check] message (found ...; expected ...)``).
"""

from __future__ import annotations


def input_problem(check, found, expected, message):
    text = "[%s] %s (found %s; expected %s)" % (check, message, found, expected)
    return {"check": check, "found": found, "expected": expected, "message": message, "text": text}
