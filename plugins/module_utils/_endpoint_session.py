# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""How endpoint_verify's checks talk to the server (private to this collection).

``CheckSession`` sends each request through an _openai_http client and records it as an
attempt of its check, retries a chat completion with a doubled budget while it ends on
``length`` with nothing to show, reads streams back into one message, and marks a check
failed with the first diagnosis.  The checks themselves are in _endpoint_checks.
"""

from __future__ import annotations

from ansible_collections.gpufleet.serving.plugins.module_utils._endpoint_prompts import token_budgets
from ansible_collections.gpufleet.serving.plugins.module_utils._http_diagnosis import (
    excerpt,
    http_diagnosis,
    json_diagnosis,
    request_name,
    transport_diagnosis,
)
from ansible_collections.gpufleet.serving.plugins.module_utils._openai_chat import (
    assemble_stream,
    first_choice,
    parse_sse,
    reasoning_fields,
    text_of,
    tool_calls_of,
    usage_tokens,
)
from ansible_collections.gpufleet.serving.plugins.module_utils._openai_http import CHAT_PATH, HEALTH_PATH, MODELS_PATH
from ansible_collections.gpufleet.serving.plugins.module_utils._redact import redact


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


class CheckSession:
    """The requests of the checks against one endpoint, and what earlier checks found."""

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
            self.fail(check, json_diagnosis(response, "a body that is not JSON", "a JSON model list"), response)
            return
        data = document.get("data") if isinstance(document, dict) else None
        if not isinstance(data, list):
            self.fail(check, json_diagnosis(response, "JSON that has no data list", "an OpenAI model list"), response)
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
        return token_budgets(self.params["max_tokens"], self.params["max_tokens_ceiling"], self.max_model_len, messages)

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
            outcome["diagnosis"] = json_diagnosis(response, "a body that is not JSON", "a chat.completion JSON object")
            return outcome
        choice = first_choice(document)
        message = choice.get("message") if choice else None
        if not isinstance(message, dict):
            outcome["diagnosis"] = json_diagnosis(response, "JSON without choices[0].message", "a chat.completion object")
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
        what = request_name(response)
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
