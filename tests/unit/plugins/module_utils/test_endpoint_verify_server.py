# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A scripted OpenAI-compatible server for the endpoint_verify tests, and tests of the script itself.

``OpenAIStub`` is a real threaded HTTP server on 127.0.0.1 (a random port).  Each route
answers from a responder: a :class:`Reply`, a list of replies (taken in turn, the last one
repeats) or a function of the request.  ``vllm_like()`` wires the default routes to the real
captures in tests/fixtures/openai/, served byte for byte as published; streams are built
from those captures' own text in the chunk format vLLM and SGLang send.  Every request is
recorded (method, path, headers, parsed JSON body) so tests can check what the probe sent.

The modules test imports this file by path (see test_endpoint_verify_module.py).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.request import ProxyHandler, Request, build_opener

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "openai"
MODELS = "vllm_v1-models_Gaudi_Llama-3.1-8B.json"
REASONING_CHAT = "sglang_chat-completion_reasoning_content_Qwen3-0.6B.json"
TOOL_CALL = "vllm_chat-completion_tool_calls_Llama-3.1-8B_GKE.json"
ERROR_404 = "vllm_error_404_model-does-not-exist.json"


def fixture_bytes(name):
    return (FIXTURES / name).read_bytes()


def fixture_json(name):
    return json.loads(fixture_bytes(name))


class Reply:
    """One scripted answer.  ``events`` makes it a server-sent event stream (each item a
    dict sent as ``data: <json>``, a raw string sent as it is, or a number: seconds to wait);
    ``done`` adds ``data: [DONE]``."""

    def __init__(self, status=200, body=b"", content_type="application/json", delay=0.0, events=None, done=True,
                 headers=None):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode("utf-8")
        elif isinstance(body, str):
            body = body.encode("utf-8")
        self.status = status
        self.body = body
        self.content_type = content_type
        self.delay = delay
        self.events = events
        self.done = done
        self.headers = headers or {}


def json_reply(document, status=200):
    return Reply(status, document)


def sse_reply(events, done=True, delay=0.0):
    return Reply(200, b"", "text/event-stream", delay=delay, events=events, done=done)


class _Handler(BaseHTTPRequestHandler):
    server_version = "stub/1"

    def log_message(self, *args):  # keep pytest output clean
        return

    def _answer(self):
        stub = self.server.stub
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        request = {"method": self.command, "path": self.path, "headers": dict(self.headers.items()), "body": body}
        stub.requests.append(request)
        reply = stub.reply_for(request)
        if reply.delay:
            time.sleep(reply.delay)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._send(reply)

    def _send(self, reply):
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if reply.events is None:
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)
            return
        self.end_headers()
        for event in reply.events:
            if isinstance(event, (int, float)):
                self.wfile.flush()
                time.sleep(event)
                continue
            data = event if isinstance(event, str) else "data: %s\n\n" % json.dumps(event)
            self.wfile.write(data.encode("utf-8"))
            self.wfile.flush()
        if reply.done:
            self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    do_GET = _answer
    do_POST = _answer


class OpenAIStub:
    """The scripted server; use as a context manager."""

    def __init__(self):
        self.routes = {}
        self.requests = []
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.stub = self
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def port(self):
        return self.httpd.server_address[1]

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def route(self, method, path, responder):
        self.routes[(method, path)] = list(responder) if isinstance(responder, list) else responder
        return self

    def reply_for(self, request):
        with self._lock:
            responder = self.routes.get((request["method"], request["path"]))
            if responder is None:
                return json_reply({"detail": "Not Found"}, 404)
            if isinstance(responder, list):
                return responder.pop(0) if len(responder) > 1 else responder[0]
            if isinstance(responder, Reply):
                return responder
        return responder(request)

    def sent(self, path, method="POST"):
        """Bodies of the requests the probe sent to ``path``."""
        return [item["body"] for item in self.requests if item["path"] == path and item["method"] == method]


# --------------------------------------------------------------------------------------
# Chunks in the format vLLM and SGLang stream, built from a capture's text
# --------------------------------------------------------------------------------------


