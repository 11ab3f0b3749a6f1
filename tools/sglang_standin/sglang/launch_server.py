#!/usr/bin/env python3
# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``python3 -m sglang.launch_server``, imitated for sandbox hosts that have no GPU.

SGLang has no CPU build, so this stand-in takes SGLang's launch command line and behaves, on the
outside, like an SGLang server while a real vLLM OpenAI server (CPU build) does the serving:

* node rank 0 binds host:port at once; ``/health`` and ``/health_generate`` answer 503 while the
  backend loads and 200 once it is ready, ``/v1/models`` answers early with the served name,
  ``/get_model_info`` answers; everything else under ``/v1/`` is relayed to ``vllm serve`` on a
  free loopback port (streams event by event), with vLLM's ``reasoning`` renamed to SGLang's
  ``reasoning_content``; when the backend's own ``/health`` first says 200 the stand-in logs
  SGLang's ready line;
* node ranks >= 1 start no backend and run a dummy health server that answers 200 whatever
  happens, as SGLang's non-zero ranks do;
* a backend that exits makes the stand-in exit non-zero; SIGTERM/SIGINT stop the backend and exit 0.

What it cannot imitate is listed in tools/sglang_standin/README.md. Stdlib only, Python 3.9+.
"""

import argparse
import contextlib
import ctypes
import http.client
import http.server
import json
import logging
import os
import shlex
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit

PROG = "launch_server.py"  # what argparse prints for ``python3 -m sglang.launch_server``
READY_LINE = "The server is fired up and ready to roll!"
HEALTH_POLL_S = 0.5
STOP_TIMEOUT_S = 20.0
BACKEND_HEALTH_TIMEOUT_S = 5.0
PROXY_TIMEOUT_S = 600.0
ENV_BACKEND = "SGLANG_STANDIN_VLLM"
ENV_BACKEND_ARGS = "SGLANG_STANDIN_VLLM_ARGS"
ENV_STOP_TIMEOUT = "SGLANG_STANDIN_STOP_TIMEOUT"

# SGLang's --tool-call-parser names (FunctionCallParser.ToolCallParserEnum) that vLLM spells
# differently (vllm/tool_parsers/__init__.py). A name not listed is passed on unchanged; vLLM
# refuses one it does not know, and then the stand-in exits non-zero like SGLang would.
TOOL_CALL_PARSERS_TO_VLLM = {
    "qwen25": "hermes",  # <tool_call>{json}</tool_call>: SGLang's Qwen25Detector, vLLM's hermes parser
    "qwen": "hermes",
    "llama3": "llama3_json",
    "deepseekv3": "deepseek_v3",
    "deepseekv31": "deepseek_v31",
    "deepseekv32": "deepseek_v32",
    "deepseekv4": "deepseek_v4",
    "glm": "glm45",
    "gpt-oss": "openai",
    "minimax-m2": "minimax_m2",
}
# The same for --reasoning-parser (SGLang's ReasoningParser.DetectorMap -> vllm/reasoning/__init__.py).
REASONING_PARSERS_TO_VLLM = {
    "deepseek-r1": "deepseek_r1",
    "deepseek-v3": "deepseek_v3",
    "deepseek-v4": "deepseek_v4",
    "qwen3-thinking": "qwen3",
    "gpt-oss": "openai_gptoss",
    "minimax": "minimax_m2",
    "minimax-append-think": "minimax_m2_append_think",
    "nemotron_3": "nemotron_v3",
}

# Real SGLang flags the stand-in accepts so that a real launch line parses, and then ignores
# (each one given is named in a log line at start). Anything else is refused, as argparse does.
IGNORED_FLAGS = (
    (("--dp-size", "--dp", "--data-parallel-size"), {"type": int}),
    (("--pp-size", "--pipeline-parallel-size"), {"type": int}),
    (("--ep-size", "--expert-parallel-size"), {"type": int}),
    (("--dtype",), {}),
    (("--quantization",), {}),
    (("--kv-cache-dtype",), {}),
    (("--load-format",), {}),
    (("--revision",), {}),
    (("--tokenizer-mode",), {}),
    (("--download-dir",), {}),
    (("--device",), {}),
    (("--attention-backend",), {}),
    (("--max-running-requests",), {"type": int}),
    (("--max-total-tokens",), {"type": int}),
    (("--chunked-prefill-size",), {"type": int}),
    (("--cuda-graph-max-bs",), {"type": int}),
    (("--schedule-policy",), {}),
    (("--random-seed",), {"type": int}),
    (("--watchdog-timeout",), {"type": float}),
    (("--dist-timeout",), {"type": int}),
    (("--log-level-http",), {}),
    (("--disable-radix-cache",), {"action": "store_true"}),
    (("--enable-torch-compile",), {"action": "store_true"}),
    (("--enable-p2p-check",), {"action": "store_true"}),
    (("--enable-cache-report",), {"action": "store_true"}),
    (("--log-requests",), {"action": "store_true"}),
    (("--skip-server-warmup",), {"action": "store_true"}),
)
# Flags with an SGLang meaning the CPU backend cannot give; accepted, logged, without effect.
NO_EFFECT = ("mem_fraction_static", "enable_metrics", "disable_cuda_graph")

logger = logging.getLogger("sglang.launch_server")


class StandInError(Exception):
    """A launch the stand-in refuses after parsing (the message says why)."""


# --------------------------------------------------------------------------------------------------
# Command line and --config
# --------------------------------------------------------------------------------------------------
def build_parser():
    # allow_abbrev=False: with only a subset of SGLang's flags, a prefix that is ambiguous in SGLang
    # could be unique here and be accepted; --tp is therefore spelled out as an alias.
    parser = argparse.ArgumentParser(prog=PROG, allow_abbrev=False,
                                     description="SGLang stand-in (tools/sglang_standin): SGLang's launch CLI in front of a vLLM CPU backend.")
    parser.add_argument("--model-path", "--model", dest="model_path", required=True, help="The path of the model weights.")
    parser.add_argument("--tokenizer-path", help="The path of the tokenizer (passed to vLLM as --tokenizer).")
    parser.add_argument("--served-model-name", help="The model name in /v1/models and responses (default: --model-path).")
    parser.add_argument("--host", default="127.0.0.1", help="The host of the HTTP server.")
    parser.add_argument("--port", type=int, default=30000, help="The port of the HTTP server.")
    parser.add_argument("--tp-size", "--tp", "--tensor-parallel-size", dest="tp_size", type=int, default=1,
                        help="The tensor parallelism size (accepted; the CPU backend runs one rank).")
    parser.add_argument("--context-length", type=int, help="The model's maximum context length (vLLM --max-model-len).")
    parser.add_argument("--reasoning-parser", help="The reasoning parser (mapped to vLLM's name).")
    parser.add_argument("--tool-call-parser", help="The tool-call parser (mapped to vLLM's name; enables auto tool choice).")
    parser.add_argument("--trust-remote-code", action="store_true", help="Allow custom model code from the checkpoint.")
    parser.add_argument("--chat-template", help="A chat template file (a built-in SGLang template name is not imitated).")
    parser.add_argument("--dist-init-addr", "--nccl-init-addr", dest="dist_init_addr", help="host:port of node rank 0.")
    parser.add_argument("--nnodes", type=int, default=1, help="The number of nodes.")
    parser.add_argument("--node-rank", type=int, default=0, help="The node rank.")
    parser.add_argument("--mem-fraction-static", type=float, help="Accepted without effect on the CPU backend.")
    parser.add_argument("--api-key", help="Require 'Authorization: Bearer <key>' on every path but /health*.")
    parser.add_argument("--log-level", default="info", help="Logging level of the stand-in.")
    parser.add_argument("--enable-metrics", action="store_true", help="Accepted without effect (no /metrics).")
    parser.add_argument("--disable-cuda-graph", action="store_true", help="Accepted without effect.")
    parser.add_argument("--config", help="A YAML file of flags (key: value); flags on the command line win.")
    ignored = parser.add_argument_group("accepted and ignored by the stand-in")
    for flags, kwargs in IGNORED_FLAGS:
        ignored.add_argument(*flags, default=None, help="accepted and ignored", **kwargs)
    return parser


def _yaml_scalar(text, path, lineno):
    """One scalar of the YAML subset the stand-in reads (what yaml.safe_load would make of it)."""
    text = text.strip()
    if text.startswith('"'):
        end = _closing_quote(text, path, lineno)
        if text[end + 1:].strip() and not text[end + 1:].strip().startswith("#"):
            raise StandInError("%s:%d: text after a quoted value" % (path, lineno))
        return json.loads(text[:end + 1])  # JSON string escapes are a subset of YAML's double-quoted ones
    if text.startswith("'"):
        body, i = [], 1
        while i < len(text):
            if text[i] == "'":
                if text[i + 1:i + 2] == "'":
                    body.append("'")
                    i += 2
                    continue
                rest = text[i + 1:].strip()
                if rest and not rest.startswith("#"):
                    raise StandInError("%s:%d: text after a quoted value" % (path, lineno))
                return "".join(body)
            body.append(text[i])
            i += 1
        raise StandInError("%s:%d: unterminated single-quoted value" % (path, lineno))
    if " #" in text:
        text = text.split(" #", 1)[0].rstrip()
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1].strip()
        return [_yaml_scalar(item, path, lineno) for item in inner.split(",")] if inner else []
    if text.startswith(("{", "[", "|", ">", "&", "*", "!")):
        raise StandInError("%s:%d: the stand-in reads only 'key: scalar' lines" % (path, lineno))
    lowered = text.lower()
    if lowered in ("", "~", "null"):
        return None
    if lowered in ("true", "yes", "on"):
        return True
    if lowered in ("false", "no", "off"):
        return False
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _closing_quote(text, path, lineno):
    i = 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == '"':
            return i
        i += 1
    raise StandInError("%s:%d: unterminated double-quoted value" % (path, lineno))


def parse_yaml_config(text, path="<config>"):
    """The top-level mapping of a flat YAML file: ``key: scalar`` lines, comments, blank lines.

    Real SGLang reads the file with yaml.safe_load; the stand-in is stdlib-only, so anything beyond
    that subset (nesting, block lists, anchors) is refused rather than misread.
    """
    config = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not line.strip() or line.lstrip().startswith("#") or line.strip() in ("---", "..."):
            continue
        if line[0] in " \t-":
            raise StandInError("%s:%d: the stand-in reads only top-level 'key: scalar' lines" % (path, lineno))
        key, sep, value = line.partition(":")
        if not sep or not key.strip() or (value and not value[0].isspace()):
            raise StandInError("%s:%d: expected 'key: value'" % (path, lineno))
        config[key.strip()] = _yaml_scalar(value, path, lineno)
    return config


def merge_config(argv):
    """Expand ``--config FILE`` the way SGLang does: the file's flags first, the command line after
    (so the command line wins); a true boolean becomes a bare flag, a false one is left out."""
    argv = list(argv)
    spots = [i for i, arg in enumerate(argv) if arg == "--config" or arg.startswith("--config=")]
    if not spots:
        return argv
    if len(spots) > 1:
        raise StandInError("Multiple config files specified! Only one allowed.")
    i = spots[0]
    if argv[i] == "--config":
        if i == len(argv) - 1:
            raise StandInError("No config file specified after --config flag!")
        path, rest = argv[i + 1], argv[:i] + argv[i + 2:]
    else:
        path, rest = argv[i].split("=", 1)[1], argv[:i] + argv[i + 1:]
    if os.path.splitext(path)[1].lower() not in (".yaml", ".yml"):
        raise StandInError("Config file must be YAML format, got: %s" % (os.path.splitext(path)[1] or path))
    if not os.path.exists(path):
        raise StandInError("Config file not found: %s" % path)
    with open(path, encoding="utf-8") as handle:
        config = parse_yaml_config(handle.read(), path)
    flags = []
    for key, value in config.items():
        if isinstance(value, bool):
            flags += ["--%s" % key] if value else []
        elif isinstance(value, list):
            flags += (["--%s" % key] + [str(item) for item in value]) if value else []
        elif value is not None:
            flags += ["--%s" % key, str(value)]
    return flags + rest


def parse_host_port(addr):
    """(host, port) from ``host:port`` or ``[v6]:port``; ValueError when it is neither."""
    addr = str(addr or "")
    if addr.startswith("["):
        host, sep, port = addr[1:].partition("]:")
    else:
        host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("expected host:port, got %r" % addr)
    return host, int(port)


def parse_args(argv):
    """Parse like SGLang: argparse errors exit 2 with usage; refused settings exit 2 too."""
    parser = build_parser()
    try:
        merged = merge_config(argv)
    except StandInError as exc:
        parser.error(str(exc))
    args = parser.parse_args(merged)
    if args.nnodes < 1:
        parser.error("--nnodes must be >= 1, got %d" % args.nnodes)
    if not 0 <= args.node_rank < args.nnodes:
        parser.error("--node-rank %d does not fit --nnodes %d" % (args.node_rank, args.nnodes))
    if args.nnodes > 1 and not args.dist_init_addr:
        parser.error("--nnodes %d needs --dist-init-addr (host:port of node rank 0)" % args.nnodes)
    if args.dist_init_addr:
        try:
            parse_host_port(args.dist_init_addr)
        except ValueError as exc:
            parser.error("--dist-init-addr: %s" % exc)
    if not 0 <= args.port < 65536:
        parser.error("--port %d is not a port" % args.port)
    if args.tp_size < 1:
        parser.error("--tp-size must be >= 1, got %d" % args.tp_size)
    if args.served_model_name is None:
        args.served_model_name = args.model_path  # SGLang's default too
    args.ignored = [flags[0] for flags, _ in IGNORED_FLAGS if getattr(args, _dest(flags[0])) not in (None, False)]
    return args


def _dest(flag):
    return flag.lstrip("-").replace("-", "_")


# --------------------------------------------------------------------------------------------------
# The vLLM backend
# --------------------------------------------------------------------------------------------------
def backend_command(environ=None):
    """``$SGLANG_STANDIN_VLLM`` split like a shell would (default ``vllm`` on PATH)."""
    environ = os.environ if environ is None else environ
    return shlex.split(environ.get(ENV_BACKEND) or "vllm")


def backend_argv(args, port, environ=None):
    """The full ``vllm serve`` command line for this launch, backend on 127.0.0.1:port."""
    environ = os.environ if environ is None else environ
    argv = backend_command(environ) + ["serve", args.model_path, "--served-model-name", args.served_model_name,
                                       "--host", "127.0.0.1", "--port", str(port)]
    if args.context_length is not None:
        argv += ["--max-model-len", str(args.context_length)]
    # TP is accepted as SGLang's flag, but the CPU engine runs one rank: --tp-size N shards nothing here.
    argv += ["--tensor-parallel-size", "1"]
    if args.tokenizer_path:
        argv += ["--tokenizer", args.tokenizer_path]
    if args.trust_remote_code:
        argv.append("--trust-remote-code")
    if args.reasoning_parser:
        argv += ["--reasoning-parser", REASONING_PARSERS_TO_VLLM.get(args.reasoning_parser, args.reasoning_parser)]
    if args.tool_call_parser:
        argv += ["--enable-auto-tool-choice", "--tool-call-parser",
                 TOOL_CALL_PARSERS_TO_VLLM.get(args.tool_call_parser, args.tool_call_parser)]
    if args.chat_template and os.path.isfile(args.chat_template):
        argv += ["--chat-template", args.chat_template]
    argv += shlex.split(environ.get(ENV_BACKEND_ARGS) or "")
    return argv


def free_loopback_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _die_with_parent():
    """preexec_fn: the backend gets SIGTERM if the stand-in dies without stopping it (Linux)."""
    if _LIBC is not None:
        _LIBC.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


try:
    _LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
except OSError:
    _LIBC = None


def backend_healthy(port, timeout=BACKEND_HEALTH_TIMEOUT_S):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", "/health")
        response = conn.getresponse()
        response.read()
        return response.status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def stop_backend(proc, timeout):
    """SIGTERM, then SIGKILL to its whole process group after ``timeout`` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            logger.info("Backend still running %.0f s after SIGTERM: SIGKILL", timeout)
            _kill_group(proc)
            proc.wait()
    _kill_group(proc)  # leftovers of the backend (vLLM's engine core) die with it


