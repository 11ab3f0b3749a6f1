# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Verify an OpenAI-compatible endpoint (vLLM, SGLang) check by check (private to this collection).

``verify_endpoint(params)`` runs the selected checks against the server and returns the
module result; it never raises for what the network or the server does.  A check result is
a dict (see ``new_check``); a failed check carries one ``diagnosis`` sentence (what was found,
what was expected, the first thing to check) and an excerpt of the body that showed it.

Checks run in the order of CHECKS whatever order they were given in, because later checks
use what earlier ones found (the model alias from ``/v1/models``, the first chat turn).
When a request cannot reach the server at all (connection refused, DNS, TLS, connect
timeout), the checks after it are not run and fail with that diagnosis.

The API key (and any credential-like extra header) is sent only in request headers and is
scrubbed from every string of the result, server text included.
"""

from __future__ import annotations

import base64
import json
import re
import struct
import zlib

from ansible_collections.gpufleet.serving.plugins.module_utils._openai_chat import (
    assemble_stream,
    assistant_turn,
    first_choice,
    parse_sse,
    reasoning_fields,
    schema_errors,
    server_error_message,
    stream_metrics,
    text_of,
    tool_calls_of,
    usage_tokens,
)
from ansible_collections.gpufleet.serving.plugins.module_utils._openai_http import (
    Client,
    build_ssl_context,
    parse_base_url,
)

CHECKS = ("health", "models", "chat", "reasoning", "tool_call", "multi_turn", "image", "long_context")
DEFAULT_CHECKS = ("health", "models", "chat", "reasoning")
# Checks that send chat completions and so need a model alias.
MODEL_CHECKS = ("chat", "reasoning", "tool_call", "multi_turn", "image", "long_context")

HEALTH_PATH = "/health"
MODELS_PATH = "/v1/models"
CHAT_PATH = "/v1/chat/completions"

REDACTED = "********"
EXCERPT_CHARS = 500
CHARS_PER_TOKEN = 4
# Smallest room (tokens) worth clamping max_tokens to when max_model_len is known.
_MIN_ROOM = 16

DEFAULT_CHAT_PROMPT = "What is the capital of France? Answer in one short sentence."
REASONING_PROMPT = "A train leaves at 14:10 and arrives at 16:45. How long is the trip? Think it through, then answer briefly."
FOLLOW_UP_PROMPT = "Now say the same thing in at most five words."
TOOL_PROMPT = "What is the weather in Paris right now? Use the get_weather tool."
IMAGE_PROMPT = "What colour is this image? Answer with one word."
LONG_CONTEXT_CODE = "7341"

WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "City name, for example Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city"],
    "additionalProperties": False,
}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": WEATHER_PARAMETERS,
    },
}
WEATHER_CHOICE = {"type": "function", "function": {"name": "get_weather"}}

_CONTEXT_RE = re.compile(
    r"context length|context window|maximum context|max_model_len|max-model-len|model length|too long|"
    r"maximum (?:input|prompt) length|exceeds|longer than", re.I)
_TOOL_FLAGS_RE = re.compile(r"enable-auto-tool-choice|tool-call-parser|tool_choice|tool choice|tool_call|\btools?\b", re.I)
_IMAGE_RE = re.compile(r"image|multimodal|multi-modal|vision|modalit|mm_", re.I)
_MODEL_RE = re.compile(r"model", re.I)
_CREDENTIAL_HEADER_RE = re.compile(r"auth|key|token|secret|cookie|pass", re.I)


# --------------------------------------------------------------------------------------
# Small pure helpers
# --------------------------------------------------------------------------------------


def solid_png(width, height, rgb):
    """A valid, uncompressed-colour PNG of one colour (8-bit RGB)."""
    row = b"\x00" + bytes(bytearray(rgb)) * width

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(row * height, 9)) + chunk(b"IEND", b"")


def png_data_url(png):
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


# 64x64 pixels: big enough for vision encoders with a minimum image size (patches of 14-16 px).
DEFAULT_IMAGE_DATA_URL = png_data_url(solid_png(64, 64, (220, 20, 20)))


def estimate_tokens(text):
    """Tokens in ``text`` at about CHARS_PER_TOKEN characters a token."""
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def estimate_prompt_tokens(messages):
    """A generous estimate of a chat prompt's tokens (template overhead included), used only
    to keep max_tokens inside max_model_len."""
    total = 32
    for message in messages:
        text = text_of(message.get("content"))
        total += 16 + (estimate_tokens(text) * 5 + 3) // 4
        if isinstance(message.get("content"), list):
            total += 256 * sum(1 for part in message["content"] if isinstance(part, dict) and part.get("type") == "image_url")
    return total


def long_prompt(tokens):
    """A prompt of about ``tokens`` tokens: numbered filler lines with one fact in the
    middle and a question about it at the end."""
    question = "\nWhat is the verification code mentioned above? Answer with the number only."
    fact = "Note: the verification code is %s.\n" % LONG_CONTEXT_CODE
    target = max(tokens * CHARS_PER_TOKEN - len(question) - len(fact), 0)
    lines = []
    size = 0
    number = 0
    while size < target:
        number += 1
        line = "Line %d: the servers in rack %d report normal temperature and steady power draw.\n" % (number, number % 40)
        lines.append(line)
        size += len(line)
    lines.insert(len(lines) // 2, fact)
    return "".join(lines) + question


def redact(text, secrets):
    """``text`` with every secret replaced by REDACTED."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return text


