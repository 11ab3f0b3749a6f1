# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How the checks' requests are sent and recorded (_endpoint_session.py): budget escalation,
budgets inside max_model_len, an unreachable endpoint blocking the later checks, excerpts."""

from __future__ import annotations

from ansible_collections.gpufleet.serving.plugins.module_utils import _endpoint_verify as ev
from test_endpoint_verify_server import (
    CHAT,
    MODELS,
    REASONING_CHAT,
    OpenAIStub,
    Reply,
    check_of,
    completion,
    fixture_bytes,
    fixture_json,
    free_port,
    json_reply,
    make_params,
    sse_reply,
    text_stream,
    verify,
    vllm_like,
)


def test_length_without_content_then_success_on_escalation():
    thinking = completion(None, finish_reason="length", reasoning="Let me think about this for a long time ...")
    answer = completion("Paris is the capital of France.", reasoning="Short thought.")
    replies = [json_reply(thinking), json_reply(answer)]

    def chat(request):
        if request["body"].get("stream"):
            return sse_reply(text_stream(answer["choices"][0]["message"], field="reasoning"))
        return replies.pop(0) if len(replies) > 1 else replies[0]

    with vllm_like(OpenAIStub(), chat=chat) as stub:
        result = verify(stub, checks=["chat"])
        budgets = [body["max_tokens"] for body in stub.sent(CHAT)]
    chat_check = check_of(result, "chat")
    assert chat_check["passed"] is True
    assert budgets == [2048, 4096, 4096]  # two attempts, then the stream at the budget that answered
    assert [(item["max_tokens"], item["finish_reason"], item["content_chars"]) for item in chat_check["attempts"][:2]] == [
        (2048, "length", 0), (4096, "stop", 31)]
    assert chat_check["details"]["max_tokens"] == 4096
    assert result["reasoning_field"] == "reasoning"
    # No usage chunk in this stream: the rate falls back to counting chunks and says so.
    assert result["metrics"]["tokens_source"] == "chunks" and result["metrics"]["completion_tokens"] > 1


def test_length_without_content_up_to_the_ceiling_fails():
    thinking = completion("", finish_reason="length", reasoning_content="thinking " * 50)
    with vllm_like(OpenAIStub(), chat=lambda request: json_reply(thinking)) as stub:
        result = verify(stub, checks=["chat"], max_tokens=1024, max_tokens_ceiling=3000)
        budgets = [body["max_tokens"] for body in stub.sent(CHAT)]
    chat = check_of(result, "chat")
    assert budgets == [1024, 2048, 3000]
    assert chat["passed"] is False and len(chat["attempts"]) == 3
    assert "no content at every budget up to 3000 tokens (3 attempt(s)), so the reasoning used the whole budget" in chat["diagnosis"]
    assert "raise max_tokens_ceiling or lower reasoning_effort" in chat["diagnosis"]
    assert result["problems"] == ["chat: " + chat["diagnosis"]]


def test_budget_kept_inside_max_model_len():
    models = fixture_json(MODELS)
    models["data"][0]["max_model_len"] = 512
    with vllm_like(OpenAIStub()) as stub:
        stub.route("GET", "/v1/models", json_reply(models))
        result = verify(stub, checks=["models", "chat"])
        budgets = [body["max_tokens"] for body in stub.sent(CHAT)]
    assert result["max_model_len"] == 512
    assert budgets and all(budget < 512 for budget in budgets)
    assert any("max_tokens lowered from 2048" in note for note in check_of(result, "chat")["notes"])


def test_chat_timeout_does_not_stop_other_checks():
    with vllm_like(OpenAIStub(), chat=lambda request: Reply(200, fixture_bytes(REASONING_CHAT), delay=1.5)) as stub:
        result = verify(stub, timeout=0.4, checks=["models", "chat", "reasoning"])
    chat = check_of(result, "chat")
    assert chat["http_status"] is None and chat["attempts"][0]["error"].startswith("no answer within the timeout")
    assert "no complete answer within the 0.4 s timeout" in chat["diagnosis"]
    assert "raise timeout" in chat["diagnosis"]
    # The reasoning check still sent its own request.
    assert len(check_of(result, "reasoning")["attempts"]) == 1 and check_of(result, "models")["passed"] is True


def test_health_timeout_stops_the_later_checks():
    with vllm_like(OpenAIStub()) as stub:
        stub.route("GET", "/health", Reply(200, b"", delay=1.5))
        result = verify(stub, timeout=0.3)
        paths = [item["path"] for item in stub.requests]
    assert paths == ["/health"]
    assert check_of(result, "models")["diagnosis"].startswith(
        "not run because an earlier request did not reach the endpoint: health check: GET /health: no complete answer")


def test_connection_refused():
    port = free_port()
    result = ev.verify_endpoint(make_params("http://127.0.0.1:%d" % port, checks=list(ev.CHECKS)))
    health = check_of(result, "health")
    assert result["healthy"] is False and health["http_status"] is None
    assert health["diagnosis"].startswith("GET /health: the connection to 127.0.0.1:%d was refused, so nothing listens there" % port)
    assert "vLLM opens its port only after the weights are loaded" in health["diagnosis"]
    for check in result["checks"][1:]:
        assert check["attempts"] == [] and check["diagnosis"].startswith("not run because an earlier request did not reach the endpoint")
    assert len(result["problems"]) == len(ev.CHECKS)


def test_long_body_excerpt_is_truncated():
    with vllm_like(OpenAIStub(), chat=lambda request: Reply(502, "x" * 5000, "text/plain")) as stub:
        result = verify(stub, checks=["chat"])
    excerpt = check_of(result, "chat")["body_excerpt"]
    assert len(excerpt) == 503 and excerpt.endswith("...")