def _kill_group(proc):
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


# --------------------------------------------------------------------------------------------------
# Response rewriting: vLLM's ``reasoning`` -> SGLang's ``reasoning_content``
# --------------------------------------------------------------------------------------------------
def rename_reasoning(part):
    """``part`` (a message or a delta) with ``reasoning`` renamed in place of the key; True when changed."""
    if not isinstance(part, dict) or "reasoning" not in part:
        return False
    value = part["reasoning"]
    keep_existing = part.get("reasoning_content") is not None  # older vLLM sends both; keep its own
    renamed = {}
    for key, item in part.items():
        if key == "reasoning":
            if not keep_existing:
                renamed["reasoning_content"] = value
        elif key == "reasoning_content":
            renamed[key] = item if keep_existing else value
        else:
            renamed[key] = item
    part.clear()
    part.update(renamed)
    return True


def rewrite_choices(document, key):
    """Rename in every ``choices[*][key]`` of a decoded body; True when anything changed."""
    changed = False
    if isinstance(document, dict) and isinstance(document.get("choices"), list):
        for choice in document["choices"]:
            if isinstance(choice, dict):
                changed = rename_reasoning(choice.get(key)) or changed
    return changed


def rewrite_json_body(data):
    """A non-streamed body with ``message.reasoning`` renamed; other bodies come back unchanged."""
    try:
        document = json.loads(data)
    except ValueError:
        return data
    if not rewrite_choices(document, "message"):
        return data
    return json.dumps(document, ensure_ascii=False).encode("utf-8")


