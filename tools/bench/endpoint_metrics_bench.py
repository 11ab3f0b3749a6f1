#!/usr/bin/env python3
# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""endpoint_verify's time to first token and output speed against vLLM's own /metrics.

For each of ``--requests`` requests, the script scrapes ``/metrics`` (Prometheus text format,
parsed here), sends the chat check's streamed request exactly as gpufleet.serving.endpoint_verify
does and measures it with the module's own functions (Client, parse_sse, assemble_stream,
stream_metrics), then scrapes again until the server has recorded the finished request. The
histogram deltas of that one request give the server's figures:

* TTFT: ``vllm:time_to_first_token_seconds`` (arrival in the engine front end to the first token
  leaving the engine core; excludes HTTP, network and detokenisation of the first chunk);
* output speed: (generated tokens - 1) / decode time, from ``vllm:request_generation_tokens`` and
  ``vllm:request_decode_time_seconds`` (vLLM 0.32; the same span the module measures between the
  first and the last token chunk). Without the decode histogram, 1 / the per-request time per
  output token (``vllm:request_time_per_output_token_seconds``, older ``vllm:time_per_output_token_seconds``).

It prints both, per request and summarised, with the difference module - server. Requests
from other clients in between make a delta cover more than one request; those rows are
flagged and left out of the summary. Nothing is asserted; figures go to docs/benchmarks.md.

    .venv/bin/python tools/bench/endpoint_metrics_bench.py --base-url http://127.0.0.1:8000 --requests 20

The API key, if the server needs one, is read from the environment variable named by
``--api-key-env`` (default ENDPOINT_API_KEY), never from the command line.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COLLECTIONS = REPO / ".collections"
LINK = COLLECTIONS / "ansible_collections" / "gpufleet" / "serving"
if not LINK.exists():
    LINK.parent.mkdir(parents=True, exist_ok=True)
    LINK.symlink_to("../../..")
sys.path.insert(0, str(COLLECTIONS))

from ansible_collections.gpufleet.serving.plugins.module_utils._endpoint_verify import (  # noqa: E402
    CHAT_PATH,
    DEFAULT_CHAT_PROMPT,
    MODELS_PATH,
)
from ansible_collections.gpufleet.serving.plugins.module_utils._openai_chat import (  # noqa: E402
    assemble_stream,
    parse_sse,
    server_error_message,
    stream_metrics,
)
from ansible_collections.gpufleet.serving.plugins.module_utils._openai_http import Client, parse_base_url  # noqa: E402

# Metric families, current name first (vLLM 0.32), then older spellings.
TTFT = ("vllm:time_to_first_token_seconds",)
DECODE = ("vllm:request_decode_time_seconds",)
GENERATION = ("vllm:request_generation_tokens",)
TPOT = ("vllm:request_time_per_output_token_seconds", "vllm:time_per_output_token_seconds")
E2E = ("vllm:e2e_request_latency_seconds",)
PROMPT = ("vllm:request_prompt_tokens",)


# --------------------------------------------------------------------------------------
# Prometheus text exposition format
# --------------------------------------------------------------------------------------


def _parse_labels(text, start):
    """``({name: value}, index after '}')`` for the label set starting after ``{``."""
    labels = {}
    index = start
    while True:
        while index < len(text) and text[index] in " ,":
            index += 1
        if index >= len(text):
            raise ValueError("unterminated label set")
        if text[index] == "}":
            return labels, index + 1
        equals = text.index("=", index)
        name = text[index:equals].strip()
        if text[equals + 1] != '"':
            raise ValueError("label %s has no quoted value" % name)
        index = equals + 2
        value = []
        while True:
            char = text[index]
            if char == "\\":
                following = text[index + 1]
                value.append({"n": "\n", "\\": "\\", '"': '"'}.get(following, "\\" + following))
                index += 2
                continue
            if char == '"':
                index += 1
                break
            value.append(char)
            index += 1
        labels[name] = "".join(value)