def chunk(delta=None, finish_reason=None, usage=None, model="stub", choices=True):
    document = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 1, "model": model}
    document["choices"] = [{"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish_reason}] if choices else []
    if usage is not None:
        document["usage"] = usage
    return document


def text_stream(message, usage=None, field="reasoning_content", pause=0.05, finish_reason="stop"):
    """Chunks that spell ``message`` (its reasoning under ``field``, then its content) word by
    word, with a ``pause`` after the first one so that the output speed is measurable."""
    events = [chunk({"role": "assistant", "content": ""})]
    for name, text in ((field, message.get("reasoning_content") or message.get("reasoning")), ("content", message.get("content"))):
        if not text:
            continue
        words = text.split(" ")
        for position, word in enumerate(words):
            events.append(chunk({name: word + (" " if position < len(words) - 1 else "")}))
            if len(events) == 2:
                events.append(pause)
    events.append(chunk({}, finish_reason=finish_reason))
    if usage is not None:
        events.append(chunk(usage=usage, choices=False))
    return events


def tool_call_stream(call, pieces=3, usage=None):
    """Chunks of one tool call: id, type and name first, the arguments cut into ``pieces``."""
    arguments = call["function"]["arguments"]
    size = max(1, len(arguments) // pieces)
    cuts = [arguments[start:start + size] for start in range(0, len(arguments), size)]
    events = [chunk({"role": "assistant", "content": None})]
    events.append(chunk({"tool_calls": [{"index": 0, "id": call["id"], "type": "function",
                                         "function": {"name": call["function"]["name"], "arguments": ""}}]}))
    for cut in cuts:
        events.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": cut}}]}))
    events.append(chunk({}, finish_reason="tool_calls"))
    if usage is not None:
        events.append(chunk(usage=usage, choices=False))
    return events


def completion(content, finish_reason="stop", model="stub", usage=None, **message_fields):
    message = {"role": "assistant", "content": content}
    message.update(message_fields)
    return {"id": "chatcmpl-stub", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
            "usage": usage or {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}}


def answering(document):
    """A chat responder that answers ``document``, streamed from its own text when asked."""

    def answer(request):
        if request["body"].get("stream"):
            choice = document["choices"][0]
            return sse_reply(text_stream(choice["message"], usage=document.get("usage"),
                                         field="reasoning" if "reasoning" in choice["message"] else "reasoning_content",
                                         finish_reason=choice["finish_reason"]))
        return json_reply(document)

    return answer


def vllm_like(stub, chat=None, tool=None):
    """Default routes: /health 200, /v1/models the Gaudi capture, chat completions the SGLang
    reasoning capture (streamed from its own text when asked), tool requests the GKE tool-call
    capture, and a plain answer to a tool result."""
    reasoning = fixture_json(REASONING_CHAT)
    tool_capture = fixture_json(TOOL_CALL)

    def answer(request):
        body = request["body"]
        if any(message.get("role") == "tool" for message in body["messages"]):
            return json_reply(completion("It is sunny and 21 degrees in Paris."))
        if body.get("tools"):
            if tool is not None:
                return tool(request)
            if body.get("stream"):
                call = tool_capture["choices"][0]["message"]["tool_calls"][0]
                return sse_reply(tool_call_stream(call, usage=tool_capture["usage"]))
            return Reply(200, fixture_bytes(TOOL_CALL))
        if chat is not None:
            return chat(request)
        if body.get("stream"):
            return sse_reply(text_stream(reasoning["choices"][0]["message"], usage=reasoning["usage"]))
        return Reply(200, fixture_bytes(REASONING_CHAT))

    stub.route("GET", "/health", Reply(200, b"", "text/plain"))
    stub.route("GET", "/v1/models", Reply(200, fixture_bytes(MODELS)))
    stub.route("POST", "/v1/chat/completions", answer)
    return stub


# --------------------------------------------------------------------------------------
# What the endpoint_verify tests share (test_endpoint_*.py, test_http_diagnosis.py)
# --------------------------------------------------------------------------------------

CANARY = "sk-canary-7f3a9c1e5b2d4e6f8a0b"
SERVED = "meta-llama/Llama-3.1-8B"  # the id in the /v1/models capture
CHAT = "/v1/chat/completions"
TOOL_CAPTURE_ID = "chatcmpl-tool-8dd7be12aefe48db82c95485622202cb"


def make_params(base_url, **overrides):
    """The module's parameters as AnsibleModule hands them over (defaults filled in)."""
    from ansible_collections.gpufleet.serving.plugins.module_utils._endpoint_verify import DEFAULT_CHECKS

    params = {
        "base_url": base_url,
        "api_key": None,
        "model": None,
        "checks": list(DEFAULT_CHECKS),
        "required_checks": None,
        "reasoning_effort": "low",
        "max_tokens": 2048,
        "max_tokens_ceiling": 8192,
        "chat_prompt": None,
        "stop": None,
        "timeout": 5.0,
        "max_line_bytes": 1048576,
        "max_response_bytes": 67108864,
        "use_proxy": True,
        "validate_certs": True,
        "ca_path": None,
        "client_cert": None,
        "client_key": None,
        "long_context_tokens": 2000,
        "image_data_url": None,
        "extra_headers": None,
        "fail_on_unhealthy": False,
    }
    params.update(overrides)
    return params


def verify(stub, **overrides):
    from ansible_collections.gpufleet.serving.plugins.module_utils._endpoint_verify import verify_endpoint

    return verify_endpoint(make_params(stub.url, **overrides))


def check_of(result, name):
    matches = [item for item in result["checks"] if item["name"] == name]
    assert len(matches) == 1, name
    return matches[0]


def free_port():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def dumps(result):
    return json.dumps(result, sort_keys=True)


# --------------------------------------------------------------------------------------
# The stub itself serves the captures as they are
# --------------------------------------------------------------------------------------


def _get(url, data=None):
    opener = build_opener(ProxyHandler({}))
    request = Request(url, data=data, headers={"Content-Type": "application/json"})
    with opener.open(request, timeout=5) as answer:
        return answer.status, answer.read()


def test_stub_serves_the_captures_byte_for_byte():
    with vllm_like(OpenAIStub()) as stub:
        status, body = _get(stub.url + "/v1/models")
        assert status == 200 and body == fixture_bytes(MODELS)
        request = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
        status, body = _get(stub.url + "/v1/chat/completions", request)
        assert body == fixture_bytes(REASONING_CHAT)


def test_stub_streams_the_capture_text():
    with vllm_like(OpenAIStub()) as stub:
        request = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
        status, body = _get(stub.url + "/v1/chat/completions", request)
    lines = [line for line in body.decode().split("\n") if line]
    assert status == 200 and lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[len("data: "):]) for line in lines[:-1]]
    content = "".join(item["choices"][0]["delta"].get("content") or "" for item in chunks if item["choices"])
    assert content == fixture_json(REASONING_CHAT)["choices"][0]["message"]["content"]
