# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The bounded HTTP client (_openai_http.py) against real local servers that misbehave: an
oversized line, too many bytes, a byte trickle past the deadline, a proxy; and its pure helpers."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import pytest
from ansible_collections.gpufleet.serving.plugins.module_utils._openai_http import (
    Client,
    classify_error,
    is_loopback,
    parse_base_url,
    plain_http_credential_warning,
)

KEY = "sk-canary-5e1f0c2d9a8b7c6d"
PROXY_ENV = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "all_proxy", "ALL_PROXY")


# --------------------------------------------------------------------------------------
# A server that misbehaves on purpose: raw sockets, so it can send what no HTTP library would
# --------------------------------------------------------------------------------------


class RawServer:
    """A threaded TCP server on 127.0.0.1 (a random port) that reads a request's head and then
    runs ``behaviour(conn, head)``; every request head it read is kept in ``heads``."""

    def __init__(self, behaviour):
        self.behaviour = behaviour
        self.heads = []
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(5)
        self.listener.close()

    def _serve(self):
        self.listener.settimeout(0.1)  # closing a listener does not wake accept()
        while not self.stop.is_set():
            try:
                conn, _addr = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn):
        with conn, contextlib.suppress(OSError):
            conn.settimeout(10)
            head = b""
            while b"\r\n\r\n" not in head:
                data = conn.recv(65536)
                if not data:
                    return
                head += data
            text = head.decode("latin-1")
            self.heads.append(text)
            self.behaviour(conn, text, self.stop)


def sse_head(conn):
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")


def client_for(server, **options):
    return Client(parse_base_url(server.url), {"Authorization": "Bearer " + KEY}, **options)


@pytest.fixture()
def no_proxy_env(monkeypatch):
    for name in PROXY_ENV:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


# --------------------------------------------------------------------------------------
# Size caps
# --------------------------------------------------------------------------------------


def test_a_line_longer_than_max_line_bytes_ends_the_stream(no_proxy_env):
    cap = 64 * 1024

    sent = []

    def huge_line(conn, _head, stop):
        sse_head(conn)
        conn.sendall(b"data: {\"ok\": 1}\n\n")
        conn.sendall(b"data: ")
        piece = b"x" * (1024 * 1024)
        for _count in range(256):  # one 256 MiB line, as the issue measured; it stops when the client hangs up
            if stop.is_set():
                break
            conn.sendall(piece)
            sent.append(len(piece))
        conn.sendall(b"\n\ndata: [DONE]\n\n")

    with RawServer(huge_line) as server:
        started = time.monotonic()
        response = client_for(server, timeout=20, max_line_bytes=cap).call("POST", "/v1/chat/completions", {}, stream=True)
        elapsed = time.monotonic() - started
    assert response.error_kind == "limit" and response.error_phase == "read" and response.status == 200
    # Cut at the cap, not after reading the line whole.
    assert elapsed < 5 and sum(sent) < 64 * 1024 * 1024, (elapsed, sum(sent))
    assert response.error_message == "a line of the stream is longer than max_line_bytes (65536 bytes)"
    assert [line for _when, line in response.lines] == ['data: {"ok": 1}', ""]
    assert all(len(line) <= cap for _when, line in response.lines)


def test_a_line_of_exactly_max_line_bytes_passes(no_proxy_env):
    def exact(conn, _head, _stop):
        sse_head(conn)
        conn.sendall(b"x" * 100 + b"\r\n" + b"y" * 100 + b"\n")

    with RawServer(exact) as server:
        response = client_for(server, max_line_bytes=100).call("GET", "/v1/models", stream=True)
    assert response.error_kind is None and [line for _when, line in response.lines] == ["x" * 100, "y" * 100]


