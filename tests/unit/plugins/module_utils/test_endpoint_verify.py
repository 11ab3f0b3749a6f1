# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""endpoint_verify's checks against a real local HTTP server (test_endpoint_verify_server.py)
that replays the captures in tests/fixtures/openai/, and the pure helpers on their own."""

from __future__ import annotations

import base64
import json
import socket
import struct
import threading
import zlib

import pytest
from ansible_collections.gpufleet.serving.plugins.module_utils import _endpoint_verify as ev
from ansible_collections.gpufleet.serving.plugins.module_utils._openai_chat import (
    assemble_stream,
    assistant_turn,
    parse_sse,
    reasoning_fields,
    schema_errors,
    server_error_message,
    stream_metrics,
)
from ansible_collections.gpufleet.serving.plugins.module_utils._openai_http import (
    Client,
    classify_error,
    parse_base_url,
)
from test_endpoint_verify_server import (
    ERROR_404,
    MODELS,
    REASONING_CHAT,
    TOOL_CALL,
    OpenAIStub,
    Reply,
    answering,
    chunk,
    completion,
    fixture_bytes,
    fixture_json,
    json_reply,
    sse_reply,
    text_stream,
    tool_call_stream,
    vllm_like,
)

CANARY = "sk-canary-7f3a9c1e5b2d4e6f8a0b"
SERVED = "meta-llama/Llama-3.1-8B"  # the id in the /v1/models capture
CHAT = "/v1/chat/completions"
TOOL_CAPTURE_ID = "chatcmpl-tool-8dd7be12aefe48db82c95485622202cb"


def make_params(base_url, **overrides):
    params = {
        "base_url": base_url,
        "api_key": None,
        "model": None,
        "checks": list(ev.DEFAULT_CHECKS),
        "required_checks": None,
        "reasoning_effort": "low",
        "max_tokens": 2048,
        "max_tokens_ceiling": 8192,
        "chat_prompt": None,
        "stop": None,
        "timeout": 5.0,
        "validate_certs": True,
        "ca_path": None,
        "client_cert": None,
        "client_key": None,
        "long_context_tokens": 2000,
        "image_data_url": None,
        "extra_headers": None,
        "fail_on_unhealthy": False,
    }
    params.update(overrides)
    return params


def verify(stub, **overrides):
    return ev.verify_endpoint(make_params(stub.url, **overrides))


def check_of(result, name):
    matches = [item for item in result["checks"] if item["name"] == name]
    assert len(matches) == 1, name
    return matches[0]


def free_port():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def dumps(result):
    return json.dumps(result, sort_keys=True)


# --------------------------------------------------------------------------------------
# Against the captures
# --------------------------------------------------------------------------------------


def test_default_checks_on_the_captures():
    with vllm_like(OpenAIStub()) as stub:
        result = verify(stub)
        sent = stub.sent(CHAT)
    assert result["healthy"] is True and result["problems"] == [] and result["changed"] is False
    assert [item["name"] for item in result["checks"]] == ["health", "models", "chat", "reasoning"]
    assert all(item["passed"] and item["required"] and item["diagnosis"] is None for item in result["checks"])
    assert result["model"] == SERVED and result["root"] == SERVED and result["max_model_len"] == 131072
    assert result["api_url"] == stub.url + "/v1"
    assert result["reasoning_field"] == "reasoning_content"
    chat = check_of(result, "chat")
    assert chat["details"]["finish_reason"] == "stop" and chat["details"]["truncated"] is False
    assert chat["details"]["content_excerpt"].startswith("Great job!")
    assert [(item["request"], item["stream"], item["http_status"]) for item in chat["attempts"]] == [
        ("chat", False, 200), ("chat stream", True, 200)]
    assert chat["attempts"][1]["done"] is True
    metrics = result["metrics"]
    assert metrics["tokens_source"] == "usage" and metrics["prompt_tokens"] == 15 and metrics["completion_tokens"] == 130
    assert metrics["ttft_s"] is not None and 0 <= metrics["ttft_s"] < 5
    # The stub's usage (130 tokens) is not its few text chunks, so its rate may look like a burst.
    assert metrics["output_tokens_per_s"] is None or metrics["output_tokens_per_s"] > 0
    # What went over the wire: the alias from /v1/models, the budget, the effort, usage for streams.
    assert all(body["model"] == SERVED and body["reasoning_effort"] == "low" for body in sent)
    assert sent[0]["max_tokens"] == 2048 and "stream" not in sent[0]
    assert sent[1]["stream"] is True and sent[1]["stream_options"] == {"include_usage": True}
    assert check_of(result, "reasoning")["details"]["reasoning_field"] == "reasoning_content"


def test_base_url_with_v1_and_bearer_key_and_extra_headers():
    with vllm_like(OpenAIStub()) as stub:
        result = ev.verify_endpoint(make_params(stub.url + "/v1/", api_key=CANARY, checks=["health", "models"],
                                                extra_headers={"X-Team": "inference"}))
        headers = [item["headers"] for item in stub.requests]
    assert result["healthy"] is True
    assert [item["path"] for item in stub.requests] == ["/health", "/v1/models"]
    assert all(item["Authorization"] == "Bearer " + CANARY and item["X-Team"] == "inference" for item in headers)
    assert CANARY not in dumps(result)


def test_model_not_listed_names_what_is_served():
    with vllm_like(OpenAIStub()) as stub:
        result = verify(stub, model="kimi-k3.1-pro", checks=["models"])
    models = check_of(result, "models")
    assert result["healthy"] is False and models["passed"] is False
    assert "lists 'meta-llama/Llama-3.1-8B' but not the model alias 'kimi-k3.1-pro'" in models["diagnosis"]
    assert "--served-model-name" in models["diagnosis"]
    assert models["details"]["served_models"] == [SERVED]
    assert result["problems"] == ["models: " + models["diagnosis"]]


def test_unknown_model_404_capture():
    with vllm_like(OpenAIStub(), chat=lambda request: Reply(404, fixture_bytes(ERROR_404))) as stub:
        result = verify(stub, model="Qwen1.5-14B-Chat-GPTQ-Int8", checks=["chat"])
    chat = check_of(result, "chat")
    assert chat["passed"] is False and chat["http_status"] == 404
    assert chat["diagnosis"].startswith("POST /v1/chat/completions answered HTTP 404 (The model `Qwen1.5-14B-Chat-GPTQ-Int8` does not exist.)")
    assert "check model against the ids GET /v1/models lists" in chat["diagnosis"]
    assert chat["body_excerpt"] == fixture_bytes(ERROR_404).decode().strip() or chat["body_excerpt"] == fixture_bytes(ERROR_404).decode()


def test_model_taken_from_models_when_models_check_not_selected():
    with vllm_like(OpenAIStub()) as stub:
        result = verify(stub, checks=["chat"])
        paths = [item["path"] for item in stub.requests]
    assert result["healthy"] is True and result["model"] == SERVED
    assert paths[0] == "/v1/models" and [item["name"] for item in result["checks"]] == ["chat"]


def test_model_given_still_reads_max_model_len():
    models = fixture_json(MODELS)
    models["data"][0]["max_model_len"] = 512
    with vllm_like(OpenAIStub()) as stub:
        stub.route("GET", "/v1/models", json_reply(models))
        result = verify(stub, model=SERVED, checks=["chat"])
        paths = [item["path"] for item in stub.requests]
        budgets = [body["max_tokens"] for body in stub.sent(CHAT)]
    assert result["healthy"] is True and result["max_model_len"] == 512
    assert paths == ["/v1/models", CHAT, CHAT] and all(budget < 512 for budget in budgets)


def test_model_given_and_no_models_route():
    with vllm_like(OpenAIStub()) as stub:
        stub.route("GET", "/v1/models", json_reply({"detail": "Not Found"}, 404))
        result = verify(stub, model="gateway-alias", checks=["chat"])
        sent = stub.sent(CHAT)
    assert result["healthy"] is True and result["max_model_len"] is None and result["model"] == "gateway-alias"
    assert sent[0]["model"] == "gateway-alias" and sent[0]["max_tokens"] == 2048


def test_model_lookup_unreachable():
    result = ev.verify_endpoint(make_params("http://127.0.0.1:%d" % free_port(), checks=["chat", "image"]))
    assert [check["attempts"] for check in result["checks"]] == [[], []]
    first, second = result["checks"]
    assert first["diagnosis"].startswith("not run because the request for the model list did not reach the endpoint: "
                                         "model lookup: GET /v1/models: the connection to")
    assert second["diagnosis"].startswith("not run because an earlier request did not reach the endpoint: model lookup: ")


def test_model_given_and_lookup_unreachable_sends_nothing_more():
    port = free_port()
    result = ev.verify_endpoint(make_params("http://127.0.0.1:%d" % port, model="m", checks=["chat"]))
    assert result["checks"][0]["attempts"] == []
    assert "model lookup: GET /v1/models: the connection to 127.0.0.1:%d was refused" % port in result["checks"][0]["diagnosis"]


def test_checks_run_in_fixed_order_whatever_the_given_order():
    with vllm_like(OpenAIStub()) as stub:
        result = verify(stub, checks=["reasoning", "chat", "models"])
    assert [item["name"] for item in result["checks"]] == ["models", "chat", "reasoning"]


# --------------------------------------------------------------------------------------
# Budget escalation
# --------------------------------------------------------------------------------------


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


def test_length_with_content_passes_and_is_reported():
    cut = completion("Paris is the capital of", finish_reason="length")
    with vllm_like(OpenAIStub(), chat=lambda request: json_reply(cut) if not request["body"].get("stream")
                   else sse_reply(text_stream(cut["choices"][0]["message"], finish_reason="length"))) as stub:
        result = verify(stub, checks=["chat"])
        sent = stub.sent(CHAT)
    chat = check_of(result, "chat")
    assert chat["passed"] is True and chat["details"]["truncated"] is True
    assert len(sent) == 2  # no escalation when there is content
    assert any("finish_reason is length" in note for note in chat["notes"])


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


def test_stop_strings_sent_except_with_tool_calls():
    with vllm_like(OpenAIStub()) as stub:
        verify(stub, checks=["chat", "tool_call"], stop=["."], reasoning_effort="")
        sent = stub.sent(CHAT)
    assert all("reasoning_effort" not in body for body in sent)
    assert [("stop" in body, bool(body.get("tools"))) for body in sent] == [
        (True, False), (True, False), (False, True), (False, True), (False, True)]


# --------------------------------------------------------------------------------------
# Tool calls
# --------------------------------------------------------------------------------------


def test_tool_call_capture_streaming_and_round_trip():
    with vllm_like(OpenAIStub()) as stub:
        result = verify(stub, checks=["tool_call"])
        sent = stub.sent(CHAT)
    tool = check_of(result, "tool_call")
    assert tool["passed"] is True and result["healthy"] is True
    details = tool["details"]
    assert details["non_streaming"] == {"passed": True, "finish_reason": "tool_calls", "arguments": {"city": "New York"}}
    assert details["streaming"]["passed"] is True and details["streaming"]["arguments"] == {"city": "New York"}
    assert details["round_trip"]["passed"] is True and details["round_trip"]["tool_call_ids"] == [TOOL_CAPTURE_ID]
    first, streamed, follow = sent
    assert first["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert first["tools"][0]["function"]["parameters"]["required"] == ["city"]
    assert streamed["stream"] is True
    # The whole assistant message of the capture goes back, then the tool result with its id.
    capture_message = fixture_json(TOOL_CALL)["choices"][0]["message"]
    assistant, result_turn = follow["messages"][1], follow["messages"][2]
    assert assistant == {"role": "assistant", "content": None, "tool_calls": capture_message["tool_calls"]}
    assert result_turn["role"] == "tool" and result_turn["tool_call_id"] == TOOL_CAPTURE_ID
    assert json.loads(result_turn["content"])["city"] == "New York"


def _tool_server(message, stream_events=None):
    """A stub whose tool requests answer ``message`` (and stream ``stream_events``)."""

    def tool(request):
        if request["body"].get("stream"):
            return sse_reply(stream_events if stream_events is not None else tool_call_stream(message["tool_calls"][0]))
        return json_reply(completion(message.get("content"), finish_reason="tool_calls",
                                     **{key: value for key, value in message.items() if key != "content"}))

    return vllm_like(OpenAIStub(), tool=tool)


def _call(arguments, call_id="call_1", name="get_weather"):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_tool_call_malformed_arguments():
    message = {"content": None, "tool_calls": [_call('{"city": "Paris", "unit": ')]}
    with _tool_server(message) as stub:
        result = verify(stub, checks=["tool_call"])
    tool = check_of(result, "tool_call")
    assert tool["passed"] is False
    assert "the get_weather call's arguments are not valid JSON" in tool["diagnosis"]
    assert "--tool-call-parser" in tool["diagnosis"]
    assert tool["details"]["non_streaming"]["passed"] is False and tool["details"]["streaming"]["passed"] is False
    assert tool["details"]["round_trip"]["skipped"] == "no valid tool call to answer"


def test_tool_call_arguments_fail_the_schema():
    message = {"content": None, "tool_calls": [_call('{"unit": "kelvin", "country": "FR"}')]}
    with _tool_server(message) as stub:
        result = verify(stub, checks=["tool_call"])
    diagnosis = check_of(result, "tool_call")["diagnosis"]
    assert "do not match the tool's schema" in diagnosis
    assert 'arguments lacks the required property "city"' in diagnosis
    assert 'arguments.unit is "kelvin", expected one of "celsius", "fahrenheit"' in diagnosis
    assert 'the property "country", which the schema does not allow' in diagnosis


def test_streamed_tool_call_fragments_split_across_chunks():
    arguments = '{"city": "Paris", "unit": "celsius"}'
    events = [chunk({"role": "assistant", "content": None}),
              chunk({"tool_calls": [{"index": 0, "id": "call_9", "type": "function", "function": {"name": "get_"}}]}),
              chunk({"tool_calls": [{"index": 0, "function": {"name": "weather", "arguments": arguments[:3]}}]}),
              0.01]
    events += [chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[start:start + 5]}}]})
               for start in range(3, len(arguments), 5)]
    events.append(chunk({}, finish_reason="tool_calls"))
    message = {"content": None, "tool_calls": [_call(arguments, "call_9")]}
    with _tool_server(message, events) as stub:
        result = verify(stub, checks=["tool_call"])
    streaming = check_of(result, "tool_call")["details"]["streaming"]
    assert streaming == {"passed": True, "finish_reason": "tool_calls", "arguments": {"city": "Paris", "unit": "celsius"}}
    assert check_of(result, "tool_call")["passed"] is True


def test_tool_round_trip_keeps_the_reasoning_field_the_server_used():
    message = {"content": "", "reasoning": "The user wants the weather; call the tool.",
               "tool_calls": [_call('{"city": "Paris"}')]}
    with _tool_server(message) as stub:
        result = verify(stub, checks=["tool_call"])
        follow = stub.sent(CHAT)[-1]
    assert check_of(result, "tool_call")["passed"] is True
    assistant = follow["messages"][1]
    assert assistant["reasoning"] == "The user wants the weather; call the tool."
    assert "reasoning_content" not in assistant
    assert check_of(result, "tool_call")["details"]["round_trip"]["reasoning_fields_sent"] == ["reasoning"]
    assert result["reasoning_field"] == "reasoning"


def test_no_tool_call_and_tool_choice_rejected():
    with _tool_server({"content": "It is probably sunny.", "tool_calls": []}, [chunk({"content": "Sunny."})]) as stub:
        result = verify(stub, checks=["tool_call"])
    diagnosis = check_of(result, "tool_call")["diagnosis"]
    assert "the answer has no tool call (finish_reason tool_calls, 21 content chars) although tool_choice named get_weather" in diagnosis
    assert diagnosis.endswith("check that the server runs with --enable-auto-tool-choice and the model's --tool-call-parser")
    rejected = {"object": "error", "message": '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
                "type": "BadRequestError", "param": None, "code": 400}
    with vllm_like(OpenAIStub(), tool=lambda request: json_reply(rejected, 400)) as stub:
        result = verify(stub, checks=["tool_call"])
    diagnosis = check_of(result, "tool_call")["diagnosis"]
    assert diagnosis.startswith("POST /v1/chat/completions answered HTTP 400 (\"auto\" tool choice requires")
    assert "check that the server runs with --enable-auto-tool-choice" in diagnosis


def test_tool_call_cut_by_the_budget():
    def tool(request):
        if request["body"].get("stream"):
            return sse_reply([chunk({"content": "<tool_call>{\"na"}, finish_reason="length")])
        return json_reply(completion('<tool_call>{"name": "get_we', finish_reason="length"))

    with vllm_like(OpenAIStub(), tool=tool) as stub:
        result = verify(stub, checks=["tool_call"], max_tokens=16, max_tokens_ceiling=16)
    tool_check = check_of(result, "tool_call")
    assert tool_check["diagnosis"].startswith("POST /v1/chat/completions: the answer has no tool call (finish_reason length, 27 content chars)")
    assert "raise max_tokens (the answer was cut at 16 tokens)" in tool_check["diagnosis"]
    assert tool_check["details"]["streaming"] == {"passed": False, "finish_reason": "length", "arguments": None}


def test_tool_result_turn_rejected():
    def chat(request):
        return json_reply({"object": "error", "message": "Unexpected message role.", "code": 400}, 400)

    with vllm_like(OpenAIStub()) as stub:
        original = stub.reply_for

        def reply_for(request):
            if request["path"] == CHAT and any(item.get("role") == "tool" for item in request["body"]["messages"]):
                return chat(request)
            return original(request)

        stub.reply_for = reply_for
        result = verify(stub, checks=["tool_call"])
    tool = check_of(result, "tool_call")
    assert tool["passed"] is False and tool["details"]["non_streaming"]["passed"] is True
    assert tool["diagnosis"].startswith("tool result turn: POST /v1/chat/completions answered HTTP 400 (Unexpected message role.)")


# --------------------------------------------------------------------------------------
# Reasoning and multi-turn
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_reasoning_field_name_reported(field):
    answer = completion("2 h 35 min.", **{field: "16:45 minus 14:10 is 2:35."})
    with vllm_like(OpenAIStub(), chat=lambda request: json_reply(answer)) as stub:
        result = verify(stub, checks=["reasoning"])
    assert result["healthy"] is True and result["reasoning_field"] == field
    assert check_of(result, "reasoning")["details"]["reasoning_field"] == field


def test_no_reasoning_text():
    answer = completion("2 h 35 min.", reasoning_content=None)
    with vllm_like(OpenAIStub(), chat=lambda request: json_reply(answer)) as stub:
        result = verify(stub, checks=["reasoning"])
    diagnosis = check_of(result, "reasoning")["diagnosis"]
    assert "without reasoning text (the field(s) reasoning_content are present but null or empty" in diagnosis
    assert "--reasoning-parser" in diagnosis and result["reasoning_field"] is None


def test_reasoning_effort_rejected():
    error = {"object": "error", "message": "1 validation error: reasoning_effort Input should be 'low', 'medium' or 'high'",
             "type": "BadRequestError", "code": 400}
    with vllm_like(OpenAIStub(), chat=lambda request: json_reply(error, 400)) as stub:
        result = verify(stub, checks=["reasoning"], reasoning_effort="extreme")
    diagnosis = check_of(result, "reasoning")["diagnosis"]
    assert "answered HTTP 400" in diagnosis and "expected reasoning_effort=extreme to be accepted" in diagnosis


def test_multi_turn_keeps_the_whole_assistant_message():
    with vllm_like(OpenAIStub()) as stub:
        result = verify(stub, checks=["multi_turn"])
        sent = stub.sent(CHAT)
    multi = check_of(result, "multi_turn")
    assert multi["passed"] is True and multi["details"]["reasoning_fields_sent"] == ["reasoning_content"]
    captured = fixture_json(REASONING_CHAT)["choices"][0]["message"]
    second = sent[-1]["messages"]
    assert second[1] == {"role": "assistant", "content": captured["content"], "reasoning_content": captured["reasoning_content"]}
    assert second[2]["role"] == "user" and len(sent) == 2


def test_multi_turn_reuses_the_chat_turn():
    with vllm_like(OpenAIStub()) as stub:
        result = verify(stub, checks=["chat", "multi_turn"])
        sent = stub.sent(CHAT)
    assert result["healthy"] is True
    assert len(sent) == 3  # chat, chat stream, second turn
    assert "first turn taken from the chat check" in check_of(result, "multi_turn")["notes"]


# --------------------------------------------------------------------------------------
# Image and long context
# --------------------------------------------------------------------------------------


def test_image_part_is_a_valid_png_data_url():
    with vllm_like(OpenAIStub()) as stub:
        result = verify(stub, checks=["image"])
        body = stub.sent(CHAT)[0]
    assert check_of(result, "image")["passed"] is True
    part = body["messages"][0]["content"][1]
    assert part["type"] == "image_url"
    prefix = "data:image/png;base64,"
    assert part["image_url"]["url"].startswith(prefix)
    png = base64.b64decode(part["image_url"]["url"][len(prefix):])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (64, 64)
    idat_length = struct.unpack(">I", png[33:37])[0]
    assert png[37:41] == b"IDAT"
    pixels = zlib.decompress(png[41:41 + idat_length])
    assert len(pixels) == 64 * (1 + 64 * 3) and pixels[1:4] == bytes((220, 20, 20))


def test_image_rejected_by_a_text_model():
    error = {"object": "error", "message": "Model does not support image input (not a multimodal model)", "code": 400}
    with vllm_like(OpenAIStub(), chat=lambda request: json_reply(error, 400)) as stub:
        result = verify(stub, checks=["image"], image_data_url="data:image/png;base64,AAAA")
        body = stub.sent(CHAT)[0]
    assert body["messages"][0]["content"][1]["image_url"]["url"] == "data:image/png;base64,AAAA"
    diagnosis = check_of(result, "image")["diagnosis"]
    assert "expected an image_url content part to be accepted; check that the model is multimodal" in diagnosis


def test_long_context_prompt_size_and_context_limit():
    with vllm_like(OpenAIStub()) as stub:
        result = verify(stub, checks=["long_context"], long_context_tokens=3000)
        prompt = stub.sent(CHAT)[0]["messages"][0]["content"]
    assert check_of(result, "long_context")["passed"] is True
    assert 11900 <= len(prompt) <= 12100 and ev.LONG_CONTEXT_CODE in prompt
    assert check_of(result, "long_context")["details"]["code_found"] is False
    error = {"object": "error", "code": 400, "type": "BadRequestError",
             "message": "This model's maximum context length is 2048 tokens. However, you requested 5048 tokens "
                        "(3000 in the messages, 2048 in the completion). Please reduce the length of the messages or completion."}
    with vllm_like(OpenAIStub(), chat=lambda request: json_reply(error, 400)) as stub:
        result = verify(stub, checks=["long_context"], long_context_tokens=3000)
    diagnosis = check_of(result, "long_context")["diagnosis"]
    assert "the prompt plus max_tokens exceed the model's context length" in diagnosis
    assert diagnosis.endswith("check --max-model-len on the server, then long_context_tokens or max_tokens")


# --------------------------------------------------------------------------------------
# HTTP failures
# --------------------------------------------------------------------------------------


def test_health_404_is_not_a_failure_and_503_is():
    with vllm_like(OpenAIStub()) as stub:
        stub.route("GET", "/health", json_reply({"detail": "Not Found"}, 404))
        result = verify(stub, checks=["health"])
    health = check_of(result, "health")
    assert health["passed"] is True and health["details"]["available"] is False and result["healthy"] is True
    with vllm_like(OpenAIStub()) as stub:
        stub.route("GET", "/health", Reply(503, b"", "text/plain"))
        result = verify(stub)
    health = check_of(result, "health")
    assert health["passed"] is False and health["http_status"] == 503
    assert "the engine is not ready (vLLM answers 503 when its engine died, SGLang while it is still starting)" in health["diagnosis"]
    # A 503 is an answer: the other checks still run.
    assert check_of(result, "chat")["passed"] is True


def test_server_error_500():
    with vllm_like(OpenAIStub(), chat=lambda request: Reply(500, "Internal Server Error", "text/plain")) as stub:
        result = verify(stub, checks=["chat"])
    chat = check_of(result, "chat")
    assert chat["diagnosis"] == ("POST /v1/chat/completions answered HTTP 500 (Internal Server Error): a server error; "
                                 "expected 200; check the engine's log for the traceback")
    assert chat["body_excerpt"] == "Internal Server Error"


def test_401_diagnosed_and_echoed_key_redacted():
    def unauthorized(request):
        return json_reply({"error": "Unauthorized: bad token %s" % request["headers"].get("Authorization")}, 401)

    with vllm_like(OpenAIStub()) as stub:
        stub.route("GET", "/v1/models", unauthorized)
        stub.route("POST", CHAT, unauthorized)
        result = verify(stub, api_key=CANARY, checks=["models", "chat"])
    models = check_of(result, "models")
    assert models["http_status"] == 401 and "check api_key against the server's --api-key" in models["diagnosis"]
    assert "Bearer ********" in models["diagnosis"] and "********" in models["body_excerpt"]
    assert check_of(result, "chat")["diagnosis"].startswith("not run: model was not given and GET /v1/models did not provide one")
    assert CANARY not in dumps(result)


def test_canary_key_never_in_the_result_even_in_model_text():
    leaky = completion("Your key is %s, keep it safe." % CANARY, reasoning="The header said %s." % CANARY)
    with vllm_like(OpenAIStub(), chat=answering(leaky)) as stub:
        result = verify(stub, api_key=CANARY, checks=list(ev.CHECKS), extra_headers={"X-Api-Token": "tok-secret-1234"})
    text = dumps(result)
    assert CANARY not in text and "tok-secret-1234" not in text
    assert result["healthy"] is True
    assert check_of(result, "chat")["details"]["content_excerpt"] == "Your key is ********, keep it safe."


def test_non_json_body():
    with vllm_like(OpenAIStub()) as stub:
        stub.route("GET", "/v1/models", Reply(200, "<html><body>Welcome to nginx!</body></html>", "text/html"))
        result = verify(stub, checks=["models"])
    models = check_of(result, "models")
    assert models["diagnosis"].startswith("GET /v1/models answered HTTP 200 with a body that is not JSON (text/html)")
    assert models["body_excerpt"] == "<html><body>Welcome to nginx!</body></html>"


def test_long_body_excerpt_is_truncated():
    with vllm_like(OpenAIStub(), chat=lambda request: Reply(502, "x" * 5000, "text/plain")) as stub:
        result = verify(stub, checks=["chat"])
    excerpt = check_of(result, "chat")["body_excerpt"]
    assert len(excerpt) == 503 and excerpt.endswith("...")


def test_stream_without_done():
    def chat(request):
        if request["body"].get("stream"):
            message = fixture_json(REASONING_CHAT)["choices"][0]["message"]
            chunks = [item for item in text_stream(message) if isinstance(item, dict)]
            return sse_reply(chunks[:20], done=False)
        return Reply(200, fixture_bytes(REASONING_CHAT))

    with vllm_like(OpenAIStub(), chat=chat) as stub:
        result = verify(stub, checks=["chat"])
    chat_check = check_of(result, "chat")
    assert chat_check["passed"] is False and chat_check["attempts"][1]["done"] is False
    assert chat_check["diagnosis"].startswith("streaming: POST /v1/chat/completions: the stream ended after 20 chunk(s) without data: [DONE]")
    assert chat_check["body_excerpt"].startswith("...") or chat_check["body_excerpt"].startswith("data: ")
    assert result["metrics"]["ttft_s"] is None


def test_stream_with_an_error_event_and_with_bad_data():
    error_events = [chunk({"role": "assistant", "content": ""}), chunk({"content": "Par"}),
                    {"error": {"object": "error", "message": "engine core died", "code": 500}}]

    def chat(request):
        if request["body"].get("stream"):
            return sse_reply(error_events)
        return Reply(200, fixture_bytes(REASONING_CHAT))

    with vllm_like(OpenAIStub(), chat=chat) as stub:
        result = verify(stub, checks=["chat"])
    assert "the stream carried an error after 3 chunk(s) (engine core died)" in check_of(result, "chat")["diagnosis"]
    error_events[:] = [chunk({"content": "Par"}), "data: {not json\n\n"]
    with vllm_like(OpenAIStub(), chat=chat) as stub:
        result = verify(stub, checks=["chat"])
    assert "the stream has data that is not JSON ('{not json')" in check_of(result, "chat")["diagnosis"]


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


def test_stream_timeout_mid_stream():
    def chat(request):
        if request["body"].get("stream"):
            return sse_reply([chunk({"content": "Paris"}), 2.0, chunk({"content": "."})])
        return Reply(200, fixture_bytes(REASONING_CHAT))

    with vllm_like(OpenAIStub(), chat=chat) as stub:
        result = verify(stub, checks=["chat"], timeout=0.5)
    assert "streaming: POST /v1/chat/completions: no complete answer within the 0.5 s timeout" in check_of(result, "chat")["diagnosis"]


# --------------------------------------------------------------------------------------
# Unreachable endpoints and bad URLs
# --------------------------------------------------------------------------------------


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


def test_tls_failure_against_a_plain_http_port():
    with vllm_like(OpenAIStub()) as stub:
        result = ev.verify_endpoint(make_params("https://127.0.0.1:%d" % stub.port))
    health = check_of(result, "health")
    assert health["attempts"][0]["error"].startswith("TLS handshake failed")
    assert "check that the port serves https, then ca_path" in health["diagnosis"]
    assert check_of(result, "models")["diagnosis"].startswith("not run because an earlier request")


def test_unreadable_ca_file(tmp_path):
    result = ev.verify_endpoint(make_params("https://127.0.0.1:1", ca_path=str(tmp_path / "missing.pem")))
    assert all(check["diagnosis"].startswith("not run: the TLS settings could not be loaded") for check in result["checks"])


def test_plain_http_to_a_closing_server():
    # A server that accepts and closes at once (what an https-only port often does to plain HTTP).
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]

    def serve():
        for _count in range(2):
            try:
                conn, _addr = listener.accept()
            except OSError:
                return
            conn.recv(1024)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        result = ev.verify_endpoint(make_params("http://127.0.0.1:%d" % port, checks=["health", "models"]))
    finally:
        listener.close()
    health = check_of(result, "health")
    assert health["http_status"] is None and "the server closed the connection" in health["diagnosis"]
    # Not a connect-phase failure: the next check still tries.
    assert check_of(result, "models")["attempts"]


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


# --------------------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------
# Pure helpers
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "root", "api"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000", "http://127.0.0.1:8000/v1"),
        ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000", "http://127.0.0.1:8000/v1"),
        ("https://llm.example.com/serving/v1", "https://llm.example.com:443/serving", "https://llm.example.com:443/serving/v1"),
        ("HTTP://[::1]:30000", "http://[::1]:30000", "http://[::1]:30000/v1"),
    ],
)
def test_parse_base_url(url, root, api):
    endpoint = parse_base_url(url)
    assert endpoint.root_url == root and endpoint.api_url == api


def test_schema_subset():
    schema = ev.WEATHER_PARAMETERS
    assert schema_errors({"city": "Paris"}, schema) == []
    assert schema_errors({"city": "Paris", "unit": "fahrenheit"}, schema) == []
    assert schema_errors(["Paris"], schema) == ["arguments is an array, expected an object"]
    assert schema_errors({"city": 3}, schema) == ["arguments.city is an integer, expected a string"]
    assert schema_errors(1, {"type": "number"}) == [] and schema_errors(True, {"type": "integer"}) == [
        "arguments is a boolean, expected an integer"]
    assert schema_errors(None, {"type": ["string", "null"]}) == []
    assert schema_errors([1, "a"], {"type": "array", "items": {"type": "integer"}}) == ["arguments[1] is a string, expected an integer"]
    assert schema_errors({"a": 1}, {"type": "object", "additionalProperties": {"type": "string"}}) == [
        "arguments.a is an integer, expected a string"]
    assert schema_errors(1, {"enum": [True]}) == ["arguments is 1, expected one of true"]


def test_sse_parsing_multi_line_data_comments_and_fields():
    lines = [(0.1, ": ping"), (0.2, "event: message"), (0.2, 'data: {"a":'), (0.3, "data: 1}"), (0.3, ""),
             (0.4, "data:[DONE]"), (0.5, "garbage")]
    events, other = parse_sse(lines)
    assert events == [(0.3, '{"a":\n1}'), (0.4, "[DONE]")] and other == 1


def test_assemble_stream_without_indexes_and_with_repeated_names():
    def event(delta, t):
        return (t, json.dumps(chunk(delta)))

    events = [
        event({"tool_calls": [{"id": "a", "function": {"name": "get_weather", "arguments": "{\"ci"}}]}, 0.1),
        event({"tool_calls": [{"function": {"name": "get_weather", "arguments": "ty\": \"Oslo\"}"}}]}, 0.2),
        event({"tool_calls": [{"id": "b", "function": {"name": "get_time", "arguments": "{}"}}]}, 0.3),
        event({"reasoning": "hm"}, 0.4),
        (0.5, "[DONE]"),
        (0.6, json.dumps(chunk({"content": "late"}))),
    ]
    stream = assemble_stream(events)
    assert stream["done"] is True and stream["after_done"] == 1
    calls = stream["message"]["tool_calls"]
    assert [(call["id"], call["function"]["name"], call["function"]["arguments"]) for call in calls] == [
        ("a", "get_weather", '{"city": "Oslo"}'), ("b", "get_time", "{}")]
    assert stream["message"]["reasoning"] == "hm" and stream["message"]["content"] is None
    assert stream["first_token_s"] == 0.1 and stream["last_token_s"] == 0.4 and stream["token_chunks"] == 4


def test_stream_metrics_from_usage_and_from_chunks():
    stream = {"usage": {"prompt_tokens": 10, "completion_tokens": 101}, "first_token_s": 0.5, "last_token_s": 2.5, "token_chunks": 60}
    assert stream_metrics(stream) == {"ttft_s": 0.5, "output_tokens_per_s": 50.0, "tokens_source": "usage",
                                      "prompt_tokens": 10, "completion_tokens": 101}
    stream["usage"] = None
    assert stream_metrics(stream)["tokens_source"] == "chunks" and stream_metrics(stream)["output_tokens_per_s"] == 29.5
    stream.update(token_chunks=1, last_token_s=0.5)
    assert stream_metrics(stream)["output_tokens_per_s"] is None


def test_server_error_message_shapes():
    assert server_error_message(fixture_bytes(ERROR_404).decode()) == "The model `Qwen1.5-14B-Chat-GPTQ-Int8` does not exist."
    assert server_error_message('{"error": {"message": "bad", "type": "x"}}') == "bad"
    assert server_error_message('{"detail": [{"loc": ["body", "max_tokens"], "msg": "must be positive"}]}') == "body.max_tokens: must be positive"
    assert server_error_message("<html>\n  Bad   Gateway </html>") == "<html> Bad Gateway </html>"


def test_reasoning_fields_and_assistant_turn_on_the_captures():
    sglang = fixture_json(REASONING_CHAT)["choices"][0]["message"]
    assert [field for field, _text in reasoning_fields(sglang)] == ["reasoning_content"]
    turn = assistant_turn(sglang)
    assert set(turn) == {"role", "content", "reasoning_content"}  # "tool_calls": null is not sent back
    vllm_tool = fixture_json(TOOL_CALL)["choices"][0]["message"]
    assert reasoning_fields(vllm_tool) == []  # "reasoning_content": null does not count
    assert assistant_turn(vllm_tool) == {"role": "assistant", "content": None, "tool_calls": vllm_tool["tool_calls"]}


def test_classify_errors():
    assert classify_error(socket.gaierror(-2, "Name or service not known"), "connect") == ("dns", "host name did not resolve: Name or service not known")
    assert classify_error(socket.timeout("timed out"), "connect")[0] == "timeout"
    assert classify_error(ConnectionRefusedError(111, "refused"), "connect") == ("refused", "connection refused")
    assert classify_error(OSError(113, "No route to host"), "connect") == ("network", "network error: No route to host")


def test_dns_failure_diagnosis():
    endpoint = parse_base_url("http://no-such-host.invalid:8000")

    class Failing(Client):
        def _connection(self):
            raise socket.gaierror(-2, "Name or service not known")

    result = ev.verify_endpoint(make_params(endpoint.root_url), client=Failing(endpoint, timeout=1))
    health = check_of(result, "health")
    assert health["attempts"][0]["error"] == "host name did not resolve: Name or service not known"
    assert "the host name no-such-host.invalid did not resolve" in health["diagnosis"]
    assert check_of(result, "chat")["diagnosis"].startswith("not run because an earlier request")


def test_long_prompt_and_estimates():
    prompt = ev.long_prompt(1000)
    assert abs(len(prompt) - 4000) < 120 and prompt.endswith("Answer with the number only.")
    assert ev.estimate_tokens("abcd" * 10) == 10
    assert ev.redact("key sk-1 and sk-1", ["sk-1"]) == "key ******** and ********"
    assert ev.secrets_of({"api_key": "k1", "extra_headers": {"X-Auth-Token": "t1", "X-Team": "a"}}) == ["k1", "t1"]


def test_stream_rate_is_withheld_for_a_burst():
    from ansible_collections.gpufleet.serving.plugins.module_utils._openai_chat import stream_metrics

    paced = {"usage": {"completion_tokens": 101, "prompt_tokens": 7}, "token_chunks": 101,
             "first_token_s": 0.2, "last_token_s": 0.45}
    assert stream_metrics(paced)["output_tokens_per_s"] == 400.0
    burst = dict(paced, last_token_s=0.2005)
    assert stream_metrics(burst)["output_tokens_per_s"] is None
