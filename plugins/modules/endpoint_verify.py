#!/usr/bin/python
# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: endpoint_verify
short_description: Read-only verification of an OpenAI-compatible endpoint (vLLM, SGLang)
version_added: 0.1.0
description:
  - Sends a few requests to an OpenAI-compatible inference server and reports, check by check,
    whether it serves what a client needs - health, the model list, chat, reasoning text, forced
    tool calls (plain and streamed, with the tool result sent back), a multi-turn conversation,
    image input and a long prompt - with time to first token and output speed from a streamed
    request.
  - Each failed check carries one C(diagnosis) sentence (what was found, what was expected, the
    first thing to check) and an excerpt of the body that showed it. The result is unhealthy
    when a required check fails; it never fails the task for what the server does unless
    O(fail_on_unhealthy) is set.
  - Checks run in a fixed order (V(health), V(models), V(chat), V(reasoning), V(tool_call),
    V(multi_turn), V(image), V(long_context)) whatever the order of O(checks). When a request
    cannot reach the server at all (connection refused, name not resolved, TLS failure, or a
    timeout of the health or model-list request), the checks after it are not run and fail with
    that diagnosis.
  - A completion that ends on C(finish_reason=length) with neither content nor a tool call
    (typically a reasoning model that spent the budget thinking) is sent again with twice the
    C(max_tokens), up to O(max_tokens_ceiling); every attempt is reported. When
    C(max_model_len) is known from C(/v1/models), budgets are kept inside it.
  - Talks HTTP through C(ansible.module_utils.urls), so it runs on the managed host (where the
    engine listens on loopback) or on the controller with C(delegate_to), and honours
    C(http_proxy), C(https_proxy) and C(no_proxy) like other modules (see O(use_proxy)); a
    loopback O(base_url) never goes through a proxy. Redirects are not followed.
  - Every answer is bounded - O(timeout) is a deadline for the whole request, a stream line may
    not exceed O(max_line_bytes) and an answer O(max_response_bytes); a request past a limit fails
    its check with a diagnosis naming the limit.
  - Warns (without failing) when O(api_key) or a credential header of O(extra_headers) would be
    sent over plain http to a host that is not loopback.
author:
  - gpufleet.serving contributors (@gpufleet)
