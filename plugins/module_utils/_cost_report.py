# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Cost per successful task across endpoints, and its Markdown and HTML reports (private to this collection).

Pure functions, no I/O. ``build_report(endpoints, runs)`` takes the endpoints as configured
(name, kind, model, base_url, cost rates; an ``api_key`` is ignored and never copied) and one
record per repetition and endpoint, ``{"endpoint": name, "repetition": n, "result": <the
endpoint_verify result>}``, and returns the comparison as plain data (``compare.json``).
``render_markdown`` and ``render_html`` turn it into ``compare.md`` and a self-contained
``compare.html`` (inline SVG chart, no script, no external resource).

The formula, per endpoint::

    cost per successful task = (GPU or API cost + storage and network + operations
                                 + human correction) / unique successful tasks

* GPU cost: ``gpu_usd_per_hour`` x busy hours, the seconds every request of the suite took
  (the probe sends one request at a time, so that is the time the endpoint worked for it).
* API cost: ``input_usd_per_1m_tokens`` and ``output_usd_per_1m_tokens`` x the tokens every
  request used, from the usage the server reported (estimated where it reported none).
* Storage and network: ``storage_network_usd``, a fixed amount for the comparison.
* Operations: ``operations_usd_per_hour`` x busy hours.
* Human correction: ``human_correction_usd_per_failure`` x unique failed tasks.

