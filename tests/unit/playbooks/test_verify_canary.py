# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The verify role and playbooks/compare_endpoints.yml run by ansible-playbook against local servers.

The servers are the scripted OpenAI-compatible stub of
tests/unit/plugins/module_utils/test_endpoint_verify_server.py (real threaded HTTP servers on
127.0.0.1, replaying the captures in tests/fixtures/openai/), made leaky on purpose: the model
repeats the API key in its answers and an unauthorised server echoes the Authorization header.
Every run uses -vvv and an Ansible log file; the canary key (and a canary gateway header) must
appear in none of stdout, stderr, the logs, the JSON reports, or compare.md/.html/.json.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from ansible_env import isolated_ansible_env

REPO = Path(__file__).resolve().parents[3]
CANARY = "sk-canary-7f3e9a1c5b2d4e6f8a0b"
HEADER_CANARY = "gw-canary-41c2d3e4f5a6b7c8"
SERVED = "meta-llama/Llama-3.1-8B"
REVISION = "0123456789abcdef0123456789abcdef01234567"


def _load_stub():
    name = "test_endpoint_verify_server"
    if name not in sys.modules:
        path = REPO / "tests" / "unit" / "plugins" / "module_utils" / (name + ".py")
        spec = importlib.util.spec_from_file_location(name, str(path))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


stub_server = _load_stub()


def leaky_server(root):
    """A healthy vLLM-like server whose model repeats the key it was given."""
    stub = stub_server.OpenAIStub()
    leaky = stub_server.completion("Paris is the capital of France (key %s)." % CANARY,
                                   reasoning_content="The user sent %s and %s; answer briefly." % (CANARY, HEADER_CANARY),
                                   usage={"prompt_tokens": 20, "completion_tokens": 16, "total_tokens": 36})
    stub_server.vllm_like(stub, chat=stub_server.answering(leaky))
    models = stub_server.fixture_json(stub_server.MODELS)
    models["data"][0]["root"] = str(root)
    stub.route("GET", "/v1/models", stub_server.json_reply(models))
    return stub


def unauthorised_server():
    """Every route answers 401 with the Authorization header it got, as some gateways do."""
    stub = stub_server.OpenAIStub()

    def echo(request):
        return stub_server.json_reply({"object": "error", "code": 401, "message": "invalid credentials: %s"
                                       % request["headers"].get("Authorization")}, 401)

    for method, path in (("GET", "/health"), ("GET", "/v1/models"), ("POST", "/v1/chat/completions")):
        stub.route(method, path, echo)
    return stub


def ansible_playbook(tmp_path, log, *args):
    env = isolated_ansible_env(tmp_path)
    env.update({
        "ANSIBLE_LOG_PATH": str(log),
        "ANSIBLE_FORCE_COLOR": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
    })
    command = [str(Path(sys.executable).parent / "ansible-playbook"), *args]
    return subprocess.run(command, cwd=str(REPO), env=env, capture_output=True, text=True, timeout=120, check=False)


def write_yaml(path, document):
    # JSON is YAML; no extra dependency.
    path.write_text(json.dumps(document, indent=2), encoding="utf-8")
    return path


