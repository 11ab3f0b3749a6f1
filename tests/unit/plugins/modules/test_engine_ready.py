# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.serving.engine_ready through its real main() against a local HTTP server that answers
as vLLM does (tests/unit only: a test double, never shipped). The unit is left empty, so no
systemctl or journalctl runs; the molecule scenario covers those on a real systemd host."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpufleet.serving.plugins.modules import engine_ready

MODELS = {"object": "list", "data": [{"id": "kimi-local", "object": "model", "root": "/srv/models/x/current", "max_model_len": 512}]}


class Engine(BaseHTTPRequestHandler):
    health = 200
    models = MODELS
    seen_auth = []

    def do_GET(self):  # noqa: N802 (http.server's naming)
        Engine.seen_auth.append(self.headers.get("Authorization"))
        if self.path == "/health":
            self.send_response(self.health)
            self.end_headers()
            return
        if self.path == "/v1/models":
            body = json.dumps(self.models).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def engine():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Engine.health, Engine.models, Engine.seen_auth = 200, MODELS, []
    yield "http://127.0.0.1:%d" % server.server_address[1]
    server.shutdown()
    server.server_close()


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(capsys, **args):
    args.setdefault("unit", "")
    args.setdefault("alias", "kimi-local")
    with patch_module_args(args), pytest.raises(SystemExit) as exited:
        engine_ready.main()
    return exited.value.code, json.loads(capsys.readouterr().out)


def test_ready_when_models_lists_the_alias(capsys, engine):
    code, result = run(capsys, base_url=engine, timeout=5, api_key="canary-key-123")
    assert code == 0 and result["ready"] is True and result["state"] == "ready" and result["changed"] is False
    assert result["root"] == "/srv/models/x/current" and result["max_model_len"] == 512
    assert "Bearer canary-key-123" in Engine.seen_auth
    assert "canary-key-123" not in json.dumps(result)


def test_health_503_is_dead_at_once(capsys, engine):
    Engine.health = 503
    code, result = run(capsys, base_url=engine, timeout=30)
    assert code == 1 and result["state"] == "dead" and result["polls"] == 1
    assert "503" in result["msg"] and "engine dead" in result["msg"]


def test_other_alias_is_not_ready(capsys, engine):
    Engine.models = {"data": [{"id": "someone-else"}]}
    code, result = run(capsys, base_url=engine, timeout=30, fail_on_not_ready=False)
    assert code == 0 and result["ready"] is False and result["state"] == "dead"
    assert result["problems"] == ["engine dead: /v1/models lists someone-else, not the alias kimi-local"]


def test_refused_is_loading_until_the_timeout(capsys):
    code, result = run(capsys, base_url="http://127.0.0.1:%d" % free_port(), timeout=1.5, interval=0.5)
    assert code == 1 and result["state"] == "loading" and result["polls"] >= 2
    assert "not ready after" in result["msg"] and "connection refused" in result["msg"]
    assert 1.0 <= result["waited_s"] < 10


def test_bad_url_fails_cleanly(capsys):
    code, result = run(capsys, base_url="ftp://x", timeout=1)
    assert code == 1 and "base_url" in result["msg"]
