"""Feed the simulator's renderers the values found in real captures and require the same text.

If a renderer's column widths, separators or labels drift from the real tool, these fail.
"""

import json
import re

import pytest
from gpusim_helpers import fixture_text

TABLE = "nvidia-smi/nvidia-smi_table_8xH100-SXM_565.57.01.txt"
TOPO_H100 = "topo/topo_4xH100_NV6_4NIC_PIX_LEGEND-TRUNCATED.txt"
TOPO_DELLA = "topo/topo_2xA100-PCIe_della_SYS_mlx5-columns_tabs.txt"
NVLINK = "nvidia-smi/nvidia-smi_nvlink-s_GB200_EXCERPT.txt"
IBSTAT = "ib/ibstat_CX7_mlx5_10_Down_Polling_redacted.txt"
NCCL = "nccl/nccl-tests_all_gather_perf_2node_16xB200_GKE-A4_gIB_wrapper-output.txt"
RCCL = "nccl/rccl-tests_all_reduce_perf_8xMI350X_EXCERPT.txt"
DRIVER_ERROR = "nvidia-smi/nvidia-smi_error_failed-communicate-driver_A100-gcp.txt"
AMD_STATIC = "rocm/amd-smi_static_MI350X_GPU0_EXCERPT.txt"
ROCM_JSON = "rocm/rocm-smi_json_4xMI100_rocm602_telegraf.json"

TABLE_ROW1 = re.compile(r"^\|\s+(\d+)  (.+?)\s+(On|Off)\s+\|\s+(\S+) (On|Off)\s+\|\s+(\S+) \|$")
TABLE_ROW2 = re.compile(r"^\|\s+(\S+)\s+(\d+C)\s+(P\d+)\s+(\d+W) /\s+(\d+W) \|\s+(\d+MiB) /\s+(\d+MiB) \|"
                        r"\s+(\d+%)\s+(\S+) \|$")


def parse_table_gpus(lines):
    gpus = []
    for pos, line in enumerate(lines):
        first = TABLE_ROW1.match(line)
        if not first:
            continue
        second = TABLE_ROW2.match(lines[pos + 1])
        mig = lines[pos + 2].strip("| ").split()[-1]
        gpus.append({"index": int(first[1]), "name": first[2], "persistence": first[3], "bus_id": first[4],
                     "display_active": first[5], "volatile_ecc": first[6], "fan": second[1], "temp": second[2],
                     "perf": second[3], "power_usage": second[4], "power_cap": second[5],
                     "memory_used": second[6], "memory_total": second[7], "util": second[8],
                     "compute_mode": second[9], "mig_mode": mig})
    return gpus


def test_table_matches_h100_capture_byte_for_byte(gpusim):
    real = fixture_text(TABLE)
    gpus = parse_table_gpus(real.splitlines())
    assert len(gpus) == 8
    ours = gpusim.render_nvsmi_table({"driver_version": "565.57.01", "cuda_version": "12.7"}, gpus)
    assert ours == real


def test_table_rule_under_version_line_uses_plus_joint_on_580(gpusim):
    # 580.95.05 public output (geerlingguy/raspberry-pi-pcie-devices#790) prints '+---' there.
    ours = gpusim.render_nvsmi_table({"driver_version": "580.95.05", "cuda_version": "13.0"}, []).splitlines()
    assert ours[2] == "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"


def parse_topo(text):
    lines = text.splitlines()
    header = lines[0].split()
    devices = [h for h in header if re.fullmatch(r"(GPU|NIC)\d+", h)]
    matrix, affinity = [], []
    for line in lines[1:1 + len(devices)]:
        cells = line.split()
        row = cells[1:1 + len(devices)]
        matrix.append(["X" if c == "X" else c for c in row])
        if cells[0].startswith("GPU"):
            affinity.append(tuple(cells[1 + len(devices):]))
    return devices, matrix, affinity


