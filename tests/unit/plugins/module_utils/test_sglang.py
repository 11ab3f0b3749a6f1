# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The sglang role's pure decisions: the launch command inside the container (one node and a
two-tray replica), the secrets config that keeps the API key off every command line."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.serving.plugins.module_utils._profiles import get_profile
from ansible_collections.gpufleet.serving.plugins.module_utils._sglang import (
    SECRETS_CONFIG_PATH,
    SglangError,
    managed_flags_in,
    model_mount_path,
    render_launch,
    secrets_config_lines,
)


def settings(**changes):
    base = {
        "served_model_name": "kimi-local", "port": 30000, "bind_host": "0.0.0.0", "context_length": 32768,
        "tensor_parallel_size": 8, "nnodes": 1, "node_rank": 0, "dist_init_addr": "", "revision": "a" * 40,
        "api_key_set": False, "extra_args": [], "socket_ifname": "",
    }
    base.update(changes)
    return base


def test_the_guide_s_kimi_launch_on_b300():
    launch = render_launch(get_profile("hardware", "b300"), get_profile("model", "kimi-k3.1-pro"), settings())
    assert launch["argv"] == [
        "python3", "-m", "sglang.launch_server", "--model-path", "/models/Kimi-K3.1-Pro",
        "--served-model-name", "kimi-local", "--host", "0.0.0.0", "--port", "30000", "--tp", "8",
        "--context-length", "32768", "--trust-remote-code", "--tool-call-parser", "kimi_k3", "--reasoning-parser", "kimi_k3",
    ]
    assert launch["env"]["HF_HUB_OFFLINE"] == "1"
    assert launch["env"]["GPUFLEET_SERVED_REVISION"] == "a" * 40
    assert launch["serves_http"] is True and launch["role"] == "head"


def test_a_gb300_replica_rank_1_joins_rank_0_and_serves_no_http():
    hardware = get_profile("hardware", "gb300")
    launch = render_launch(hardware, get_profile("model", "kimi-k3.1-pro"),
                           settings(nnodes=2, node_rank=1, dist_init_addr="10.0.0.1:20000", socket_ifname="enP5p9s0",
                                    bind_host="127.0.0.1"))
    argv = launch["argv"]
    assert argv[argv.index("--dist-init-addr") + 1:argv.index("--dist-init-addr") + 6] == [
        "10.0.0.1:20000", "--nnodes", "2", "--node-rank", "1"]
    assert launch["serves_http"] is False and launch["role"] == "worker"
    assert launch["env"]["NCCL_SOCKET_IFNAME"] == launch["env"]["GLOO_SOCKET_IFNAME"] == "enP5p9s0"
    assert launch["env"]["NCCL_MNNVL_ENABLE"] == "1"


def test_a_multi_node_launch_needs_rank_0_s_address():
    with pytest.raises(SglangError, match="dist_init_addr"):
        render_launch(get_profile("hardware", "gb300"), get_profile("model", "kimi-k3.1-pro"), settings(nnodes=2))
    with pytest.raises(SglangError, match="does not fit"):
        render_launch(get_profile("hardware", "b300"), get_profile("model", "kimi-k3.1-pro"), settings(node_rank=1))


def test_the_api_key_is_read_from_the_mounted_config_never_from_argv():
    launch = render_launch(get_profile("hardware", "b300"), get_profile("model", "kimi-k3.1-pro"), settings(api_key_set=True))
    assert launch["argv"][-2:] == ["--config", SECRETS_CONFIG_PATH]
    assert not any("key" in arg.lower() for arg in launch["argv"] if arg != "--config")
    assert secrets_config_lines('s3cr"et\\x') == ['api-key: "s3cr\\"et\\\\x"']
    with pytest.raises(SglangError):
        secrets_config_lines("a\nb")


def test_sglang_parser_names_come_from_the_model_profile():
    launch = render_launch(get_profile("hardware", "cpu_sandbox"), get_profile("model", "sandbox-thinker"),
                           settings(tensor_parallel_size=1, context_length=16384))
    argv = launch["argv"]
    assert argv[argv.index("--reasoning-parser") + 1] == "deepseek-r1"
    assert "--tool-call-parser" not in argv and "--trust-remote-code" not in argv


def test_extra_args_may_not_repeat_managed_flags():
    assert managed_flags_in(["--tp=4", "--log-level", "info", "--port", "1"]) == ["--tp", "--port"]
    with pytest.raises(SglangError, match="--tp"):
        render_launch(get_profile("hardware", "b300"), get_profile("model", "kimi-k3.1-pro"), settings(extra_args=["--tp=4"]))


def test_the_mount_path_is_the_repository_s_name():
    assert model_mount_path("moonshotai/Kimi-K3.1-Pro") == "/models/Kimi-K3.1-Pro"
    with pytest.raises(SglangError):
        model_mount_path("org/..")
