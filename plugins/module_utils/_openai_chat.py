# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Read OpenAI chat-completion answers (private to this collection).

Pure functions over parsed JSON and text lines, no I/O:

* the assistant message of a completion, its reasoning text under whichever field name the
  server used (vLLM: ``reasoning``; SGLang and older vLLM: ``reasoning_content``) and the
  assistant turn to send back in a follow-up request;
* server-sent events (``data: {...}`` lines ending with ``data: [DONE]``) and the message a
  stream of ``chat.completion.chunk`` deltas adds up to, tool-call fragments included, with the
  timing of the first and last generated token;
* the error message in an error body (vLLM, SGLang, OpenAI and FastAPI shapes);
* a validator for the JSON-schema subset tool definitions here use (``type``, ``required``,
  ``enum``, ``properties``, ``additionalProperties``, ``items``).
"""

from __future__ import annotations

import json

REASONING_FIELDS = ("reasoning", "reasoning_content")


# --------------------------------------------------------------------------------------
# Completions
# --------------------------------------------------------------------------------------


def first_choice(document):
    """``choices[0]`` of a completion or chunk as a dict, else None."""
    if not isinstance(document, dict):
        return None
    choices = document.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    return choices[0]


def text_of(value):
    """A message's ``content`` as text: strings as they are, lists of text parts joined."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for part in value:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)
    return ""


def reasoning_fields(message):
    """``[(field, text), ...]`` for every reasoning field holding non-empty text, in the
    order of REASONING_FIELDS (a null or empty field does not count)."""
    found = []
    if not isinstance(message, dict):
        return found
    for field in REASONING_FIELDS:
        value = message.get(field)
        if isinstance(value, str) and value.strip():
            found.append((field, value))
    return found


def tool_calls_of(message):
    """The message's ``tool_calls`` as a list of dicts (empty when null or absent)."""
    if not isinstance(message, dict):
        return []
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return []
    return [call for call in calls if isinstance(call, dict)]


def assistant_turn(message):
    """The assistant message to send back in the next request: its content as the server
    gave it, every reasoning field that holds text (under the server's own name) and its
    tool calls."""
    turn = {"role": "assistant", "content": message.get("content") if isinstance(message, dict) else None}
    for field, text in reasoning_fields(message):
        turn[field] = text
    calls = tool_calls_of(message)
    if calls:
        turn["tool_calls"] = calls
    elif turn["content"] is None:
        turn["content"] = ""
    return turn


def usage_tokens(usage, key):
    """An integer count from a ``usage`` object, or None."""
    if not isinstance(usage, dict):
        return None
    value = usage.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def server_error_message(text):
    """The message an error body carries, or a stripped excerpt of the body when it has no
    recognised shape: ``{"object": "error", "message"}`` (vLLM, SGLang), ``{"error":
    {"message"}}`` (OpenAI, newer vLLM), ``{"detail": ...}`` (FastAPI)."""
    try:
        document = json.loads(text)
    except ValueError:
        return " ".join(text.split())[:300]
    message = None
    if isinstance(document, dict):
        error = document.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            message = error["message"]
        elif isinstance(error, str):
            message = error
        elif isinstance(document.get("message"), str):
            message = document["message"]
        elif isinstance(document.get("detail"), str):
            message = document["detail"]
        elif isinstance(document.get("detail"), list):
            parts = []
            for item in document["detail"]:
                if isinstance(item, dict) and "msg" in item:
                    where = ".".join(str(part) for part in item.get("loc", []))
                    parts.append(("%s: %s" % (where, item["msg"])) if where else str(item["msg"]))
            message = "; ".join(parts) or None
    if message is None:
        return " ".join(text.split())[:300]
    return " ".join(message.split())[:300]


# --------------------------------------------------------------------------------------
# Server-sent events
# --------------------------------------------------------------------------------------