def scrub(value, secrets):
    """A copy of a result (dicts, lists, strings) with every secret redacted from strings."""
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return {key: scrub(item, secrets) for key, item in value.items()}
    if isinstance(value, list):
        return [scrub(item, secrets) for item in value]
    return value


def excerpt(text, secrets, limit=EXCERPT_CHARS, tail=False):
    """At most ``limit`` characters of ``text`` (its end when ``tail``), secrets redacted."""
    text = redact(text, secrets)
    if len(text) <= limit:
        return text
    if tail:
        return "..." + text[-limit:]
    return text[:limit] + "..."


def secrets_of(params):
    """Strings that must never appear in the result: the API key and the values of extra
    headers whose names look like credentials."""
    secrets = []
    if params.get("api_key"):
        secrets.append(params["api_key"])
    for name, value in (params.get("extra_headers") or {}).items():
        if _CREDENTIAL_HEADER_RE.search(str(name)) and value:
            secrets.append(str(value))
    # Longest first, so that a secret containing another is redacted whole.
    return sorted(set(secrets), key=lambda item: (-len(item), item))


def option_errors(params):
    """Invalid option combinations (the module fails on these), as sentences."""
    errors = []
    checks = params.get("checks")
    if checks is not None and not checks:
        errors.append("checks must name at least one check")
    required = params.get("required_checks")
    if required is not None:
        selected = list(checks) if checks is not None else list(DEFAULT_CHECKS)
        extra = [name for name in required if name not in selected]
        if extra:
            errors.append("required_checks names checks that are not in checks: %s" % ", ".join(extra))
    max_tokens = params.get("max_tokens")
    ceiling = params.get("max_tokens_ceiling")
    if max_tokens is not None and max_tokens < 1:
        errors.append("max_tokens must be at least 1, got %d" % max_tokens)
    if max_tokens is not None and ceiling is not None and ceiling < max_tokens:
        errors.append("max_tokens_ceiling (%d) must not be lower than max_tokens (%d)" % (ceiling, max_tokens))
    timeout = params.get("timeout")
    if timeout is not None and timeout <= 0:
        errors.append("timeout must be a positive number of seconds, got %s" % timeout)
    tokens = params.get("long_context_tokens")
    if tokens is not None and tokens < 1:
        errors.append("long_context_tokens must be at least 1, got %d" % tokens)
    if params.get("client_key") and not params.get("client_cert"):
        errors.append("client_key needs client_cert")
    if params.get("image_data_url") is not None and not params["image_data_url"].strip():
        errors.append("image_data_url must not be empty; omit it to use the built-in image")
    headers = params.get("extra_headers") or {}
    for name, value in headers.items():
        if not re.match(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$", str(name)):
            errors.append("extra_headers has an invalid header name %r" % (name,))
        elif re.search(r"[\r\n]", str(value)):
            errors.append("extra_headers value of %s contains a line break" % name)
    if params.get("api_key") and any(str(name).lower() == "authorization" for name in headers):
        errors.append("api_key and an Authorization header in extra_headers are mutually exclusive")
    return errors


def request_headers(params):
    headers = {}
    for name, value in (params.get("extra_headers") or {}).items():
        headers[str(name)] = str(value)
    if params.get("api_key"):
        headers["Authorization"] = "Bearer %s" % params["api_key"]
    return headers


def new_check(name, required):
    return {
        "name": name,
        "passed": False,
        "required": required,
        "http_status": None,
        "latency_s": 0.0,
        "attempts": [],
        "diagnosis": None,
        "body_excerpt": None,
        "notes": [],
        "details": {},
    }


def empty_metrics():
    return {
        "ttft_s": None,
        "output_tokens_per_s": None,
        "tokens_source": None,
        "prompt_tokens": None,
        "completion_tokens": None,
    }


# --------------------------------------------------------------------------------------
# Diagnoses
# --------------------------------------------------------------------------------------


def _request_name(response):
    return "%s %s" % (response.method, response.path)


def transport_diagnosis(response, endpoint, timeout):
    """One sentence for a request that got no complete HTTP answer."""
    what = _request_name(response)
    kind = response.error_kind
    where = endpoint.netloc
    if kind == "refused":
        return ("%s: the connection to %s was refused, so nothing listens there; expected the engine's HTTP server; "
                "check that the service is running and whether it is still loading (vLLM opens its port only after "
                "the weights are loaded) and that base_url has the right host and port" % (what, where))
    if kind == "dns":
        return ("%s: the host name %s did not resolve (%s); expected a resolvable name or an IP address; check the host "
                "in base_url" % (what, endpoint.host, response.error_message))
    if kind == "tls":
        return ("%s: %s with %s; expected a certificate this host trusts on an https port; check that the port serves "
                "https, then ca_path, client_cert/client_key and validate_certs" % (what, response.error_message, where))
    if kind == "timeout" and response.error_phase == "connect":
        return ("%s: no connection to %s within %s s; expected the server to accept connections; check the host and "
                "port in base_url and any firewall in between" % (what, where, _seconds(timeout)))
    if kind == "timeout":
        return ("%s: no complete answer within the %s s timeout; expected the server to answer in time; check the "
                "engine's log and load, or raise timeout for a slow model" % (what, _seconds(timeout)))
    if kind == "protocol":
        hint = " (an https server on this port?)" if endpoint.scheme == "http" else ""
        return ("%s: %s%s; expected an HTTP answer from the engine; check base_url's scheme and port"
                % (what, response.error_message, hint))
    return ("%s: %s; expected a complete HTTP answer from %s; check the engine's log for a crash and the network path"
            % (what, response.error_message, where))


def _seconds(value):
    return ("%g" % value) if isinstance(value, (int, float)) else str(value)


def http_diagnosis(response, secrets, context=None, payload=None):
    """One sentence for an HTTP answer that is not 2xx.  ``context`` names the check, which
    picks the most likely cause of a 400."""
    status = response.status
    message = redact(server_error_message(response.text()), secrets) if response.body or response.lines else "empty body"
    what = "%s answered HTTP %d (%s)" % (_request_name(response), status, message)
    if status in (401, 403):
        return ("%s; expected %s to accept the API key; check api_key against the server's --api-key (and any gateway "
                "in front of it)" % (what, "the server" if status == 401 else "the key to be allowed this route"))
    if status == 404:
        if response.path == CHAT_PATH and _MODEL_RE.search(message):
            model = (payload or {}).get("model")
            return ("%s; expected the model alias %r to be served; check model against the ids GET /v1/models lists "
                    "(set by --served-model-name)" % (what, model))
        return ("%s; expected an OpenAI-compatible server at base_url; check base_url's host, port and path prefix"
                % what)
    if status == 400:
        effort = (payload or {}).get("reasoning_effort")
        if effort is not None and "reasoning_effort" in message:
            return ("%s; expected reasoning_effort=%s to be accepted; check the values this server takes "
                    "(vLLM: none, minimal, low, medium, high, xhigh, max) or change reasoning_effort" % (what, effort))
        if context == "tool_call" and _TOOL_FLAGS_RE.search(message):
            return ("%s; expected a forced tool call to be accepted; check that the server runs with "
                    "--enable-auto-tool-choice and the model's --tool-call-parser" % what)
        if context == "image" and _IMAGE_RE.search(message):
            return ("%s; expected an image_url content part to be accepted; check that the model is multimodal and "
                    "the server allows images (vLLM --limit-mm-per-prompt)" % what)
        if _CONTEXT_RE.search(message):
            return ("%s: the prompt plus max_tokens exceed the model's context length; expected them to fit; check "
                    "--max-model-len on the server, then %s"
                    % (what, "long_context_tokens or max_tokens" if context == "long_context" else "max_tokens"))
        return "%s; expected the request to be accepted; check the engine's log for the rejected field" % what
    if status == 503:
        return ("%s: the engine is not ready (vLLM answers 503 when its engine died, SGLang while it is still "
                "starting); expected 200; check the service's log (journalctl -u <unit>)" % what)
    if status == 429:
        return ("%s: the server is overloaded or rate-limits this client; expected 200; check the engine's queue and "
                "any gateway limits" % what)
    if status >= 500:
        return "%s: a server error; expected 200; check the engine's log for the traceback" % what
    return "%s; expected 200; check the engine's log and the request options" % what


def _json_diagnosis(response, problem, expected):
    content_type = response.headers.get("content-type", "no content type")
    return ("%s answered HTTP %d with %s (%s); expected %s; check that base_url points at the engine itself and not at "
            "a proxy or web page" % (_request_name(response), response.status, problem, content_type, expected))


# --------------------------------------------------------------------------------------
# The verifier
# --------------------------------------------------------------------------------------


class _Verifier:
    """Runs the checks against one endpoint and keeps what earlier checks found."""

    def __init__(self, params, client, endpoint, secrets):
        self.params = params
        self.client = client
        self.endpoint = endpoint
        self.secrets = secrets
        self.model = params.get("model") or None
        self.root = None
        self.max_model_len = None
        self.reasoning_field = None
        self.blocked = None
        self.no_model = None
        self.looked_up = False
        self.first_turn = None
        self.metrics = empty_metrics()

    # --- bookkeeping ------------------------------------------------------------------

    def fail(self, check, diagnosis, response=None, tail=False):
        """Mark ``check`` failed; the first diagnosis and its body excerpt stay."""
        check["passed"] = False
        if check["diagnosis"] is not None:
            return
        check["diagnosis"] = redact(diagnosis, self.secrets)
        if response is not None:
            text = response.text()
            if text:
                check["body_excerpt"] = excerpt(text, self.secrets, tail=tail)

    def send(self, check, label, method, path, payload=None, stream=False):
        response = self.client.call(method, path, payload, stream)
        attempt = {
            "request": label,
            "method": method,
            "path": path,
            "stream": stream,
            "max_tokens": (payload or {}).get("max_tokens"),
            "http_status": response.status,
            "latency_s": round(response.latency_s or 0.0, 3),
            "error": response.error_message,
            "finish_reason": None,
            "content_chars": None,
            "reasoning_chars": None,
            "tool_calls": None,
            "prompt_tokens": None,
            "completion_tokens": None,
            "chunks": None,
            "done": None,
        }
        check["attempts"].append(attempt)
        check["http_status"] = response.status
        check["latency_s"] = round(check["latency_s"] + (response.latency_s or 0.0), 3)
        # Unreachable, or too slow for a request that should answer at once: later requests
        # would only wait the same way.
        stuck = response.error_kind == "timeout" and path in (HEALTH_PATH, MODELS_PATH)
        if (response.unreachable or stuck) and self.blocked is None:
            where = check["name"] if check["name"] == "model lookup" else "%s check" % check["name"]
            self.blocked = "%s: %s" % (where, transport_diagnosis(response, self.endpoint, self.client.timeout))
        return response, attempt

    def answer_problem(self, response, context, payload=None):
        """Diagnosis when ``response`` is not a 2xx answer, else None."""
        if response.error_kind is not None:
            return transport_diagnosis(response, self.endpoint, self.client.timeout)
        if not 200 <= response.status < 300:
            return http_diagnosis(response, self.secrets, context, payload)
        return None

    # --- checks -----------------------------------------------------------------------

    def check_health(self, check):
        response, _attempt = self.send(check, "health", "GET", HEALTH_PATH)
        if response.error_kind is None and response.status == 404:
            check["details"]["available"] = False
            check["notes"].append("GET /health answered 404: this server has no health route; not counted as a failure")
            check["passed"] = True
            return
        problem = self.answer_problem(response, "health")
        if problem:
            self.fail(check, problem, response)
            return
        check["details"]["available"] = True
        check["passed"] = True

    def check_models(self, check):
        response, _attempt = self.send(check, "models", "GET", MODELS_PATH)
        problem = self.answer_problem(response, "models")
        if problem:
            self.fail(check, problem, response)
            return
        try:
            document = response.json()
        except ValueError:
            self.fail(check, _json_diagnosis(response, "a body that is not JSON", "a JSON model list"), response)
            return
        data = document.get("data") if isinstance(document, dict) else None
        if not isinstance(data, list):
            self.fail(check, _json_diagnosis(response, "JSON that has no data list", "an OpenAI model list"), response)
            return
        entries = [entry for entry in data if isinstance(entry, dict) and isinstance(entry.get("id"), str)]
        ids = [entry["id"] for entry in entries]
        check["details"]["served_models"] = ids
        if self.model is not None:
            matches = [entry for entry in entries if entry["id"] == self.model]
            if not matches:
                self.fail(check, "GET /v1/models lists %s but not the model alias %r; expected the alias to be served; "
                          "check model against the server's --served-model-name"
                          % (", ".join(repr(item) for item in ids) or "no model", self.model), response)
                return
            entry = matches[0]
        else:
            if not entries:
                self.fail(check, "GET /v1/models lists no model; expected at least one served model; check the "
                          "engine's log: it may still be loading (SGLang answers before the model can serve)", response)
                return
            entry = entries[0]
            self.model = entry["id"]
            if len(entries) > 1:
                check["notes"].append("model not given: took the first of %d listed models, %r" % (len(entries), self.model))
        root = entry.get("root")
        self.root = root if isinstance(root, str) else None
        length = entry.get("max_model_len")
        self.max_model_len = length if isinstance(length, int) and not isinstance(length, bool) and length > 0 else None
        check["details"]["model"] = self.model
        check["details"]["root"] = self.root
        check["details"]["max_model_len"] = self.max_model_len
        check["passed"] = True

    # --- chat completions ---------------------------------------------------------------

    def budgets(self, messages):
        """``(first budget, ceiling, note)``; both kept inside max_model_len when it is known."""
        start = self.params["max_tokens"]
        ceiling = max(self.params["max_tokens_ceiling"], start)
        note = None
        if self.max_model_len:
            room = self.max_model_len - estimate_prompt_tokens(messages)
            if room >= _MIN_ROOM:
                ceiling = min(ceiling, room)
                if start > room:
                    note = "max_tokens lowered from %d to %d to fit max_model_len %d" % (start, room, self.max_model_len)
                    start = room
        return start, ceiling, note

    def payload(self, messages, budget, use_stop=True, extra=None):
        payload = {"model": self.model, "messages": messages, "max_tokens": budget}
        effort = self.params.get("reasoning_effort")
        if effort:
            payload["reasoning_effort"] = effort
        if use_stop and self.params.get("stop"):
            payload["stop"] = list(self.params["stop"])
        if extra:
            payload.update(extra)
        return payload

    def note_reasoning(self, message):
        fields = reasoning_fields(message)
        if fields and self.reasoning_field is None:
            self.reasoning_field = fields[0][0]
        return fields

    def complete(self, check, label, messages, context, use_stop=True, extra=None):
        """One chat completion, retried with a doubled budget (up to the ceiling) while it ends
        on ``length`` with neither content nor tool calls.  Returns an outcome dict."""
        budget, ceiling, note = self.budgets(messages)
        if note and note not in check["notes"]:
            check["notes"].append(note)
        while True:
            payload = self.payload(messages, budget, use_stop, extra)
            response, attempt = self.send(check, label, "POST", CHAT_PATH, payload)
            outcome = self.read_completion(response, attempt, context, payload)
            outcome["budget"] = budget
            if outcome["diagnosis"] is not None:
                return outcome
            empty = not outcome["content"].strip() and not outcome["tool_calls"]
            if outcome["finish_reason"] == "length" and empty and budget < ceiling:
                budget = min(budget * 2, ceiling)
                continue
            outcome["ceiling"] = ceiling
            return outcome

    def read_completion(self, response, attempt, context, payload):
        outcome = {"response": response, "diagnosis": None, "message": None, "content": "", "tool_calls": [],
                   "finish_reason": None, "usage": None, "reasoning": []}
        problem = self.answer_problem(response, context, payload)
        if problem is not None:
            outcome["diagnosis"] = problem
            return outcome
        try:
            document = response.json()
        except ValueError:
            outcome["diagnosis"] = _json_diagnosis(response, "a body that is not JSON", "a chat.completion JSON object")
            return outcome
        choice = first_choice(document)
        message = choice.get("message") if choice else None
        if not isinstance(message, dict):
            outcome["diagnosis"] = _json_diagnosis(response, "JSON without choices[0].message", "a chat.completion object")
            return outcome
        outcome["message"] = message
        outcome["content"] = text_of(message.get("content"))
        outcome["tool_calls"] = tool_calls_of(message)
        outcome["finish_reason"] = choice.get("finish_reason")
        outcome["usage"] = document.get("usage") if isinstance(document, dict) else None
        outcome["reasoning"] = self.note_reasoning(message)
        attempt["finish_reason"] = outcome["finish_reason"]
        attempt["content_chars"] = len(outcome["content"])
        attempt["reasoning_chars"] = sum(len(text) for _field, text in outcome["reasoning"])
        attempt["tool_calls"] = len(outcome["tool_calls"])
        attempt["completion_tokens"] = usage_tokens(outcome["usage"], "completion_tokens")
        attempt["prompt_tokens"] = usage_tokens(outcome["usage"], "prompt_tokens")
        return outcome

    def stream(self, check, label, messages, budget, use_stop=True, extra=None):
        """One streamed chat completion with usage; returns ``(diagnosis, assembled, response)``."""
        stream_extra = {"stream": True, "stream_options": {"include_usage": True}}
        stream_extra.update(extra or {})
        payload = self.payload(messages, budget, use_stop, stream_extra)
        response, attempt = self.send(check, label, "POST", CHAT_PATH, payload, stream=True)
        problem = self.answer_problem(response, check["name"], payload)
        if problem is not None:
            return problem, None, response
        events, _other = parse_sse(response.lines)
        assembled = assemble_stream(events)
        message = assembled["message"]
        attempt["finish_reason"] = assembled["finish_reason"]
        attempt["chunks"] = assembled["chunks"]
        attempt["done"] = assembled["done"]
        attempt["content_chars"] = len(message["content"] or "")
        attempt["reasoning_chars"] = sum(len(text) for _field, text in reasoning_fields(message))
        attempt["tool_calls"] = len(message.get("tool_calls", []))
        attempt["completion_tokens"] = usage_tokens(assembled["usage"], "completion_tokens")
        attempt["prompt_tokens"] = usage_tokens(assembled["usage"], "prompt_tokens")
        self.note_reasoning(message)
        what = _request_name(response)
        if not events:
            return ("%s with stream=true answered HTTP %d without server-sent events (%s); expected data: lines ending "
                    "with data: [DONE]; check that base_url points at the engine and not a buffering proxy"
                    % (what, response.status, response.headers.get("content-type", "no content type"))), None, response
        if assembled["error"]:
            return ("%s: the stream carried an error after %d chunk(s) (%s); expected chunks ending with data: [DONE]; "
                    "check the engine's log" % (what, assembled["chunks"], redact(assembled["error"], self.secrets))), None, response
        if assembled["bad_chunks"]:
            return ("%s: the stream has data that is not JSON (%r); expected one JSON chunk per data: line; check that "
                    "nothing between the client and the engine rewrites the stream"
                    % (what, excerpt(assembled["bad_chunks"][0], self.secrets, 80))), None, response
        if not assembled["done"]:
            if response.body_truncated:
                return ("%s: the stream was longer than this probe reads (%d lines) without data: [DONE]; expected a "
                        "shorter answer; lower max_tokens" % (what, len(response.lines))), None, response
            return ("%s: the stream ended after %d chunk(s) without data: [DONE] (finish_reason %s); expected the "
                    "server to close the stream with data: [DONE]; check the engine's log for a crash and any proxy "
                    "that cuts long responses" % (what, assembled["chunks"], assembled["finish_reason"])), None, response
        return None, assembled, response

    # --- chat ---------------------------------------------------------------------------

    def check_chat(self, check):
        messages = [{"role": "user", "content": self.params.get("chat_prompt") or DEFAULT_CHAT_PROMPT}]
        outcome = self.complete(check, "chat", messages, "chat")
        if outcome["diagnosis"] is not None:
            self.fail(check, outcome["diagnosis"], outcome["response"])
            return
        details = check["details"]
        details["finish_reason"] = outcome["finish_reason"]
        details["max_tokens"] = outcome["budget"]
        details["content_excerpt"] = excerpt(outcome["content"], self.secrets, 200)
        details["truncated"] = outcome["finish_reason"] == "length"
        details["reasoning_field"] = outcome["reasoning"][0][0] if outcome["reasoning"] else None
        details["usage"] = outcome["usage"]
        if not outcome["content"].strip():
            if outcome["finish_reason"] == "length":
                self.fail(check, "POST %s ended on finish_reason length with no content at every budget up to %d tokens "
                          "(%d attempt(s)), so the reasoning used the whole budget; expected final content; raise "
                          "max_tokens_ceiling or lower reasoning_effort" % (CHAT_PATH, outcome["budget"], len(check["attempts"])),
                          outcome["response"])
            else:
                self.fail(check, "POST %s answered without content (finish_reason %s); expected text in "
                          "choices[0].message.content; check the engine's log, the chat template and the reasoning "
                          "parser" % (CHAT_PATH, outcome["finish_reason"]), outcome["response"])
            return
        if outcome["finish_reason"] == "length":
            check["notes"].append("finish_reason is length: the content was cut at %d tokens; passed because the "
                                  "endpoint served content" % outcome["budget"])
        self.first_turn = (messages, outcome["message"])
        # The same request streamed, for the streaming path and the latency metrics.
        problem, assembled, response = self.stream(check, "chat stream", messages, outcome["budget"])
        if problem is not None:
            self.fail(check, "streaming: " + problem, response, tail=True)
            return
        message = assembled["message"]
        if not (message["content"] or reasoning_fields(message)):
            self.fail(check, "streaming: POST %s with stream=true carried no content or reasoning text (finish_reason "
                      "%s); expected generated text; check the engine's log" % (CHAT_PATH, assembled["finish_reason"]),
                      response, tail=True)
            return
        self.metrics = stream_metrics(assembled)
        details["stream_finish_reason"] = assembled["finish_reason"]
        details["stream_chunks"] = assembled["chunks"]
        check["passed"] = True

    # --- reasoning ----------------------------------------------------------------------

    def check_reasoning(self, check):
        messages = [{"role": "user", "content": REASONING_PROMPT}]
        outcome = self.complete(check, "reasoning", messages, "reasoning")
        check["details"]["reasoning_effort"] = self.params.get("reasoning_effort") or None
        if outcome["diagnosis"] is not None:
            self.fail(check, outcome["diagnosis"], outcome["response"])
            return
        fields = outcome["reasoning"]
        check["details"]["finish_reason"] = outcome["finish_reason"]
        check["details"]["reasoning_field"] = fields[0][0] if fields else None
        check["details"]["reasoning_chars"] = sum(len(text) for _field, text in fields)
        check["details"]["content_chars"] = len(outcome["content"])
        if not fields:
            message = outcome["message"]
            present = [field for field in ("reasoning", "reasoning_content") if field in message]
            seen = ("the field(s) %s are present but null or empty" % ", ".join(present)) if present else "neither field is present"
            self.fail(check, "POST %s answered without reasoning text (%s; finish_reason %s, %d content chars); "
                      "expected text in message.reasoning or message.reasoning_content; check that the server runs "
                      "with the model's --reasoning-parser and that reasoning_effort lets the model think"
                      % (CHAT_PATH, seen, outcome["finish_reason"], len(outcome["content"])), outcome["response"])
            return
        if not outcome["content"].strip():
            check["notes"].append("reasoning found but no final content within %d tokens" % outcome["budget"])
        check["passed"] = True

    # --- tool calls ---------------------------------------------------------------------

    def _judge_call(self, message, where, finish_reason, budget):
        """``(diagnosis, call, arguments)`` for the get_weather call in ``message``."""
        calls = tool_calls_of(message)
        name = WEATHER_TOOL["function"]["name"]
        if not calls:
            content = text_of(message.get("content"))
            if finish_reason == "length":
                hint = "raise max_tokens (the answer was cut at %s tokens), then check --tool-call-parser" % budget
            else:
                hint = "check that the server runs with --enable-auto-tool-choice and the model's --tool-call-parser"
            return ("%sthe answer has no tool call (finish_reason %s, %d content chars) although tool_choice named %s; "
                    "expected message.tool_calls with a %s call; %s" % (where, finish_reason, len(content), name, name, hint)), None, None
        matching = [call for call in calls if isinstance(call.get("function"), dict) and call["function"].get("name") == name]
        if not matching:
            names = [str((call.get("function") or {}).get("name")) for call in calls]
            return ("%sthe model called %s instead of %s; expected the function tool_choice named; check the "
                    "--tool-call-parser" % (where, ", ".join(names), name)), None, None
        call = matching[0]
        raw = call["function"].get("arguments")
        if isinstance(raw, dict):
            arguments = raw
        else:
            try:
                arguments = json.loads(raw if isinstance(raw, str) else "")
            except ValueError as exc:
                return ("%sthe %s call's arguments are not valid JSON (%s): %r; expected a JSON object matching the "
                        "tool's schema; check that --tool-call-parser matches the model"
                        % (where, name, exc, excerpt(str(raw), self.secrets, 120))), call, None
        errors = schema_errors(arguments, WEATHER_PARAMETERS)
        if errors:
            return ("%sthe %s call's arguments do not match the tool's schema: %s; expected {city: string, unit: "
                    "celsius or fahrenheit}; check the --tool-call-parser and the chat template"
                    % (where, name, "; ".join(errors[:5]))), call, arguments
        if not isinstance(call.get("id"), str) or not call["id"]:
            return ("%sthe %s call has no id; expected an id to answer it with tool_call_id; check the "
                    "--tool-call-parser" % (where, name)), call, arguments
        return None, call, arguments

    def check_tool_call(self, check):
        messages = [{"role": "user", "content": TOOL_PROMPT}]
        extra = {"tools": [WEATHER_TOOL], "tool_choice": WEATHER_CHOICE}
        details = check["details"]
        parts = {}
        # Non-streaming.
        outcome = self.complete(check, "tool call", messages, "tool_call", use_stop=False, extra=extra)
        budget = outcome["budget"]
        part = {"passed": False, "finish_reason": outcome["finish_reason"], "arguments": None}
        assistant = None
        if outcome["diagnosis"] is not None:
            self.fail(check, outcome["diagnosis"], outcome["response"])
        else:
            problem, call, arguments = self._judge_call(outcome["message"], "", outcome["finish_reason"], budget)
            part["arguments"] = arguments
            if problem is not None:
                self.fail(check, "POST %s: %s" % (CHAT_PATH, problem), outcome["response"])
            else:
                part["passed"] = True
                assistant = outcome["message"]
        parts["non_streaming"] = part
        if self.blocked:
            details.update(parts)
            return
        # Streaming.
        problem, assembled, response = self.stream(check, "tool call stream", messages, budget, use_stop=False, extra=extra)
        part = {"passed": False, "finish_reason": None, "arguments": None}
        if problem is not None:
            self.fail(check, "streaming: " + problem, response, tail=True)
        else:
            part["finish_reason"] = assembled["finish_reason"]
            problem, call, arguments = self._judge_call(assembled["message"], "streaming: ", assembled["finish_reason"], budget)
            part["arguments"] = arguments
            if problem is not None:
                self.fail(check, problem, response, tail=True)
            else:
                part["passed"] = True
                if assistant is None:
                    assistant = assembled["message"]
        parts["streaming"] = part
        # The tool result sent back, answered by the model.
        part = {"passed": False, "finish_reason": None, "tool_call_ids": []}
        parts["round_trip"] = part
        details.update(parts)
        if assistant is None or self.blocked:
            part["skipped"] = "no valid tool call to answer"
            self.fail(check, "no valid tool call to answer")
            return
        follow = list(messages)
        follow.append(assistant_turn(assistant))
        for call in tool_calls_of(assistant):
            arguments = call.get("function", {}).get("arguments")
            try:
                city = json.loads(arguments).get("city") if isinstance(arguments, str) else arguments.get("city")
            except (ValueError, AttributeError):
                city = None
            follow.append({"role": "tool", "tool_call_id": call.get("id"),
                           "content": json.dumps({"city": city or "Paris", "temperature": 21, "unit": "celsius",
                                                  "conditions": "sunny"})})
            part["tool_call_ids"].append(call.get("id"))
        part["reasoning_fields_sent"] = [field for field, _text in reasoning_fields(assistant)]
        reply = self.complete(check, "tool result", follow, "tool_call", use_stop=False, extra={"tools": [WEATHER_TOOL]})
        part["finish_reason"] = reply["finish_reason"]
        if reply["diagnosis"] is not None:
            self.fail(check, "tool result turn: " + reply["diagnosis"], reply["response"])
            return
        if not reply["content"].strip():
            self.fail(check, "tool result turn: POST %s answered without content (finish_reason %s, %d tool call(s)); "
                      "expected the model to answer from the tool result; check the chat template's handling of "
                      "tool messages" % (CHAT_PATH, reply["finish_reason"], len(reply["tool_calls"])), reply["response"])
            return
        part["passed"] = True
        check["passed"] = check["diagnosis"] is None

    # --- multi-turn ---------------------------------------------------------------------

    def check_multi_turn(self, check):
        if self.first_turn is not None:
            messages, message = self.first_turn
            check["notes"].append("first turn taken from the chat check")
        else:
            messages = [{"role": "user", "content": self.params.get("chat_prompt") or DEFAULT_CHAT_PROMPT}]
            outcome = self.complete(check, "first turn", messages, "multi_turn")
            if outcome["diagnosis"] is not None:
                self.fail(check, "first turn: " + outcome["diagnosis"], outcome["response"])
                return
            if not outcome["content"].strip():
                self.fail(check, "first turn: POST %s answered without content (finish_reason %s); expected text to "
                          "continue from; check the chat check's diagnosis" % (CHAT_PATH, outcome["finish_reason"]),
                          outcome["response"])
                return
            message = outcome["message"]
        turn = assistant_turn(message)
        check["details"]["reasoning_fields_sent"] = [field for field, _text in reasoning_fields(turn)]
        follow = list(messages) + [turn, {"role": "user", "content": FOLLOW_UP_PROMPT}]
        outcome = self.complete(check, "second turn", follow, "multi_turn")
        if outcome["diagnosis"] is not None:
            self.fail(check, "second turn (the whole assistant message kept): " + outcome["diagnosis"], outcome["response"])
            return
        check["details"]["finish_reason"] = outcome["finish_reason"]
        if not outcome["content"].strip():
            self.fail(check, "second turn: POST %s answered without content (finish_reason %s); expected an answer to "
                      "the follow-up; check the chat template's handling of earlier assistant turns"
                      % (CHAT_PATH, outcome["finish_reason"]), outcome["response"])
            return
        check["passed"] = True

    # --- image --------------------------------------------------------------------------

    def check_image(self, check):
        url = self.params.get("image_data_url") or DEFAULT_IMAGE_DATA_URL
        check["details"]["image"] = "image_data_url" if self.params.get("image_data_url") else "built-in 64x64 red PNG"
        check["details"]["image_url_chars"] = len(url)
        messages = [{"role": "user", "content": [{"type": "text", "text": IMAGE_PROMPT},
                                                 {"type": "image_url", "image_url": {"url": url}}]}]
        outcome = self.complete(check, "image", messages, "image")
        if outcome["diagnosis"] is not None:
            self.fail(check, outcome["diagnosis"], outcome["response"])
            return
        check["details"]["finish_reason"] = outcome["finish_reason"]
        check["details"]["content_excerpt"] = excerpt(outcome["content"], self.secrets, 200)
        if not outcome["content"].strip():
            self.fail(check, "POST %s with an image answered without content (finish_reason %s); expected a "
                      "description; check the engine's log and its vision encoder settings"
                      % (CHAT_PATH, outcome["finish_reason"]), outcome["response"])
            return
        check["passed"] = True

    # --- long context -------------------------------------------------------------------

    def check_long_context(self, check):
        tokens = self.params["long_context_tokens"]
        prompt = long_prompt(tokens)
        details = check["details"]
        details["prompt_chars"] = len(prompt)
        details["estimated_prompt_tokens"] = estimate_tokens(prompt)
        if self.max_model_len and estimate_tokens(prompt) >= self.max_model_len:
            check["notes"].append("the prompt (about %d tokens) is not shorter than max_model_len %d; expect a "
                                  "context-length error" % (estimate_tokens(prompt), self.max_model_len))
        messages = [{"role": "user", "content": prompt}]
        outcome = self.complete(check, "long context", messages, "long_context")
        if outcome["diagnosis"] is not None:
            self.fail(check, outcome["diagnosis"], outcome["response"])
            return
        details["prompt_tokens"] = usage_tokens(outcome["usage"], "prompt_tokens")
        details["finish_reason"] = outcome["finish_reason"]
        details["code_found"] = LONG_CONTEXT_CODE in outcome["content"]
        if not outcome["content"].strip():
            self.fail(check, "POST %s with a prompt of about %d tokens answered without content (finish_reason %s); "
                      "expected an answer; check the engine's log" % (CHAT_PATH, estimate_tokens(prompt), outcome["finish_reason"]),
                      outcome["response"])
            return
        check["passed"] = True

    # --- running ------------------------------------------------------------------------

    def look_up_model(self):
        """Read /v1/models once when no models check ran: for the alias when it was not given,
        and for max_model_len either way (a failure only matters without an alias)."""
        self.looked_up = True
        probe = new_check("model lookup", False)
        self.check_models(probe)
        if not probe["passed"] and self.model is None:
            self.no_model = probe["diagnosis"]

    def run(self, check):
        name = check["name"]
        if self.blocked is not None:
            self.fail(check, "not run because an earlier request did not reach the endpoint: %s" % self.blocked)
            return
        if name in MODEL_CHECKS and not self.looked_up:
            self.look_up_model()
            if self.blocked is not None:
                self.fail(check, "not run because the request for the model list did not reach the endpoint: %s" % self.blocked)
                return
        if name in MODEL_CHECKS and self.model is None:
            self.fail(check, "not run: model was not given and GET /v1/models did not provide one (%s)" % self.no_model)
            return
        getattr(self, "check_" + name)(check)
        if name == "models":
            self.looked_up = True
            if not check["passed"] and self.model is None:
                self.no_model = check["diagnosis"]


def _not_run_result(params, checks, required, diagnosis):
    result = _result_shell(params)
    for name in checks:
        check = new_check(name, name in required)
        check["diagnosis"] = diagnosis
        result["checks"].append(check)
    return result


def _result_shell(params):
    return {
        "changed": False,
        "healthy": False,
        "problems": [],
        "api_url": None,
        "model": params.get("model") or None,
        "root": None,
        "max_model_len": None,
        "reasoning_field": None,
        "metrics": empty_metrics(),
        "checks": [],
    }


def _finish(result, secrets):
    failed = [check for check in result["checks"] if check["required"] and not check["passed"]]
    result["problems"] = ["%s: %s" % (check["name"], check["diagnosis"]) for check in failed]
    result["healthy"] = not failed
    return scrub(result, secrets)


def selected_checks(params):
    """``(checks in run order, required names)``."""
    chosen = params.get("checks")
    chosen = list(DEFAULT_CHECKS) if chosen is None else list(chosen)
    required = params.get("required_checks")
    required = chosen if required is None else list(required)
    return [name for name in CHECKS if name in chosen], set(required)


def verify_endpoint(params, client=None):
    """Run the checks ``params`` select (the module's options; see option_errors for what must
    hold first) and return the module result."""
    secrets = secrets_of(params)
    checks, required = selected_checks(params)
    try:
        endpoint = parse_base_url(params.get("base_url"))
    except ValueError as exc:
        return _finish(_not_run_result(params, checks, required, "not run: %s; expected an http:// or https:// URL "
                                       "such as http://127.0.0.1:8000/v1; check base_url" % exc), secrets)
    if client is None:
        context = None
        if endpoint.scheme == "https":
            try:
                context = build_ssl_context(params.get("validate_certs", True), params.get("ca_path"),
                                            params.get("client_cert"), params.get("client_key"))
            except (OSError, ValueError) as exc:
                return _finish(_not_run_result(params, checks, required, "not run: the TLS settings could not be "
                                               "loaded (%s); expected readable PEM files; check ca_path, client_cert and "
                                               "client_key" % exc), secrets)
        client = Client(endpoint, request_headers(params), params.get("timeout") or 300.0, context)
    verifier = _Verifier(params, client, endpoint, secrets)
    result = _result_shell(params)
    result["api_url"] = endpoint.api_url
    for name in checks:
        check = new_check(name, name in required)
        try:
            verifier.run(check)
        except Exception as exc:  # pylint: disable=broad-except
            verifier.fail(check, "the probe itself failed while running this check (%s: %s); expected no error; "
                          "report this as a bug in endpoint_verify" % (type(exc).__name__, exc))
        result["checks"].append(check)
    result["model"] = verifier.model
    result["root"] = verifier.root
    result["max_model_len"] = verifier.max_model_len
    result["reasoning_field"] = verifier.reasoning_field
    result["metrics"] = verifier.metrics
    return _finish(result, secrets)


def summary_message(result):
    """One line naming every failed required check, for fail_json."""
    return "Endpoint verification failed: %d required check(s) failed: %s" % (
        len(result["problems"]), " | ".join(result["problems"]))
