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
    ("consumer", ("ib_port_degraded", "--port", "mlx5_0", "--rate", "200")),
    ("b300", ("ib_port_degraded", "--port", "mlx5_9", "--rate", "200")),
    ("b300", ("ib_port_degraded", "--port", "mlx5_0", "--rate", "800")),  # not lower than the NIC's rate
    ("mi355x", ("ib_port_degraded", "--port", "mlx5_0", "--rate", "400")),
    ("consumer", ("collective_slow", "--percent", "50")),
    ("consumer", ("collective_wrong",)),
    ("consumer", ("nccl_init_failure",)),
    ("b300", ("imex_peer_not_ready", "--node", "0")),
    ("mi355x", ("imex_peer_not_ready", "--node", "0")),
    ("gb300", ("imex_peer_not_ready", "--node", "1")),  # the host alone is node 0
])
def test_faults_without_meaning_are_refused(fresh, profile, args):
    host = fresh(profile)
    result = host.admin("fault", "add", *args)
    assert result.returncode == 3 and "gpusim:" in result.stderr
    assert host.admin("fault", "list").stdout == ""


def test_fault_needs_its_target(fresh):
    result = fresh("b300").admin("fault", "add", "gpu_missing")
    assert result.returncode == 2 and "--gpu" in result.stderr


@pytest.mark.parametrize("profile,args,needed", [
    ("b300", ("collective_slow",), "--percent"),
    ("b300", ("ib_port_degraded", "--port", "mlx5_0"), "--rate"),
    ("gb300", ("imex_peer_not_ready",), "--node"),
    ("b300", ("collective_slow", "--percent", "0"), "--percent"),
    ("b300", ("collective_slow", "--percent", "100"), "--percent"),
    ("b300", ("collective_slow", "--percent", "fifty"), "--percent"),
    ("b300", ("ib_port_degraded", "--port", "mlx5_0", "--rate", "200G"), "--rate"),
    ("b300", ("ib_port_degraded", "--port", "mlx5_0", "--rate", "0"), "--rate"),
    ("gb300", ("imex_peer_not_ready", "--node", "-1"), "--node"),
    ("gb300", ("imex_peer_not_ready", "--node", "one"), "--node"),
    ("b300", ("gpu_missing", "--gpu", "x"), "--gpu"),
])
def test_bad_or_missing_option_values_exit_2(fresh, profile, args, needed):
    host = fresh(profile)
    result = host.admin("fault", "add", *args)
    assert result.returncode == 2 and needed in result.stderr and "Traceback" not in result.stderr
    assert host.admin("fault", "list").stdout == ""


# --------------------------------------------------------------------------- interconnect faults

def perf_rows(text):
    return [line for line in text.splitlines() if re.match(r"^ *\d+ +\d+ +\w+ +\w+ +-?\d+ ", line)]


def busbw_at_largest(host, gpus, *extra):
    """Out-of-place and in-place busbw of the last (largest) row."""
    result = host.run("all_reduce_perf", "-b", "1G", "-e", "8G", "-f", "2", "-g", str(gpus), *extra)
    assert result.returncode == 0, result.stdout + result.stderr
    cells = perf_rows(result.stdout)[-1].split()
    return float(cells[7]), float(cells[11])


@pytest.mark.parametrize("profile,gpus,percent", [("b300", 8, 40), ("gb300", 4, 75), ("mi355x", 8, 10)])
def test_collective_slow_scales_peak_busbw(fresh, profile, gpus, percent):
    clean = busbw_at_largest(fresh(profile, hostname="clean"), gpus)
    slow = busbw_at_largest(fresh(profile, hostname="slow").fault("collective_slow", "--percent", str(percent)), gpus)
    for clean_bw, slow_bw in zip(clean, slow):
        # the fixed latency keeps the ratio a hair above P% even at 8 GiB
        assert slow_bw / clean_bw == pytest.approx(percent / 100, abs=0.005)


def test_collective_slow_combines_with_nvlink_down(fresh):
    clean = busbw_at_largest(fresh("b300", hostname="clean"), 8)[0]
    host = fresh("b300", hostname="both").fault("collective_slow", "--percent", "50")
    host.fault("nvlink_down", "--gpu", "2", "--link", "5")
    assert busbw_at_largest(host, 8)[0] / clean == pytest.approx(0.5 * 17 / 18, abs=0.005)


