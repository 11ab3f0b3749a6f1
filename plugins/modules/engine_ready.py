#!/usr/bin/python
# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: engine_ready
short_description: Wait until a vLLM or SGLang engine unit serves its alias, or say why it never will
version_added: 0.1.0
description:
  - Polls an engine started by systemd until C(/v1/models) lists the expected alias, with vLLM's
    readiness semantics. A refused connection means the weights are still loading (vLLM opens its
    port only after loading them and allocating the KV cache), so the wait goes on. C(/health)
    answering 503 means the engine core died. A unit that left C(active), waits to be restarted
    or restarted during the wait is a crash loop, never "still loading", and ends the wait at once.
  - With O(engine=sglang), SGLang's semantics apply. Once it listens, C(/health) says 503 until a
    warm-up generation passed (still loading, not dead), and C(/v1/models) may list the model before
    it can generate, so only C(/health) 200 with the alias listed is ready. Probe rank 0 only, since
    ranks >= 1 of a multi-node launch run a dummy health server that always answers 200.
  - On a timeout or a dead engine the task fails with the last lines of the unit's journal and
    the first checks of every troubleshooting row those lines match (unrecognised architecture,
    out of memory while loading, context limit, tool-call parsing, missing model path, multi-node
    hang, missing compiler, port in use, sandboxing denials).
  - Read-only; it never starts, stops or restarts anything.
author:
  - gpufleet.serving contributors (@gpufleet)
options:
  base_url:
    description: The engine's URL, for example C(http://127.0.0.1:8000) (a trailing C(/v1) is accepted).
    type: str
    required: true
  alias:
    description: The served model name C(/v1/models) must list.
    type: str
    required: true
  unit:
    description: The engine's systemd unit; its state and journal are read. Empty to skip both.
    type: str
    default: vllm.service
  api_key:
    description: The engine's API key, sent as a bearer token to C(/v1/models). Never returned.
    type: str
  timeout:
    description: Seconds to wait for readiness before failing.
    type: float
    default: 600
  interval:
    description: Seconds between polls.
    type: float
    default: 2
  engine:
    description: Whose readiness semantics apply.
    type: str
    choices: [vllm, sglang]
    default: vllm
  journal_lines:
    description:
      - How many of the last journal lines to return on failure. Hints are matched against up to
        1000 lines since the wait began; lines that matched a hint are shown too.
    type: int
    default: 40
  fail_on_not_ready:
    description: Fail the task on a timeout or a dead engine. With V(false) the result reports it in RV(ready) and RV(problems).
    type: bool
    default: true
notes:
  - Needs C(systemctl) and C(journalctl) on the host when O(unit) is set.
  - Probe rank 0 of a multi-node launch; C(--headless) workers serve no HTTP.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: The module only reads; it runs fully in check mode and never reports a change.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Wait for the engine to serve kimi-local
  gpufleet.serving.engine_ready:
    base_url: http://127.0.0.1:8000
    alias: kimi-local
    unit: vllm.service
    timeout: 3900

- name: Probe once, without failing
  gpufleet.serving.engine_ready:
    base_url: http://127.0.0.1:8000
    alias: kimi-local
    timeout: 0
    fail_on_not_ready: false
  register: engine
"""

RETURN = r"""
changed:
  description: Always V(false).
  returned: always
  type: bool
ready:
  description: Whether C(/v1/models) listed the alias.
  returned: always
  type: bool
  sample: true
state:
  description: V(ready), V(loading) (the wait timed out while loading) or V(dead).
  returned: always
  type: str
  sample: ready
reason:
  description: What the last poll saw.
  returned: always
  type: str
  sample: /v1/models lists kimi-local
waited_s:
  description: Seconds spent waiting.
  returned: always
  type: float
polls:
  description: Number of polls.
  returned: always
  type: int
model_ids:
  description: The ids C(/v1/models) listed.
  returned: always
  type: list
  elements: str
root:
  description: The served path the alias resolves to (C(root) in C(/v1/models)).
  returned: always
  type: str
max_model_len:
  description: The context length the engine serves, when listed.
  returned: always
  type: int
unit_state:
  description: The unit's ActiveState, SubState, NRestarts, Result, MainPID and ExecMainStartTimestamp at the last poll.
  returned: always
  type: dict
journal:
  description: The unit's last journal lines since the wait began (on failure only).
  returned: always
  type: list
  elements: str
hints:
  description: Troubleshooting rows the journal matches, each with symptom, first_checks and line.
  returned: always
  type: list
  elements: dict
problems:
  description: One line per problem; empty when ready.
  returned: always
  type: list
  elements: str
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.serving.plugins.module_utils._openai_http import Client, parse_base_url
from ansible_collections.gpufleet.serving.plugins.module_utils._vllm import classify_readiness, format_failure, journal_hints

