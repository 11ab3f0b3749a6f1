"""Each injected fault changes exactly what the real fault changes, and nothing else."""

import json
import re
import xml.etree.ElementTree as ET

import pytest
from gpusim_helpers import fixture_text


def xml_gpus(host):
    return ET.fromstring(host.run("nvidia-smi", "-q", "-x").stdout)


def test_gpu_missing_drops_the_gpu_everywhere(fresh):
    host = fresh("b300").fault("gpu_missing", "--gpu", "3")
    lines = host.run("nvidia-smi", "-L").stdout.splitlines()
    assert len(lines) == 7 and [line.split(":")[0] for line in lines] == [f"GPU {i}" for i in range(7)]
    root = xml_gpus(host)
    assert root.findtext("attached_gpus") == "7" and len(root.findall("gpu")) == 7
    assert "00000000:70:00.0" not in {g.get("id") for g in root.findall("gpu")}
    header = host.run("nvidia-smi", "topo", "-m").stdout.splitlines()[0].split("\t")
    assert [c for c in header if re.fullmatch(r"GPU\d+", c)] == [f"GPU{i}" for i in range(7)]
    assert host.run("nvidia-smi", "--query-gpu=count", "--format=csv,noheader").stdout.splitlines()[0] == "7"
    assert len(host.run("nvidia-smi", "nvlink", "-s").stdout.splitlines()) == 7 * 19
    table = host.run("nvidia-smi").stdout
    assert table.count("NVIDIA B300 SXM6 AC") == 7 and "00000000:70:00.0" not in table


def test_gpu_missing_on_amd(fresh):
    host = fresh("mi355x").fault("gpu_missing", "--gpu", "0")
    listed = json.loads(host.run("amd-smi", "list", "--json").stdout)
    assert [g["gpu"] for g in listed] == list(range(7)) and listed[0]["bdf"] == "0000:15:00.0"
    assert len([k for k in json.loads(host.run("rocm-smi", "--showallinfo", "--json").stdout) if k != "system"]) == 7


def test_ecc_uncorrectable_counts_volatile_and_aggregate(fresh):
    host = fresh("b300").fault("ecc_uncorrectable", "--gpu", "2")
    gpus = xml_gpus(host).findall("gpu")
    for index, gpu in enumerate(gpus):
        counts = [int(gpu.findtext(f"ecc_errors/{scope}/{kind}")) for scope in ("volatile", "aggregate")
                  for kind in ("dram_uncorrectable", "sram_uncorrectable_parity")]
        assert all(c > 0 for c in counts) if index == 2 else counts == [0, 0, 0, 0]
    csv = host.run("nvidia-smi", "--query-gpu=ecc.errors.uncorrected.volatile.total",
                   "--format=csv,noheader").stdout.split()
    assert csv[2] != "0" and set(csv[:2] + csv[3:]) == {"0"}
    row = host.run("nvidia-smi").stdout.splitlines()[8 + 4 * 2]
    assert re.search(r"Off \|\s+3 \|$", row)


def test_ecc_uncorrectable_on_amd(fresh):
    host = fresh("mi355x").fault("ecc_uncorrectable", "--gpu", "1")
    metric = json.loads(host.run("amd-smi", "metric", "--ecc", "--json").stdout)
    assert [m["ecc"]["total_uncorrectable_count"] > 0 for m in metric] == [i == 1 for i in range(8)]


def test_row_remap_pending(fresh):
    host = fresh("b300").fault("row_remap_pending", "--gpu", "5")
    gpus = xml_gpus(host).findall("gpu")
    expected = ["Yes" if i == 5 else "No" for i in range(8)]
    assert [g.findtext("remapped_rows/remapped_row_pending") for g in gpus] == expected
    assert int(gpus[5].findtext("remapped_rows/remapped_row_unc")) > 0
    text = host.run("nvidia-smi", "-q", "-i", "5").stdout.splitlines()
    remap = text.index("    Remapped Rows")
    assert text[remap + 3] == "        Pending                           : Yes"


def test_row_remap_pending_on_amd_is_a_pending_bad_page(fresh):
    host = fresh("mi355x").fault("row_remap_pending", "--gpu", "4")
    pages = json.loads(host.run("amd-smi", "bad-pages", "--json").stdout)
    assert [("status" in p) for p in pages] == [i == 4 for i in range(8)]
    assert pages[4]["status"] == "PENDING"