def rewrite_sse_event(lines):
    """One server-sent event (its lines, blank line included) with ``delta.reasoning`` renamed."""
    out = []
    for line in lines:
        body = line.rstrip(b"\r\n")
        if body.startswith(b"data:") and body[5:].strip() != b"[DONE]":
            try:
                document = json.loads(body[5:])
            except ValueError:
                document = None
            if document is not None and rewrite_choices(document, "delta"):
                line = b"data: " + json.dumps(document, ensure_ascii=False).encode("utf-8") + line[len(body):]
        out.append(line)
    return b"".join(out)


# --------------------------------------------------------------------------------------------------
# HTTP
# --------------------------------------------------------------------------------------------------
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
              "transfer-encoding", "upgrade", "host", "content-length", "authorization"}
NOT_FOUND = {"detail": "Not Found"}


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host, port, handler):
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, port), handler)

    def server_bind(self):
        # HTTPServer.server_bind would resolve the host's FQDN (a DNS lookup) for nothing.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


class BaseHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"  # what SGLang's HTTP server says in its Server header
    sys_version = ""

    def log_request(self, code="-", size="-"):
        phrase = self.responses.get(code, ("",))[0] if isinstance(code, int) else ""
        logger.info('INFO:     %s:%s - "%s" %s %s', self.client_address[0], self.client_address[1], self.requestline, int(code), phrase)

    def log_error(self, fmt, *args):
        logger.warning("WARNING:  %s", fmt % args)

    def read_body(self):
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def send_bytes(self, status, data=b"", content_type="application/json", extra=()):
        self.send_response(status)
        if data or content_type != "application/json":
            self.send_header("Content-Type", content_type)
        for key, value in extra:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data and self.command != "HEAD":
            self.wfile.write(data)

    def send_json(self, status, document):
        self.send_bytes(status, json.dumps(document).encode("utf-8"))

    def do_GET(self):
        self.route()

    def do_POST(self):
        self.route()

    def do_PUT(self):
        self.route()

    def do_DELETE(self):
        self.route()

    def route(self):
        raise NotImplementedError