def test_a_stream_longer_than_max_response_bytes_ends(no_proxy_env):
    cap = 256 * 1024

    def endless(conn, _head, stop):
        sse_head(conn)
        line = b"data: " + b"z" * 94 + b"\n"
        for _count in range(20000):  # 2 MB of short lines
            if stop.is_set():
                return
            conn.sendall(line)

    with RawServer(endless) as server:
        response = client_for(server, max_response_bytes=cap).call("POST", "/v1/chat/completions", {}, stream=True)
    assert response.error_kind == "limit"
    assert response.error_message == "the stream is longer than max_response_bytes (262144 bytes)"
    assert sum(len(line) + 1 for _when, line in response.lines) <= cap


def test_a_body_longer_than_max_response_bytes_ends(no_proxy_env):
    cap = 1024 * 1024

    def big_body(conn, _head, _stop):
        body = b"[" + b"1," * (2 * 1024 * 1024) + b"1]"
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
        conn.sendall(body)

    with RawServer(big_body) as server:
        response = client_for(server, max_response_bytes=cap).call("GET", "/v1/models")
    assert response.error_kind == "limit" and response.status == 200
    assert response.error_message == "the answer is longer than max_response_bytes (1048576 bytes)"
    assert len(response.body) == cap


# --------------------------------------------------------------------------------------
# The deadline: the whole request, not each read
# --------------------------------------------------------------------------------------


def trickle(conn, stop, payload=b"x", seconds=8.0, pause=0.05):
    """One byte every ``pause`` seconds: every read gets data long before any read timeout."""
    end = time.monotonic() + seconds
    while time.monotonic() < end and not stop.is_set():
        conn.sendall(payload)
        time.sleep(pause)


@pytest.mark.parametrize("stream", [False, True])
def test_a_trickled_body_is_cut_at_the_deadline(no_proxy_env, stream):
    def slow_body(conn, _head, stop):
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 100000\r\n\r\n")
        trickle(conn, stop)

    with RawServer(slow_body) as server:
        started = time.monotonic()
        response = client_for(server, timeout=1.0).call("POST", "/v1/chat/completions", {}, stream=stream)
        elapsed = time.monotonic() - started
    assert response.error_kind == "timeout" and response.error_phase == "read" and response.status == 200
    assert response.error_message.startswith("no answer within the timeout (1 s for the whole request")
    assert 0.9 <= elapsed < 1.9, elapsed
    assert response.latency_s < 1.9


def test_trickled_headers_are_cut_at_the_deadline(no_proxy_env):
    def slow_headers(conn, _head, stop):
        conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
        trickle(conn, stop)

    with RawServer(slow_headers) as server:
        started = time.monotonic()
        response = client_for(server, timeout=1.0).call("GET", "/health")
        elapsed = time.monotonic() - started
    assert response.error_kind == "timeout" and response.error_phase == "wait" and response.status is None
    assert 0.9 <= elapsed < 1.9, elapsed


def test_a_quick_answer_is_not_held_to_the_deadline(no_proxy_env):
    def quick(conn, _head, _stop):
        conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")

    with RawServer(quick) as server:
        started = time.monotonic()
        response = client_for(server, timeout=30).call("GET", "/health")
    assert time.monotonic() - started < 5
    assert response.error_kind is None and response.status == 404 and response.body == b"{}"


# --------------------------------------------------------------------------------------
# Proxies from the environment (ansible.module_utils.urls)
# --------------------------------------------------------------------------------------


def proxy_answer(conn, head, _stop):
    """A proxy stand-in: answers every forwarded request itself, refuses CONNECT tunnels."""
    if head.startswith("CONNECT "):
        conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
        return
    body = b'{"object": "list", "data": [{"id": "via-proxy"}]}'
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))


def test_http_proxy_from_the_environment_is_used(no_proxy_env):
    with RawServer(proxy_answer) as proxy:
        no_proxy_env.setenv("http_proxy", proxy.url)
        client = Client(parse_base_url("http://engine.invalid:8000/v1"), {"Authorization": "Bearer " + KEY}, timeout=5)
        response = client.call("GET", "/v1/models")
    assert response.error_kind is None and response.json()["data"][0]["id"] == "via-proxy"
    assert response.proxy == proxy.url
    assert proxy.heads[0].startswith("GET http://engine.invalid:8000/v1/models HTTP/1.1\r\n")
    assert "Authorization: Bearer %s\r\n" % KEY in proxy.heads[0]


