# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Diagnosis sentences for endpoint_verify's requests (private to this collection).

A failed request gets one sentence: what was found, what was expected, the first thing to
check.  ``transport_diagnosis`` is for a request that got no complete HTTP answer (see
_openai_http's error kinds), ``http_diagnosis`` for a status that is not 2xx,
``json_diagnosis`` for a 2xx answer that is not the JSON expected.  Server text is redacted
before it is quoted.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.serving.plugins.module_utils._openai_chat import server_error_message
from ansible_collections.gpufleet.serving.plugins.module_utils._openai_http import CHAT_PATH
from ansible_collections.gpufleet.serving.plugins.module_utils._redact import redact

EXCERPT_CHARS = 500

_CONTEXT_RE = re.compile(
    r"context length|context window|maximum context|max_model_len|max-model-len|model length|too long|"
    r"maximum (?:input|prompt) length|exceeds|longer than", re.I)
_TOOL_FLAGS_RE = re.compile(r"enable-auto-tool-choice|tool-call-parser|tool_choice|tool choice|tool_call|\btools?\b", re.I)
_IMAGE_RE = re.compile(r"image|multimodal|multi-modal|vision|modalit|mm_", re.I)
_MODEL_RE = re.compile(r"model", re.I)


def excerpt(text, secrets, limit=EXCERPT_CHARS, tail=False):
    """At most ``limit`` characters of ``text`` (its end when ``tail``), secrets redacted."""
    text = redact(text, secrets)
    if len(text) <= limit:
        return text
    if tail:
        return "..." + text[-limit:]
    return text[:limit] + "..."


def request_name(response):
    return "%s %s" % (response.method, response.path)


def transport_diagnosis(response, endpoint, timeout):
    """One sentence for a request that got no complete HTTP answer (naming the proxy when the
    request went through one)."""
    sentence = _transport_sentence(response, endpoint, timeout)
    if getattr(response, "proxy", None) and response.error_kind in ("refused", "dns", "timeout", "network", "tls"):
        sentence += ("; the request went through the proxy %s from the environment: check it, no_proxy, or "
                     "use_proxy" % response.proxy)
    return sentence


def _transport_sentence(response, endpoint, timeout):
    what = request_name(response)
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
    if kind == "limit":
        return ("%s: %s, so the probe stopped reading; expected a bounded answer from the engine; check that base_url "
                "points at the engine and not at something that streams without end, then lower max_tokens or raise "
                "max_line_bytes/max_response_bytes" % (what, response.error_message))
    return ("%s: %s; expected a complete HTTP answer from %s; check the engine's log for a crash and the network path"
            % (what, response.error_message, where))


def _seconds(value):
    return ("%g" % value) if isinstance(value, (int, float)) else str(value)


def http_diagnosis(response, secrets, context=None, payload=None):
    """One sentence for an HTTP answer that is not 2xx.  ``context`` names the check, which
    picks the most likely cause of a 400."""
    status = response.status
    message = redact(server_error_message(response.text()), secrets) if response.body or response.lines else "empty body"
    what = "%s answered HTTP %d (%s)" % (request_name(response), status, message)
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


def json_diagnosis(response, problem, expected):
    content_type = response.headers.get("content-type", "no content type")
    return ("%s answered HTTP %d with %s (%s); expected %s; check that base_url points at the engine itself and not at "
            "a proxy or web page" % (request_name(response), response.status, problem, content_type, expected))
