# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.serving.endpoint_verify run through its real main() against a local HTTP server.

The server is the scripted stub of ../module_utils/test_endpoint_verify_server.py (loaded by
path, so this file also runs on its own), replaying the captures in tests/fixtures/openai/.
Module arguments go in through ansible-core's own ``patch_module_args``; exit_json/fail_json
print the result and exit, so each test reads the JSON the module printed.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import sys
from pathlib import Path

import pytest
from ansible.module_utils import _internal as module_utils_internal
from ansible.module_utils.common import warnings as ansible_warnings
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpufleet.serving.plugins.modules import endpoint_verify


def _load_stub():
    name = "test_endpoint_verify_server"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "module_utils" / (name + ".py")
        spec = importlib.util.spec_from_file_location(name, str(path))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


stub_server = _load_stub()

CANARY = "sk-canary-0d1e2f3a4b5c6d7e8f90"
SERVED = "meta-llama/Llama-3.1-8B"


def run_module(capsys, **args):
    # Warnings are process-global in ansible-core, and once any test has imported controller code
    # (a filter plugin, ansible.errors) module warnings go to the controller's display instead of the
    # result. Run the module as it runs on a host: target side, no leftover warnings.
    ansible_warnings._global_warnings.clear()
    was_controller = module_utils_internal.is_controller
    module_utils_internal.is_controller = False
    try:
        with patch_module_args(args), pytest.raises(SystemExit) as exited:
            endpoint_verify.main()
    finally:
        module_utils_internal.is_controller = was_controller
    output = capsys.readouterr().out
    return exited.value.code, json.loads(output), output


def free_port():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def test_default_checks(capsys):
    with stub_server.vllm_like(stub_server.OpenAIStub()) as stub:
        code, result, _output = run_module(capsys, base_url=stub.url, api_key=CANARY, timeout=5)
        headers = [item["headers"].get("Authorization") for item in stub.requests]
    assert code == 0
    assert result["changed"] is False and result["healthy"] is True and result["problems"] == []
    assert [item["name"] for item in result["checks"]] == ["health", "models", "chat", "reasoning"]
    assert result["model"] == SERVED and result["max_model_len"] == 131072 and result["reasoning_field"] == "reasoning_content"
    assert result["metrics"]["tokens_source"] == "usage" and result["metrics"]["completion_tokens"] == 130
    assert set(headers) == {"Bearer " + CANARY}


def test_canary_key_never_in_the_output(capsys):
    """The server echoes the Authorization header in its errors and the model repeats the key."""

    def echo(request):
        return stub_server.json_reply({"object": "error", "code": 401,
                                       "message": "invalid key in header %s" % request["headers"].get("Authorization")}, 401)

    leaky = stub_server.completion("The key is %s." % CANARY, reasoning="I saw %s" % CANARY)
    with stub_server.vllm_like(stub_server.OpenAIStub(), chat=stub_server.answering(leaky)) as stub:
        stub.route("GET", "/v1/models", echo)
        code, result, output = run_module(capsys, base_url=stub.url, api_key=CANARY, model="m", timeout=5,
                                          checks=["health", "models", "chat", "reasoning", "tool_call", "multi_turn"],
                                          required_checks=["health", "chat"])
    assert code == 0
    assert CANARY not in output and CANARY[3:] not in output
    models = [item for item in result["checks"] if item["name"] == "models"][0]
    assert models["passed"] is False and models["required"] is False and "api_key" in models["diagnosis"]
    # A failed optional check is reported and warned about, and does not make the result unhealthy.
    assert result["healthy"] is True
    # ansible-core 2.19 prints each warning as a WarningSummary dict with the text in event.msg.
    warnings = [item["event"]["msg"] if isinstance(item, dict) else item for item in result["warnings"]]
    assert any(text.startswith("optional check models failed: GET /v1/models answered HTTP 401") for text in warnings), warnings


def test_canary_key_with_fail_on_unhealthy(capsys):
    port = free_port()
    code, result, output = run_module(capsys, base_url="http://127.0.0.1:%d/v1" % port, api_key=CANARY,
                                      fail_on_unhealthy=True, timeout=2)
    assert code == 1 and result["failed"] is True and CANARY not in output
    assert result["msg"].startswith("Endpoint verification failed: 4 required check(s) failed: health: GET /health: the connection to")
    assert len(result["checks"]) == 4 and result["healthy"] is False


def test_connection_refused_is_a_result_not_a_failure(capsys):
    port = free_port()
    code, result, _output = run_module(capsys, base_url="http://127.0.0.1:%d" % port, timeout=2)
    assert code == 0 and result["healthy"] is False and result["changed"] is False
    assert "was refused" in result["problems"][0]
    assert result["metrics"]["ttft_s"] is None


def test_malformed_url_is_a_result_not_a_failure(capsys):
    code, result, _output = run_module(capsys, base_url="localhost:8000")
    assert code == 0 and result["healthy"] is False and result["api_url"] is None
    assert all("does not start with http:// or https://" in problem for problem in result["problems"])


def test_check_mode_behaves_the_same(capsys):
    with stub_server.vllm_like(stub_server.OpenAIStub()) as stub:
        _code, normal, _output = run_module(capsys, base_url=stub.url, timeout=5)
        code, checked, _output = run_module(capsys, base_url=stub.url, timeout=5, _ansible_check_mode=True)
    assert code == 0
    for key in ("changed", "healthy", "problems", "model", "root", "max_model_len", "reasoning_field"):
        assert checked[key] == normal[key], key
    assert [item["passed"] for item in checked["checks"]] == [item["passed"] for item in normal["checks"]]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"checks": ["chat"], "required_checks": ["tool_call"]}, "required_checks names checks that are not in checks: tool_call"),
        ({"max_tokens": 4096, "max_tokens_ceiling": 2048}, "max_tokens_ceiling (2048) must not be lower than max_tokens (4096)"),
        ({"client_key": "/etc/pki/client.key"}, "client_key needs client_cert"),
        ({"api_key": CANARY, "extra_headers": {"Authorization": "Bearer other"}}, "mutually exclusive"),
        ({"checks": ["chat", "telepathy"]}, "value of checks must be one or more of"),
        ({"base_url": None}, "missing required arguments: base_url"),
    ],
)
def test_invalid_option_combinations(capsys, args, message):
    module_args = {"base_url": "http://127.0.0.1:1"}
    module_args.update(args)
    if module_args["base_url"] is None:
        del module_args["base_url"]
    code, result, output = run_module(capsys, **module_args)
    assert code == 1 and result["failed"] is True
    assert message in result["msg"]
    assert CANARY not in output


def test_a_key_over_plain_http_to_another_host_is_warned(capsys):
    # 192.0.2.1 is TEST-NET-1: nothing answers; the warning comes before any request.
    code, result, output = run_module(capsys, base_url="http://192.0.2.1:8000", api_key=CANARY, checks=["health"],
                                      timeout=0.5, use_proxy=False)
    warnings = [item["event"]["msg"] if isinstance(item, dict) else item for item in result.get("warnings", [])]
    assert code == 0 and result["healthy"] is False
    assert any(item.startswith("the Authorization header is sent over plain http to 192.0.2.1:8000") for item in warnings)
    assert CANARY not in output


def test_no_warning_for_loopback(capsys):
    with stub_server.vllm_like(stub_server.OpenAIStub()) as stub:
        _code, result, _output = run_module(capsys, base_url=stub.url, api_key=CANARY, checks=["health"], timeout=5)
    assert not any("plain http" in str(item) for item in result.get("warnings", []))
