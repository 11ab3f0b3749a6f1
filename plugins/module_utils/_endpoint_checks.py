# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""endpoint_verify's checks (private to this collection): what each check sends and how
it judges the answers.  The requests go through ``CheckSession`` (_endpoint_session); the
orchestration (options, order, result) is in _endpoint_verify.
"""

from __future__ import annotations

import json

from ansible_collections.gpufleet.serving.plugins.module_utils._endpoint_prompts import (
    DEFAULT_CHAT_PROMPT,
    DEFAULT_IMAGE_DATA_URL,
    FOLLOW_UP_PROMPT,
    IMAGE_PROMPT,
    LONG_CONTEXT_CODE,
    REASONING_PROMPT,
    TOOL_PROMPT,
    WEATHER_CHOICE,
    WEATHER_PARAMETERS,
    WEATHER_TOOL,
    estimate_tokens,
    long_prompt,
)
from ansible_collections.gpufleet.serving.plugins.module_utils._endpoint_session import CheckSession, new_check
from ansible_collections.gpufleet.serving.plugins.module_utils._http_diagnosis import excerpt
from ansible_collections.gpufleet.serving.plugins.module_utils._openai_chat import (
    assistant_turn,
    reasoning_fields,
    schema_errors,
    stream_metrics,
    text_of,
    tool_calls_of,
    usage_tokens,
)
from ansible_collections.gpufleet.serving.plugins.module_utils._openai_http import CHAT_PATH

CHECKS = ("health", "models", "chat", "reasoning", "tool_call", "multi_turn", "image", "long_context")
DEFAULT_CHECKS = ("health", "models", "chat", "reasoning")
# Checks that send chat completions and so need a model alias.
MODEL_CHECKS = ("chat", "reasoning", "tool_call", "multi_turn", "image", "long_context")


class Verifier(CheckSession):
    """Runs the checks against one endpoint and keeps what earlier checks found."""

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
