# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""endpoint_verify's orchestration (_endpoint_verify.py): options, check order, the result's
shape, redaction of the whole result, and the client warnings."""

from __future__ import annotations

import json

import pytest
from ansible_collections.gpufleet.serving.plugins.module_utils import _endpoint_verify as ev
from test_endpoint_verify_server import (
    CANARY,
    OpenAIStub,
    answering,
    check_of,
    completion,
    dumps,
    json_reply,
    make_params,
    verify,
    vllm_like,
)


def test_checks_run_in_fixed_order_whatever_the_given_order():
    with vllm_like(OpenAIStub()) as stub:
        result = verify(stub, checks=["reasoning", "chat", "models"])
    assert [item["name"] for item in result["checks"]] == ["models", "chat", "reasoning"]


def test_canary_key_never_in_the_result_even_in_model_text():
    leaky = completion("Your key is %s, keep it safe." % CANARY, reasoning="The header said %s." % CANARY)
    with vllm_like(OpenAIStub(), chat=answering(leaky)) as stub:
        result = verify(stub, api_key=CANARY, checks=list(ev.CHECKS), extra_headers={"X-Api-Token": "tok-secret-1234"})
    text = dumps(result)
    assert CANARY not in text and "tok-secret-1234" not in text
    assert result["healthy"] is True
    assert check_of(result, "chat")["details"]["content_excerpt"] == "Your key is ********, keep it safe."


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("127.0.0.1:8000", "does not start with http:// or https://"),
        ("ftp://127.0.0.1:8000", "does not start with http:// or https://"),
        ("http://", "names no host"),
        ("http://127.0.0.1:99999", "has an invalid port"),
        ("http://user:pw@127.0.0.1:8000", "must not carry credentials"),
        ("http://127.0.0.1:8000/v1?x=1", "must not carry a query string"),
        ("", "base_url is empty"),
    ],
)
def test_malformed_url(url, message):
    result = ev.verify_endpoint(make_params(url))
    assert result["healthy"] is False and result["api_url"] is None
    assert [item["name"] for item in result["checks"]] == list(ev.DEFAULT_CHECKS)
    for check in result["checks"]:
        assert check["passed"] is False and check["attempts"] == []
        assert check["diagnosis"].startswith("not run: ") and message in check["diagnosis"]
    assert "user:pw" not in dumps(result)


def test_unreadable_ca_file(tmp_path):
    result = ev.verify_endpoint(make_params("https://127.0.0.1:1", ca_path=str(tmp_path / "missing.pem")))
    assert all(check["diagnosis"].startswith("not run: the TLS settings could not be loaded") for check in result["checks"])


def test_optional_check_failure_keeps_healthy():
    with vllm_like(OpenAIStub(), tool=lambda request: json_reply({"object": "error", "message": "tools off", "code": 400}, 400)) as stub:
        result = verify(stub, checks=["chat", "tool_call"], required_checks=["chat"])
    tool = check_of(result, "tool_call")
    assert result["healthy"] is True and result["problems"] == []
    assert tool["passed"] is False and tool["required"] is False and tool["diagnosis"]


def test_every_check_has_the_documented_keys():
    keys = {"name", "passed", "required", "http_status", "latency_s", "attempts", "diagnosis", "body_excerpt", "notes", "details"}
    attempt_keys = {"request", "method", "path", "stream", "max_tokens", "http_status", "latency_s", "error", "finish_reason",
                    "content_chars", "reasoning_chars", "tool_calls", "prompt_tokens", "completion_tokens", "chunks", "done"}
    with vllm_like(OpenAIStub()) as stub:
        result = verify(stub, checks=list(ev.CHECKS))
    assert set(result) == {"changed", "healthy", "problems", "api_url", "model", "root", "max_model_len", "reasoning_field",
                           "metrics", "checks"}
    assert result["healthy"] is True
    for check in result["checks"]:
        assert set(check) == keys
        assert all(set(attempt) == attempt_keys for attempt in check["attempts"])
    json.dumps(result)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"checks": []}, "checks must name at least one check"),
        ({"checks": ["chat"], "required_checks": ["chat", "image"]}, "required_checks names checks that are not in checks: image"),
        ({"max_tokens": 0}, "max_tokens must be at least 1"),
        ({"max_tokens": 4096, "max_tokens_ceiling": 1024}, "max_tokens_ceiling (1024) must not be lower than max_tokens (4096)"),
        ({"timeout": 0}, "timeout must be a positive number"),
        ({"long_context_tokens": 0}, "long_context_tokens must be at least 1"),
        ({"client_key": "/k.pem"}, "client_key needs client_cert"),
        ({"image_data_url": " "}, "image_data_url must not be empty"),
        ({"extra_headers": {"Bad Header": "x"}}, "invalid header name"),
        ({"extra_headers": {"X-A": "a\r\nInjected: 1"}}, "contains a line break"),
        ({"api_key": CANARY, "extra_headers": {"authorization": "Bearer x"}}, "mutually exclusive"),
    ],
)
def test_option_errors(overrides, message):
    errors = ev.option_errors(make_params("http://127.0.0.1:8000", **overrides))
    assert any(message in error for error in errors), errors


def test_valid_options_have_no_errors():
    assert ev.option_errors(make_params("http://127.0.0.1:8000", checks=["chat", "image"], required_checks=["chat"])) == []


def test_secrets_of_takes_the_key_and_credential_headers():
    assert ev.secrets_of({"api_key": "k1", "extra_headers": {"X-Auth-Token": "t1", "X-Team": "a"}}) == ["k1", "t1"]


@pytest.mark.parametrize(
    ("base_url", "extra", "warned"),
    [
        ("http://10.0.0.5:8000", {"api_key": "k1"}, "the Authorization header is sent over plain http to 10.0.0.5:8000"),
        ("http://engine.example.com/v1", {"extra_headers": {"X-Api-Key": "k2"}}, "the X-Api-Key header"),
        ("http://127.0.0.1:8000", {"api_key": "k1"}, None),
        ("http://localhost:8000", {"api_key": "k1"}, None),
        ("http://[::1]:8000", {"api_key": "k1"}, None),
        ("https://10.0.0.5:8000", {"api_key": "k1"}, None),
        ("http://10.0.0.5:8000", {"extra_headers": {"X-Team": "a"}}, None),
        ("ftp://10.0.0.5", {"api_key": "k1"}, None),
    ],
)
def test_client_warnings_for_a_key_over_plain_http(base_url, extra, warned):
    warnings = ev.client_warnings(make_params(base_url, **extra))
    if warned is None:
        assert warnings == []
    else:
        assert len(warnings) == 1 and warnings[0].startswith(warned) and "use an https base_url" in warnings[0]
        assert "k1" not in warnings[0] and "k2" not in warnings[0]