JOURNAL_SCAN_LINES = 1000
UNIT_PROPERTIES = ("ActiveState", "SubState", "NRestarts", "Result", "MainPID", "ExecMainStartTimestamp")


def unit_state(module, unit):
    if not unit:
        return {}
    rc, out, _err = module.run_command([module.get_bin_path("systemctl", required=True), "show", unit,
                                        "--property=" + ",".join(UNIT_PROPERTIES)])
    state = {}
    for line in out.splitlines() if rc == 0 else ():
        key, _sep, value = line.partition("=")
        state[key] = value
    return state


def journal_tail(module, unit, since_epoch, lines):
    if not unit:
        return []
    rc, out, _err = module.run_command([module.get_bin_path("journalctl", required=True), "--unit", unit, "--no-pager",
                                        "--output", "short-iso", "--since", "@%d" % int(since_epoch), "--lines", str(lines)])
    return [line for line in out.splitlines() if line and not line.startswith("-- ")] if rc == 0 else []


def observe(module, client, unit):
    observation = {"unit": unit_state(module, unit)}
    health = client.call("GET", "/health")
    if health.error_kind == "refused":
        observation["connect"] = "refused"
        return observation
    if health.error_kind is not None:
        observation["connect"] = health.error_kind
        return observation
    observation["connect"] = "ok"
    observation["health_status"] = health.status
    if health.status != 200:
        return observation
    models = client.call("GET", "/v1/models")
    observation["models_status"] = models.status
    if models.ok:
        try:
            data = models.json().get("data") or []
        except (ValueError, AttributeError):
            data = []
        observation["model_ids"] = [str(entry.get("id")) for entry in data if isinstance(entry, dict)]
        observation["entries"] = [entry for entry in data if isinstance(entry, dict)]
    return observation


def run_module(module):
    params = module.params
    try:
        endpoint = parse_base_url(params["base_url"])
    except ValueError as exc:
        module.fail_json(msg="base_url: %s" % exc)
    headers = {"Authorization": "Bearer %s" % params["api_key"]} if params["api_key"] else {}
    client = Client(endpoint, headers=headers, timeout=10.0)
    unit = params["unit"]
    started_wall = time.time()
    started = time.monotonic()
    baseline = unit_state(module, unit).get("NRestarts") or 0
    polls = 0
    while True:
        polls += 1
        observation = observe(module, client, unit)
        state, reason = classify_readiness(observation, params["alias"], baseline, params["engine"])
        waited = time.monotonic() - started
        if state != "loading" or waited >= params["timeout"]:
            break
        time.sleep(max(0.1, min(params["interval"], params["timeout"] - waited)))
    entry = next((e for e in observation.get("entries", []) if str(e.get("id")) == params["alias"]), {})
    result = {
        "changed": False, "ready": state == "ready", "state": state, "reason": reason, "waited_s": round(waited, 1),
        "polls": polls, "model_ids": observation.get("model_ids", []), "root": entry.get("root"),
        "max_model_len": entry.get("max_model_len"), "unit_state": observation.get("unit", {}),
        "journal": [], "hints": [], "problems": [],
    }
    if state == "ready":
        module.exit_json(**result)
    if state == "loading":
        reason = "not ready after %.0f s (%s)" % (waited, reason)
    # The journal since a little before the wait: the (re)start that led here is in it. Hints are
    # read from all of it (a traceback pushes the one telling line far from the tail), and the
    # lines that matched are shown above the tail when the tail does not hold them.
    window = journal_tail(module, unit, started_wall - 30, max(params["journal_lines"], JOURNAL_SCAN_LINES))
    hints = journal_hints(window)
    journal = window[-params["journal_lines"]:] if params["journal_lines"] > 0 else []
    matched = [hint["line"] for hint in hints if not any(hint["line"] in line for line in journal)]
    if matched:
        journal = matched + ["..."] + journal
    result.update(journal=journal, hints=hints, problems=["engine %s: %s" % (state, reason)])
    if params["fail_on_not_ready"]:
        module.fail_json(msg=format_failure("%s %s" % (endpoint.netloc, unit or "engine"), state, reason, journal, hints), **result)
    module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            base_url=dict(type="str", required=True),
            alias=dict(type="str", required=True),
            unit=dict(type="str", default="vllm.service"),
            api_key=dict(type="str", no_log=True),
            timeout=dict(type="float", default=600),
            interval=dict(type="float", default=2),
            engine=dict(type="str", choices=["vllm", "sglang"], default="vllm"),
            journal_lines=dict(type="int", default=40),
            fail_on_not_ready=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    run_module(module)


if __name__ == "__main__":
    main()
