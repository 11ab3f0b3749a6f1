"""ibstat, ibv_devinfo, nvidia-imex-ctl, amd-smi, rocm-smi, all_reduce_perf and the admin commands."""

import json
import os
import re

import pytest
from gpusim_helpers import GPUSIM, fixture_text

PERF_ROW = re.compile(r"^ {0,11}\d+ +\d+ +\w+ +\w+ +-?\d+( +[\d.]+ +[\d.]+ +[\d.]+ +\S+){2}$")


@pytest.mark.parametrize("profile,tools", [
    ("b300", ["nvidia-smi", "ibstat", "ibv_devinfo", "all_reduce_perf"]),
    ("gb300", ["nvidia-smi", "ibstat", "ibv_devinfo", "all_reduce_perf", "nvidia-imex-ctl"]),
    ("mi355x", ["amd-smi", "rocm-smi", "ibstat", "ibv_devinfo", "all_reduce_perf"]),
    ("consumer", ["nvidia-smi"]),
])
def test_tools_and_install_links(healthy, profile, tools):
    import subprocess
    import sys
    listed = subprocess.run([sys.executable, str(GPUSIM), "tools", "--profile", profile], capture_output=True,
                            text=True, check=True).stdout.split()
    assert listed == tools
    bin_dir = healthy[profile].root / "usr" / "bin"
    assert sorted(p.name for p in bin_dir.iterdir()) == sorted(tools)
    assert all(os.readlink(bin_dir / t) == "../local/lib/gpusim/gpusim.py" for t in tools)
    config = json.loads((healthy[profile].root / "etc/gpusim/host.json").read_text())
    assert config == {"profile": profile, "hostname": f"node-{profile}", "node_index": 0}


def test_reinstall_with_other_profile_replaces_links(fresh, tmp_path):
    from gpusim_helpers import install
    install(tmp_path / "h", "mi355x")
    host = install(tmp_path / "h", "consumer")
    assert sorted(p.name for p in (host.root / "usr/bin").iterdir()) == ["nvidia-smi"]


def ibstat_shape(text):
    """Field names with their indentation depth, in ibstat's order."""
    return [(len(line) - len(line.lstrip("\t")), line.strip().split(":")[0]) for line in text.splitlines()
            if not line.startswith("CA '")]


def test_ibstat_fields_and_indentation_match_capture(healthy):
    real = fixture_text("ib/ibstat_CX7_mlx5_10_Down_Polling_redacted.txt").replace("    ", "\t")
    ours = healthy["b300"].run("ibstat").stdout
    blocks = re.split(r"(?m)^(?=CA ')", ours)[1:]
    assert [b.splitlines()[0] for b in blocks] == [f"CA 'mlx5_{i}'" for i in range(8)]
    for block in blocks:
        assert ibstat_shape(block) == ibstat_shape(real)
    assert healthy["b300"].run("ibstat", "-l").stdout.split() == [f"mlx5_{i}" for i in range(8)]
    unknown = healthy["b300"].run("ibstat", "mlx5_99")
    assert unknown.returncode != 0 and "mlx5_99" in unknown.stderr


def test_ibv_devinfo_layout(healthy):
    out = healthy["mi355x"].run("ibv_devinfo").stdout
    blocks = [b for b in out.split("\n\n") if b.strip()]
    assert len(blocks) == 8
    first = blocks[0].splitlines()
    assert first[0] == "hca_id:\tmlx5_0" and first[1] == "\ttransport:\t\t\tInfiniBand (0)"
    assert "\t\tport:\t1" in first and "\t\t\tstate:\t\t\tPORT_ACTIVE (4)" in first
    assert re.search(r"\tnode_guid:\t+([0-9a-f]{4}:){3}[0-9a-f]{4}", blocks[0])
    assert healthy["mi355x"].run("ibv_devinfo", "-l").stdout.startswith("8 HCAs found:\n\tmlx5_0\n")


def test_imex_node_status(fresh):
    host = fresh("gb300", "--imex-peers", "10.1.0.1,10.1.0.2", hostname="tray-0")
    lines = host.run("nvidia-imex-ctl", "-N").stdout.splitlines()
    nodes = [line for line in lines if line.startswith("Node #")]
    assert [re.split(r"\s+-\s+", n)[1] for n in nodes] == ["10.1.0.1", "10.1.0.2"]
    assert all("READY" in n for n in nodes) and lines[-1] == "Domain State: UP"
    alone = fresh("gb300", "--ip", "10.9.9.9", hostname="tray-x").run("nvidia-imex-ctl", "-N", "-H").stdout
    assert "10.9.9.9 (tray-x)" in alone


def test_amd_smi_version_and_list(healthy):
    host = healthy["mi355x"]
    version = host.run("amd-smi", "version").stdout
    assert re.fullmatch(r"AMDSMI Tool: \S+ \| AMDSMI Library version: \S+ \| ROCm version: 7\.\d+\.\d+ \| "
                        r"amdgpu version: \S+ \| amd_hsmp version: N/A\n", version)
    text = host.run("amd-smi", "list").stdout
    assert text.startswith("GPU: 0\n    BDF: 0000:05:00.0\n    UUID: ")
    listed = json.loads(host.run("amd-smi", "list", "--json").stdout)
    assert len(listed) == 8 and set(listed[0]) == {"gpu", "bdf", "uuid", "kfd_id", "node_id", "partition_id"}