def _parse_value(text):
    lowered = text.lower()
    if lowered in ("+inf", "inf"):
        return math.inf
    if lowered == "-inf":
        return -math.inf
    if lowered == "nan":
        return math.nan
    return float(text)


def parse_prometheus(text):
    """Samples of a Prometheus text exposition: a list of ``(name, labels, value)``. Comment
    lines (``# HELP``, ``# TYPE``) and timestamps are skipped; a malformed line raises ValueError."""
    samples = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            brace = line.find("{")
            space = line.find(" ")
            if brace != -1 and (space == -1 or brace < space):
                name = line[:brace]
                labels, index = _parse_labels(line, brace + 1)
                rest = line[index:].split()
            else:
                name, rest = line.split(None, 1)[0], line.split()[1:]
                labels = {}
            if not rest:
                raise ValueError("no value")
            samples.append((name, labels, _parse_value(rest[0])))
        except (ValueError, IndexError) as exc:
            raise ValueError("line %d of the metrics is not valid exposition format (%s): %r" % (number, exc, raw[:200])) from None
    return samples


def histogram(samples, families, model=None):
    """``{"family", "count", "sum"}`` of the first of ``families`` present, summed over label sets
    (engines), only those of ``model`` when given; None when none is present."""
    for family in families:
        count = total = 0.0
        found = False
        for name, labels, value in samples:
            if model is not None and labels.get("model_name") not in (None, model):
                continue
            if name == family + "_count":
                count += value
                found = True
            elif name == family + "_sum":
                total += value
                found = True
        if found:
            return {"family": family, "count": count, "sum": total}
    return None


def snapshot(samples, model):
    return {key: histogram(samples, families, model)
            for key, families in (("ttft", TTFT), ("decode", DECODE), ("generation", GENERATION), ("tpot", TPOT),
                                  ("e2e", E2E), ("prompt", PROMPT))}


def delta(before, after, key):
    """``(count, sum)`` added between two snapshots for one family; None when it is missing."""
    if before.get(key) is None or after.get(key) is None:
        return None
    return after[key]["count"] - before[key]["count"], after[key]["sum"] - before[key]["sum"]


def server_figures(before, after):
    """The server's view of the requests that finished between two snapshots."""
    figures = {"requests": None, "ttft_s": None, "output_tokens_per_s": None, "generation_tokens": None,
               "e2e_s": None, "prompt_tokens": None}
    e2e = delta(before, after, "e2e")
    if e2e is not None:
        figures["requests"] = int(round(e2e[0]))
        figures["e2e_s"] = e2e[1] / e2e[0] if e2e[0] else None
    ttft = delta(before, after, "ttft")
    if ttft is not None and ttft[0]:
        figures["ttft_s"] = ttft[1] / ttft[0]
    generation = delta(before, after, "generation")
    decode = delta(before, after, "decode")
    prompt = delta(before, after, "prompt")
    if prompt is not None and prompt[0]:
        figures["prompt_tokens"] = prompt[1] / prompt[0]
    if generation is not None and generation[0]:
        figures["generation_tokens"] = generation[1] / generation[0]
    if generation is not None and decode is not None and decode[0] and decode[1] > 0:
        figures["output_tokens_per_s"] = (generation[1] - generation[0]) / decode[1]
    else:
        tpot = delta(before, after, "tpot")
        if tpot is not None and tpot[0] and tpot[1] > 0:
            figures["output_tokens_per_s"] = tpot[0] / tpot[1]
    return figures


# --------------------------------------------------------------------------------------
# The requests
# --------------------------------------------------------------------------------------


def scrape(client, model):
    response = client.call("GET", "/metrics")
    if not response.ok:
        raise SystemExit("GET /metrics failed: %s" % (response.error_message or "HTTP %s" % response.status))
    return snapshot(parse_prometheus(response.text()), model)


