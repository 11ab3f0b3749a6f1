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
scrubbed from every string of the result, server text included (_redact).

This file only orchestrates: the checks are in _endpoint_checks, their requests in
_endpoint_session, what they send in _endpoint_prompts, the diagnosis sentences in
_http_diagnosis and the bounded HTTP client in _openai_http.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.serving.plugins.module_utils._endpoint_checks import CHECKS, DEFAULT_CHECKS, MODEL_CHECKS, Verifier
from ansible_collections.gpufleet.serving.plugins.module_utils._endpoint_prompts import (
    DEFAULT_CHAT_PROMPT,
    FOLLOW_UP_PROMPT,
    IMAGE_PROMPT,
    REASONING_PROMPT,
    TOOL_PROMPT,
    WEATHER_TOOL,
    estimate_prompt_tokens,
    estimate_tokens,
)
from ansible_collections.gpufleet.serving.plugins.module_utils._endpoint_session import empty_metrics, new_check
from ansible_collections.gpufleet.serving.plugins.module_utils._openai_http import (
    CHAT_PATH,
    CREDENTIAL_HEADER_RE,
    DEFAULT_MAX_LINE_BYTES,
    DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_TIMEOUT,
    MODELS_PATH,
    Client,
    build_ssl_context,
    parse_base_url,
    plain_http_credential_warning,
)
from ansible_collections.gpufleet.serving.plugins.module_utils._redact import scrub

# Re-exported: _cost_report and tools/bench price and replay the requests the checks send.
__all__ = [
    "CHAT_PATH", "CHECKS", "DEFAULT_CHAT_PROMPT", "DEFAULT_CHECKS", "FOLLOW_UP_PROMPT", "IMAGE_PROMPT", "MODELS_PATH",
    "MODEL_CHECKS", "REASONING_PROMPT", "TOOL_PROMPT", "WEATHER_TOOL", "estimate_prompt_tokens", "estimate_tokens",
    "client_warnings", "option_errors", "secrets_of", "selected_checks", "summary_message", "verify_endpoint",
]


def secrets_of(params):
    """Strings that must never appear in the result: the API key and the values of extra
    headers whose names look like credentials."""
    secrets = []
    if params.get("api_key"):
        secrets.append(params["api_key"])
    for name, value in (params.get("extra_headers") or {}).items():
        if CREDENTIAL_HEADER_RE.search(str(name)) and value:
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
    for name in ("max_line_bytes", "max_response_bytes"):
        value = params.get(name)
        if value is not None and value < 1:
            errors.append("%s must be at least 1, got %d" % (name, value))
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


def client_warnings(params):
    """Warnings about how the requests will travel (the module prints them; they fail nothing)."""
    try:
        endpoint = parse_base_url(params.get("base_url"))
    except ValueError:
        return []
    warning = plain_http_credential_warning(endpoint, request_headers(params))
    return [warning] if warning else []


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
        client = Client(endpoint, request_headers(params), params.get("timeout") or DEFAULT_TIMEOUT, context,
                        use_proxy=params.get("use_proxy", True),
                        max_line_bytes=params.get("max_line_bytes") or DEFAULT_MAX_LINE_BYTES,
                        max_response_bytes=params.get("max_response_bytes") or DEFAULT_MAX_RESPONSE_BYTES)
    verifier = Verifier(params, client, endpoint, secrets)
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
