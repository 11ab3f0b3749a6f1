# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The SGLang stand-in (tools/sglang_standin) against a fake ``vllm serve``.

Parsing and the backend command line are checked in process; everything else runs
``python3 -m sglang.launch_server`` as a subprocess on a port the kernel picks (``--port 0``, read
back from its "Uvicorn running on" line) with a fake backend written by the test.
"""

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from sglang_standin_helpers import MODEL, READY_LINE, SERVED, STANDIN, alive, fixture_json

BASE = ("--model-path", MODEL, "--served-model-name", SERVED, "--context-length", "4096")
LOADING = {"FAKE_VLLM_HEALTH_DELAY": "1.5"}


def run_cli(*args, env=None):
    environ = dict(os.environ, PYTHONPATH=str(STANDIN), **(env or {}))
    return subprocess.run([sys.executable, "-m", "sglang.launch_server", *args], capture_output=True, text=True,
                          env=environ, timeout=30, check=False)


# ------------------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------------------
def test_defaults_are_sglangs(standin_module):
    args = standin_module.parse_args(["--model-path", MODEL])
    assert (args.host, args.port, args.nnodes, args.node_rank, args.tp_size) == ("127.0.0.1", 30000, 1, 0, 1)
    assert args.served_model_name == MODEL  # SGLang serves under the model path when no name is given
    assert args.api_key is None and args.context_length is None and not args.trust_remote_code


@pytest.mark.parametrize("flag", ["--tp", "--tp-size", "--tensor-parallel-size"])
def test_tensor_parallel_spellings(standin_module, flag):
    assert standin_module.parse_args(["--model", MODEL, flag, "8"]).tp_size == 8


def test_every_required_flag_parses(standin_module):
    args = standin_module.parse_args([
        "--model-path", MODEL, "--tokenizer-path", "/models/tok", "--tp", "16", "--served-model-name", SERVED,
        "--host", "0.0.0.0", "--port", "8000", "--context-length", "32768", "--reasoning-parser", "qwen3",
        "--tool-call-parser", "qwen25", "--trust-remote-code", "--dist-init-addr", "10.0.0.1:5000", "--nnodes", "2",
        "--node-rank", "1", "--mem-fraction-static", "0.85", "--api-key", "k", "--log-level", "warning",
        "--chat-template", "/t.jinja", "--enable-metrics", "--disable-cuda-graph", "--dtype", "bfloat16"])
    assert (args.tp_size, args.port, args.context_length, args.nnodes, args.node_rank) == (16, 8000, 32768, 2, 1)
    assert (args.dist_init_addr, args.mem_fraction_static, args.api_key) == ("10.0.0.1:5000", 0.85, "k")
    assert args.trust_remote_code and args.enable_metrics and args.disable_cuda_graph
    assert args.ignored == ["--dtype"]


def test_unknown_flag_is_refused_like_argparse(backend):
    env = {"SGLANG_STANDIN_VLLM": backend.command, "FAKE_VLLM_DIR": str(backend.dir)}
    result = run_cli("--model-path", MODEL, "--no-such-flag", "1", env=env)
    assert result.returncode == 2
    assert result.stderr.startswith("usage: launch_server.py")
    assert result.stderr.rstrip().endswith("launch_server.py: error: unrecognized arguments: --no-such-flag 1")
    assert result.stdout == "" and backend.argv() is None  # nothing was started


def test_model_path_is_required():
    result = run_cli("--port", "0")
    assert result.returncode == 2 and "the following arguments are required: --model-path" in result.stderr


@pytest.mark.parametrize("args, message", [
    (["--nnodes", "2", "--node-rank", "1"], "--nnodes 2 needs --dist-init-addr"),
    (["--nnodes", "2", "--dist-init-addr", "rank0"], "--dist-init-addr: expected host:port, got 'rank0'"),
    (["--nnodes", "2", "--node-rank", "2", "--dist-init-addr", "10.0.0.1:5000"], "--node-rank 2 does not fit --nnodes 2"),
])
def test_multi_node_launch_needs_rank0_address(args, message):
    result = run_cli("--model-path", MODEL, *args)
    assert result.returncode == 2 and message in result.stderr, result.stderr


def test_dist_init_addr_forms(standin_module):
    assert standin_module.parse_host_port("sgl-dev-0:50000") == ("sgl-dev-0", 50000)
    assert standin_module.parse_host_port("[fd00::1]:25000") == ("fd00::1", 25000)
    for bad in ("host", "host:", ":5000", "host:99999", "[fd00::1]"):
        with pytest.raises(ValueError):
            standin_module.parse_host_port(bad)


def test_config_file_flags_come_first_so_the_command_line_wins(standin_module, tmp_path):
    config = tmp_path / "sglang-secrets.yaml"
    # What the sglang role writes (secrets_config_lines): the key as a double-quoted scalar.
    config.write_text('# root-only\napi-key: "s3cr\\"et"\ntrust-remote-code: true\nenable-metrics: false\nport: 31000\n')
    args = standin_module.parse_args(["--model-path", MODEL, "--config", str(config), "--port", "32000"])
    assert (args.api_key, args.trust_remote_code, args.enable_metrics, args.port) == ('s3cr"et', True, False, 32000)
    assert standin_module.merge_config(["--config=%s" % config]) == ["--api-key", 's3cr"et', "--trust-remote-code", "--port", "31000"]


@pytest.mark.parametrize("name, text, message", [
    ("flags.json", "{}", "Config file must be YAML format, got: .json"),
    ("missing.yaml", None, "Config file not found"),
    ("nested.yaml", "parallel:\n  tp: 2\n", "reads only top-level 'key: scalar' lines"),
])
def test_config_file_refusals(tmp_path, name, text, message):
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    result = run_cli("--model-path", MODEL, "--config", str(path))
    assert result.returncode == 2 and message in result.stderr, result.stderr


# ------------------------------------------------------------------------------------------------
# The backend command line
# ------------------------------------------------------------------------------------------------
def test_backend_argv(standin_module, tmp_path):
    template = tmp_path / "chat.jinja"
    template.write_text("{{ messages }}")
    args = standin_module.parse_args([*BASE, "--tp", "4", "--tokenizer-path", "/models/tok", "--trust-remote-code",
                                      "--reasoning-parser", "deepseek-r1", "--tool-call-parser", "qwen25",
                                      "--chat-template", str(template), "--mem-fraction-static", "0.8"])
    environ = {"SGLANG_STANDIN_VLLM": "/opt/vllm/bin/python -m vllm.entrypoints.cli.main",
               "SGLANG_STANDIN_VLLM_ARGS": "--dtype float32 --enforce-eager"}
    assert standin_module.backend_argv(args, 41234, environ) == [
        "/opt/vllm/bin/python", "-m", "vllm.entrypoints.cli.main", "serve", MODEL, "--served-model-name", SERVED,
        "--host", "127.0.0.1", "--port", "41234", "--max-model-len", "4096", "--tensor-parallel-size", "1",
        "--tokenizer", "/models/tok", "--trust-remote-code", "--reasoning-parser", "deepseek_r1",
        "--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--chat-template", str(template),
        "--dtype", "float32", "--enforce-eager"]


def test_backend_argv_minimal_and_unmapped_parsers(standin_module):
    args = standin_module.parse_args(["--model-path", MODEL, "--reasoning-parser", "qwen3", "--tool-call-parser", "kimi_k2",
                                      "--chat-template", "chatml"])
    assert standin_module.backend_argv(args, 5, {}) == [
        "vllm", "serve", MODEL, "--served-model-name", MODEL, "--host", "127.0.0.1", "--port", "5",
        "--tensor-parallel-size", "1", "--reasoning-parser", "qwen3", "--enable-auto-tool-choice", "--tool-call-parser", "kimi_k2"]


def test_backend_receives_that_argv(launch, backend):
    standin = launch(*BASE, "--reasoning-parser", "qwen3", "--tool-call-parser", "llama3", "--trust-remote-code",
                     env={"SGLANG_STANDIN_VLLM_ARGS": "--dtype float32 --enforce-eager"})
    standin.wait_for(READY_LINE)
    argv = backend.argv()
    port = argv[argv.index("--port") + 1]
    assert argv == ["serve", MODEL, "--served-model-name", SERVED, "--host", "127.0.0.1", "--port", port,
                    "--max-model-len", "4096", "--tensor-parallel-size", "1", "--trust-remote-code",
                    "--reasoning-parser", "qwen3", "--enable-auto-tool-choice", "--tool-call-parser", "llama3_json",
                    "--dtype", "float32", "--enforce-eager"]
    assert int(port) != standin.port


# ------------------------------------------------------------------------------------------------
# Readiness
# ------------------------------------------------------------------------------------------------
def test_health_is_503_while_loading_then_200_and_the_ready_line_comes_once(launch):
    standin = launch(*BASE, env=LOADING)
    assert standin.request("GET", "/health")[0] == 503
    assert standin.request("GET", "/health_generate")[0] == 503
    assert READY_LINE not in standin.output()
    ready = standin.wait_for(READY_LINE)
    assert ready.endswith("] " + READY_LINE) and ready.startswith("[")  # "[YYYY-MM-DD HH:MM:SS] The server is ..."
    assert standin.request("GET", "/health")[0] == 200
    assert standin.request("GET", "/health_generate")[0] == 200
    time.sleep(1.2)  # two more polls of the backend: no second ready line
    assert [line for line in standin.lines if READY_LINE in line] == [ready]


def test_models_and_model_info_answer_before_the_backend_is_ready(launch):
    standin = launch(*BASE, env={"FAKE_VLLM_HEALTH_DELAY": "3"})
    status, models = standin.get_json("/v1/models")
    assert status == 200 and [card["id"] for card in models["data"]] == [SERVED]
    assert models["data"][0]["owned_by"] == "sglang" and models["data"][0]["max_model_len"] == 4096
    assert standin.get_json("/get_model_info") == (200, {"model_path": MODEL, "tokenizer_path": MODEL, "is_generation": True})
    assert standin.request("GET", "/health")[0] == 503  # listed, yet not able to serve
    status, _headers, body = standin.request("POST", "/v1/chat/completions", {"model": SERVED, "messages": []})
    assert status == 503 and json.loads(body)["code"] == 503


def test_unknown_paths_are_404(launch):
    standin = launch(*BASE)
    standin.wait_for(READY_LINE)
    assert standin.get_json("/no/such/path") == (404, {"detail": "Not Found"})
    assert standin.request("GET", "/metrics")[0] == 404


# ------------------------------------------------------------------------------------------------
# The relay
# ------------------------------------------------------------------------------------------------
def test_chat_completion_reasoning_becomes_reasoning_content(launch, backend):
    standin = launch(*BASE)
    standin.wait_for(READY_LINE)
    status, headers, body = standin.request("POST", "/v1/chat/completions", {"model": SERVED, "messages": [
        {"role": "user", "content": "Damn, I finally deployed you successfully."}]})
    assert status == 200 and headers["Content-Type"] == "application/json"
    message = json.loads(body)["choices"][0]["message"]
    assert "reasoning" not in message
    assert message["reasoning_content"] == "The user deployed me; be glad."
    assert message["content"] == "Great job! \U0001f389"
    assert list(message)[-1] == "reasoning_content"  # renamed where vLLM had it, other keys untouched
    sent = backend.requests()[-1]
    assert sent["path"] == "/v1/chat/completions" and json.loads(sent["body"])["messages"][0]["role"] == "user"


def test_models_are_relayed_once_ready(launch):
    standin = launch(*BASE)
    standin.wait_for(READY_LINE)
    status, models = standin.get_json("/v1/models")
    assert status == 200 and models["data"][0]["owned_by"] == "vllm"  # the backend's own answer now


def test_stream_is_relayed_event_by_event_with_reasoning_content(launch, backend):
    standin = launch(*BASE)
    standin.wait_for(READY_LINE)
    conn = http.client.HTTPConnection("127.0.0.1", standin.port, timeout=10)
    conn.request("POST", "/v1/chat/completions", body=json.dumps({"model": SERVED, "stream": True, "messages": []}),
                 headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200 and response.getheader("Content-Type").startswith("text/event-stream")

    def next_event():
        lines = []
        while not lines or lines[-1] != b"\n":
            line = response.readline()
            assert line, "stream ended early"
            lines.append(line)
        assert len(lines) == 2 and lines[0].startswith(b"data: ")
        payload = lines[0][len(b"data: "):].strip()
        return payload if payload == b"[DONE]" else json.loads(payload)

    # The fake backend holds the rest of the stream until the gate opens: a buffering relay hangs here.
    assert next_event()["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert next_event()["choices"][0]["delta"] == {"reasoning_content": "Let me think."}
    backend.open_gate()
    assert next_event()["choices"][0]["delta"] == {"content": "Hello!"}
    assert next_event()["choices"][0]["finish_reason"] == "stop"
    assert next_event() == b"[DONE]"
    assert response.read() == b""
    conn.close()


def test_rewrite_gives_sglangs_shape_of_a_real_capture(standin_module):
    # A real SGLang answer (tests/fixtures/openai, see PROVENANCE.md), given the field name vLLM uses.
    sglang = fixture_json("openai/sglang_chat-completion_reasoning_content_Qwen3-0.6B.json")
    vllm = json.loads(json.dumps(sglang))
    message = vllm["choices"][0]["message"]
    vllm["choices"][0]["message"] = {("reasoning" if k == "reasoning_content" else k): v for k, v in message.items()}
    rewritten = json.loads(standin_module.rewrite_json_body(json.dumps(vllm).encode()))
    assert rewritten == sglang and list(rewritten["choices"][0]["message"]) == list(sglang["choices"][0]["message"])
    untouched = json.dumps(sglang).encode()
    assert standin_module.rewrite_json_body(untouched) is untouched


def test_rewrite_keeps_a_reasoning_content_the_backend_already_sent(standin_module):
    both = {"choices": [{"delta": {"reasoning_content": "kept", "reasoning": "dropped"}}]}
    event = standin_module.rewrite_sse_event([b"data: " + json.dumps(both).encode() + b"\r\n", b"\r\n"])
    assert event == b'data: {"choices": [{"delta": {"reasoning_content": "kept"}}]}\r\n\r\n'
    assert standin_module.rewrite_sse_event([b"data: [DONE]\n", b"\n"]) == b"data: [DONE]\n\n"


# ------------------------------------------------------------------------------------------------
# API key
# ------------------------------------------------------------------------------------------------
def test_api_key_guards_everything_but_health(launch, backend, tmp_path):
    config = tmp_path / "secrets.yaml"
    config.write_text('api-key: "sk-sandbox"\n')
    standin = launch(*BASE, "--config", str(config), env=LOADING)
    assert standin.request("GET", "/health")[0] == 503  # no key needed, and still loading
    assert standin.get_json("/v1/models") == (401, {"error": "Unauthorized"})
    assert standin.get_json("/get_model_info")[0] == 401
    assert standin.get_json("/v1/models", {"Authorization": "Bearer sk-sandbox"})[0] == 200
    standin.wait_for(READY_LINE)
    assert standin.request("GET", "/health")[0] == 200
    chat = {"model": SERVED, "messages": []}
    assert standin.request("POST", "/v1/chat/completions", chat)[0] == 401
    assert standin.request("POST", "/v1/chat/completions", chat, {"Authorization": "Bearer wrong"})[0] == 401
    assert standin.request("POST", "/v1/chat/completions", chat, {"Authorization": "Bearer sk-sandbox"})[0] == 200
    chats = [r for r in backend.requests() if r["path"] == "/v1/chat/completions"]
    assert len(chats) == 1 and "Authorization" not in chats[0]["headers"]  # the refused ones never reached it
    assert "sk-sandbox" not in standin.output()  # the key is not logged


# ------------------------------------------------------------------------------------------------
# Node ranks >= 1
# ------------------------------------------------------------------------------------------------
def test_nonzero_rank_runs_a_dummy_health_server_only(launch, backend):
    standin = launch(*BASE, "--tp", "2", "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.1.2.3:5000")
    assert standin.request("GET", "/health")[0] == 200
    assert standin.request("GET", "/health_generate")[0] == 200
    assert standin.get_json("/v1/models") == (404, {"detail": "Not Found"})
    assert standin.get_json("/get_model_info")[0] == 404
    assert standin.request("POST", "/v1/chat/completions", {"model": SERVED, "messages": []})[0] == 404
    line = standin.wait_for("non-zero rank")
    assert "Node rank 1 of 2" in line and "waiting for node rank 0 at 10.1.2.3:5000" in line
    time.sleep(0.7)
    assert backend.argv() is None and READY_LINE not in standin.output()
    assert standin.terminate() == 0


# ------------------------------------------------------------------------------------------------
# Failures and stopping
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("env, when", [
    ({"FAKE_VLLM_HEALTH_DELAY": "30", "FAKE_VLLM_EXIT": "0.5:3"}, "before it was ready"),
    ({"FAKE_VLLM_EXIT": "1.5:3"}, "after it was ready"),
])
def test_backend_exit_makes_the_standin_exit_nonzero(launch, env, when):
    standin = launch(*BASE, env=env)
    assert standin.wait_exit() == 3
    line = standin.wait_for("exited with code 3")
    assert when in line
    assert (READY_LINE in standin.output()) == (when == "after it was ready")


def test_backend_killed_by_a_signal(launch, backend):
    standin = launch(*BASE)
    standin.wait_for(READY_LINE)
    os.kill(backend.pid(), 9)
    assert standin.wait_exit() == 128 + 9
    assert "exited with code -9" in standin.wait_for("exited with code")


def test_backend_that_cannot_start():
    result = run_cli(*BASE, "--port", "0", env={"SGLANG_STANDIN_VLLM": "/nonexistent/vllm"})
    assert result.returncode == 1
    assert "Cannot start the backend /nonexistent/vllm: [Errno 2]" in result.stdout


def test_port_in_use(backend):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        result = run_cli(*BASE, "--port", str(busy.getsockname()[1]),
                         env={"SGLANG_STANDIN_VLLM": backend.command, "FAKE_VLLM_DIR": str(backend.dir)})
    assert result.returncode == 1 and "Cannot bind 127.0.0.1:" in result.stdout
    assert backend.argv() is None


@pytest.mark.parametrize("ready", [True, False])
def test_sigterm_stops_the_backend_and_exits_0(launch, backend, ready):
    standin = launch(*BASE, env=None if ready else {"FAKE_VLLM_HEALTH_DELAY": "30"})
    if ready:
        standin.wait_for(READY_LINE)
    else:
        standin.wait_for("Starting the backend")
        deadline = time.monotonic() + 10
        while backend.argv() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    pid = backend.pid()
    assert alive(pid)
    assert standin.terminate() == 0
    assert not alive(pid)
    assert "Received SIGTERM: shutting down" in standin.output()


def test_backend_deaf_to_sigterm_is_killed(launch, backend):
    standin = launch(*BASE, env={"FAKE_VLLM_IGNORE_TERM": "1", "SGLANG_STANDIN_STOP_TIMEOUT": "2"})
    standin.wait_for(READY_LINE)
    assert standin.request("GET", "/health")[0] == 200
    pid = backend.pid()
    started = time.monotonic()
    standin.proc.send_signal(signal.SIGTERM)
    standin.wait_for("Received SIGTERM")
    assert standin.request("GET", "/health")[0] == 503  # shutting down, the backend still up: no longer healthy
    assert standin.wait_exit() == 0
    assert time.monotonic() - started < 8
    assert not alive(pid)
    assert "still running 2 s after SIGTERM: SIGKILL" in standin.output()
