#!/usr/bin/python
# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_health
short_description: Read-only health probe of a host's NVIDIA or AMD GPUs
version_added: 0.1.0
description:
  - Queries the GPU management tool of the host and reports inventory, per-GPU health,
    the GPU/NIC topology and a list of problems. It never changes the host.
  - "NVIDIA: runs C(nvidia-smi -q -x), C(nvidia-smi topo -m) and, where the XML has no NVLink
    state, C(nvidia-smi nvlink -s)."
  - "AMD: runs C(amd-smi static --json), C(amd-smi metric --json), C(amd-smi version --json),
    C(amd-smi topology --json) and C(amd-smi process --json); on hosts without C(amd-smi) it
    falls back to C(rocm-smi --showallinfo --json), which also supplies the GPU link types when
    C(amd-smi topology) is unavailable."
  - A tool that is missing, fails (for example when the driver is not loaded) or prints
    output that cannot be parsed makes the result unhealthy with a problem that quotes the
    tool's own message. Values a tool does not report are returned as V(null) (unknown),
    never guessed.
  - Expectations (O(expected_gpu_count), O(expected_link_type), O(require_fabric_completed),
    O(min_memory_mib), O(min_driver_version)) become critical problems when they do not
    hold, and also when they cannot be checked because the value is unknown.
author:
  - gpufleet.serving contributors (@gpufleet)
options:
  vendor:
    description:
      - Which GPU vendor's tools to use.
      - V(auto) uses C(nvidia-smi) when present, else C(amd-smi), else C(rocm-smi).
    type: str
    choices: [auto, nvidia, amd]
    default: auto
  fail_on_unhealthy:
    description:
      - Fail the task when any critical problem is found. The failure message names the
        problems and the result still carries every fact.
    type: bool
    default: false
  expected_gpu_count:
    description:
      - Number of GPUs the host must show. A different count is a critical
        V(gpu_count_mismatch) problem.
    type: int
  expected_link_type:
    description:
      - Link type every GPU pair must have in the topology matrix, for example V(NV18) for
        an 8-GPU NVSwitch system or V(XGMI) for AMD Instinct platforms. Compared without
        regard to case. A different or unknown link is a critical V(link_type_mismatch).
    type: str
  require_fabric_completed:
    description:
      - Require every GPU's fabric (NVLink/NVSwitch fabric manager registration, reported
        by Hopper and Blackwell GPUs) to be in state C(Completed) with status C(Success).
        Otherwise, or if the state is unknown, each GPU gets a critical
        V(fabric_not_completed) problem.
    type: bool
    default: false
  min_memory_mib:
    description:
      - Minimum total memory per GPU in MiB. Less, or unknown, is a critical
        V(memory_below_minimum) problem.
    type: int
  min_driver_version:
    description:
      - Minimum driver version (dotted, for example V(570.133.20) for NVIDIA or the amdgpu
        driver version for AMD). Lower, or not comparable, is a critical
        V(driver_below_minimum) problem.
    type: str
  command_timeout:
    description:
      - Seconds each tool invocation may run before it is stopped (through the C(timeout)
        utility when the host has it). A hung tool is then reported as failed. V(0)
        disables the limit.
    type: int
    default: 120
notes:
  - "Problem codes: V(tool_missing), V(tool_failed) (critical for the main query, warning for
    the auxiliary topology/NVLink/metric queries), V(no_gpus), V(gpu_records_missing),
    V(gpu_count_mismatch), V(ecc_uncorrectable) (critical for errors since driver load,
    warning for lifetime-only errors), V(row_remap_pending), V(row_remap_failure),
    V(retired_pages_pending), V(nvlink_down), V(fabric_not_completed), V(fabric_unhealthy)
    (warning), V(link_type_mismatch), V(memory_below_minimum), V(driver_below_minimum),
    V(pcie_link_degraded) (warning), V(mig_enabled) (warning), V(gpu_in_use) (warning),
    V(xml_unparseable) (warning) and V(internal_error)."
  - When C(nvidia-smi -q -x) prints XML that is not well-formed, the GPUs are read from the
    plain C(nvidia-smi) summary table instead (name, bus id, memory, persistence, volatile
    uncorrectable ECC, processes); every other field is then unknown.
  - Only a PCIe link narrower than its maximum is flagged; GPUs lower their PCIe generation
    when idle, so a lower current generation is reported but not treated as a problem.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: The module only reads; it runs fully in check mode and never reports a change.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Probe the GPUs and keep the result
  gpufleet.serving.gpu_health:
  register: gpu

- name: Show the problems
  ansible.builtin.debug:
    var: gpu.problems

- name: Require a healthy 8x B300 HGX node before serving
  gpufleet.serving.gpu_health:
    vendor: nvidia
    expected_gpu_count: 8
    expected_link_type: NV18
    min_memory_mib: 260000
    min_driver_version: "580.65.06"
    fail_on_unhealthy: true