def test_https_goes_through_a_connect_tunnel(no_proxy_env):
    with RawServer(proxy_answer) as proxy:
        no_proxy_env.setenv("https_proxy", proxy.url)
        response = Client(parse_base_url("https://engine.invalid:8443"), {"Authorization": "Bearer " + KEY},
                          timeout=5).call("GET", "/health")
    assert proxy.heads[0].startswith("CONNECT engine.invalid:8443 HTTP/1.")
    assert KEY not in proxy.heads[0]
    assert response.error_kind == "network" and "403" in response.error_message


@pytest.mark.parametrize("case", ["no_proxy", "use_proxy=false", "loopback"])
def test_the_proxy_is_skipped(no_proxy_env, case):
    def engine(conn, _head, _stop):
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")

    with RawServer(proxy_answer) as proxy, RawServer(engine) as direct:
        no_proxy_env.setenv("http_proxy", proxy.url)
        if case == "loopback":
            # A proxy cannot reach this host's loopback, so it is not asked even without no_proxy.
            response = Client(parse_base_url(direct.url), timeout=5).call("GET", "/health")
            assert response.status == 200 and response.proxy is None and len(direct.heads) == 1
        else:
            options = {"use_proxy": False} if case == "use_proxy=false" else {}
            if case == "no_proxy":
                no_proxy_env.setenv("no_proxy", "engine.invalid")
            # Straight to a name that cannot resolve: only the proxy could have answered.
            response = Client(parse_base_url("http://engine.invalid:8000"), timeout=5, **options).call("GET", "/health")
            assert response.status is None and response.error_phase == "connect"
    assert proxy.heads == []


# --------------------------------------------------------------------------------------
# The plain-http credential warning (decision only; no network)
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("localhost", True), ("LOCALHOST.", True),
     ("vllm.localhost", True), ("10.0.0.5", False), ("0.0.0.0", False), ("192.168.1.2", False),
     ("engine.example.com", False), ("127.0.0.1.nip.io", False), ("::ffff:10.0.0.1", False)],
)
def test_is_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_plain_http_credential_warning():
    remote = parse_base_url("http://10.0.0.5:8000")
    warning = plain_http_credential_warning(remote, {"Authorization": "Bearer " + KEY, "X-Team": "a"})
    assert warning.startswith("the Authorization header is sent over plain http to 10.0.0.5:8000, which is not a loopback")
    assert KEY not in warning
    assert plain_http_credential_warning(remote, {"X-Team": "a"}) is None
    assert plain_http_credential_warning(remote, {"Authorization": ""}) is None
    assert plain_http_credential_warning(parse_base_url("https://10.0.0.5:8000"), {"Authorization": "x"}) is None
    assert plain_http_credential_warning(parse_base_url("http://127.0.0.1:8000"), {"Authorization": "x"}) is None


# --------------------------------------------------------------------------------------
# Pure helpers
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "root", "api"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000", "http://127.0.0.1:8000/v1"),
        ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000", "http://127.0.0.1:8000/v1"),
        ("https://llm.example.com/serving/v1", "https://llm.example.com:443/serving", "https://llm.example.com:443/serving/v1"),
        ("HTTP://[::1]:30000", "http://[::1]:30000", "http://[::1]:30000/v1"),
    ],
)
def test_parse_base_url(url, root, api):
    endpoint = parse_base_url(url)
    assert endpoint.root_url == root and endpoint.api_url == api


def test_classify_errors():
    assert classify_error(socket.gaierror(-2, "Name or service not known"), "connect") == ("dns", "host name did not resolve: Name or service not known")
    assert classify_error(socket.timeout("timed out"), "connect")[0] == "timeout"
    assert classify_error(ConnectionRefusedError(111, "refused"), "connect") == ("refused", "connection refused")
    assert classify_error(OSError(113, "No route to host"), "connect") == ("network", "network error: No route to host")