class DummyHealthHandler(BaseHandler):
    """Node ranks >= 1: /health and /health_generate say 200 whatever the model does; nothing else."""

    def route(self):
        self.read_body()
        if self.command == "GET" and urlsplit(self.path).path in ("/health", "/health_generate"):
            self.send_bytes(200)
        else:
            self.send_json(404, NOT_FOUND)


class State:
    def __init__(self, args):
        self.args = args
        self.backend_port = None
        self.ready = threading.Event()
        self.shutting_down = threading.Event()
        self.created = int(time.time())


def make_rank0_handler(state):
    args = state.args

    class Rank0Handler(BaseHandler):
        def route(self):
            body = self.read_body()
            path = urlsplit(self.path).path
            # SGLang's API-key middleware lets /health* (and /metrics) through and guards everything else.
            guarded = args.api_key and self.command != "OPTIONS" and not path.startswith(("/health", "/metrics"))
            if guarded and self.headers.get("Authorization") != "Bearer " + args.api_key:
                self.send_json(401, {"error": "Unauthorized"})
                return
            if self.command == "GET" and path in ("/health", "/health_generate"):
                self.health()
            elif self.command == "GET" and path in ("/get_model_info", "/model_info"):
                self.send_json(200, {"model_path": args.model_path, "tokenizer_path": args.tokenizer_path or args.model_path,
                                     "is_generation": True})
            elif self.command == "GET" and path == "/v1/models" and not state.ready.is_set():
                self.send_json(200, self.early_models())
            elif path.startswith("/v1/"):
                if not state.ready.is_set():
                    self.send_json(503, {"object": "error", "type": "ServiceUnavailableError", "code": 503,
                                         "message": "The server is starting (SGLang stand-in: the vLLM backend is not ready yet)."})
                else:
                    self.proxy(body, path)
            else:
                self.send_json(404, NOT_FOUND)

        def health(self):
            if state.shutting_down.is_set() or not state.ready.is_set():
                self.send_bytes(503)
            else:
                self.send_bytes(200 if backend_healthy(state.backend_port) else 503)

        def early_models(self):
            # SGLang answers /v1/models from its tokenizer manager, before the first generation works.
            name = args.served_model_name
            return {"object": "list", "data": [{"id": name, "object": "model", "created": state.created, "owned_by": "sglang",
                                                "root": name, "max_model_len": args.context_length}]}

        def proxy(self, body, path):
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            if body or self.command in ("POST", "PUT"):
                headers["Content-Length"] = str(len(body))
            conn = http.client.HTTPConnection("127.0.0.1", state.backend_port, timeout=PROXY_TIMEOUT_S)
            self.streaming = False
            try:
                conn.request(self.command, self.path, body=body or None, headers=headers)
                response = conn.getresponse()
                content_type = response.getheader("Content-Type") or ""
                if "text/event-stream" in content_type:
                    self.relay_stream(response, content_type)
                else:
                    data = response.read()
                    if "json" in content_type:
                        data = rewrite_json_body(data)
                    self.send_bytes(response.status, data, content_type or "application/json")
            except (OSError, http.client.HTTPException) as exc:
                if self.streaming:  # a stream cut in the middle (either side): end the connection with it
                    self.close_connection = True
                    return
                try:
                    self.send_json(503, {"object": "error", "type": "ServiceUnavailableError", "code": 503,
                                         "message": "SGLang stand-in: the vLLM backend did not answer %s (%s)" % (path, exc)})
                except OSError:
                    self.close_connection = True
            finally:
                conn.close()

        def relay_stream(self, response, content_type):
            """Server-sent events go on one by one, as the backend sends them (chunked encoding)."""
            self.send_response(response.status)
            self.send_header("Content-Type", content_type)
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.streaming = True
            event = []
            while True:
                line = response.readline()
                if not line:
                    break
                event.append(line)
                if line in (b"\n", b"\r\n"):
                    self.write_chunk(rewrite_sse_event(event))
                    event = []
            if event:
                self.write_chunk(rewrite_sse_event(event))
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def write_chunk(self, data):
            if data:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

    return Rank0Handler


