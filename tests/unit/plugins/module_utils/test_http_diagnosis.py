# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The diagnosis sentences (_http_diagnosis.py) for HTTP errors, bodies that are not JSON and
requests that got no complete answer, against real local servers that misbehave that way."""

from __future__ import annotations

import socket
import threading
import urllib.error

from ansible_collections.gpufleet.serving.plugins.module_utils import _endpoint_verify as ev
from ansible_collections.gpufleet.serving.plugins.module_utils._openai_http import (
    Client,
    parse_base_url,
)
from test_endpoint_verify_server import (
    CANARY,
    CHAT,
    ERROR_404,
    REASONING_CHAT,
    OpenAIStub,
    Reply,
    check_of,
    chunk,
    dumps,
    fixture_bytes,
    free_port,
    json_reply,
    make_params,
    sse_reply,
    verify,
    vllm_like,
)


def test_unknown_model_404_capture():
    with vllm_like(OpenAIStub(), chat=lambda request: Reply(404, fixture_bytes(ERROR_404))) as stub:
        result = verify(stub, model="Qwen1.5-14B-Chat-GPTQ-Int8", checks=["chat"])
    chat = check_of(result, "chat")
    assert chat["passed"] is False and chat["http_status"] == 404
    assert chat["diagnosis"].startswith("POST /v1/chat/completions answered HTTP 404 (The model `Qwen1.5-14B-Chat-GPTQ-Int8` does not exist.)")
    assert "check model against the ids GET /v1/models lists" in chat["diagnosis"]
    assert chat["body_excerpt"] == fixture_bytes(ERROR_404).decode().strip() or chat["body_excerpt"] == fixture_bytes(ERROR_404).decode()


def test_server_error_500():
    with vllm_like(OpenAIStub(), chat=lambda request: Reply(500, "Internal Server Error", "text/plain")) as stub:
        result = verify(stub, checks=["chat"])
    chat = check_of(result, "chat")
    assert chat["diagnosis"] == ("POST /v1/chat/completions answered HTTP 500 (Internal Server Error): a server error; "
                                 "expected 200; check the engine's log for the traceback")
    assert chat["body_excerpt"] == "Internal Server Error"


def test_401_diagnosed_and_echoed_key_redacted():
    def unauthorized(request):
        return json_reply({"error": "Unauthorized: bad token %s" % request["headers"].get("Authorization")}, 401)

    with vllm_like(OpenAIStub()) as stub:
        stub.route("GET", "/v1/models", unauthorized)
        stub.route("POST", CHAT, unauthorized)
        result = verify(stub, api_key=CANARY, checks=["models", "chat"])
    models = check_of(result, "models")
    assert models["http_status"] == 401 and "check api_key against the server's --api-key" in models["diagnosis"]
    assert "Bearer ********" in models["diagnosis"] and "********" in models["body_excerpt"]
    assert check_of(result, "chat")["diagnosis"].startswith("not run: model was not given and GET /v1/models did not provide one")
    assert CANARY not in dumps(result)


def test_non_json_body():
    with vllm_like(OpenAIStub()) as stub:
        stub.route("GET", "/v1/models", Reply(200, "<html><body>Welcome to nginx!</body></html>", "text/html"))
        result = verify(stub, checks=["models"])
    models = check_of(result, "models")
    assert models["diagnosis"].startswith("GET /v1/models answered HTTP 200 with a body that is not JSON (text/html)")
    assert models["body_excerpt"] == "<html><body>Welcome to nginx!</body></html>"


def test_stream_timeout_mid_stream():
    def chat(request):
        if request["body"].get("stream"):
            return sse_reply([chunk({"content": "Paris"}), 2.0, chunk({"content": "."})])
        return Reply(200, fixture_bytes(REASONING_CHAT))

    with vllm_like(OpenAIStub(), chat=chat) as stub:
        result = verify(stub, checks=["chat"], timeout=0.5)
    assert "streaming: POST /v1/chat/completions: no complete answer within the 0.5 s timeout" in check_of(result, "chat")["diagnosis"]


def test_tls_failure_against_a_plain_http_port():
    with vllm_like(OpenAIStub()) as stub:
        result = ev.verify_endpoint(make_params("https://127.0.0.1:%d" % stub.port))
    health = check_of(result, "health")
    assert health["attempts"][0]["error"].startswith("TLS handshake failed")
    assert "check that the port serves https, then ca_path" in health["diagnosis"]
    assert check_of(result, "models")["diagnosis"].startswith("not run because an earlier request")


def test_plain_http_to_a_closing_server():
    # A server that accepts and closes at once (what an https-only port often does to plain HTTP).
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]

    def serve():
        for _count in range(2):
            try:
                conn, _addr = listener.accept()
            except OSError:
                return
            conn.recv(1024)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        result = ev.verify_endpoint(make_params("http://127.0.0.1:%d" % port, checks=["health", "models"]))
    finally:
        listener.close()
    health = check_of(result, "health")
    assert health["http_status"] is None and "the server closed the connection" in health["diagnosis"]
    # Not a connect-phase failure: the next check still tries.
    assert check_of(result, "models")["attempts"]


def test_dns_failure_diagnosis():
    endpoint = parse_base_url("http://no-such-host.invalid:8000")

    class Failing(Client):
        def _open(self, method, url, body, headers, timeout):
            raise urllib.error.URLError(socket.gaierror(-2, "Name or service not known"))

    result = ev.verify_endpoint(make_params(endpoint.root_url), client=Failing(endpoint, timeout=1))
    health = check_of(result, "health")
    assert health["attempts"][0]["error"] == "host name did not resolve: Name or service not known"
    assert "the host name no-such-host.invalid did not resolve" in health["diagnosis"]
    assert check_of(result, "chat")["diagnosis"].startswith("not run because an earlier request")


def test_a_stream_past_max_line_bytes_is_diagnosed_with_the_limit():
    def chat(request):
        if request["body"].get("stream"):
            return sse_reply(["data: " + "x" * 5000 + "\n\n"])
        return Reply(200, fixture_bytes(REASONING_CHAT))

    with vllm_like(OpenAIStub(), chat=chat) as stub:
        result = verify(stub, checks=["chat"], max_line_bytes=1024)
    diagnosis = check_of(result, "chat")["diagnosis"]
    assert diagnosis.startswith("streaming: POST /v1/chat/completions: a line of the stream is longer than max_line_bytes "
                                "(1024 bytes), so the probe stopped reading")
    assert "raise max_line_bytes/max_response_bytes" in diagnosis


def test_a_refused_proxy_is_named(monkeypatch):
    port = free_port()
    monkeypatch.setenv("http_proxy", "http://user:secret@127.0.0.1:%d" % port)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    result = ev.verify_endpoint(make_params("http://engine.invalid:8000", checks=["health"]))
    diagnosis = check_of(result, "health")["diagnosis"]
    assert "was refused" in diagnosis
    assert diagnosis.endswith("the request went through the proxy http://****:****@127.0.0.1:%d from the environment: "
                              "check it, no_proxy, or use_proxy" % port)
    assert "secret" not in dumps(result)