- name: Require a completed NVLink fabric on a GB300 tray
  gpufleet.serving.gpu_health:
    expected_gpu_count: 4
    require_fabric_completed: true
    fail_on_unhealthy: true

- name: Check an 8x MI355X node
  gpufleet.serving.gpu_health:
    vendor: amd
    expected_gpu_count: 8
    expected_link_type: XGMI
  register: amd_gpu
"""

RETURN = r"""
changed:
  description: Always V(false); the module only reads.
  returned: always
  type: bool
  sample: false
healthy:
  description: V(true) if and only if no problem has severity V(critical).
  returned: always
  type: bool
  sample: true
vendor:
  description: GPU vendor probed, V(nvidia), V(amd) or V(unknown) when no tool was found.
  returned: always
  type: str
  sample: nvidia
tool:
  description: Main tool used (V(nvidia-smi), V(amd-smi) or V(rocm-smi)); V(null) if none was found.
  returned: always
  type: str
  sample: nvidia-smi
gpu_count:
  description: Number of GPUs the tool returned records for; V(null) when no tool was found.
  returned: always
  type: int
  sample: 8
attached_gpus:
  description: GPU count that nvidia-smi itself reports (C(attached_gpus)); V(null) for AMD or when unknown.
  returned: always
  type: int
  sample: 8
driver_version:
  description: NVIDIA driver version or amdgpu driver version; V(null) when unknown.
  returned: always
  type: str
  sample: 535.54.03
cuda_version:
  description: CUDA version reported by nvidia-smi; V(null) for AMD or when unknown.
  returned: always
  type: str
  sample: "12.2"
rocm_version:
  description: ROCm version reported by C(amd-smi version); V(null) for NVIDIA or when unknown.
  returned: always
  type: str
  sample: 6.4.1
gpus:
  description: One entry per GPU, in the tool's index order. Unknown values are V(null).
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: GPU index as the tool numbers it.
      type: int
      sample: 0
    name:
      description: Product name.
      type: str
      sample: NVIDIA A100-SXM4-80GB
    uuid:
      description: GPU UUID (for C(rocm-smi), its unique ID).
      type: str
      sample: GPU-513536b6-7d19-9063-b049-1e69664bb298
    pci_bus_id:
      description: PCI bus ID.
      type: str
      sample: 00000000:01:00.0
    memory_total_mib:
      description: Total device memory in MiB.
      type: int
      sample: 81920
    memory_used_mib:
      description: Used device memory in MiB.
      type: int
      sample: 50
    persistence_mode:
      description: V(enabled) or V(disabled) (NVIDIA only).
      type: str
      sample: enabled
    ecc:
      description: ECC mode and error counts.
      type: dict
      contains:
        mode:
          description: Current ECC mode, V(enabled) or V(disabled).
          type: str
        volatile_uncorrectable:
          description: Uncorrectable errors since the driver loaded.
          type: int
        aggregate_uncorrectable:
          description: Uncorrectable errors over the GPU's lifetime.
          type: int
        volatile_correctable:
          description: Correctable errors since the driver loaded.
          type: int
        aggregate_correctable:
          description: Correctable errors over the GPU's lifetime.
          type: int
    retired_pages:
      description: Page retirement (pre-Ampere NVIDIA memory repair).
      type: dict
      contains:
        single_bit:
          description: Pages retired for multiple single-bit errors.
          type: int
        double_bit:
          description: Pages retired for double-bit errors.
          type: int
        pending:
          description: Whether a retirement waits for a reset.
          type: bool
    row_remap:
      description: Row remapping (Ampere and later NVIDIA memory repair).
      type: dict
      contains:
        correctable:
          description: Rows remapped for correctable errors.
          type: int
        uncorrectable:
          description: Rows remapped for uncorrectable errors.
          type: int
        pending:
          description: Whether a remap waits for a GPU reset.
          type: bool
        failure:
          description: Whether a remap failed.
          type: bool
    temperature_c:
      description: GPU temperature in degrees Celsius (AMD - hotspot, else edge).
      type: float
      sample: 27.0
    power_draw_w:
      description: Power draw in watts.
      type: float
      sample: 67.03
    pcie:
      description: PCIe link generation and width, current and maximum.
      type: dict
      contains:
        current_gen:
          description: Current PCIe generation.
          type: int
        max_gen:
          description: Maximum PCIe generation.
          type: int
        current_width:
          description: Current link width (lanes).
          type: int
        max_width:
          description: Maximum link width (lanes).
          type: int
    nvlinks:
      description: NVLink links; V(null) when unknown (AMD, or no NVLink data).
      type: list
      elements: dict
      contains:
        link:
          description: Link number.
          type: int
        state:
          description: V(up), V(down) or V(unknown).
          type: str
        speed_gbps:
          description: Link speed in GB/s when up.
          type: float
    nvlink_source:
      description: Where the NVLink data came from.
      type: str
      sample: nvidia-smi nvlink -s
    fabric:
      description: NVLink fabric registration (Hopper/Blackwell; V(null) fields elsewhere).
      type: dict
      contains:
        state:
          description: Fabric state, for example C(Completed), C(In Progress), C(Not Started).
          type: str
        status:
          description: Fabric status, for example C(Success).
          type: str
        clique_id:
          description: Fabric clique ID.
          type: str
        cluster_uuid:
          description: Fabric cluster UUID.
          type: str
        health:
          description: Fabric health fields as the tool names them (for example C(summary), C(bandwidth)).
          type: dict
    mig:
      description: MIG mode.
      type: dict
      contains:
        current:
          description: Current MIG mode, V(enabled) or V(disabled).
          type: str
        pending:
          description: Pending MIG mode.
          type: str
        devices:
          description: Number of MIG devices listed.
          type: int
    processes:
      description: Processes using the GPU; V(null) when unknown.
      type: list
      elements: dict
      contains:
        pid:
          description: Process ID.
          type: int
        type:
          description: Process type (C(C) compute, C(G) graphics, C(C+G)).
          type: str
        name:
          description: Process name.
          type: str
        used_memory_mib:
          description: GPU memory used by the process in MiB.
          type: int
        gpu_instance_id:
          description: MIG GPU instance.
          type: int
        compute_instance_id:
          description: MIG compute instance.
          type: int