@pytest.mark.parametrize("profile,flavor_width", [("b300", 5), ("mi355x", 6)])
def test_collective_wrong_rows_summary_and_exit_status(fresh, profile, flavor_width):
    host = fresh(profile).fault("collective_wrong")
    result = host.run("all_reduce_perf", "-b", "256K", "-e", "8M", "-f", "2", "-g", "8")
    rows = perf_rows(result.stdout)
    wrong = {int(r.split()[0]): (r.split()[8], r.split()[12]) for r in rows}
    assert wrong == {size: (str(size >> 20),) * 2 if size >= 1 << 20 else ("0", "0")
                     for size in (256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20)}
    # the out-of-place #wrong cell keeps its column: right-aligned in the flavour's width, like a clean row
    assert rows[-1].endswith(" " * (flavor_width - 1) + "8")
    failed = 8  # four sizes from 1 MiB up, out-of-place and in-place
    assert f"# Out of bounds values : {failed} FAILED" in result.stdout.splitlines()
    assert "# Out of bounds values : 0 OK" not in result.stdout
    assert result.returncode == 1  # nccl-tests <= 2.17.2 and rccl-tests: exit(EXIT_FAILURE)


def test_collective_wrong_counts_large_sizes_with_g_format(fresh):
    host = fresh("b300").fault("collective_wrong")
    row = perf_rows(host.run("all_reduce_perf", "-b", "8G", "-e", "8G", "-g", "8").stdout)[0]
    assert row.split()[8] == row.split()[12] == "8192"


def test_collective_wrong_is_invisible_without_a_check(fresh):
    host = fresh("b300").fault("collective_wrong")
    result = host.run("all_reduce_perf", "-b", "1M", "-e", "4M", "-f", "2", "-g", "8", "-c", "0")
    assert all(r.split()[8] == r.split()[12] == "N/A" for r in perf_rows(result.stdout))
    assert "# Out of bounds values : 0 OK" in result.stdout and result.returncode == 0


NCCL_FAILURE = ("{host}: Test NCCL failure {site} 'unhandled system error (run with NCCL_DEBUG=INFO for details) / '")
NCCL_WARN = re.compile(r"^node-(b300|mi355x):(\d+):\d+ \[0\] misc/socket\.cc:\d+ NCCL WARN socketStartConnect: "
                       r"[Cc]onnect to 10\.0\.0\.2<29500> failed : Software caused connection abort$")


@pytest.mark.parametrize("profile,site,frames", [
    ("b300", "common.cu:411", ["common.cu:609", "all_reduce.cu:90", "common.cu:642", "common.cu:1202", "common.cu:937"]),
    ("mi355x", "common.cu:504", ["common.cu:718", "all_reduce.cu:91", "common.cu:827", "common.cu:1373",
                                 "common.cu:1164"]),
])
def test_nccl_init_failure_after_the_column_titles(healthy, fresh, gpusim, profile, site, frames):
    args = ("-b", "8", "-e", "128M", "-f", "2", "-g", "8")
    clean = healthy[profile].run("all_reduce_perf", *args).stdout.splitlines()
    host = fresh(profile).fault("nccl_init_failure")
    result = host.run("all_reduce_perf", *args, env={"NCCL_DEBUG": ""})
    lines = result.stdout.splitlines()
    titles = clean.index(gpusim.render_perf_header_rows("rccl" if profile == "mi355x" else "nccl")[2]) + 1
    assert lines[:titles] == clean[:titles]  # every header line, up to and including the column titles
    pid = re.search(r"Pid +(\d+)", result.stdout).group(1)
    assert lines[titles:] == [NCCL_FAILURE.format(host=f"node-{profile}", site=site)] + [
        f" .. node-{profile} pid {pid}: Test failure {frame}" for frame in frames]
    assert not perf_rows(result.stdout) and "NCCL WARN" not in result.stdout + result.stderr
    assert result.returncode == 3  # testNcclError, returned by main()'s TESTCHECK(run())


@pytest.mark.parametrize("profile", ["b300", "mi355x"])
@pytest.mark.parametrize("level", ["WARN", "INFO", "info"])
def test_nccl_init_failure_warns_only_with_nccl_debug(fresh, profile, level):
    host = fresh(profile).fault("nccl_init_failure")
    result = host.run("all_reduce_perf", "-g", "8", env={"NCCL_DEBUG": level})
    lines = result.stdout.splitlines()
    failure = next(i for i, line in enumerate(lines) if " Test NCCL failure " in line)
    warn = NCCL_WARN.match(lines[failure - 1])
    assert warn and lines[failure - 2] == ""  # NCCL starts every WARN with a newline
    assert f"Pid {int(warn.group(2)):6d} on" in result.stdout  # the same process as the rank lines
    assert result.returncode == 3
    quiet = host.run("all_reduce_perf", "-g", "8", env={"NCCL_DEBUG": "VERSION"})
    assert "NCCL WARN" not in quiet.stdout and quiet.returncode == 3