def test_nvlink_down(fresh):
    host = fresh("b300").fault("nvlink_down", "--gpu", "1", "--link", "7")
    lines = host.run("nvidia-smi", "nvlink", "-s").stdout.splitlines()
    gpu1 = lines[19:38]
    assert gpu1[8] == "\t Link 7: <inactive>"
    assert sum("<inactive>" in line for line in lines) == 1
    rows = host.run("nvidia-smi", "topo", "-m").stdout.splitlines()
    assert rows[1].split("\t")[2] == "NV17" and rows[1].split("\t")[3] == "NV18"


def test_fabric_in_progress(fresh):
    host = fresh("gb300").fault("fabric_in_progress")
    for gpu in xml_gpus(host).findall("gpu"):
        assert gpu.findtext("fabric/state") == "In Progress"
        assert gpu.findtext("fabric/status") == "N/A" and gpu.findtext("fabric/cliqueId") == "N/A"


@pytest.mark.parametrize("args", [(), ("-L",), ("-q", "-x"), ("topo", "-m"), ("nvlink", "-s")])
def test_driver_not_loaded_nvidia(fresh, args):
    host = fresh("b300").fault("driver_not_loaded")
    result = host.run("nvidia-smi", *args)
    assert result.returncode == 9
    assert result.stdout == fixture_text("nvidia-smi/nvidia-smi_error_failed-communicate-driver_A100-gcp.txt") \
        .splitlines()[1] + "\n"


def test_driver_not_loaded_amd(fresh):
    host = fresh("mi355x").fault("driver_not_loaded")
    amd = host.run("amd-smi", "static")
    assert amd.returncode != 0 and "driver not initialized (amdgpu not found in modules)" in amd.stderr
    rocm = host.run("rocm-smi", "--showallinfo")
    assert rocm.returncode != 0 and rocm.stderr.endswith("ERROR:root:Driver not initialized "
                                                         "(amdgpu not found in modules)\n")
    assert host.run("all_reduce_perf", "-g", "8").returncode != 0


def test_ib_port_down(fresh):
    host = fresh("b300").fault("ib_port_down", "--port", "mlx5_3")
    down = host.run("ibstat", "mlx5_3").stdout
    assert "\t\tState: Down\n\t\tPhysical state: Polling\n\t\tRate: 10\n" in down
    assert "State: Active" in host.run("ibstat", "mlx5_2").stdout
    assert host.run("ibstat").stdout.count("State: Down") == 1
    devinfo = host.run("ibv_devinfo", "-d", "mlx5_3", "-v").stdout
    assert "PORT_DOWN (1)" in devinfo and "POLLING (2)" in devinfo


def test_clear_and_list(fresh):
    host = fresh("b300").fault("gpu_missing", "--gpu", "0").fault("driver_not_loaded")
    assert [json.loads(line)["kind"] for line in host.admin("fault", "list").stdout.splitlines()] == [
        "gpu_missing", "driver_not_loaded"]
    host.admin("fault", "clear", "driver_not_loaded")
    assert len(host.run("nvidia-smi", "-L").stdout.splitlines()) == 7
    host.admin("fault", "clear")
    assert len(host.run("nvidia-smi", "-L").stdout.splitlines()) == 8


@pytest.mark.parametrize("profile,args", [
    ("consumer", ("nvlink_down", "--gpu", "0", "--link", "0")),
    ("consumer", ("fabric_in_progress",)),
    ("consumer", ("ib_port_down", "--port", "mlx5_0")),
    ("mi355x", ("nvlink_down", "--gpu", "0", "--link", "0")),
    ("mi355x", ("fabric_in_progress",)),
    ("b300", ("gpu_missing", "--gpu", "8")),
    ("b300", ("nvlink_down", "--gpu", "0", "--link", "18")),
    ("b300", ("ib_port_down", "--port", "mlx5_9")),
])
def test_faults_without_meaning_are_refused(fresh, profile, args):
    host = fresh(profile)
    result = host.admin("fault", "add", *args)
    assert result.returncode == 3 and "gpusim:" in result.stderr
    assert host.admin("fault", "list").stdout == ""


def test_fault_needs_its_target(fresh):
    result = fresh("b300").admin("fault", "add", "gpu_missing")
    assert result.returncode == 2 and "--gpu" in result.stderr