def served_model(client):
    response = client.call("GET", MODELS_PATH)
    if not response.ok:
        raise SystemExit("GET /v1/models failed: %s" % (response.error_message or "HTTP %s %s" % (
            response.status, server_error_message(response.text()))))
    data = response.json().get("data") or []
    if not data:
        raise SystemExit("GET /v1/models lists no model")
    return data[0]["id"]


def payload(args, model):
    """The chat check's streamed request, as endpoint_verify sends it."""
    body = {"model": model, "messages": [{"role": "user", "content": args.prompt}], "max_tokens": args.max_tokens,
            "stream": True, "stream_options": {"include_usage": True}}
    if args.reasoning_effort:
        body["reasoning_effort"] = args.reasoning_effort
    if args.stop:
        body["stop"] = list(args.stop)
    if args.ignore_eos:
        body["ignore_eos"] = True
    return body


def measure(client, args, model):
    response = client.call("POST", CHAT_PATH, payload(args, model), stream=True)
    if not response.ok:
        raise SystemExit("POST %s failed: %s" % (CHAT_PATH, response.error_message or "HTTP %s %s" % (
            response.status, server_error_message(response.text()))))
    events, _other = parse_sse(response.lines)
    stream = assemble_stream(events)
    if not stream["done"]:
        raise SystemExit("the stream ended without data: [DONE]")
    metrics = stream_metrics(stream)
    metrics["latency_s"] = response.latency_s
    metrics["first_token_s"] = stream["first_token_s"]
    metrics["last_token_s"] = stream["last_token_s"]
    return metrics


def wait_for_server(client, model, before, settle):
    """Scrape until the server recorded the finished request (its e2e count grew), or ``settle`` s."""
    deadline = time.monotonic() + settle
    while True:
        after = scrape(client, model)
        e2e = delta(before, after, "e2e")
        if e2e is None or e2e[0] >= 1 or time.monotonic() >= deadline:
            return after
        time.sleep(0.02)


def _fmt(value, spec):
    return "-" if value is None else format(value, spec)


def _diff(module, server, scale=1.0):
    return None if module is None or server is None else (module - server) * scale


def _pct(module, server):
    return None if module is None or server is None or not server else 100.0 * (module - server) / server