def test_nccl_init_failure_with_one_gpu_per_thread_fails_in_the_collective_call(fresh):
    host = fresh("b300").fault("nccl_init_failure")
    lines = host.run("all_reduce_perf", "-g", "1").stdout.splitlines()
    failure = next(i for i, line in enumerate(lines) if " Test NCCL failure " in line)
    assert " Test NCCL failure all_reduce.cu:44 " in lines[failure]
    assert [line.rsplit(" ", 1)[1] for line in lines[failure + 1:]] == [
        "common.cu:400", "common.cu:609", "all_reduce.cu:90", "common.cu:642", "common.cu:1202", "common.cu:937"]


def test_ib_port_degraded(fresh):
    host = fresh("b300")
    devinfo = host.run("ibv_devinfo", "-v").stdout
    host.fault("ib_port_degraded", "--port", "mlx5_2", "--rate", "200")
    assert "\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 200\n" in host.run("ibstat", "mlx5_2").stdout
    everything = host.run("ibstat").stdout
    assert everything.count("Rate: 200\n") == 1 and everything.count("Rate: 800\n") == 7
    assert "State: Down" not in everything
    assert host.run("ibv_devinfo", "-v").stdout == devinfo  # the port is still PORT_ACTIVE / LINK_UP


def test_ib_port_down_wins_over_degraded(fresh):
    host = fresh("mi355x").fault("ib_port_degraded", "--port", "mlx5_1", "--rate", "200")
    host.fault("ib_port_down", "--port", "mlx5_1")
    assert "\t\tState: Down\n\t\tPhysical state: Polling\n\t\tRate: 10\n" in host.run("ibstat", "mlx5_1").stdout


PEERS = ("--imex-peers", "10.1.0.1,10.1.0.2,10.1.0.3")


def imex_table(host):
    """(node statuses, matrix rows as lists, domain state) of nvidia-imex-ctl -N."""
    lines = host.run("nvidia-imex-ctl", "-N").stdout.splitlines()
    statuses = [re.split(r"\s+-\s+", line)[2] for line in lines if line.startswith("Node #")]
    start = next(i for i, line in enumerate(lines) if line.startswith(" Nodes From\\To"))
    matrix = [line.split()[1:] for line in lines[start + 1:start + 1 + len(statuses)]]
    return statuses, matrix, lines[-1]


def test_imex_peer_not_ready(fresh):
    host = fresh("gb300", *PEERS, "--ip", "10.1.0.1", hostname="tray-0").fault("imex_peer_not_ready", "--node", "1")
    statuses, matrix, domain = imex_table(host)
    assert statuses == ["READY", "UNAVAILABLE", "READY"]
    assert matrix == [["C", "I", "C"], ["I", "I", "I"], ["C", "I", "C"]]
    assert domain == "Domain State: DEGRADED"
    assert host.run("nvidia-imex-ctl", "-q").stdout == "READY\n"  # the local daemon (node 0) is fine


def test_imex_peer_not_ready_on_its_own_host(fresh):
    peer = fresh("gb300", *PEERS, "--ip", "10.1.0.2", hostname="tray-1").fault("imex_peer_not_ready", "--node", "1")
    assert peer.run("nvidia-imex-ctl", "-q").stdout == "UNAVAILABLE\n"
    by_index = fresh("gb300", *PEERS, "--node-index", "2", hostname="tray-2").fault("imex_peer_not_ready", "--node", "2")
    assert by_index.run("nvidia-imex-ctl", "-q").stdout == "UNAVAILABLE\n"  # no --ip: host.json's node_index


def test_imex_domain_down_when_no_node_is_ready(fresh):
    host = fresh("gb300", "--ip", "10.9.9.9", hostname="tray-x").fault("imex_peer_not_ready", "--node", "0")
    statuses, matrix, domain = imex_table(host)
    assert (statuses, matrix, domain) == (["UNAVAILABLE"], [["I"]], "Domain State: DOWN")


def test_imex_peer_not_ready_beyond_peers_on_a_driver_managed_host(fresh):
    # Its peers come from nodes_config.cfg, written later by the deployment: accepted, and no effect until then.
    host = fresh("gb300", "--bare", hostname="tray-b")
    assert host.admin("fault", "add", "imex_peer_not_ready", "--node", "7").returncode == 0