def closed_port():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def recap(stdout, host):
    for line in stdout.splitlines():
        if line.startswith(host + " ") and "ok=" in line:
            return dict(item.split("=") for item in line.split(":", 1)[1].split())
    raise AssertionError("no recap line for %s in:\n%s" % (host, stdout[-3000:]))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three ansible-playbook runs with -vvv: verify then verify --check --diff, and (at the same
    time, with its own log file) compare_endpoints.yml."""
    tmp_path = tmp_path_factory.mktemp("canary")
    revision_dir = tmp_path / "models" / "org--model" / "revisions" / REVISION
    revision_dir.mkdir(parents=True)
    current = tmp_path / "models" / "org--model" / "current"
    current.symlink_to("revisions/" + REVISION)
    logs = [tmp_path / "verify.log", tmp_path / "compare.log"]
    with leaky_server(current) as good, leaky_server(current) as hosted, unauthorised_server() as bad:
        inventory = write_yaml(tmp_path / "inventory.yml", {"all": {"hosts": {
            "node-good": {"verify_base_url": good.url},
            "node-bad": {"verify_base_url": bad.url},
            "node-down": {"verify_base_url": "http://127.0.0.1:%d" % closed_port()},
            "node-badurl": {"verify_base_url": "ftp://user:%s@127.0.0.1/v1" % CANARY},
        }, "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}})
        playbook = tmp_path / "verify.yml"
        playbook.write_text("---\n- name: Verify\n  hosts: all\n  gather_facts: false\n  roles:\n"
                            "    - role: gpufleet.serving.verify\n", encoding="utf-8")
        verify_vars = write_yaml(tmp_path / "verify_vars.yml", {
            "verify_api_key": CANARY,
            "verify_model": SERVED,
            "verify_timeout": 10,
            "verify_max_tokens": 64,
            "verify_max_tokens_ceiling": 128,
        })
        compare_vars = write_yaml(tmp_path / "compare_vars.yml", {
            "compare_repetitions": 2,
            "compare_report_dir": str(tmp_path / "reports" / "compare"),
            "verify_timeout": 10,
            "verify_max_tokens": 64,
            "verify_max_tokens_ceiling": 128,
            "compare_endpoints": [
                {"name": "local-b300", "kind": "self_hosted", "base_url": good.url, "api_key": CANARY, "model": SERVED,
                 "cost": {"gpu_usd_per_hour": 60.0, "storage_network_usd": 0.01, "operations_usd_per_hour": 10.0,
                          "human_correction_usd_per_failure": 2.0}},
                {"name": "hosted-api", "kind": "hosted", "base_url": hosted.url + "/v1", "api_key": CANARY,
                 "extra_headers": {"X-Gateway-Token": HEADER_CANARY},
                 "cost": {"input_usd_per_1m_tokens": 1.25, "output_usd_per_1m_tokens": 10.0,
                          "human_correction_usd_per_failure": 2.0}},
                {"name": "wrong-key", "kind": "hosted", "base_url": bad.url, "api_key": CANARY, "model": SERVED,
                 "cost": {"input_usd_per_1m_tokens": 1.0, "output_usd_per_1m_tokens": 4.0,
                          "human_correction_usd_per_failure": 2.0}},
            ],
        })

        def verify_twice():
            first = ansible_playbook(tmp_path, logs[0], "-vvv", "-i", str(inventory), str(playbook), "-e", "@%s" % verify_vars)
            check = ansible_playbook(tmp_path, logs[0], "-vvv", "--check", "--diff", "--limit", "node-good",
                                     "-i", str(inventory), str(playbook), "-e", "@%s" % verify_vars)
            return first, check

        def compare():
            return ansible_playbook(tmp_path, logs[1], "-vvv", "-i", "localhost,", "-c", "local",
                                    "-e", "ansible_python_interpreter=%s" % sys.executable,
                                    str(REPO / "playbooks" / "compare_endpoints.yml"), "-e", "@%s" % compare_vars)

        with ThreadPoolExecutor(max_workers=2) as pool:
            verified = pool.submit(verify_twice)
            compared = pool.submit(compare)
            first, check = verified.result()
            compared = compared.result()
    return {"tmp": tmp_path, "logs": logs, "first": first, "check": check, "compare": compared,
            "outputs": [first, check, compared]}


def test_canary_key_appears_nowhere(runs):
    texts = {}
    for position, run in enumerate(runs["outputs"]):
        texts["run %d stdout" % position] = run.stdout
        texts["run %d stderr" % position] = run.stderr
    for log in runs["logs"]:
        texts[log.name] = log.read_text(encoding="utf-8")
    reports = sorted((runs["tmp"] / "reports").rglob("*"))
    for path in reports:
        if path.is_file():
            texts[str(path)] = path.read_text(encoding="utf-8")
    # The files that must exist were all read.
    names = {path.name for path in reports}
    assert {"node-good.json", "node-bad.json", "compare.md", "compare.html", "compare.json"} <= names
    for log in runs["logs"]:
        assert len(texts[log.name]) > 10000 and "ESTABLISH LOCAL CONNECTION" in texts[log.name]
    for canary in (CANARY, HEADER_CANARY):
        leaks = [where for where, text in texts.items() if canary in text]
        assert not leaks, "canary %s found in %s" % (canary, leaks)


def test_verify_role_reports_and_fails_the_unhealthy_host(runs):
    first = runs["first"]
    assert first.returncode == 2, first.stdout[-3000:]
    assert recap(first.stdout, "node-good")["failed"] == "0"
    assert all(recap(first.stdout, host)["failed"] == "1" for host in ("node-bad", "node-down", "node-badurl"))
    assert "node-bad: endpoint http://127.0.0.1:" in first.stdout and "failed 6 required check(s)" in first.stdout
    assert "answered HTTP 401" in first.stdout and "Traceback" not in first.stdout + first.stderr
    # Nothing listening, and a URL that is not http(s) (with credentials in it): diagnoses, not errors.
    assert "node-down: endpoint http://127.0.0.1:" in first.stdout and "was refused, so nothing listens there" in first.stdout
    assert "node-badurl: endpoint ftp://127.0.0.1/v1 failed 6 required check(s)" in first.stdout
    assert "not run: base_url 'ftp://user:********@127.0.0.1/v1' does not start with http:// or https://" in first.stdout
    # The summary: endpoint, alias, revision, checks, TTFT and tokens/s on one screen.
    assert "node-good: healthy - http://127.0.0.1:" in first.stdout
    assert "model %s, revision %s" % (SERVED, REVISION) in first.stdout
    assert "checks: health ok, models ok, chat ok, reasoning ok, tool_call ok, multi_turn ok" in first.stdout
    report_dir = runs["tmp"] / "reports" / "verify"
    good = json.loads((report_dir / "node-good.json").read_text())
    bad = json.loads((report_dir / "node-bad.json").read_text())
    assert good["schema"] == "gpufleet.serving/verify-report/v1" and good["healthy"] is True
    assert good["revision"] == REVISION and good["model"] == SERVED and good["host"] == "node-good"
    assert good["metrics"]["ttft_s"] is not None and good["metrics"]["output_tokens_per_s"] is not None
    assert [check["name"] for check in good["checks"]] == ["health", "models", "chat", "reasoning", "tool_call", "multi_turn"]
    assert bad["healthy"] is False and bad["revision"] is None
    assert all("HTTP 401" in problem for problem in bad["problems"][:2])
    assert oct((report_dir / "node-good.json").stat().st_mode & 0o777) == "0o644"


def test_check_mode_runs_the_probe_and_changes_nothing(runs):
    check = runs["check"]
    assert check.returncode == 0, check.stdout[-3000:]
    counts = recap(check.stdout, "node-good")
    assert counts["changed"] == "0" and counts["failed"] == "0"
    assert "node-good: healthy" in check.stdout


def test_compare_writes_the_three_reports(runs):
    compare = runs["compare"]
    assert compare.returncode == 0, compare.stdout[-3000:]
    out = runs["tmp"] / "reports" / "compare"
    report = json.loads((out / "compare.json").read_text())
    by_name = {item["name"]: item for item in report["endpoints"]}
    assert report["repetitions"] == 2 and report["task_checks"] == ["chat", "reasoning", "tool_call", "multi_turn"]
    assert by_name["local-b300"]["tasks"] == {"total": 8, "succeeded": 8, "failed": 0, "per_check": {
        name: {"succeeded": 2, "tasks": 2} for name in ("chat", "reasoning", "tool_call", "multi_turn")}}
    # No model configured: the report names the alias the probe took from /v1/models.
    assert by_name["hosted-api"]["model"] == SERVED and by_name["hosted-api"]["tasks"]["succeeded"] == 8
    assert by_name["hosted-api"]["cost_usd"]["api"] > 0 and by_name["local-b300"]["cost_usd"]["gpu"] > 0
    assert by_name["wrong-key"]["tasks"]["succeeded"] == 0 and by_name["wrong-key"]["cost_usd"]["per_success"] == "n/a"
    assert by_name["wrong-key"]["cost_usd"]["human_correction"] == 16.0
    markdown = (out / "compare.md").read_text()
    page = (out / "compare.html").read_text()
    assert "| wrong-key | hosted |" in markdown and "n/a" in markdown
    assert "<svg" in page and "<script" not in page.lower() and "src=" not in page and "href=" not in page
    assert "local-b300 (self_hosted): 8/8 tasks ok" in compare.stdout
