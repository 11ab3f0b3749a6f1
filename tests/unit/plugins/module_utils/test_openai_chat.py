# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The OpenAI chat helpers (_openai_chat.py): SSE parsing, stream assembly, metrics, error
messages, reasoning fields, the schema subset."""

from __future__ import annotations

import json

from ansible_collections.gpufleet.serving.plugins.module_utils import _endpoint_prompts as prompts
from ansible_collections.gpufleet.serving.plugins.module_utils._openai_chat import (
    assemble_stream,
    assistant_turn,
    parse_sse,
    reasoning_fields,
    schema_errors,
    server_error_message,
    stream_metrics,
)
from test_endpoint_verify_server import (
    ERROR_404,
    REASONING_CHAT,
    TOOL_CALL,
    chunk,
    fixture_bytes,
    fixture_json,
)


def test_schema_subset():
    schema = prompts.WEATHER_PARAMETERS
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


def test_stream_rate_is_withheld_for_a_burst():
    from ansible_collections.gpufleet.serving.plugins.module_utils._openai_chat import stream_metrics

    paced = {"usage": {"completion_tokens": 101, "prompt_tokens": 7}, "token_chunks": 101,
             "first_token_s": 0.2, "last_token_s": 0.45}
    assert stream_metrics(paced)["output_tokens_per_s"] == 400.0
    burst = dict(paced, last_token_s=0.2005)
    assert stream_metrics(burst)["output_tokens_per_s"] is None