options:
  base_url:
    description:
      - URL of the server, with or without the C(/v1) suffix, for example
        V(http://127.0.0.1:8000) or V(https://gateway.example.com/llm/v1). C(/health) is
        looked up next to C(/v1).
      - A URL that is not http(s), names no host, has an invalid port, carries credentials or
        a query string does not fail the task; every check fails with a diagnosis saying so.
    type: str
    required: true
  api_key:
    description:
      - API key the server expects (vLLM and SGLang C(--api-key)), sent as a
        bearer token in the C(Authorization) header. It never appears in the result, not even where the server
        echoes it.
    type: str
  model:
    description:
      - The model alias the server must serve (vLLM C(--served-model-name)).
      - When omitted, the first id that C(/v1/models) lists is used (SGLang serves one model
        under its path or name); the V(models) check then notes the choice.
    type: str
  checks:
    description:
      - The checks to run.
      - V(health) - C(GET /health). 200 passes; 404 passes as "no health route"; 503 fails
        (vLLM answers it when the engine died, SGLang while it is still starting).
      - V(models) - C(GET /v1/models) lists O(model) (or any model when it is omitted);
        reports C(root) (served path or revision) and C(max_model_len) when the server gives
        them.
      - V(chat) - a short prompt (O(chat_prompt)) answered with content, then the same request
        streamed with usage, for the metrics. C(finish_reason=length) with some content passes
        with a note (the endpoint served content; the cut is reported in C(details.truncated)).
        A stream that ends without the C([DONE]) event fails the check.
      - V(reasoning) - reasoning text in C(message.reasoning) (vLLM) or
        C(message.reasoning_content) (SGLang, older vLLM) with O(reasoning_effort) sent; a 400
        that names C(reasoning_effort) fails with that diagnosis. The field name found is
        returned in RV(reasoning_field).
      - V(tool_call) - a forced call of a C(get_weather(city, unit)) function (C(tool_choice)
        naming it), non-streaming and streaming (fragments reassembled by index); the
        arguments must be JSON matching the function's schema and the call must have an id.
        Then the tool result is sent back with that C(tool_call_id) after the whole assistant
        message (content, reasoning field under the server's own name, tool calls), and the
        model's next turn must have content.
      - V(multi_turn) - a second user turn after the whole first assistant message (reused from
        the V(chat) check when it passed) is accepted and answered with content.
      - V(image) - a user message with an C(image_url) content part holding a data URL
        (O(image_data_url), else a built-in 64x64 red PNG) is answered with content.
      - V(long_context) - a prompt of about O(long_context_tokens) tokens (4 characters a
        token) is answered with content; a 400 about the context length is diagnosed as the
        model's context limit. Whether the answer quotes the code hidden in the prompt is
        reported (C(details.code_found)) but not judged.
    type: list
    elements: str
    choices: [health, models, chat, reasoning, tool_call, multi_turn, image, long_context]
    default: [health, models, chat, reasoning]
  required_checks:
    description:
      - The checks whose failure makes the result unhealthy; a subset of O(checks). Other
        checks still run and are reported (and warned about) but do not count.
      - Defaults to every check in O(checks).
    type: list
    elements: str
    choices: [health, models, chat, reasoning, tool_call, multi_turn, image, long_context]
  reasoning_effort:
    description:
      - C(reasoning_effort) sent with every chat completion (vLLM accepts V(none), V(minimal),
        V(low), V(medium), V(high), V(xhigh), V(max)). vLLM drops it silently when the chat
        template does not use it.
      - An empty string sends no C(reasoning_effort).
    type: str
    default: low
  max_tokens:
    description:
      - C(max_tokens) of each chat completion's first attempt.
    type: int
    default: 2048
  max_tokens_ceiling:
    description:
      - Highest C(max_tokens) the budget escalation may reach (the budget doubles each attempt).
        Must not be lower than O(max_tokens); equal to it turns escalation off.
    type: int
    default: 8192
  chat_prompt:
    description:
      - Prompt of the V(chat) check (and of the first turn of V(multi_turn)).
      - Defaults to C(What is the capital of France? Answer in one short sentence.)
    type: str
  stop:
    description:
      - Stop strings sent with every chat completion except those of the V(tool_call) check
        (a stop string could cut the arguments). A stop string is the reliable way to get
        C(finish_reason=stop) from a test model with random weights.
    type: list
    elements: str
  timeout:
    description:
      - Longest time one request may take, in seconds, from connecting to the end of the
        answer (or of the stream). It is a deadline for the whole request, not a per-read
        timeout - a server that trickles bytes is cut off when it passes.
    type: float
    default: 300
  max_line_bytes:
    description:
      - Longest line of a streamed answer (one server-sent event line), in bytes. A longer line
        ends the request and fails its check.
    type: int
    default: 1048576
  max_response_bytes:
    description:
      - Most bytes one answer (body or whole stream) may have. A longer answer ends the request
        and fails its check.
    type: int
    default: 67108864
  use_proxy:
    description:
      - Use the proxy named by C(http_proxy) or C(https_proxy) in the environment (subject to
        C(no_proxy)) for a O(base_url) that is not loopback, as the hosted-API comparison
        behind an egress proxy needs.
      - A loopback O(base_url) (C(localhost), C(127.0.0.0/8), C(::1)) never uses a proxy.
    type: bool
    default: true
  validate_certs:
    description:
      - Verify the server's TLS certificate and host name (https only).
    type: bool
    default: true
  ca_path:
    description:
      - PEM file of the CA certificates to trust instead of the system's (https only).
    type: path
  client_cert:
    description:
      - PEM client certificate for mutual TLS (https only); may hold the key too.
    type: path
  client_key:
    description:
      - PEM private key of O(client_cert) when it is in a separate file.
    type: path
  long_context_tokens:
    description:
      - Approximate size in tokens of the V(long_context) check's prompt.
    type: int
    default: 32768
  image_data_url:
    description:
      - Image the V(image) check sends, as a C(data:image/...;base64,...) URL. Defaults to a
        built-in 64x64 red PNG.
    type: str
  extra_headers:
    description:
      - Additional HTTP headers for every request, for example for a gateway. Values of headers
        whose names look like credentials (containing C(auth), C(key), C(token), C(secret),
        C(cookie) or C(pass)) are redacted from the result like O(api_key).
      - An C(Authorization) header cannot be combined with O(api_key).
    type: dict
  fail_on_unhealthy:
    description:
      - Fail the task when a required check fails. The failure message names the failed checks
        and the result still carries every check.
    type: bool
    default: false
notes:
  - The requests generate tokens (a few thousand at most with the defaults, more with
    V(long_context)) but change nothing on the server; the module runs fully in check mode.
  - "vLLM opens its port only after loading the weights: a refused connection right after a
    start usually means the engine is still loading. SGLang answers C(/v1/models) before it can
    serve and a multi-node SGLang's non-zero ranks answer C(/health) with 200 whatever the
    state, so probe rank 0 and rely on the V(chat) check."
  - Time to first token and output speed come from the streamed request of the V(chat) check;
    they are V(null) when it does not run or fails.
seealso:
  - module: gpufleet.serving.gpu_health
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: The module only sends read-only requests; it runs fully in check mode and never reports a change.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Verify the local vLLM endpoint (health, models, chat, reasoning)
  gpufleet.serving.endpoint_verify:
    base_url: http://127.0.0.1:8000
    model: kimi-k3.1-pro
    api_key: "{{ serving_api_key }}"
  register: endpoint

- name: Show the verdict
  ansible.builtin.debug:
    msg: >-
      healthy={{ endpoint.healthy }} ttft={{ endpoint.metrics.ttft_s }} s
      speed={{ endpoint.metrics.output_tokens_per_s }} tok/s problems={{ endpoint.problems }}

- name: Full verification, tool calls and images optional, from the controller
  gpufleet.serving.endpoint_verify:
    base_url: https://llm.example.com/v1
    api_key: "{{ serving_api_key }}"
    checks: [health, models, chat, reasoning, tool_call, multi_turn, image, long_context]
    required_checks: [health, models, chat, reasoning, multi_turn, long_context]
    long_context_tokens: 100000
    max_tokens_ceiling: 16384
    ca_path: /etc/pki/serving-ca.pem
    fail_on_unhealthy: true
  delegate_to: localhost

- name: SGLang on its default port; the model alias comes from /v1/models
  gpufleet.serving.endpoint_verify:
    base_url: http://127.0.0.1:30000
    checks: [health, models, chat, tool_call]

- name: Sandbox model with random weights - a stop string ends its answers
  gpufleet.serving.endpoint_verify:
    base_url: http://127.0.0.1:8000/v1
    checks: [health, models, chat]
    reasoning_effort: ""
    max_tokens: 32
    max_tokens_ceiling: 64
    stop: ["."]
"""

RETURN = r"""
changed:
  description: Always V(false); the module only reads.
  returned: always
  type: bool
  sample: false
healthy:
  description: V(true) if and only if every required check passed.
  returned: always
  type: bool
  sample: true
problems:
  description: One line per failed required check - the check's name, a colon and its diagnosis.
  returned: always
  type: list
  elements: str
  sample:
    - "chat: POST /v1/chat/completions answered HTTP 401 (Unauthorized); expected the server to accept the API key; ..."
api_url:
  description: The server's C(/v1) URL as the module used it; V(null) when O(base_url) is not usable.
  returned: always
  type: str
  sample: http://127.0.0.1:8000/v1
model:
  description: The model alias used, as given or as taken from C(/v1/models); V(null) when unknown.
  returned: always
  type: str
  sample: kimi-k3.1-pro
root:
  description: The C(root) of the model in C(/v1/models) (vLLM - the served path or repository); V(null) when not exposed.
  returned: always
  type: str
  sample: /models/Kimi-K3.1-Pro
max_model_len:
  description: The model's context length from C(/v1/models); V(null) when not exposed.
  returned: always
  type: int
  sample: 262144
reasoning_field:
  description: >-
    Name of the message field in which the server returned reasoning text (V(reasoning) or
    V(reasoning_content)); V(null) when no answer carried any.
  returned: always
  type: str
  sample: reasoning
metrics:
  description: Timing of the V(chat) check's streamed request; every value V(null) when it did not run or failed.
  returned: always
  type: dict
  contains:
    ttft_s:
      description: Seconds from sending the request to the first chunk with generated text (content or reasoning).
      type: float
      sample: 0.412
    output_tokens_per_s:
      description: >-
        Output tokens after the first one divided by the seconds from the first to the last
        token chunk; V(null) with fewer than two tokens.
      type: float
      sample: 87.5
    tokens_source:
      description: >-
        V(usage) when the token counts come from the stream's usage chunk
        (C(stream_options.include_usage)); V(chunks) when the server sent none and every chunk
        with generated text was counted as one token (an estimate).
      type: str
      sample: usage
    prompt_tokens:
      description: Prompt tokens from the stream's usage; V(null) without usage.
      type: int
      sample: 18
    completion_tokens:
      description: Output tokens (see RV(metrics.tokens_source)).
      type: int
      sample: 130
checks:
  description: One entry per check that ran, in run order.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The check, one of the O(checks) choices.
      type: str
      sample: chat
    passed:
      description: Whether the check passed.
      type: bool
      sample: true
    required:
      description: Whether the check counts for RV(healthy).
      type: bool
      sample: true
    http_status:
      description: HTTP status of the check's last request; V(null) when none arrived.
      type: int
      sample: 200
    latency_s:
      description: Seconds all the check's requests took together.
      type: float
      sample: 1.284
    diagnosis:
      description: >-
        On failure, one sentence - what was found, what was expected, the first thing to
        check; V(null) when the check passed.
      type: str
    body_excerpt:
      description: >-
        On failure, up to 500 characters of the body (for a stream, its end) that showed the
        problem, credentials redacted; V(null) otherwise.
      type: str
    notes:
      description: Remarks that do not fail the check, for example a truncated answer or a health route that does not exist.
      type: list
      elements: str
    attempts:
      description: Every request the check sent, in order.
      type: list
      elements: dict
      contains:
        request:
          description: What the request was for, for example V(chat), V(chat stream), V(tool result).
          type: str
        method:
          description: HTTP method.
          type: str
        path:
          description: Path below the server's root, for example C(/v1/chat/completions).
          type: str
        stream:
          description: Whether the request asked for a stream.
          type: bool
        prompt_tokens:
          description: Prompt tokens from the answer's usage; V(null) when it has none.
          type: int
        max_tokens:
          description: The C(max_tokens) sent; V(null) for GET requests.
          type: int
        http_status:
          description: HTTP status; V(null) when no answer arrived.
          type: int
        latency_s:
          description: Seconds from connecting to the end of the answer.
          type: float
        error:
          description: Why no complete answer arrived (connection refused, timeout, TLS...); V(null) when one did.
          type: str
        finish_reason:
          description: C(finish_reason) of a completion; V(null) otherwise.
          type: str
        content_chars:
          description: Characters of content in a completion.
          type: int
        reasoning_chars:
          description: Characters of reasoning text in a completion.
          type: int
        tool_calls:
          description: Number of tool calls in a completion.
          type: int
        completion_tokens:
          description: C(usage.completion_tokens) of a completion.
          type: int
        chunks:
          description: JSON chunks of a stream; V(null) for other requests.
          type: int
        done:
          description: Whether a stream ended with the C([DONE]) event; V(null) for other requests.
          type: bool
    details:
      description: >-
        What the check found. V(health) - C(available). V(models) - C(served_models), C(model),
        C(root), C(max_model_len). V(chat) - C(finish_reason), C(max_tokens) (the budget that
        answered), C(truncated), C(content_excerpt), C(reasoning_field), C(usage),
        C(stream_finish_reason), C(stream_chunks). V(reasoning) - C(reasoning_effort),
        C(reasoning_field), C(reasoning_chars), C(content_chars), C(finish_reason).
        V(tool_call) - C(non_streaming) and C(streaming) (C(passed), C(finish_reason), the
        parsed C(arguments)) and C(round_trip) (C(passed), C(finish_reason), C(tool_call_ids),
        C(reasoning_fields_sent)). V(multi_turn) - C(reasoning_fields_sent), C(finish_reason).
        V(image) - C(image), C(image_url_chars), C(finish_reason), C(content_excerpt).
        V(long_context) - C(prompt_chars), C(estimated_prompt_tokens), C(prompt_tokens),
        C(finish_reason), C(code_found).
      type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.serving.plugins.module_utils._endpoint_verify import (
    CHECKS,
    DEFAULT_CHECKS,
    client_warnings,
    option_errors,
    secrets_of,
    summary_message,
    verify_endpoint,
)


def run_module(module):
    """Verify the endpoint and exit."""
    # Credential-looking header values are secrets too: mask them wherever Ansible prints.
    module.no_log_values.update(secrets_of(module.params))
    errors = option_errors(module.params)
    if errors:
        module.fail_json(msg="; ".join(errors))
    for warning in client_warnings(module.params):
        module.warn(warning)
    result = verify_endpoint(module.params)
    for check in result["checks"]:
        if not check["passed"] and not check["required"]:
            module.warn("optional check %s failed: %s" % (check["name"], check["diagnosis"]))
    if module.params["fail_on_unhealthy"] and not result["healthy"]:
        module.fail_json(msg=summary_message(result), **result)
    module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            base_url=dict(type="str", required=True),
            api_key=dict(type="str", no_log=True),
            model=dict(type="str"),
            checks=dict(type="list", elements="str", choices=list(CHECKS), default=list(DEFAULT_CHECKS)),
            required_checks=dict(type="list", elements="str", choices=list(CHECKS)),
            reasoning_effort=dict(type="str", default="low"),
            max_tokens=dict(type="int", default=2048, no_log=False),
            max_tokens_ceiling=dict(type="int", default=8192, no_log=False),
            chat_prompt=dict(type="str"),
            stop=dict(type="list", elements="str"),
            timeout=dict(type="float", default=300),
            max_line_bytes=dict(type="int", default=1048576),
            max_response_bytes=dict(type="int", default=67108864),
            use_proxy=dict(type="bool", default=True),
            validate_certs=dict(type="bool", default=True),
            ca_path=dict(type="path"),
            client_cert=dict(type="path"),
            client_key=dict(type="path", no_log=False),
            long_context_tokens=dict(type="int", default=32768, no_log=False),
            image_data_url=dict(type="str"),
            extra_headers=dict(type="dict"),
            fail_on_unhealthy=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    run_module(module)


if __name__ == "__main__":
    main()
