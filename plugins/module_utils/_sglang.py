# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang in a container under systemd: pure decisions for the sglang role.

* :func:`render_launch`: the ``python3 -m sglang.launch_server`` command inside the container, its
  environment and what kind of node this is, from a hardware profile, a model profile and the
  role's settings;
* :func:`secrets_config_lines`: the root-only ``--config`` YAML that carries the API key (SGLang
  reads its flags from such a file, so the key is never on a command line the host's ``ps`` shows);

SGLang's readiness is not vLLM's: once its HTTP server listens, /health answers 503 until a
warm-up generation has passed (and again while it shuts down), so 503 there means "not yet", never
"dead"; its /v1/models may list the model before it can generate. Ranks >= 1 of a multi-node
launch run a dummy health server that says nothing about the model, so only rank 0 is probed
(``classify_readiness(..., engine="sglang")`` in _vllm.py judges it).
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.serving.plugins.module_utils._vllm import BASE_ENV

READY_LINE = "The server is fired up and ready to roll!"
# Where the checkpoint is mounted inside the container (the deployment guide's path form).
MODEL_MOUNT_ROOT = "/models"
SECRETS_CONFIG_PATH = "/etc/gpufleet/sglang-secrets.yaml"

# Flags the role sets itself; giving them again in sglang_extra_args would make two sources of truth.
MANAGED_FLAGS = (
    "--model-path", "--served-model-name", "--host", "--port", "--tp", "--tp-size", "--tensor-parallel-size", "--pp-size", "--pipeline-parallel-size",
    "--context-length", "--trust-remote-code", "--tool-call-parser", "--reasoning-parser", "--api-key",
    "--dist-init-addr", "--nnodes", "--node-rank", "--config", "--mem-fraction-static",
)
_FLAG_NAME = re.compile(r"^(--?[A-Za-z0-9][A-Za-z0-9-]*)(?:=.*)?$")


class SglangError(ValueError):
    """Settings SGLang cannot be launched with (the message says which and why)."""


def model_mount_path(hf_repo_id):
    """``/models/<name>``: the repository's last path component, as the guide mounts Kimi-K3.1-Pro."""
    name = str(hf_repo_id).rstrip("/").rsplit("/", 1)[-1]
    if not name or name in (".", ".."):
        raise SglangError("cannot derive a mount path from repository id %r" % (hf_repo_id,))
    return "%s/%s" % (MODEL_MOUNT_ROOT, name)


def managed_flags_in(args):
    """The role-managed flags found in user-given extra arguments."""
    found = []
    for arg in args or []:
        match = _FLAG_NAME.match(str(arg))
        if match and match.group(1) in MANAGED_FLAGS and match.group(1) not in found:
            found.append(match.group(1))
    return found


def render_launch(hardware, model, settings):
    """The launch command inside the container, its environment and the node's part.

    ``settings``: served_model_name, port (inside the container), bind_host, context_length,
    tensor_parallel_size, nnodes, node_rank, dist_init_addr (``host:port`` of rank 0), revision,
    api_key_set (bool), extra_args, socket_ifname, mem_fraction_static.
    """
    nnodes = int(settings.get("nnodes") or 1)
    rank = int(settings.get("node_rank") or 0)
    if nnodes < 1 or not 0 <= rank < nnodes:
        raise SglangError("node_rank %d does not fit nnodes %d" % (rank, nnodes))
    clashes = managed_flags_in(settings.get("extra_args"))
    if clashes:
        raise SglangError("extra_args repeat flag(s) the role sets itself: %s" % ", ".join(clashes))
    argv = ["python3", "-m", "sglang.launch_server",
            "--model-path", model_mount_path(model["hf_repo_id"]),
            "--served-model-name", str(settings["served_model_name"]),
            "--host", str(settings["bind_host"]),
            "--port", str(int(settings["port"])),
            "--tp", str(int(settings["tensor_parallel_size"])),
            "--context-length", str(int(settings["context_length"]))]
    if int(settings.get("pipeline_parallel_size") or 1) > 1:
        argv += ["--pp-size", str(int(settings["pipeline_parallel_size"]))]
    # Remote code runs only from the pinned, verified revision the role mounts read-only.
    if model.get("trust_remote_code"):
        argv.append("--trust-remote-code")
    if model.get("sglang_tool_call_parser"):
        argv += ["--tool-call-parser", model["sglang_tool_call_parser"]]
    if model.get("sglang_reasoning_parser"):
        argv += ["--reasoning-parser", model["sglang_reasoning_parser"]]
    if settings.get("mem_fraction_static") is not None:
        argv += ["--mem-fraction-static", str(settings["mem_fraction_static"])]
    if nnodes > 1:
        if not settings.get("dist_init_addr"):
            raise SglangError("a launch over %d nodes needs dist_init_addr (rank 0's host:port)" % nnodes)
        argv += ["--dist-init-addr", str(settings["dist_init_addr"]), "--nnodes", str(nnodes), "--node-rank", str(rank)]
    if settings.get("api_key_set"):
        argv += ["--config", SECRETS_CONFIG_PATH]
    argv += [str(arg) for arg in model.get("sglang_extra_args") or []]
    argv += [str(arg) for arg in settings.get("extra_args") or []]

    env = dict(BASE_ENV)
    env["GPUFLEET_SERVED_REVISION"] = str(settings.get("revision") or "")
    env.update({str(k): str(v) for k, v in (hardware.get("sglang_env") or hardware.get("vllm_env") or {}).items()})
    if nnodes > 1:
        env.update({str(k): str(v) for k, v in (hardware.get("vllm_multinode_env") or {}).items()})
        if settings.get("socket_ifname"):
            env["GLOO_SOCKET_IFNAME"] = str(settings["socket_ifname"])
            env["NCCL_SOCKET_IFNAME"] = str(settings["socket_ifname"])
    return {
        "argv": argv,
        "env": dict(sorted(env.items())),
        "role": "head" if rank == 0 else "worker",
        # Ranks >= 1 answer /health from a dummy server whatever the model does: never probe them.
        "serves_http": rank == 0,
        "nnodes": nnodes,
        "node_rank": rank,
    }


def secrets_config_lines(api_key):
    """The YAML lines of the root-only ``--config`` file: the API key as a double-quoted scalar."""
    key = str(api_key)
    if any(ord(ch) < 32 for ch in key):
        raise SglangError("the API key has a control character")
    quoted = key.replace("\\", "\\\\").replace('"', '\\"')
    return ['api-key: "%s"' % quoted]