def _stats(values):
    values = [value for value in values if value is not None]
    if not values:
        return {"n": 0, "mean": None, "median": None, "min": None, "max": None}
    return {"n": len(values), "mean": statistics.mean(values), "median": statistics.median(values),
            "min": min(values), "max": max(values)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--base-url", required=True, help="the vLLM server, e.g. http://127.0.0.1:8000")
    parser.add_argument("--model", help="served alias (default: the first id of /v1/models)")
    parser.add_argument("--requests", type=int, default=10, help="measured requests (default 10)")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured requests first (default 1)")
    parser.add_argument("--max-tokens", type=int, default=128, help="max_tokens per request (default 128)")
    parser.add_argument("--prompt", default=DEFAULT_CHAT_PROMPT, help="prompt (default: the chat check's)")
    parser.add_argument("--reasoning-effort", default="", help="reasoning_effort to send (default: none)")
    parser.add_argument("--stop", action="append", help="stop string (repeatable)")
    parser.add_argument("--ignore-eos", action="store_true", help="vLLM ignore_eos: always generate max_tokens")
    parser.add_argument("--timeout", type=float, default=300.0, help="per request, seconds (default 300)")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds to wait for /metrics to record a request")
    parser.add_argument("--api-key-env", default="ENDPOINT_API_KEY", help="environment variable holding the API key")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)

    endpoint = parse_base_url(args.base_url)
    key = os.environ.get(args.api_key_env, "")
    headers = {"Authorization": "Bearer %s" % key} if key else {}
    client = Client(endpoint, headers, args.timeout)
    model = args.model or served_model(client)

    print("endpoint_verify metrics vs vLLM /metrics: %s, model %s, %d request(s) of max_tokens %d (+%d warm-up)"
          % (endpoint.api_url, model, args.requests, args.max_tokens, args.warmup))
    print("client: %s, Python %s" % (platform.node(), platform.python_version()))
    for _ in range(args.warmup):
        measure(client, args, model)
    first = scrape(client, model)
    missing = [key for key in ("ttft", "e2e") if first[key] is None]
    if missing:
        raise SystemExit("/metrics has no %s histogram: not a vLLM server, or a version with other metric names"
                         % " or ".join(missing))
    print("server histograms: %s" % ", ".join(sorted({item["family"] for item in first.values() if item})))
    rows = []
    header = ("%3s  %10s %10s %9s   %10s %10s %8s   %7s %7s  %s"
              % ("#", "TTFT mod", "TTFT srv", "diff ms", "tok/s mod", "tok/s srv", "diff %", "tok mod", "tok srv", "note"))
    print(header)
    print("-" * len(header))
    for number in range(1, args.requests + 1):
        before = scrape(client, model)
        module = measure(client, args, model)
        after = wait_for_server(client, model, before, args.settle)
        server = server_figures(before, after)
        note = ""
        if server["requests"] != 1:
            note = "server recorded %s requests in between: left out" % server["requests"]
        row = {"request": number, "module": module, "server": server, "note": note,
               "ttft_diff_ms": _diff(module["ttft_s"], server["ttft_s"], 1000.0),
               "tokens_per_s_diff_pct": _pct(module["output_tokens_per_s"], server["output_tokens_per_s"])}
        rows.append(row)
        print("%3d  %10s %10s %9s   %10s %10s %8s   %7s %7s  %s" % (
            number, _fmt(module["ttft_s"], ".4f"), _fmt(server["ttft_s"], ".4f"), _fmt(row["ttft_diff_ms"], "+.1f"),
            _fmt(module["output_tokens_per_s"], ".1f"), _fmt(server["output_tokens_per_s"], ".1f"),
            _fmt(row["tokens_per_s_diff_pct"], "+.1f"), _fmt(module["completion_tokens"], "d"),
            _fmt(server["generation_tokens"], ".0f"), note))
    clean = [row for row in rows if not row["note"]]
    summary = {
        "module_ttft_s": _stats([row["module"]["ttft_s"] for row in clean]),
        "server_ttft_s": _stats([row["server"]["ttft_s"] for row in clean]),
        "ttft_diff_ms": _stats([row["ttft_diff_ms"] for row in clean]),
        "module_tokens_per_s": _stats([row["module"]["output_tokens_per_s"] for row in clean]),
        "server_tokens_per_s": _stats([row["server"]["output_tokens_per_s"] for row in clean]),
        "tokens_per_s_diff_pct": _stats([row["tokens_per_s_diff_pct"] for row in clean]),
    }
    print()
    print("%d of %d requests compared (%d left out: other traffic)" % (len(clean), len(rows), len(rows) - len(clean)))
    print("%-24s %10s %10s %10s %10s" % ("", "mean", "median", "min", "max"))
    for label, key, spec in (("TTFT module s", "module_ttft_s", ".4f"), ("TTFT server s", "server_ttft_s", ".4f"),
                             ("TTFT module - server ms", "ttft_diff_ms", "+.1f"),
                             ("tok/s module", "module_tokens_per_s", ".1f"), ("tok/s server", "server_tokens_per_s", ".1f"),
                             ("tok/s module vs server %", "tokens_per_s_diff_pct", "+.1f")):
        item = summary[key]
        print("%-24s %10s %10s %10s %10s" % (label, _fmt(item["mean"], spec), _fmt(item["median"], spec),
                                             _fmt(item["min"], spec), _fmt(item["max"], spec)))
    if args.json:
        Path(args.json).write_text(json.dumps({"endpoint": endpoint.api_url, "model": model, "rows": rows,
                                               "summary": summary}, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
