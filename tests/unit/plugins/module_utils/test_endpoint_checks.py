# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""endpoint_verify's checks (_endpoint_checks.py) against a real local HTTP server
(test_endpoint_verify_server.py) that replays the captures in tests/fixtures/openai/."""

from __future__ import annotations

import base64
import json
import struct
import zlib

import pytest
from ansible_collections.gpufleet.serving.plugins.module_utils import _endpoint_prompts as prompts
from ansible_collections.gpufleet.serving.plugins.module_utils import _endpoint_verify as ev
from test_endpoint_verify_server import (
    CANARY,
    CHAT,
    MODELS,
    REASONING_CHAT,
    SERVED,
    TOOL_CALL,
    TOOL_CAPTURE_ID,
    OpenAIStub,
    Reply,
    check_of,
    chunk,
    completion,
    dumps,
    fixture_bytes,
    fixture_json,
    free_port,
    json_reply,
    make_params,
    sse_reply,
    text_stream,
    tool_call_stream,
    verify,
    vllm_like,
)


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


def test_stop_strings_sent_except_with_tool_calls():
    with vllm_like(OpenAIStub()) as stub:
        verify(stub, checks=["chat", "tool_call"], stop=["."], reasoning_effort="")
        sent = stub.sent(CHAT)
    assert all("reasoning_effort" not in body for body in sent)
    assert [("stop" in body, bool(body.get("tools"))) for body in sent] == [
        (True, False), (True, False), (False, True), (False, True), (False, True)]


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
    assert 11900 <= len(prompt) <= 12100 and prompts.LONG_CONTEXT_CODE in prompt
    assert check_of(result, "long_context")["details"]["code_found"] is False
    error = {"object": "error", "code": 400, "type": "BadRequestError",
             "message": "This model's maximum context length is 2048 tokens. However, you requested 5048 tokens "
                        "(3000 in the messages, 2048 in the completion). Please reduce the length of the messages or completion."}
    with vllm_like(OpenAIStub(), chat=lambda request: json_reply(error, 400)) as stub:
        result = verify(stub, checks=["long_context"], long_context_tokens=3000)
    diagnosis = check_of(result, "long_context")["diagnosis"]
    assert "the prompt plus max_tokens exceed the model's context length" in diagnosis
    assert diagnosis.endswith("check --max-model-len on the server, then long_context_tokens or max_tokens")


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