def test_topo_matches_h100_capture_after_tab_expansion(gpusim):
    real = fixture_text(TOPO_H100)
    devices, matrix, affinity = parse_topo(real)
    ours = gpusim.render_topo_matrix(devices, matrix, affinity, ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"])
    ours_lines = ours.expandtabs().splitlines()
    real_lines = real.splitlines()
    # The capture is cut after the PHB legend line; everything up to there must be identical.
    assert ours_lines[:len(real_lines)] == real_lines


def test_topo_legend_matches_complete_della_legend(gpusim):
    real = fixture_text(TOPO_DELLA)
    legend = real[real.index("Legend:"):]
    assert legend == gpusim.TOPO_LEGEND


def test_topo_uses_tabs_like_the_raw_capture(gpusim):
    # The della capture kept the real TABs: header starts with one, cells are TAB separated.
    raw = fixture_text(TOPO_DELLA).splitlines()
    ours = gpusim.render_topo_matrix(["GPU0", "GPU1"], [["X", "SYS"], ["SYS", "X"]],
                                     [("0-63", "0", "N/A"), ("64-127", "1", "N/A")], []).splitlines()
    assert raw[0].startswith("\tGPU0\tGPU1\t") and ours[0].startswith("\tGPU0\tGPU1\t")
    assert raw[1].startswith("GPU0\t X \tSYS\t") and ours[1].startswith("GPU0\t X \tSYS\t")


def test_nvlink_status_matches_gb200_capture(gpusim):
    real = [line for line in fixture_text(NVLINK).splitlines()[1:] if line != "..."]
    speeds = ["53.125 GB/s"] * 18
    ours = gpusim.render_nvlink_status([
        (0, "NVIDIA GB200", "GPU-d1b93026-6d5b-03bd-3a71-f85b47a61bde", speeds),
        (1, "NVIDIA GB200", "GPU-39ac7bce-e3d6-b426-008e-fa47897c72d5", speeds),
    ]).expandtabs().splitlines()
    assert ours[:len(real)] == real


def test_ibstat_matches_cx7_capture(gpusim):
    real = fixture_text(IBSTAT)
    ca = {"name": "mlx5_10", "ca_type": "MT4129", "firmware": "28.39.1002", "node_guid": "...", "sys_guid": "...",
          "ports": [{"state": "Down", "physical_state": "Polling", "rate": 10, "base_lid": 868, "lmc": 0,
                     "sm_lid": 334, "capability_mask": "0xa751e848", "port_guid": "...",
                     "link_layer": "InfiniBand"}]}
    # The capture was rendered as markdown with 4 spaces per TAB.
    assert gpusim.render_ibstat_ca(ca).replace("\t", "    ") == real


def parse_perf_rows(text):
    rows = []
    for line in text.splitlines():
        cells = line.split()
        if len(cells) == 13 and cells[0].isdigit():
            rows.append((line, cells))
    return rows


@pytest.mark.parametrize("flavor,fixture", [("nccl", NCCL), ("rccl", RCCL)])
def test_perf_table_header_and_rows_match_capture(gpusim, flavor, fixture):
    real = fixture_text(fixture)
    lines = real.splitlines()
    start = next(i for i, line in enumerate(lines) if "out-of-place" in line)
    assert lines[start:start + 3] == gpusim.render_perf_header_rows(flavor)
    rows = parse_perf_rows(real)
    assert rows
    for line, cells in rows:
        results = [(float(cells[5]), float(cells[6]), float(cells[7]), cells[8]),
                   (float(cells[9]), float(cells[10]), float(cells[11]), cells[12])]
        assert gpusim.render_perf_row(flavor, int(cells[0]), int(cells[1]), cells[2], cells[3], int(cells[4]),
                                      results) == line


@pytest.mark.parametrize("fixture", [NCCL, RCCL])
def test_perf_summary_lines_match_capture_style(fixture):
    lines = fixture_text(fixture).splitlines()
    assert "# Out of bounds values : 0 OK" in lines
    assert any(re.fullmatch(r"# Avg bus bandwidth    : [0-9.]+", line) for line in lines)
    assert any(re.match(r"# nThread \d+ nGpus \d+ minBytes \d+ maxBytes \d+ step: \d+\(factor\) warmup iters: \d+ "
                        r"iters: \d+ agg iters: \d+ validation: \d+ graph: \d+$", line) for line in lines)


def test_driver_error_text_is_the_captured_one(gpusim):
    real = fixture_text(DRIVER_ERROR).splitlines()
    assert real[1] + "\n" == gpusim.NVSMI_DRIVER_ERROR


def amd_static_structure(text):
    """[(section, [keys])] of the first GPU block, checking amd-smi's 4/8-space indentation."""
    structure = []
    for line in text.splitlines():
        if line.startswith("GPU: ") and structure:
            break
        if re.fullmatch(r"    [A-Z_]+:", line):
            structure.append((line.strip(" :"), []))
        elif re.match(r"        [A-Z_]+: ", line):
            structure[-1][1].append(line.split(":")[0].strip())
    return structure


def test_amd_static_sections_and_keys_match_mi350x_capture(healthy):
    real = amd_static_structure(fixture_text(AMD_STATIC))
    result = healthy["mi355x"].run("amd-smi", "static", "-g", "0")
    ours = dict(amd_static_structure(result.stdout))
    ours_order = [section for section, _keys in amd_static_structure(result.stdout)]
    real_order = [section for section, _keys in real]
    assert real_order == [s for s in ours_order if s in dict(real)]
    for section, keys in real:
        assert ours[section] == keys, section
    # Sections after RAS were cut from the capture; ours are documented additions.
    assert set(ours) - set(real_order) == {"NUMA", "VRAM"}


def test_rocm_smi_json_uses_the_capture_key_names(healthy):
    real = json.loads(fixture_text(ROCM_JSON))
    ours = json.loads(healthy["mi355x"].run("rocm-smi", "--showallinfo", "--json").stdout)
    assert sorted(ours) == [f"card{i}" for i in range(8)] + ["system"]
    real_keys = {k for k in real["card0"] if not k.isdigit()}  # '0'..'15' are clock levels, per card
    # MI300-class parts report socket power instead of average package power.
    renamed = {"Average Graphics Package Power (W)": "Current Socket Graphics Package Power (W)"}
    for key in real_keys:
        assert renamed.get(key, key) in ours["card0"], key
    assert all(isinstance(v, str) for v in ours["card0"].values())  # rocm-smi prints every value as a string
    for key in real["system"]:
        pattern = re.sub(r"\d+", r"\\d+", re.escape(key))
        assert any(re.fullmatch(pattern, k) for k in ours["system"]), key