Counted once: every request the probe sent is billed exactly once, by its own tokens and its
own seconds. A budget-escalation retry is a request of its own (billed), never a task of its
own; a check's total latency is not billed on top of its requests; the first turn that the
multi_turn check reuses from the chat check was sent once and is billed once. A task is one
acceptance check in one repetition, ``(repetition, check)``; a task recorded more than once
(a repetition run again) counts once, as succeeded if any of its records passed, while the
requests of every record are billed. With no successful task the cost per success is "n/a".
"""

from __future__ import annotations

import html
import json
import math
import re

from ansible_collections.gpufleet.serving.plugins.module_utils._endpoint_verify import (
    DEFAULT_CHAT_PROMPT,
    FOLLOW_UP_PROMPT,
    IMAGE_PROMPT,
    MODEL_CHECKS,
    REASONING_PROMPT,
    TOOL_PROMPT,
    WEATHER_TOOL,
    estimate_prompt_tokens,
    estimate_tokens,
)

SCHEMA = "gpufleet.serving/compare-report/v1"
KINDS = ("self_hosted", "hosted")
NA = "n/a"
COST_KEYS = (
    "gpu_usd_per_hour",
    "input_usd_per_1m_tokens",
    "output_usd_per_1m_tokens",
    "storage_network_usd",
    "operations_usd_per_hour",
    "human_correction_usd_per_failure",
)
REQUIRED_COST_KEYS = {
    "self_hosted": ("gpu_usd_per_hour",),
    "hosted": ("input_usd_per_1m_tokens", "output_usd_per_1m_tokens"),
}
FORMULA = ("cost per successful task = (GPU or API cost + storage and network + operations + human correction) "
           "/ unique successful tasks")
# Tokens a tool call adds to an answer when the server reports no usage (name, id, arguments).
_TOOL_CALL_TOKENS = 24
# Failures listed per endpoint in the reports; the JSON keeps them all.
_FAILURES_SHOWN = 10
_COLOURS = {"self_hosted": "#2b6cb0", "hosted": "#c05621"}


class CostReportError(ValueError):
    """The endpoints or the runs cannot be compared (the message says which and why)."""


# --------------------------------------------------------------------------------------
# Input checks
# --------------------------------------------------------------------------------------


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def sanitize_url(url):
    """``url`` without user information and query string (neither may carry a secret into a report)."""
    text = str(url or "")
    text = re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@", r"\1", text)
    return text.split("?", 1)[0].split("#", 1)[0]


def normalize_endpoints(endpoints):
    """The public part of each endpoint (no api_key, no headers), with its cost rates checked.
    Raises CostReportError naming the endpoint and the problem."""
    if not isinstance(endpoints, list) or not endpoints:
        raise CostReportError("endpoints must be a non-empty list of {name, base_url, kind, cost, ...}")
    public = []
    seen = set()
    for position, endpoint in enumerate(endpoints, 1):
        if not isinstance(endpoint, dict):
            raise CostReportError("endpoint %d is not a dict" % position)
        name = endpoint.get("name")
        if not isinstance(name, str) or not name.strip():
            raise CostReportError("endpoint %d has no name" % position)
        if name in seen:
            raise CostReportError("endpoint name %r is used twice; names must be unique" % name)
        seen.add(name)
        kind = endpoint.get("kind", "hosted")
        if kind not in KINDS:
            raise CostReportError("endpoint %r: kind is %r, expected one of %s" % (name, kind, ", ".join(KINDS)))
        cost = endpoint.get("cost") or {}
        if not isinstance(cost, dict):
            raise CostReportError("endpoint %r: cost must be a dict of rates" % name)
        unknown = sorted(key for key in cost if key not in COST_KEYS)
        if unknown:
            raise CostReportError("endpoint %r: unknown cost key(s) %s; expected some of %s"
                                  % (name, ", ".join(unknown), ", ".join(COST_KEYS)))
        rates = {}
        for key in COST_KEYS:
            value = cost.get(key)
            if value is None:
                rates[key] = 0.0
                continue
            if isinstance(value, str):
                try:
                    value = float(value)
                except ValueError:
                    value = None
            if not _number(value) or value < 0:
                raise CostReportError("endpoint %r: cost.%s is %r, expected a number >= 0" % (name, key, cost.get(key)))
            rates[key] = float(value)
        missing = [key for key in REQUIRED_COST_KEYS[kind] if cost.get(key) is None]
        if missing:
            raise CostReportError("endpoint %r (%s): cost.%s is required; give 0 where it really costs nothing"
                                  % (name, kind, " and cost.".join(missing)))
        model = endpoint.get("model")
        public.append({
            "name": name,
            "kind": kind,
            "model": model if isinstance(model, str) and model else None,
            "base_url": sanitize_url(endpoint.get("base_url")),
            "cost_rates": rates,
        })
    return public


# --------------------------------------------------------------------------------------
# Tokens of one request
# --------------------------------------------------------------------------------------


def _int(value):
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _answered(attempt):
    status = attempt.get("http_status")
    return _int(status) is not None and 200 <= status < 300 and not attempt.get("error")


def estimated_input_tokens(attempt, check, result):
    """Prompt tokens of a chat request whose usage the probe did not report: the usage of the
    same prompt where another request reported it, else the probe's own estimate of the
    prompt it sends for this request (``attempt["request"]``)."""
    label = attempt.get("request") or ""
    details = check.get("details") or {}
    chat_usage = None
    for item in result.get("checks") or []:
        if item.get("name") == "chat":
            chat_usage = _int(((item.get("details") or {}).get("usage") or {}).get("prompt_tokens"))
    if chat_usage is None:
        chat_usage = _int((result.get("metrics") or {}).get("prompt_tokens"))
    chat_messages = [{"role": "user", "content": DEFAULT_CHAT_PROMPT}]
    if label in ("chat", "chat stream", "first turn"):
        return chat_usage if chat_usage is not None else estimate_prompt_tokens(chat_messages)
    if label == "long context":
        known = _int(details.get("prompt_tokens"))
        return known if known is not None else (_int(details.get("estimated_prompt_tokens")) or 0)
    if label == "reasoning":
        return estimate_prompt_tokens([{"role": "user", "content": REASONING_PROMPT}])
    tools = estimate_tokens(json.dumps(WEATHER_TOOL))
    if label in ("tool call", "tool call stream"):
        return estimate_prompt_tokens([{"role": "user", "content": TOOL_PROMPT}]) + tools
    if label == "tool result":
        call = '{"id": "call_0", "function": {"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}}'
        reply = '{"city": "Paris", "temperature": 21, "unit": "celsius", "conditions": "sunny"}'
        messages = [{"role": "user", "content": TOOL_PROMPT}, {"role": "assistant", "content": call},
                    {"role": "tool", "content": reply}]
        return estimate_prompt_tokens(messages) + tools
    if label == "second turn":
        first = chat_usage if chat_usage is not None else estimate_prompt_tokens(chat_messages)
        answer = 0
        for item in check.get("attempts") or []:
            if item.get("request") == "first turn" and _int(item.get("content_chars")) is not None:
                answer = item["content_chars"]
        if not answer:
            for item in result.get("checks") or []:
                if item.get("name") == "chat":
                    answer = len(str((item.get("details") or {}).get("content_excerpt") or ""))
        return first + estimate_prompt_tokens([{"role": "assistant", "content": "x" * answer},
                                               {"role": "user", "content": FOLLOW_UP_PROMPT}])
    if label == "image":
        return estimate_prompt_tokens([{"role": "user", "content": [{"type": "text", "text": IMAGE_PROMPT},
                                                                    {"type": "image_url", "image_url": {"url": ""}}]}])
    return estimate_prompt_tokens([{"role": "user", "content": ""}])


def request_tokens(attempt, check, result):
    """``(input tokens, output tokens, input estimated, output estimated)`` billed for one
    request. GET requests and requests without a 2xx answer are billed no tokens."""
    if attempt.get("method") != "POST" or not _answered(attempt):
        return 0, 0, False, False
    output = _int(attempt.get("completion_tokens"))
    output_estimated = output is None
    if output is None:
        chars = (_int(attempt.get("content_chars")) or 0) + (_int(attempt.get("reasoning_chars")) or 0)
        output = estimate_tokens("x" * chars) + _TOOL_CALL_TOKENS * (_int(attempt.get("tool_calls")) or 0)
    given = _int(attempt.get("prompt_tokens"))
    if given is not None:
        return given, output, False, output_estimated
    return estimated_input_tokens(attempt, check, result), output, True, output_estimated


# --------------------------------------------------------------------------------------
# The comparison
# --------------------------------------------------------------------------------------


def _median(values):
    values = sorted(value for value in values if _number(value))
    if not values:
        return None
    middle = len(values) // 2
    if len(values) % 2:
        return values[middle]
    return (values[middle - 1] + values[middle]) / 2.0


def _round(value, digits=6):
    return None if value is None else round(float(value), digits)


def _task_checks(runs, task_checks):
    if task_checks is not None:
        return [name for name in MODEL_CHECKS if name in task_checks]
    names = set()
    for run in runs:
        for check in (run.get("result") or {}).get("checks") or []:
            names.add(check.get("name"))
    return [name for name in MODEL_CHECKS if name in names]


def _normalize_runs(runs, names):
    if not isinstance(runs, list):
        raise CostReportError("runs must be a list of {endpoint, repetition, result}")
    checked = []
    for position, run in enumerate(runs, 1):
        if not isinstance(run, dict):
            raise CostReportError("run %d is not a dict" % position)
        if run.get("endpoint") not in names:
            raise CostReportError("run %d names endpoint %r, which is not among the endpoints (%s)"
                                  % (position, run.get("endpoint"), ", ".join(sorted(names))))
        repetition = run.get("repetition")
        if _int(repetition) is None or repetition < 1:
            raise CostReportError("run %d of %r: repetition is %r, expected an integer >= 1"
                                  % (position, run["endpoint"], repetition))
        result = run.get("result")
        if not isinstance(result, dict) or not isinstance(result.get("checks"), list):
            raise CostReportError("run %d of %r: result is not an endpoint_verify result (no checks list)"
                                  % (position, run["endpoint"]))
        checked.append(run)
    return sorted(checked, key=lambda item: item["repetition"])


def endpoint_summary(endpoint, runs, task_checks):
    """The comparison of one endpoint over its runs (see the module docstring for the rules)."""
    rates = endpoint["cost_rates"]
    busy_s = 0.0
    requests = retries = 0
    input_tokens = output_tokens = input_estimated = output_estimated = 0
    tasks = {}
    task_latency = {}
    failures = []
    ttfts = []
    speeds = []
    for run in runs:
        result = run["result"]
        metrics = result.get("metrics") or {}
        ttfts.append(metrics.get("ttft_s"))
        speeds.append(metrics.get("output_tokens_per_s"))
        for check in result["checks"]:
            attempts = check.get("attempts") or []
            labels = set()
            for attempt in attempts:
                requests += 1
                label = attempt.get("request")
                if label in labels:
                    retries += 1
                labels.add(label)
                latency = attempt.get("latency_s")
                busy_s += float(latency) if _number(latency) and latency > 0 else 0.0
                given_in, given_out, in_est, out_est = request_tokens(attempt, check, result)
                input_tokens += given_in
                output_tokens += given_out
                input_estimated += 1 if in_est else 0
                output_estimated += 1 if out_est else 0
            if not attempts and _number(check.get("latency_s")):
                busy_s += max(float(check["latency_s"]), 0.0)
            name = check.get("name")
            if name not in task_checks:
                continue
            key = (run["repetition"], name)
            passed = check.get("passed") is True
            tasks[key] = tasks.get(key, False) or passed
            if passed and _number(check.get("latency_s")):
                task_latency.setdefault(key, float(check["latency_s"]))
            if not passed:
                failures.append({"repetition": run["repetition"], "check": name,
                                 "diagnosis": check.get("diagnosis") or "failed without a diagnosis"})
    succeeded = sum(1 for passed in tasks.values() if passed)
    failed = len(tasks) - succeeded
    # A task that failed in one record and passed in another is a success, not a failure.
    unique = {}
    for item in failures:
        key = (item["repetition"], item["check"])
        if not tasks.get(key) and key not in unique:
            unique[key] = item
    failures = list(unique.values())
    hours = busy_s / 3600.0
    compute = rates["gpu_usd_per_hour"] * hours
    api = (input_tokens * rates["input_usd_per_1m_tokens"] + output_tokens * rates["output_usd_per_1m_tokens"]) / 1e6
    storage = rates["storage_network_usd"]
    operations = rates["operations_usd_per_hour"] * hours
    correction = rates["human_correction_usd_per_failure"] * failed
    total = compute + api + storage + operations + correction
    per_check = {}
    for name in task_checks:
        keys = [key for key in tasks if key[1] == name]
        per_check[name] = {"succeeded": sum(1 for key in keys if tasks[key]), "tasks": len(keys)}
    served = [run["result"].get("model") for run in runs if isinstance(run["result"].get("model"), str)]
    return {
        "name": endpoint["name"],
        "kind": endpoint["kind"],
        # As configured, else the alias the probe took from /v1/models.
        "model": endpoint["model"] or (max(sorted(set(served)), key=served.count) if served else None),
        "base_url": endpoint["base_url"],
        "cost_rates": rates,
        "runs": len(runs),
        "tasks": {"total": len(tasks), "succeeded": succeeded, "failed": failed, "per_check": per_check},
        "requests": {
            "total": requests,
            "retries": retries,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "input_tokens_estimated_requests": input_estimated,
            "output_tokens_estimated_requests": output_estimated,
        },
        "busy_s": _round(busy_s, 3),
        "latency": {
            "task_median_s": _round(_median(task_latency.values()), 3),
            "ttft_median_s": _round(_median(ttfts), 3),
            "output_tokens_per_s_median": _round(_median(speeds), 1),
        },
        "cost_usd": {
            "gpu": _round(compute),
            "api": _round(api),
            "storage_network": _round(storage),
            "operations": _round(operations),
            "human_correction": _round(correction),
            "total": _round(total),
            "per_success": _round(total / succeeded) if succeeded else NA,
        },
        "failures": failures,
    }


def build_report(endpoints, runs, generated_at=None, task_checks=None):
    """The comparison of every endpoint (see the module docstring). ``task_checks`` limits the
    checks that count as tasks (default: every chat check that ran; health and models are
    preconditions, never tasks)."""
    public = normalize_endpoints(endpoints)
    names = {item["name"] for item in public}
    runs = _normalize_runs(runs, names)
    checks = _task_checks(runs, task_checks)
    summaries = []
    for endpoint in public:
        own = [run for run in runs if run["endpoint"] == endpoint["name"]]
        summaries.append(endpoint_summary(endpoint, own, checks))
    return {
        "schema": SCHEMA,
        "generated_at": generated_at,
        "repetitions": max([run["repetition"] for run in runs] or [0]),
        "task_checks": checks,
        "formula": FORMULA,
        "endpoints": summaries,
    }


# --------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------


def money(value):
    """``$0.0123`` below a dollar, ``$12.35`` above; "n/a" as it is."""
    if not _number(value):
        return NA
    if value == 0:
        return "$0"
    return ("$%.4f" % value) if abs(value) < 1 else ("$%.2f" % value)


def seconds(value):
    return NA if not _number(value) else "%.3f" % value


def _rate(value):
    return NA if not _number(value) else "%.1f" % value


def _md(text):
    """A Markdown table cell: pipes escaped, no line breaks."""
    return " ".join(str(text).split()).replace("|", "\\|") if text is not None else NA


def _rows(report):
    rows = []
    for item in report["endpoints"]:
        rows.append({
            "name": item["name"],
            "kind": item["kind"].replace("_", "-"),
            "model": item["model"] or NA,
            "tasks": "%d / %d" % (item["tasks"]["succeeded"], item["tasks"]["total"]),
            "task_median": seconds(item["latency"]["task_median_s"]),
            "ttft": seconds(item["latency"]["ttft_median_s"]),
            "speed": _rate(item["latency"]["output_tokens_per_s_median"]),
            "requests": "%d (%d retries)" % (item["requests"]["total"], item["requests"]["retries"]),
            "tokens": "%d / %d" % (item["requests"]["input_tokens"], item["requests"]["output_tokens"]),
            "compute": money(item["cost_usd"]["gpu"] + item["cost_usd"]["api"]),
            "storage": money(item["cost_usd"]["storage_network"]),
            "operations": money(item["cost_usd"]["operations"]),
            "correction": money(item["cost_usd"]["human_correction"]),
            "total": money(item["cost_usd"]["total"]),
            "per_success": money(item["cost_usd"]["per_success"]),
        })
    return rows


_COLUMNS = (
    ("name", "endpoint"), ("kind", "kind"), ("model", "model"), ("tasks", "tasks ok"),
    ("task_median", "latency s (median task)"), ("ttft", "TTFT s (median)"), ("speed", "tokens/s (median)"),
    ("requests", "requests"), ("tokens", "tokens in / out"), ("compute", "GPU or API"), ("storage", "storage + network"),
    ("operations", "operations"), ("correction", "human correction"), ("total", "total"), ("per_success", "per success"),
)


def _bar(value, top, width):
    if not _number(value) or not top:
        return ""
    cells = int(round(width * value / top))
    return "#" * max(cells, 1 if value > 0 else 0)


def text_chart(report, width=24):
    """Latency per successful task and cost per success side by side, as text bars."""
    items = report["endpoints"]
    latency = [item["latency"]["task_median_s"] for item in items]
    cost = [item["cost_usd"]["per_success"] for item in items]
    top_latency = max([value for value in latency if _number(value)] or [0])
    top_cost = max([value for value in cost if _number(value)] or [0])
    name_width = max(len(item["name"]) for item in items) if items else 8
    left_width = name_width + 1 + width + 10
    lines = ["%-*s   %s" % (left_width, "latency per successful task (median s)", "cost per successful task")]
    for item, lat, per in zip(items, latency, cost):
        left = "%-*s %-*s %s" % (name_width, item["name"], width, _bar(lat, top_latency, width), seconds(lat))
        right = "%-*s %-*s %s" % (name_width, item["name"], width, _bar(per, top_cost, width), money(per))
        lines.append("%-*s   %s" % (left_width, left, right))
    return "\n".join(line.rstrip() for line in lines)


def _rate_text(item):
    rates = item["cost_rates"]
    parts = []
    if rates["gpu_usd_per_hour"] or item["kind"] == "self_hosted":
        parts.append("GPU %s/h" % money(rates["gpu_usd_per_hour"]))
    if rates["input_usd_per_1m_tokens"] or rates["output_usd_per_1m_tokens"] or item["kind"] == "hosted":
        parts.append("%s / %s per 1M tokens in/out" % (money(rates["input_usd_per_1m_tokens"]),
                                                       money(rates["output_usd_per_1m_tokens"])))
    parts.append("storage + network %s" % money(rates["storage_network_usd"]))
    parts.append("operations %s/h" % money(rates["operations_usd_per_hour"]))
    parts.append("human correction %s per failed task" % money(rates["human_correction_usd_per_failure"]))
    return ", ".join(parts)


def _notes(report):
    notes = []
    for item in report["endpoints"]:
        requests = item["requests"]
        if requests["input_tokens_estimated_requests"] or requests["output_tokens_estimated_requests"]:
            notes.append("%s: input tokens estimated for %d and output tokens for %d of %d requests (no usage reported)"
                         % (item["name"], requests["input_tokens_estimated_requests"],
                            requests["output_tokens_estimated_requests"], requests["total"]))
        if item["cost_usd"]["per_success"] == NA:
            notes.append("%s: no task succeeded, so there is no cost per success (n/a)" % item["name"])
    return notes


def failure_groups(item):
    """The endpoint's failed tasks grouped by diagnosis, in first-seen order:
    ``[(diagnosis, "chat in runs 1, 2; reasoning in run 1"), ...]``."""
    groups = {}
    for failure in item["failures"]:
        checks = groups.setdefault(failure["diagnosis"], {})
        checks.setdefault(failure["check"], []).append(failure["repetition"])
    described = []
    for diagnosis, checks in groups.items():
        parts = ["%s in run%s %s" % (check, "s" if len(runs) > 1 else "", ", ".join(str(run) for run in runs))
                 for check, runs in checks.items()]
        described.append((diagnosis, "; ".join(parts)))
    return described


def _intro(report):
    tasks = ", ".join(report["task_checks"]) or "none"
    return ("%d repetition(s) of the acceptance suite per endpoint; tasks: %s (health and models run as "
            "preconditions and are not tasks)." % (report["repetitions"], tasks))


def render_markdown(report):
    """compare.md: the table, the chart as text, the rates, the formula and the failures."""
    lines = ["# Endpoint comparison: latency and cost per successful task", ""]
    if report.get("generated_at"):
        lines += ["Generated %s. %s" % (report["generated_at"], _intro(report)), ""]
    else:
        lines += [_intro(report), ""]
    lines.append("| " + " | ".join(title for _key, title in _COLUMNS) + " |")
    lines.append("|" + "|".join("---" if key in ("name", "kind", "model") else "---:" for key, _title in _COLUMNS) + "|")
    for row in _rows(report):
        lines.append("| " + " | ".join(_md(row[key]) for key, _title in _COLUMNS) + " |")
    lines += ["", "## Latency and cost per success", "", "```text", text_chart(report), "```", ""]
    lines += ["## Rates and formula", "", "`%s`" % FORMULA, ""]
    for item in report["endpoints"]:
        lines.append("- %s (%s, %s): %s" % (_md(item["name"]), _md(item["kind"].replace("_", "-")),
                                            _md(item["base_url"] or NA), _md(_rate_text(item))))
    lines += ["", "GPU and operations cost count the busy time (every request's seconds, retries included, each once); "
              "API cost counts every request's tokens once; a retry is never a task of its own.", ""]
    notes = _notes(report)
    if notes:
        lines += ["## Notes", ""] + ["- " + _md(note) for note in notes] + [""]
    lines += ["## Failed tasks", ""]
    groups = [(item, group) for item in report["endpoints"] for group in failure_groups(item)]
    if not groups:
        lines += ["None.", ""]
    for item in report["endpoints"]:
        described = failure_groups(item)
        for diagnosis, where in described[:_FAILURES_SHOWN]:
            lines.append("- %s, %s: %s" % (_md(item["name"]), _md(where), _md(diagnosis)))
        if len(described) > _FAILURES_SHOWN:
            lines.append("- %s: %d more diagnoses in compare.json" % (_md(item["name"]), len(described) - _FAILURES_SHOWN))
    if groups:
        lines.append("")
    return "\n".join(lines)


def _svg_panel(items, values, title, fmt, x, width, row_height, name_width):
    top = max([value for value in values if _number(value)] or [0])
    bar_space = width - name_width - 70
    parts = ['<text x="%d" y="16" class="t">%s</text>' % (x, html.escape(title))]
    for position, (item, value) in enumerate(zip(items, values)):
        y = 28 + position * row_height
        parts.append('<text x="%d" y="%d" class="l">%s</text>' % (x, y + 13, html.escape(item["name"])))
        length = 0
        if _number(value) and top:
            length = max(int(round(bar_space * value / top)), 1 if value > 0 else 0)
        if length:
            parts.append('<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>'
                         % (x + name_width, y + 2, length, row_height - 8, _COLOURS[item["kind"]]))
        parts.append('<text x="%d" y="%d" class="v">%s</text>' % (x + name_width + length + 4, y + 13, html.escape(fmt(value))))
    return parts


def svg_chart(report):
    """Two bar charts side by side (median latency per successful task, cost per success), inline SVG."""
    items = report["endpoints"]
    row_height = 22
    name_width = min(max([len(item["name"]) for item in items] or [4]) * 7 + 10, 160)
    panel = name_width + 230
    height = 40 + row_height * max(len(items), 1)
    width = panel * 2 + 20
    parts = ['<svg role="img" aria-label="latency and cost per successful task" width="%d" height="%d" viewBox="0 0 %d %d">'
             % (width, height, width, height)]
    parts += _svg_panel(items, [item["latency"]["task_median_s"] for item in items], "Latency per successful task (median s)",
                        seconds, 0, panel, row_height, name_width)
    parts += _svg_panel(items, [item["cost_usd"]["per_success"] for item in items], "Cost per successful task",
                        money, panel + 20, panel, row_height, name_width)
    parts.append("</svg>")
    return "\n".join(parts)


_STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #1a202c; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #cbd5e0; padding: 0.25em 0.5em; }
td.n { text-align: right; }
svg text { font-family: sans-serif; font-size: 12px; fill: #1a202c; }
svg text.t { font-weight: bold; }
.k { display: inline-block; width: 0.8em; height: 0.8em; margin: 0 0.3em 0 1em; }
""".strip()