topology:
  description: GPU and NIC topology.
  returned: always
  type: dict
  contains:
    available:
      description: Whether a topology could be read.
      type: bool
    source:
      description: Command the topology came from.
      type: str
      sample: nvidia-smi topo -m
    devices:
      description: Matrix columns in order (C(GPU0) ..., C(NIC0) ... or C(mlx5_0) ...).
      type: list
      elements: str
    matrix:
      description: Link type between every pair of devices, C(X) for self (for example C(NV18), C(PIX), C(SYS), C(XGMI)).
      type: dict
      sample: {"GPU0": {"GPU0": "X", "GPU1": "NV18", "NIC0": "PIX"}}
    gpu_links:
      description: GPU-to-GPU part of the matrix, self excluded.
      type: dict
      sample: {"GPU0": {"GPU1": "NV18"}}
    nics:
      description: NIC column to device name (C(NIC0) -> C(mlx5_0)); V(null) values where the NIC legend does not say.
      type: dict
      sample: {"NIC0": "mlx5_0"}
    affinity:
      description: Per GPU C(cpu_affinity), C(numa_affinity) and C(gpu_numa_id) (V(null) when not shown).
      type: dict
      sample: {"GPU0": {"cpu_affinity": "0-63", "numa_affinity": "0", "gpu_numa_id": null}}
    legend:
      description: Link type legend printed by the tool.
      type: dict
    warnings:
      description: What could not be read from the topology output.
      type: list
      elements: str
problems:
  description: Problems found. Critical ones make the host unhealthy.
  returned: always
  type: list
  elements: dict
  contains:
    severity:
      description: V(critical) or V(warning).
      type: str
      sample: critical
    gpu:
      description: GPU index the problem concerns, V(null) for host-wide problems.
      type: int
      sample: 0
    code:
      description: Stable problem code (see the notes).
      type: str
      sample: ecc_uncorrectable
    message:
      description: Human-readable explanation, quoting the tool's own message where there is one.
      type: str
commands:
  description: Commands that were run, with their exit codes.
  returned: always
  type: list
  elements: dict
  contains:
    argv:
      description: Command line as a list.
      type: list
      elements: str
    rc:
      description: Exit code.
      type: int
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.serving.plugins.module_utils._gpu_health import summary_message
from ansible_collections.gpufleet.serving.plugins.module_utils._gpu_probe import probe

_ROCM_BIN_DIRS = ["/opt/rocm/bin", "/usr/local/bin", "/usr/bin"]


def run_module(module):
    """Probe the GPUs with the module's own command helpers and exit."""

    def which(name):
        return module.get_bin_path(name, opt_dirs=_ROCM_BIN_DIRS)

    def run(argv):
        return module.run_command(argv, check_rc=False)

    result = probe(module.params, which, run)
    if module.params["fail_on_unhealthy"] and not result["healthy"]:
        module.fail_json(msg=summary_message(result["problems"]), **result)
    module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            vendor=dict(type="str", default="auto", choices=["auto", "nvidia", "amd"]),
            fail_on_unhealthy=dict(type="bool", default=False),
            expected_gpu_count=dict(type="int"),
            expected_link_type=dict(type="str"),
            require_fabric_completed=dict(type="bool", default=False),
            min_memory_mib=dict(type="int"),
            min_driver_version=dict(type="str"),
            command_timeout=dict(type="int", default=120),
        ),
        supports_check_mode=True,
    )
    run_module(module)


if __name__ == "__main__":
    main()
