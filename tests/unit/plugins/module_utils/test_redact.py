# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The collection's one redaction helper (_redact.py) and the two places that use it."""

from __future__ import annotations

from ansible_collections.gpufleet.serving.plugins.module_utils import _checkpoint_download, _endpoint_checks, _http_diagnosis
from ansible_collections.gpufleet.serving.plugins.module_utils._redact import REDACTED, redact, scrub


def test_one_placeholder_for_one_or_many_secrets():
    assert REDACTED == "********"
    assert redact("key sk-1 and sk-1", ["sk-1"]) == "key ******** and ********"
    assert redact("token hf_abc in url", "hf_abc") == "token ******** in url"
    assert redact("nothing", None) == "nothing" and redact("", ["x"]) == "" and redact(None, ["x"]) is None
    assert redact("a b", ["", None]) == "a b"


def test_a_secret_containing_another_is_replaced_whole():
    # Shortest first would leave "-long" readable.
    assert redact("sk-1-long", ["sk-1", "sk-1-long"]) == REDACTED
    assert redact("sk-1-long", ("sk-1-long", "sk-1")) == REDACTED


def test_scrub_walks_results():
    result = {"a": ["k1 here", {"b": "no k1"}], "n": 3, "t": None}
    assert scrub(result, ["k1"]) == {"a": ["******** here", {"b": "no ********"}], "n": 3, "t": None}


def test_every_redaction_site_uses_the_helper():
    assert _checkpoint_download.redact is redact
    assert _http_diagnosis.redact is redact
    assert _endpoint_checks.CheckSession.fail.__globals__["redact"] is redact