def test_amd_smi_static_and_metric_json_mirror_text(healthy):
    host = healthy["mi355x"]
    static = json.loads(host.run("amd-smi", "static", "--json", "-g", "2").stdout)
    assert len(static) == 1 and static[0]["gpu"] == 2
    asic = static[0]["asic"]
    assert (asic["market_name"], asic["device_id"], asic["target_graphics_version"]) == (
        "AMD Instinct MI355X", "0x75a3", "gfx950")
    assert static[0]["vram"]["size"] == {"value": 294896, "unit": "MB"}
    text = host.run("amd-smi", "static", "-g", "2").stdout
    for section, values in static[0].items():
        if section != "gpu":
            assert f"    {section.upper()}:" in text
            for key in values:
                assert f"        {key.upper()}: " in text
    metric = host.run("amd-smi", "metric", "-g", "0").stdout
    for header in ("USAGE:", "POWER:", "TEMPERATURE:", "MEM_USAGE:", "ECC:"):
        assert f"\n    {header}\n" in metric
    assert "        GFX_ACTIVITY: 0 %" in metric and "        SOCKET_POWER: " in metric
    assert host.run("amd-smi", "static", "-g", "8").returncode != 0


def test_rocm_smi_text_and_driver(healthy):
    host = healthy["mi355x"]
    text = host.run("rocm-smi", "--showproductname").stdout
    assert "GPU[0]\t\t: Card series: AMD Instinct MI355X" in text
    assert json.loads(host.run("rocm-smi", "--showdriverversion", "--json").stdout) == {
        "system": {"Driver version": "6.14.14"}}
    system = json.loads(host.run("rocm-smi", "--showallinfo", "--json").stdout)["system"]
    assert system["(Topology) Link type between DRM devices 0 and 7"] == "XGMI"


@pytest.mark.parametrize("profile,fixture", [
    ("b300", "nccl/nccl-tests_all_gather_perf_2node_16xB200_GKE-A4_gIB_wrapper-output.txt"),
    ("gb300", "nccl/nccl-tests_all_gather_perf_2node_16xB200_GKE-A4_gIB_wrapper-output.txt"),
    ("mi355x", "nccl/rccl-tests_all_reduce_perf_8xMI350X_EXCERPT.txt"),
])
def test_all_reduce_perf_layout_and_options(healthy, gpusim, profile, fixture):
    gpus = 4 if profile == "gb300" else 8
    out = healthy[profile].run("all_reduce_perf", "-b", "8", "-e", "128M", "-f", "2", "-g", str(gpus)).stdout
    lines = out.splitlines()
    assert lines[0] == (f"# nThread 1 nGpus {gpus} minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 "
                        "iters: 20 agg iters: 1 validation: 1 graph: 0")
    flavor = "rccl" if profile == "mi355x" else "nccl"
    real = fixture_text(fixture).splitlines()
    start = lines.index(gpusim.render_perf_header_rows(flavor)[0])
    assert lines[start:start + 3] == real[real.index(lines[start]):real.index(lines[start]) + 3]
    rows = [line for line in lines if PERF_ROW.match(line)]
    assert [int(r.split()[0]) for r in rows] == [8 << i for i in range(25)]
    assert all(r.split()[2:5] == ["float", "sum", "-1"] for r in rows)
    devices = [line for line in lines if line.startswith("#  Rank")]
    assert len(devices) == gpus
    avg = float(re.fullmatch(r"# Avg bus bandwidth    : ([\d.]+)", [x for x in lines if "Avg bus" in x][0])[1])
    big_busbw = float(rows[-1].split()[7])
    assert 0 < avg < big_busbw
    assert 200 < big_busbw < 900  # plausible for NVLink5 / XGMI at 128 MiB
    assert out == healthy[profile].run("all_reduce_perf", "-b", "8", "-e", "128M", "-f", "2", "-g",
                                       str(gpus)).stdout  # deterministic


def test_all_reduce_perf_slower_with_a_link_down(fresh):
    def busbw(host):
        rows = host.run("all_reduce_perf", "-b", "1G", "-e", "1G", "-g", "8").stdout.splitlines()
        return float([r for r in rows if PERF_ROW.match(r)][0].split()[7])
    healthy_bw = busbw(fresh("b300", hostname="a"))
    degraded = busbw(fresh("b300", hostname="b").fault("nvlink_down", "--gpu", "0", "--link", "0"))
    assert degraded < healthy_bw


def test_all_reduce_perf_rejects_more_gpus_than_present(healthy):
    result = healthy["gb300"].run("all_reduce_perf", "-g", "8")
    assert result.returncode != 0 and "failure" in result.stderr


def test_tool_not_in_profile_is_not_found(tmp_path):
    from gpusim_helpers import install
    host = install(tmp_path / "c", "consumer")
    (host.root / "usr/bin/ibstat").symlink_to("../local/lib/gpusim/gpusim.py")
    result = host.run("ibstat")
    assert result.returncode == 127