def start_http(host, port, handler):
    """Bind now (errors surface here); serve from a thread once ``serve`` is called."""
    server = Server(host, port, handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True, name="http")
    return server, thread


def _url_host(host):
    return "[%s]" % host if ":" in host else host


# --------------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------------
def configure_logging(level_name):
    # SGLang's format: "[time] message", no level name (sglang/srt/utils configure_logger).
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", datefmt="%Y-%m-%d %H:%M:%S"))
    logger.handlers[:] = [handler]
    logger.propagate = False
    level = getattr(logging, str(level_name).upper(), None)
    logger.setLevel(level if isinstance(level, int) else logging.INFO)


def install_stop_handlers(stop):
    def handler(signum, _frame):
        logger.info("Received %s: shutting down", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def log_server_args(args):
    shown = {k: v for k, v in sorted(vars(args).items()) if k not in ("ignored",) and v not in (None, False)}
    if args.api_key:
        shown["api_key"] = "<set>"  # never the key itself in a journal
    logger.info("server_args=ServerArgs(%s)", ", ".join("%s=%r" % item for item in shown.items()))
    logger.info("SGLang stand-in (tools/sglang_standin): this is not SGLang; a vLLM CPU server does the serving")
    for name in NO_EFFECT:
        if getattr(args, name) not in (None, False):
            logger.info("--%s is accepted without effect by the stand-in", name.replace("_", "-"))
    for flag in args.ignored:
        logger.info("%s is accepted and ignored by the stand-in", flag)


def run_nonzero_rank(args, stop):
    try:
        server, thread = start_http(args.host, args.port, DummyHealthHandler)
    except OSError as exc:
        logger.error("Cannot bind %s:%d: %s", args.host, args.port, exc)
        return 1
    thread.start()
    port = server.server_address[1]
    logger.info("Node rank %d of %d is a non-zero rank: waiting for node rank 0 at %s. The stand-in joins no collective and "
                "starts no backend; its dummy health check server on %s:%d answers 200 on /health and /health_generate "
                "and says nothing about the model", args.node_rank, args.nnodes, args.dist_init_addr, args.host, port)
    logger.info("INFO:     Uvicorn running on http://%s:%d (Press CTRL+C to quit)", _url_host(args.host), port)
    stop.wait()
    server.shutdown()
    server.server_close()
    return 0


def run_rank0(args, stop):
    state = State(args)
    try:
        server, thread = start_http(args.host, args.port, make_rank0_handler(state))
    except OSError as exc:
        logger.error("Cannot bind %s:%d: %s", args.host, args.port, exc)
        return 1
    state.backend_port = free_loopback_port()
    argv = backend_argv(args, state.backend_port)
    if args.tp_size > 1 or args.nnodes > 1:
        logger.info("--tp-size %d over %d node(s) accepted; the CPU backend runs one rank (--tensor-parallel-size 1)",
                    args.tp_size, args.nnodes)
    logger.info("Starting the backend: %s", shlex.join(argv))
    try:
        proc = subprocess.Popen(argv, start_new_session=True, preexec_fn=_die_with_parent)
    except OSError as exc:
        logger.error("Cannot start the backend %s: %s", argv[0], exc)
        server.server_close()
        return 1
    thread.start()
    port = server.server_address[1]
    logger.info("INFO:     Uvicorn running on http://%s:%d (Press CTRL+C to quit)", _url_host(args.host), port)
    code = 0
    while not stop.is_set():
        returncode = proc.poll()
        if returncode is not None:
            logger.error("The backend (%s) exited with code %d %s; the stand-in exits", argv[0], returncode,
                         "after it was ready" if state.ready.is_set() else "before it was ready")
            code = returncode if 0 < returncode < 256 else (128 - returncode if returncode < 0 else 1)
            break
        if not state.ready.is_set() and backend_healthy(state.backend_port, timeout=2.0):
            state.ready.set()
            logger.info(READY_LINE)
        stop.wait(HEALTH_POLL_S)
    state.shutting_down.set()
    stop_backend(proc, float(os.environ.get(ENV_STOP_TIMEOUT) or STOP_TIMEOUT_S))
    server.shutdown()
    server.server_close()
    return code


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    configure_logging(args.log_level)
    stop = threading.Event()
    install_stop_handlers(stop)
    log_server_args(args)
    if args.node_rank >= 1:
        return run_nonzero_rank(args, stop)
    return run_rank0(args, stop)


if __name__ == "__main__":
    sys.exit(main())