def render_html(report):
    """compare.html: one self-contained page (inline style and SVG; no script, no external resource)."""
    esc = html.escape
    out = ['<!DOCTYPE html>', '<html lang="en">', "<head>", '<meta charset="utf-8">',
           "<title>Endpoint comparison</title>", "<style>", _STYLE, "</style>", "</head>", "<body>",
           "<h1>Endpoint comparison: latency and cost per successful task</h1>"]
    intro = _intro(report)
    if report.get("generated_at"):
        intro = "Generated %s. %s" % (report["generated_at"], intro)
    out.append("<p>%s</p>" % esc(intro))
    out.append(svg_chart(report))
    out.append('<p>%s</p>' % "".join('<span class="k" style="background:%s"></span>%s' % (colour, esc(kind.replace("_", "-")))
                                     for kind, colour in sorted(_COLOURS.items(), reverse=True)))
    out.append("<table>")
    out.append("<tr>" + "".join("<th>%s</th>" % esc(title) for _key, title in _COLUMNS) + "</tr>")
    for row in _rows(report):
        cells = []
        for key, _title in _COLUMNS:
            css = "" if key in ("name", "kind", "model") else ' class="n"'
            cells.append("<td%s>%s</td>" % (css, esc(str(row[key]))))
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    out.append("<h2>Rates and formula</h2>")
    out.append("<p><code>%s</code></p>" % esc(FORMULA))
    out.append("<ul>")
    for item in report["endpoints"]:
        parts = (esc(item["name"]), esc(item["kind"].replace("_", "-")), esc(item["base_url"] or NA), esc(_rate_text(item)))
        out.append("<li>%s (%s, %s): %s</li>" % parts)
    out.append("</ul>")
    out.append("<p>GPU and operations cost count the busy time (every request's seconds, retries included, each once); "
               "API cost counts every request's tokens once; a retry is never a task of its own.</p>")
    notes = _notes(report)
    if notes:
        out.append("<h2>Notes</h2><ul>%s</ul>" % "".join("<li>%s</li>" % esc(note) for note in notes))
    out.append("<h2>Failed tasks</h2>")
    if not any(item["failures"] for item in report["endpoints"]):
        out.append("<p>None.</p>")
    else:
        out.append("<ul>")
        for item in report["endpoints"]:
            described = failure_groups(item)
            for diagnosis, where in described[:_FAILURES_SHOWN]:
                out.append("<li>%s, %s: %s</li>" % (esc(item["name"]), esc(where), esc(diagnosis)))
            if len(described) > _FAILURES_SHOWN:
                out.append("<li>%s: %d more diagnoses in compare.json</li>" % (esc(item["name"]), len(described) - _FAILURES_SHOWN))
        out.append("</ul>")
    out += ["</body>", "</html>", ""]
    return "\n".join(out)