def parse_sse(lines):
    """Events of a server-sent event stream.

    ``lines`` are ``(t, line)`` pairs (``t``: seconds since the request was sent; an empty
    line ends an event).  Returns ``(events, other)``: ``events`` are ``(t, data)`` pairs,
    the ``data:`` lines of one event joined with newlines, ``t`` the time of its last line;
    ``other`` counts lines that are neither data, comments nor other SSE fields."""
    events = []
    other = 0
    data = []
    when = None
    for t, line in lines:
        if line == "":
            if data:
                events.append((when, "\n".join(data)))
            data = []
            continue
        if line.startswith(":"):
            continue
        field, sep, value = line.partition(":")
        if not sep:
            other += 1
            continue
        if value.startswith(" "):
            value = value[1:]
        if field == "data":
            data.append(value)
            when = t
        elif field not in ("event", "id", "retry"):
            other += 1
    if data:
        events.append((when, "\n".join(data)))
    return events, other


def _merge_tool_call(calls, fragment):
    """Add one ``delta.tool_calls`` entry to ``calls`` (index -> call): the id and type are
    taken once, name fragments are joined (a repeated whole name is taken once) and argument
    fragments are concatenated."""
    index = fragment.get("index")
    if not isinstance(index, int) or isinstance(index, bool):
        # No index: a new id starts a new call, anything else continues the last one.
        index = max(calls) if calls else 0
        new_id = fragment.get("id")
        if calls and new_id and calls[index]["id"] and new_id != calls[index]["id"]:
            index += 1
    call = calls.setdefault(index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
    if isinstance(fragment.get("id"), str) and fragment["id"] and not call["id"]:
        call["id"] = fragment["id"]
    if isinstance(fragment.get("type"), str) and fragment["type"]:
        call["type"] = fragment["type"]
    function = fragment.get("function")
    if isinstance(function, dict):
        name = function.get("name")
        if isinstance(name, str) and name and name != call["function"]["name"]:
            call["function"]["name"] += name
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            call["function"]["arguments"] += arguments
        elif isinstance(arguments, dict):
            call["function"]["arguments"] += json.dumps(arguments)


def assemble_stream(events):
    """What a stream of chat-completion chunks adds up to.

    Returns a dict with ``done`` (``data: [DONE]`` seen), ``chunks`` (JSON chunks),
    ``bad_chunks`` (data that is not JSON, first few), ``error`` (message of an error
    object sent in the stream), ``message`` (role, content, reasoning fields and tool calls
    as one assistant message), ``finish_reason``, ``usage`` (the last usage object),
    ``first_token_s``/``last_token_s`` (time of the first and last chunk that carried
    generated text or tool-call fragments) and ``token_chunks`` (how many did)."""
    state = {
        "done": False,
        "chunks": 0,
        "bad_chunks": [],
        "after_done": 0,
        "error": None,
        "finish_reason": None,
        "usage": None,
        "first_token_s": None,
        "last_token_s": None,
        "token_chunks": 0,
    }
    content = []
    reasoning = {}
    calls = {}
    for t, data in events:
        if state["done"]:
            state["after_done"] += 1
            continue
        if data.strip() == "[DONE]":
            state["done"] = True
            continue
        try:
            chunk = json.loads(data)
        except ValueError:
            if len(state["bad_chunks"]) < 3:
                state["bad_chunks"].append(data[:200])
            continue
        state["chunks"] += 1
        if not isinstance(chunk, dict):
            continue
        if chunk.get("error") is not None or chunk.get("object") == "error":
            state["error"] = server_error_message(json.dumps(chunk))
            continue
        if isinstance(chunk.get("usage"), dict):
            state["usage"] = chunk["usage"]
        choice = first_choice(chunk)
        if choice is None:
            continue
        if choice.get("finish_reason"):
            state["finish_reason"] = choice["finish_reason"]
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            continue
        generated = False
        text = text_of(delta.get("content"))
        if text:
            content.append(text)
            generated = True
        for field in REASONING_FIELDS:
            value = delta.get(field)
            if isinstance(value, str) and value:
                reasoning[field] = reasoning.get(field, "") + value
                generated = True
        fragments = delta.get("tool_calls")
        if isinstance(fragments, list):
            for fragment in fragments:
                if isinstance(fragment, dict):
                    _merge_tool_call(calls, fragment)
                    generated = True
        if generated:
            state["token_chunks"] += 1
            if state["first_token_s"] is None:
                state["first_token_s"] = t
            state["last_token_s"] = t
    message = {"role": "assistant", "content": "".join(content) if content else None}
    for field in REASONING_FIELDS:
        if field in reasoning:
            message[field] = reasoning[field]
    if calls:
        message["tool_calls"] = [calls[index] for index in sorted(calls)]
    state["message"] = message
    return state


MAX_PLAUSIBLE_TOKENS_PER_S = 5000


def stream_metrics(stream):
    """Timing of an assembled stream: ``ttft_s``, ``output_tokens_per_s`` (the tokens after
    the first one over the time from the first to the last token), the token counts and
    ``tokens_source`` (``usage`` when the server sent usage, else ``chunks``: every chunk
    that carried generated text counted as one token)."""
    usage = stream.get("usage")
    completion = usage_tokens(usage, "completion_tokens")
    source = "usage"
    if completion is None:
        completion = stream["token_chunks"]
        source = "chunks"
    first, last = stream["first_token_s"], stream["last_token_s"]
    rate = None
    if first is not None and last is not None and last > first and completion and completion > 1:
        rate = round((completion - 1) / (last - first), 1)
        # A stream that arrived in one burst (buffered by a proxy or a loaded client) has no usable
        # first-to-last span: no rate rather than an absurd one (bursts measured 30,000+ tok/s).
        if rate > MAX_PLAUSIBLE_TOKENS_PER_S:
            rate = None
    return {
        "ttft_s": round(first, 3) if first is not None else None,
        "output_tokens_per_s": rate,
        "tokens_source": source,
        "prompt_tokens": usage_tokens(usage, "prompt_tokens"),
        "completion_tokens": completion,
    }


# --------------------------------------------------------------------------------------
# JSON schema subset
# --------------------------------------------------------------------------------------

_TYPE_NAMES = {
    "object": "an object",
    "array": "an array",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "null": "null",
}


def _json_type(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _type_matches(value, expected):
    actual = _json_type(value)
    if actual == expected:
        return True
    return expected == "number" and actual == "integer"


def schema_errors(value, schema, where="arguments"):
    """Why ``value`` does not match ``schema`` (a list of sentences; empty when it does).
    Supports ``type`` (a name or a list of names), ``enum``, ``properties``, ``required``,
    ``additionalProperties`` (false or a schema) and ``items``."""
    errors = []
    if not isinstance(schema, dict):
        return errors
    expected = schema.get("type")
    if expected is not None:
        names = expected if isinstance(expected, list) else [expected]
        if not any(_type_matches(value, name) for name in names):
            wanted = " or ".join(_TYPE_NAMES.get(name, str(name)) for name in names)
            errors.append("%s is %s, expected %s" % (where, _TYPE_NAMES.get(_json_type(value), _json_type(value)), wanted))
            return errors
    choices = schema.get("enum")
    if isinstance(choices, list) and not any(value == item and _json_type(value) == _json_type(item) for item in choices):
        errors.append("%s is %s, expected one of %s" % (where, json.dumps(value), ", ".join(json.dumps(item) for item in choices)))
    if isinstance(value, dict):
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        for name in schema.get("required") or []:
            if name not in value:
                errors.append("%s lacks the required property %s" % (where, json.dumps(name)))
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            if name in properties:
                errors.extend(schema_errors(item, properties[name], "%s.%s" % (where, name)))
            elif extra is False:
                errors.append("%s has the property %s, which the schema does not allow" % (where, json.dumps(name)))
            elif isinstance(extra, dict):
                errors.extend(schema_errors(item, extra, "%s.%s" % (where, name)))
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for position, item in enumerate(value):
            errors.extend(schema_errors(item, schema["items"], "%s[%d]" % (where, position)))
    return errors
