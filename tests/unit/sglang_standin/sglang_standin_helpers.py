# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Helpers for the SGLang stand-in tests: a fake ``vllm serve``, the stand-in as a subprocess, raw HTTP.

The fake backend is a small stdlib script the tests write into their tmp directory and name in
``SGLANG_STANDIN_VLLM``. It records its argv, pid and the requests it got under ``FAKE_VLLM_DIR`` and
is steered by environment variables:

* ``FAKE_VLLM_HEALTH_DELAY``: seconds its ``/health`` answers 503 before 200 (default 0);
* ``FAKE_VLLM_EXIT``: ``SECONDS:CODE``, exit with CODE that long after start (a crash);
* ``FAKE_VLLM_IGNORE_TERM``: ``1`` to ignore SIGTERM (so only SIGKILL stops it);
* a streamed chat completion stops after its reasoning event until the file ``gate`` exists in
  ``FAKE_VLLM_DIR``, so a test can prove the stand-in relays the first events before the last exist.
"""

import contextlib
import http.client
import importlib.util
import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
STANDIN = REPO / "tools" / "sglang_standin"
FIXTURES = REPO / "tests" / "fixtures"
READY_LINE = "The server is fired up and ready to roll!"
MODEL = "/models/Qwen3-0.6B"
SERVED = "qwen3-tiny"

FAKE_VLLM = r'''
import json, os, signal, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STARTED = time.monotonic()
OUT = os.environ["FAKE_VLLM_DIR"]
ARGV = sys.argv[1:]
with open(os.path.join(OUT, "argv.json"), "w") as f:
    json.dump(ARGV, f)
with open(os.path.join(OUT, "pid"), "w") as f:
    f.write(str(os.getpid()))
if os.environ.get("FAKE_VLLM_IGNORE_TERM") == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.environ.get("FAKE_VLLM_EXIT"):
    after, code = os.environ["FAKE_VLLM_EXIT"].split(":")
    threading.Timer(float(after), os._exit, args=(int(code),)).start()
assert ARGV[0] == "serve", ARGV
PORT = int(ARGV[ARGV.index("--port") + 1])
NAME = ARGV[ARGV.index("--served-model-name") + 1]
DELAY = float(os.environ.get("FAKE_VLLM_HEALTH_DELAY") or 0)
LOCK = threading.Lock()


def chunk(delta, finish=None):
    return {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1, "model": NAME,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, status, doc):
        data = json.dumps(doc).encode() if doc is not None else b""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def record(self, body):
        with LOCK, open(os.path.join(OUT, "requests.jsonl"), "a") as f:
            f.write(json.dumps({"method": self.command, "path": self.path, "headers": dict(self.headers.items()),
                                "body": body.decode()}) + "\n")

    def do_GET(self):
        self.record(b"")
        if self.path == "/health":
            self.send(200 if time.monotonic() - STARTED >= DELAY else 503, None)
        elif self.path == "/v1/models":
            self.send(200, {"object": "list", "data": [{"id": NAME, "object": "model", "created": 2, "owned_by": "vllm",
                                                        "root": ARGV[1], "parent": None, "max_model_len": 4096}]})
        else:
            self.send(404, {"detail": "Not Found"})

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.record(body)
        if self.path != "/v1/chat/completions":
            self.send(404, {"detail": "Not Found"})
            return
        request = json.loads(body)
        if not request.get("stream"):
            self.send(200, {"id": "chatcmpl-fake", "object": "chat.completion", "created": 1, "model": NAME,
                            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Great job! \U0001f389",
                                                                 "refusal": None, "annotations": None, "audio": None,
                                                                 "function_call": None, "tool_calls": [],
                                                                 "reasoning": "The user deployed me; be glad."},
                                         "logprobs": None, "finish_reason": "stop", "stop_reason": None}],
                            "usage": {"prompt_tokens": 15, "total_tokens": 30, "completion_tokens": 15}})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def event(doc):
            data = b"data: " + (doc if isinstance(doc, bytes) else json.dumps(doc).encode()) + b"\n\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        event(chunk({"role": "assistant", "content": ""}))
        event(chunk({"reasoning": "Let me think."}))
        gate = os.path.join(OUT, "gate")
        deadline = time.monotonic() + 20
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.02)
        event(chunk({"content": "Hello!"}))
        event(chunk({}, finish="stop"))
        event(b"[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
'''


def load_standin():
    """launch_server.py as a module (under its own name: no ``sglang`` package enters sys.modules)."""
    spec = importlib.util.spec_from_file_location("sglang_standin_launch_server", STANDIN / "sglang" / "launch_server.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fixture_json(relative):
    return json.loads((FIXTURES / relative).read_text())


class FakeBackend:
    """The fake ``vllm`` of one test: where its script is and what it recorded."""

    def __init__(self, root):
        self.dir = root / "fake_vllm"
        self.dir.mkdir()
        self.script = root / "fake_vllm.py"
        self.script.write_text(FAKE_VLLM)

    @property
    def command(self):
        return shlex.join([sys.executable, str(self.script)])

    def argv(self):
        path = self.dir / "argv.json"
        return json.loads(path.read_text()) if path.exists() else None

    def pid(self):
        return int((self.dir / "pid").read_text())

    def requests(self):
        path = self.dir / "requests.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def open_gate(self):
        (self.dir / "gate").touch()


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is dead for our purposes.
    try:
        with open("/proc/%d/stat" % pid) as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class StandIn:
    """``python3 -m sglang.launch_server ARGS`` with tools/sglang_standin on PYTHONPATH; stdout collected."""

    def __init__(self, backend, *args, env=None, port=0):
        environ = dict(os.environ, PYTHONPATH=str(STANDIN), PYTHONUNBUFFERED="1", FAKE_VLLM_DIR=str(backend.dir),
                       SGLANG_STANDIN_VLLM=backend.command)
        environ.update(env or {})
        self.backend = backend
        self.argv = [sys.executable, "-m", "sglang.launch_server", "--port", str(port), *args]
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=environ, text=True)
        self.lines = []
        self._queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.port = int(self.wait_for("Uvicorn running on http://").rsplit(":", 1)[1].split()[0])

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, text, timeout=15):
        """The first line (seen so far or to come) containing ``text``."""
        for line in list(self.lines):
            if text in line:
                return line
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=0.1)
            except queue.Empty:
                continue
            if line is None:
                break
            if text in line:
                return line
        raise AssertionError("no line with %r within %ss; output:\n%s" % (text, timeout, "\n".join(self.lines)))

    def output(self):
        return "\n".join(self.lines)

    def request(self, method, path, body=None, headers=None, timeout=10):
        """(status, headers, body bytes) of one request to the stand-in."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = json.dumps(body).encode() if isinstance(body, dict) else body
            conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
            response = conn.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            conn.close()

    def get_json(self, path, headers=None):
        status, _headers, body = self.request("GET", path, headers=headers)
        return status, (json.loads(body) if body else None)

    def wait_exit(self, timeout=15):
        code = self.proc.wait(timeout)
        self._reader.join(5)
        return code

    def terminate(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.wait_exit()

    def close(self):
        """Tear down whatever is left: the stand-in, then the fake backend (through its pid file).

        The backend shares the stand-in's stdout pipe, so the reader sees EOF only once both are gone;
        the pipe is closed only after the reader has stopped (closing it under a blocked read hangs)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
            os.kill(self.backend.pid(), signal.SIGKILL)
        self._reader.join(10)
        if not self._reader.is_alive():
            self.proc.stdout.close()
