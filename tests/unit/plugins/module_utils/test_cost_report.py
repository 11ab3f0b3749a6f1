# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Cost per successful task (_cost_report and the cost_report filters).

Results come from two places: real endpoint_verify runs against the scripted stub server of
test_endpoint_verify_server.py (budget escalation, usage as vLLM reports it), and small
hand-made results where the arithmetic must be exact (the worked example of docs/verify.md).
"""

from __future__ import annotations

import copy
import json
import re
from html.parser import HTMLParser

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.serving.plugins.filter.cost_report import FilterModule
from ansible_collections.gpufleet.serving.plugins.module_utils._cost_report import (
    NA,
    CostReportError,
    build_report,
    money,
    render_html,
    render_markdown,
    request_tokens,
    sanitize_url,
)
from ansible_collections.gpufleet.serving.plugins.module_utils._endpoint_verify import (
    DEFAULT_CHAT_PROMPT,
    estimate_prompt_tokens,
    verify_endpoint,
)
from test_endpoint_verify_server import OpenAIStub, completion, json_reply, sse_reply, text_stream, vllm_like

FILTERS = FilterModule().filters()
SELF = {"name": "local-b300", "kind": "self_hosted", "base_url": "http://127.0.0.1:8000",
        "cost": {"gpu_usd_per_hour": 60.0, "storage_network_usd": 0.5, "operations_usd_per_hour": 10.0,
                 "human_correction_usd_per_failure": 2.0}}
HOSTED = {"name": "hosted-api", "kind": "hosted", "base_url": "https://api.example.com/v1", "model": "big-model",
          "api_key": "sk-do-not-copy", "cost": {"input_usd_per_1m_tokens": 1.25, "output_usd_per_1m_tokens": 10.0,
                                                "human_correction_usd_per_failure": 2.0}}


def attempt(label, latency, prompt=None, completion_tokens=None, status=200, method="POST", **extra):
    item = {"request": label, "method": method, "path": "/v1/chat/completions" if method == "POST" else "/v1/models",
            "stream": False, "max_tokens": 64, "http_status": status, "latency_s": latency, "error": None,
            "finish_reason": "stop", "content_chars": 40, "reasoning_chars": 0, "tool_calls": 0,
            "completion_tokens": completion_tokens, "chunks": None, "done": None}
    if prompt is not None:
        item["prompt_tokens"] = prompt
    item.update(extra)
    return item


def check(name, passed, attempts, diagnosis=None):
    return {"name": name, "passed": passed, "required": True, "http_status": 200,
            "latency_s": round(sum(item["latency_s"] for item in attempts), 3), "attempts": attempts,
            "diagnosis": None if passed else (diagnosis or "%s: failed" % name), "body_excerpt": None,
            "notes": [], "details": {}}


def result(checks, ttft=0.5, speed=50.0, model="m"):
    return {"changed": False, "healthy": all(item["passed"] for item in checks), "problems": [], "model": model,
            "metrics": {"ttft_s": ttft, "output_tokens_per_s": speed, "tokens_source": "usage",
                        "prompt_tokens": None, "completion_tokens": None},
            "checks": checks}


def suite(failed=(), seconds=10.0, prompt=2500, output=1000):
    """health and models (free), then four tasks of ``seconds`` and the given tokens each."""
    checks = [check("health", True, [attempt("health", 0.0, method="GET")]),
              check("models", True, [attempt("models", 0.0, method="GET")])]
    for name in ("chat", "reasoning", "tool_call", "multi_turn"):
        checks.append(check(name, name not in failed, [attempt(name, seconds, prompt, output)]))
    return result(checks)


def worked_example():
    """docs/verify.md: 3 repetitions of 4 tasks; the self-hosted node fails one, the hosted API two."""
    runs = []
    for repetition in (1, 2, 3):
        runs.append({"endpoint": "local-b300", "repetition": repetition,
                     "result": suite(failed=("tool_call",) if repetition == 2 else ())})
        runs.append({"endpoint": "hosted-api", "repetition": repetition,
                     "result": suite(failed=("tool_call",) if repetition in (1, 3) else ())})
    return build_report([SELF, HOSTED], runs, "2026-12-02T00:00:00Z")


def by_name(report):
    return {item["name"]: item for item in report["endpoints"]}


def test_worked_example_of_the_docs():
    report = worked_example()
    local, hosted = by_name(report)["local-b300"], by_name(report)["hosted-api"]
    # 12 tasks of 10 s: 120 s busy. GPU 60 $/h -> $2.00, operations 10 $/h -> $0.3333, storage $0.50,
    # one failed task -> $2.00; total $4.8333 over 11 successes.
    assert local["busy_s"] == 120.0 and local["tasks"]["succeeded"] == 11 and local["tasks"]["failed"] == 1
    assert local["cost_usd"] == {"gpu": 2.0, "api": 0.0, "storage_network": 0.5, "operations": 0.333333,
                                 "human_correction": 2.0, "total": 4.833333, "per_success": 0.439394}
    # 12 requests x 2,500 in / 1,000 out: 30,000 x $1.25/1M + 12,000 x $10/1M = $0.1575; two failed tasks $4.
    assert hosted["requests"]["input_tokens"] == 30000 and hosted["requests"]["output_tokens"] == 12000
    assert hosted["cost_usd"] == {"gpu": 0.0, "api": 0.1575, "storage_network": 0.0, "operations": 0.0,
                                  "human_correction": 4.0, "total": 4.1575, "per_success": 0.415750}
    assert report["repetitions"] == 3 and report["task_checks"] == ["chat", "reasoning", "tool_call", "multi_turn"]


def test_retries_are_billed_once_and_are_never_tasks():
    """A real escalation: the first chat answer spends its budget thinking, the second answers."""
    thinking = completion(None, finish_reason="length", reasoning="Let me think " * 20,
                          usage={"prompt_tokens": 20, "completion_tokens": 32, "total_tokens": 52})
    answer = completion("Paris.", reasoning="Short.", usage={"prompt_tokens": 20, "completion_tokens": 9, "total_tokens": 29})
    replies = [json_reply(thinking), json_reply(answer)]

    def chat(request):
        if request["body"].get("stream"):
            return sse_reply(text_stream(answer["choices"][0]["message"], usage=answer["usage"], field="reasoning"))
        return replies.pop(0) if len(replies) > 1 else replies[0]

    with vllm_like(OpenAIStub(), chat=chat) as stub:
        probe = verify_endpoint({"base_url": stub.url, "checks": ["health", "models", "chat"], "max_tokens": 32,
                                 "max_tokens_ceiling": 64, "timeout": 5, "reasoning_effort": "low"})
    chat_check = probe["checks"][2]
    assert probe["healthy"] and [item["max_tokens"] for item in chat_check["attempts"]] == [32, 64, 64]
    report = build_report([SELF], [{"endpoint": "local-b300", "repetition": 1, "result": probe}])
    item = report["endpoints"][0]
    attempts = [one for checked in probe["checks"] for one in checked["attempts"]]
    assert item["requests"]["total"] == len(attempts) == 5 and item["requests"]["retries"] == 1
    # Every request's output tokens once: 32 (the retry's first try) + 9 + 9 (the stream).
    assert item["requests"]["output_tokens"] == 32 + 9 + 9
    # The chat check's latency is the sum of its requests: billed through them, not again.
    assert item["busy_s"] == pytest.approx(sum(one["latency_s"] for one in attempts), abs=0.002)
    assert item["cost_usd"]["gpu"] == pytest.approx(60.0 * item["busy_s"] / 3600, abs=1e-6)
    assert item["tasks"] == {"total": 1, "succeeded": 1, "failed": 0, "per_check": {"chat": {"succeeded": 1, "tasks": 1}}}


def test_a_task_recorded_twice_counts_once_and_both_records_are_billed():
    runs = [{"endpoint": "hosted-api", "repetition": 1, "result": suite(failed=("chat",))},
            {"endpoint": "hosted-api", "repetition": 1, "result": suite()},
            {"endpoint": "hosted-api", "repetition": 2, "result": suite(failed=("reasoning",))},
            {"endpoint": "hosted-api", "repetition": 2, "result": suite(failed=("reasoning",))}]
    item = build_report([HOSTED], runs)["endpoints"][0]
    assert item["tasks"]["total"] == 8 and item["tasks"]["succeeded"] == 7 and item["tasks"]["failed"] == 1
    assert item["failures"] == [{"repetition": 2, "check": "reasoning", "diagnosis": "reasoning: failed"}]
    assert item["cost_usd"]["human_correction"] == 2.0
    assert item["requests"]["total"] == 4 * 6 and item["requests"]["input_tokens"] == 16 * 2500


def test_zero_successes_is_na_not_a_division_error():
    runs = [{"endpoint": "hosted-api", "repetition": repetition,
             "result": suite(failed=("chat", "reasoning", "tool_call", "multi_turn"))} for repetition in (1, 2)]
    report = build_report([HOSTED], runs)
    item = report["endpoints"][0]
    assert item["tasks"]["succeeded"] == 0 and item["cost_usd"]["per_success"] == NA
    assert item["cost_usd"]["human_correction"] == 16.0 and item["latency"]["task_median_s"] is None
    assert "| n/a |" in render_markdown(report) and "no task succeeded" in render_markdown(report)
    assert ">n/a<" in render_html(report)
    # An endpoint without any run at all is n/a too.
    empty = build_report([SELF, HOSTED], runs)
    assert by_name(empty)["local-b300"]["cost_usd"]["per_success"] == NA and by_name(empty)["local-b300"]["runs"] == 0


def test_failed_requests_cost_time_but_no_tokens_and_gets_are_free():
    checks = [check("models", False, [attempt("models", 0.2, method="GET", status=401)]),
              check("chat", False, [attempt("chat", 0.3, status=401, completion_tokens=None, content_chars=None)]),
              check("reasoning", False, [attempt("reasoning", 30.0, status=None, error="timeout")])]
    item = build_report([HOSTED], [{"endpoint": "hosted-api", "repetition": 1, "result": result(checks)}])["endpoints"][0]
    assert item["requests"]["input_tokens"] == 0 and item["requests"]["output_tokens"] == 0
    assert item["busy_s"] == 30.5 and item["tasks"]["failed"] == 2


def test_tokens_are_estimated_when_the_server_reports_no_usage():
    answered = attempt("chat", 1.0, completion_tokens=None, content_chars=400, reasoning_chars=0)
    chat_prompt = estimate_prompt_tokens([{"role": "user", "content": DEFAULT_CHAT_PROMPT}])
    assert request_tokens(answered, check("chat", True, [answered]), result([])) == (chat_prompt, 100, True, True)
    reported = attempt("chat", 1.0, prompt=17, completion_tokens=5)
    assert request_tokens(reported, check("chat", True, [reported]), result([])) == (17, 5, False, False)
    # The chat check's own usage stands in for the prompt of its other requests.
    chat = check("chat", True, [attempt("chat stream", 1.0, completion_tokens=5)])
    chat["details"]["usage"] = {"prompt_tokens": 23, "completion_tokens": 5}
    assert request_tokens(chat["attempts"][0], chat, result([chat]))[0] == 23
    long_check = check("long_context", True, [attempt("long context", 5.0, completion_tokens=4)])
    long_check["details"] = {"prompt_tokens": 32790, "estimated_prompt_tokens": 32768}
    assert request_tokens(long_check["attempts"][0], long_check, result([long_check]))[0] == 32790
    tool = check("tool_call", True, [attempt("tool call", 1.0, completion_tokens=20), attempt("tool result", 1.0, completion_tokens=9)])
    first, second = (request_tokens(one, tool, result([tool]))[0] for one in tool["attempts"])
    assert 60 < first < second < 400
    report = build_report([HOSTED], [{"endpoint": "hosted-api", "repetition": 1, "result": result([tool])}])
    assert "input tokens estimated for 2 and output tokens for 0 of 2 requests" in render_markdown(report)


def test_health_and_models_are_preconditions_not_tasks():
    report = build_report([SELF], [{"endpoint": "local-b300", "repetition": 1, "result": suite()}])
    assert report["task_checks"] == ["chat", "reasoning", "tool_call", "multi_turn"]
    assert report["endpoints"][0]["tasks"]["total"] == 4
    limited = build_report([SELF], [{"endpoint": "local-b300", "repetition": 1, "result": suite()}], task_checks=["chat", "health"])
    assert limited["task_checks"] == ["chat"] and limited["endpoints"][0]["tasks"]["total"] == 1


@pytest.mark.parametrize("change, message", [
    (lambda eps: eps.append(copy.deepcopy(eps[0])), "used twice"),
    (lambda eps: eps[0].update(kind="cloud"), "kind is 'cloud'"),
    (lambda eps: eps[0]["cost"].update(gpu_usd_per_hr=3), "unknown cost key(s) gpu_usd_per_hr"),
    (lambda eps: eps[0]["cost"].update(gpu_usd_per_hour=-1), "cost.gpu_usd_per_hour is -1"),
    (lambda eps: eps[0]["cost"].update(gpu_usd_per_hour="cheap"), "expected a number >= 0"),
    (lambda eps: eps[0]["cost"].update(gpu_usd_per_hour=True), "expected a number >= 0"),
    (lambda eps: eps[0]["cost"].pop("gpu_usd_per_hour"), "cost.gpu_usd_per_hour is required"),
    (lambda eps: eps[1]["cost"].pop("output_usd_per_1m_tokens"), "cost.output_usd_per_1m_tokens is required"),
    (lambda eps: eps[1].pop("name"), "endpoint 2 has no name"),
    (lambda eps: eps.clear(), "non-empty list"),
])
def test_bad_endpoints_are_refused_with_the_reason(change, message):
    endpoints = copy.deepcopy([SELF, HOSTED])
    change(endpoints)
    with pytest.raises(CostReportError, match=re.escape(message)):
        build_report(endpoints, [])
    with pytest.raises(AnsibleFilterError, match="cost_report: "):
        FILTERS["cost_report"]([], endpoints)


@pytest.mark.parametrize("run, message", [
    ({"endpoint": "elsewhere", "repetition": 1, "result": suite()}, "names endpoint 'elsewhere'"),
    ({"endpoint": "local-b300", "repetition": 0, "result": suite()}, "repetition is 0"),
    ({"endpoint": "local-b300", "repetition": 1, "result": {"healthy": True}}, "not an endpoint_verify result"),
])
def test_bad_runs_are_refused(run, message):
    with pytest.raises(CostReportError, match=re.escape(message)):
        build_report([SELF], [run])


def test_no_secret_reaches_the_report():
    secret_url = dict(HOSTED, base_url="https://user:sk-in-url@api.example.com/v1?key=sk-in-query#frag")
    report = build_report([SELF, secret_url], [{"endpoint": "hosted-api", "repetition": 1, "result": suite()}])
    text = json.dumps(report) + render_markdown(report) + render_html(report)
    assert "sk-do-not-copy" not in text and "sk-in-url" not in text and "sk-in-query" not in text
    assert by_name(report)["hosted-api"]["base_url"] == "https://api.example.com/v1"
    assert sanitize_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000"


def test_the_report_is_deterministic_but_for_the_timestamp():
    first = json.dumps(worked_example(), sort_keys=True)
    second = json.dumps(worked_example(), sort_keys=True)
    assert first == second
    again = build_report([SELF, HOSTED], [], "2030-01-01T00:00:00Z")
    assert again["generated_at"] == "2030-01-01T00:00:00Z"


def test_markdown_table_chart_formula_and_failures():
    report = worked_example()
    markdown = FILTERS["cost_report_markdown"](report)
    lines = markdown.splitlines()
    header = next(line for line in lines if line.startswith("| endpoint |"))
    rows = [line for line in lines if line.startswith("| local-b300 |") or line.startswith("| hosted-api |")]
    assert len(rows) == 2 and all(row.count(" | ") == header.count(" | ") for row in rows)
    assert "| local-b300 | self-hosted | m | 11 / 12 |" in markdown and rows[0].endswith("| $4.83 | $0.4394 |")
    assert "| hosted-api | hosted | big-model | 10 / 12 |" in markdown and rows[1].endswith("| $4.16 | $0.4158 |")
    chart = markdown.split("```text\n", 1)[1].split("```", 1)[0]
    assert "latency per successful task" in chart and "cost per successful task" in chart
    assert re.search(r"local-b300 #+ +\$0\.4394", chart) and re.search(r"hosted-api #+ +\$0\.4158", chart)
    assert "`cost per successful task = (GPU or API cost + storage and network + operations + human correction)" in markdown
    assert "- hosted-api, tool_call in runs 1, 3: tool_call: failed" in markdown
    assert "- local-b300, tool_call in run 2: tool_call: failed" in markdown
    # A pipe in a name or a diagnosis does not break the table.
    odd = build_report([dict(SELF, name="a|b")], [{"endpoint": "a|b", "repetition": 1, "result": suite()}])
    assert "| a\\|b | self-hosted |" in render_markdown(odd)


class _Collector(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags = []
        self.attrs = []
        self.open = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.extend(name for name, _value in attrs)
        if tag not in ("meta", "rect", "br"):
            self.open.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.extend(name for name, _value in attrs)

    def handle_endtag(self, tag):
        assert self.open and self.open[-1] == tag, "unbalanced </%s> after %s" % (tag, self.open[-3:])
        self.open.pop()


def test_html_is_one_self_contained_page_with_an_svg_chart():
    report = worked_example()
    page = FILTERS["cost_report_html"](report)
    parser = _Collector()
    parser.feed(page)
    assert parser.open == []
    assert "script" not in parser.tags and "link" not in parser.tags and "img" not in parser.tags
    assert not {"src", "href", "onload", "onclick"} & set(parser.attrs)
    external = page.replace(HOSTED["base_url"], "").replace(SELF["base_url"], "")
    assert "url(" not in page and "@import" not in page and "http" not in external
    svg = page.split("<svg", 1)[1].split("</svg>", 1)[0]
    widths = [int(value) for value in re.findall(r'<rect x="\d+" y="\d+" width="(\d+)"', svg)]
    # Two panels of two bars: the same median latency (10 s), then the dearer success the longer bar.
    assert len(widths) == 4 and widths[0] == widths[1] and widths[2] > widths[3]
    assert "$0.4394" in svg and "$0.4158" in svg and "10.000" in svg


def test_html_escapes_names_and_diagnoses():
    hostile = dict(SELF, name="<b>x</b>")
    broken = suite(failed=("chat",))
    broken["checks"][2]["diagnosis"] = "server said <script>alert(1)</script>"
    page = render_html(build_report([hostile], [{"endpoint": "<b>x</b>", "repetition": 1, "result": broken}]))
    assert "<script" not in page and "&lt;script&gt;" in page and "&lt;b&gt;x&lt;/b&gt;" in page


def test_money_formatting():
    assert [money(value) for value in (0, 0.00012, 0.4394, 4.833333, NA, None)] == ["$0", "$0.0001", "$0.4394", "$4.83", NA, NA]
    with pytest.raises(AnsibleFilterError, match="expected the output of gpufleet.serving.cost_report"):
        FILTERS["cost_report_html"]({"endpoints": None})
