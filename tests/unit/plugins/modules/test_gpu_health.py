# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.serving.gpu_health run through its real main().

AnsibleModule.get_bin_path / run_command are replaced by a fake host that answers from the
real captures; module arguments go in through ansible-core's own
``ansible.module_utils.testing.patch_module_args``.  exit_json/fail_json print the result and
exit, so each test reads the JSON the module printed.
"""

from __future__ import annotations

import json

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpufleet.serving.plugins.modules import gpu_health
from gpu_captures import DRIVER_ERROR, DRIVER_NOT_LOADED, NVLINK_GB200, ROCM_MI100, TOPO_H100, a100_xml, read


class FakeHost:
    """Tools present on the fake host and what each command line prints."""

    def __init__(self, tools, answers):
        self.tools = tools
        self.answers = answers
        self.calls = []

    def get_bin_path(self, arg, required=False, opt_dirs=None):  # pylint: disable=unused-argument
        return "/usr/bin/%s" % arg if arg in self.tools else None

    def run_command(self, args, **_kwargs):
        assert isinstance(args, list), "commands must be argv lists, never shell strings"
        self.calls.append(args)
        command = args[4:] if args[0].endswith("/timeout") else args  # timeout -k 5 N <command>
        key = " ".join([command[0].rsplit("/", 1)[-1]] + command[1:])
        answer = self.answers.get(key)
        if answer is None:
            return 127, "", "no fake answer for %s" % key
        return answer


def run_module(monkeypatch, capsys, host, **args):
    # Bound methods set on the class are not re-bound, so the module instance is not passed.
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", host.get_bin_path)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", host.run_command)
    with patch_module_args(args), pytest.raises(SystemExit) as exited:
        gpu_health.main()
    result = json.loads(capsys.readouterr().out)
    return exited.value.code, result


def nvidia_host(xml, topo=None, nvlink=None, tools=("nvidia-smi",)):
    answers = {"nvidia-smi -q -x": xml}
    if topo is not None:
        answers["nvidia-smi topo -m"] = topo
    if nvlink is not None:
        answers["nvidia-smi nvlink -s"] = nvlink
    return FakeHost(set(tools), answers)


def test_healthy_four_gpu_host(monkeypatch, capsys):
    host = nvidia_host((0, a100_xml(gpus=4, mig=False), ""), (0, read(TOPO_H100), ""), (0, read(NVLINK_GB200), ""))
    code, result = run_module(monkeypatch, capsys, host, expected_gpu_count=4, expected_link_type="NV6",
                              min_memory_mib=80000, min_driver_version="535")
    assert code == 0
    assert result["changed"] is False
    assert result["healthy"] is True
    assert result["problems"] == []
    assert (result["vendor"], result["tool"], result["gpu_count"]) == ("nvidia", "nvidia-smi", 4)
    assert (result["driver_version"], result["cuda_version"], result["rocm_version"]) == ("535.54.03", "12.2", None)
    assert result["topology"]["available"] is True
    assert result["topology"]["source"] == "nvidia-smi topo -m"
    assert result["topology"]["gpu_links"]["GPU3"] == {"GPU0": "NV6", "GPU1": "NV6", "GPU2": "NV6"}
    gpu0 = result["gpus"][0]
    assert len(gpu0["nvlinks"]) == 18 and gpu0["nvlink_source"] == "nvidia-smi nvlink -s"
    # The GB200 excerpt lists no GPU 2/3: their NVLink state stays unknown.
    assert result["gpus"][2]["nvlinks"] is None
    assert [call[1:] for call in host.calls] == [["-q", "-x"], ["topo", "-m"], ["nvlink", "-s"]]
    assert [entry["argv"][1:] for entry in result["commands"]] == [["-q", "-x"], ["topo", "-m"], ["nvlink", "-s"]]


def test_real_a100_capture_reports_its_own_problems(monkeypatch, capsys):
    host = nvidia_host((0, read("nvidia-smi/nvidia-smi_-q-x_A100-SXM4-80GB_MIG_535.54.03.xml"), ""),
                       (0, read(TOPO_H100), ""), (0, "", ""))
    code, result = run_module(monkeypatch, capsys, host)
    assert code == 0
    assert result["healthy"] is False
    assert sorted(item["code"] for item in result["problems"]) == ["gpu_records_missing", "mig_enabled"]
    assert result["attached_gpus"] == 4 and result["gpu_count"] == 1


def test_driver_not_loaded(monkeypatch, capsys):
    # nvidia-smi prints the message on stdout and exits 9 when the driver is not loaded.
    host = nvidia_host((9, read(DRIVER_ERROR).split("\n", 1)[1], ""))
    code, result = run_module(monkeypatch, capsys, host, expected_gpu_count=8)
    assert code == 0
    assert result["changed"] is False
    assert result["healthy"] is False
    failed = [item for item in result["problems"] if item["code"] == "tool_failed"]
    assert len(failed) == 1 and failed[0]["severity"] == "critical"
    assert DRIVER_NOT_LOADED in failed[0]["message"]
    assert "(rc 9)" in failed[0]["message"]
    assert any(item["code"] == "gpu_count_mismatch" for item in result["problems"])
    assert result["gpus"] == [] and result["gpu_count"] == 0
    assert len(host.calls) == 1  # no topo/nvlink after the main query failed


def test_driver_not_loaded_fail_on_unhealthy(monkeypatch, capsys):
    host = nvidia_host((9, DRIVER_NOT_LOADED + "\n", ""))
    code, result = run_module(monkeypatch, capsys, host, fail_on_unhealthy=True)
    assert code == 1
    assert result["failed"] is True
    assert result["changed"] is False
    assert "[tool_failed]" in result["msg"] and DRIVER_NOT_LOADED in result["msg"]
    # All facts still come back with the failure.
    assert result["healthy"] is False and result["vendor"] == "nvidia"
    assert "gpus" in result and "topology" in result and "problems" in result


@pytest.mark.parametrize(
    "message",
    [
        "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error",
        "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.  "
        "Reboot the system to recover this GPU",
    ],
)
def test_device_handle_errors_alone(monkeypatch, capsys, message):
    host = nvidia_host((255, message + "\n", ""))
    _code, result = run_module(monkeypatch, capsys, host)
    assert result["healthy"] is False
    assert [item["code"] for item in result["problems"]] == ["tool_failed"]
    assert message.split("  ")[0] in result["problems"][0]["message"]


def test_device_handle_error_next_to_xml_keeps_the_other_gpus(monkeypatch, capsys):
    message = "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error"
    host = nvidia_host((255, message + "\n" + a100_xml(gpus=2, attached=3, mig=False), ""),
                       (0, read(TOPO_H100), ""), (0, "", ""))
    _code, result = run_module(monkeypatch, capsys, host)
    assert result["gpu_count"] == 2
    assert sorted(item["code"] for item in result["problems"]) == ["gpu_records_missing", "tool_failed"]
    assert message in [item for item in result["problems"] if item["code"] == "tool_failed"][0]["message"]


def test_no_devices_found(monkeypatch, capsys):
    host = nvidia_host((6, "No devices were found\n", ""))
    _code, result = run_module(monkeypatch, capsys, host)
    assert result["healthy"] is False
    assert [item["code"] for item in result["problems"]] == ["no_gpus"]
    assert "No devices were found" in result["problems"][0]["message"]


def test_non_xml_output(monkeypatch, capsys):
    host = nvidia_host((0, "this is not xml at all", ""))
    _code, result = run_module(monkeypatch, capsys, host)
    assert result["healthy"] is False
    assert result["problems"][0]["code"] == "tool_failed"
    assert "this is not xml at all" in result["problems"][0]["message"]


def test_truncated_xml_output(monkeypatch, capsys):
    xml = a100_xml(mig=False)
    host = nvidia_host((0, xml[: len(xml) // 3], ""))
    _code, result = run_module(monkeypatch, capsys, host)
    assert result["healthy"] is False
    assert "not well-formed XML" in result["problems"][0]["message"]


def test_no_tool_at_all(monkeypatch, capsys):
    code, result = run_module(monkeypatch, capsys, FakeHost(set(), {}))
    assert code == 0
    assert result["changed"] is False and result["healthy"] is False
    assert result["vendor"] == "unknown" and result["tool"] is None and result["gpu_count"] is None
    assert [item["code"] for item in result["problems"]] == ["tool_missing"]


def test_vendor_nvidia_requested_but_only_amd_tools(monkeypatch, capsys):
    host = FakeHost({"rocm-smi"}, {})
    code, result = run_module(monkeypatch, capsys, host, vendor="nvidia", fail_on_unhealthy=True)
    assert code == 1
    assert "nvidia-smi" in result["msg"] and "[tool_missing]" in result["msg"]


def test_topology_failure_is_a_warning_but_link_expectation_fails_closed(monkeypatch, capsys):
    host = nvidia_host((0, a100_xml(gpus=2, mig=False), ""), (3, "", "topology not supported"), (0, "", ""))
    _code, result = run_module(monkeypatch, capsys, host)
    assert result["healthy"] is True
    assert [(item["severity"], item["code"]) for item in result["problems"]] == [("warning", "tool_failed")]
    assert "topology not supported" in result["problems"][0]["message"]
    _code, result = run_module(monkeypatch, capsys, host, expected_link_type="NV18")
    assert result["healthy"] is False
    assert "link_type_mismatch" in [item["code"] for item in result["problems"]]


def test_check_mode_runs_fully(monkeypatch, capsys):
    host = nvidia_host((0, a100_xml(mig=False), ""), (0, read(TOPO_H100), ""), (0, "", ""))
    code, result = run_module(monkeypatch, capsys, host, _ansible_check_mode=True)
    assert code == 0
    assert result["changed"] is False and result["gpu_count"] == 1
    assert len(host.calls) == 3


def test_timeout_wrapper_when_available(monkeypatch, capsys):
    host = nvidia_host((124, "", ""), tools=("nvidia-smi", "timeout"))
    _code, result = run_module(monkeypatch, capsys, host, command_timeout=30)
    assert host.calls[0][:4] == ["/usr/bin/timeout", "-k", "5", "30"]
    assert host.calls[0][4:] == ["/usr/bin/nvidia-smi", "-q", "-x"]
    assert "timed out after 30 seconds" in result["problems"][0]["message"]
    assert result["commands"][0]["argv"] == ["/usr/bin/nvidia-smi", "-q", "-x"]


def test_rocm_smi_fallback_on_mi100_capture(monkeypatch, capsys):
    host = FakeHost({"rocm-smi"}, {"rocm-smi --showallinfo --json": (0, read(ROCM_MI100), "")})
    code, result = run_module(monkeypatch, capsys, host, expected_gpu_count=4, expected_link_type="XGMI")
    assert code == 0
    assert (result["vendor"], result["tool"], result["gpu_count"]) == ("amd", "rocm-smi", 4)
    assert result["driver_version"] == "6.3.6"
    assert result["cuda_version"] is None
    assert result["topology"]["source"] == "rocm-smi --showallinfo --json"
    assert result["topology"]["affinity"]["GPU0"]["numa_affinity"] == "1"
    # The MI100s are PCIe-linked: the XGMI expectation fails, once per GPU.
    assert [item["code"] for item in result["problems"]] == ["link_type_mismatch"] * 4
    assert result["healthy"] is False


def test_nonzero_rc_with_complete_xml_still_fails_with_facts(monkeypatch, capsys):
    host = nvidia_host((15, a100_xml(mig=False), ""), (0, read(TOPO_H100), ""), (0, "", ""))
    _code, result = run_module(monkeypatch, capsys, host)
    assert result["gpu_count"] == 1 and result["gpus"][0]["memory_total_mib"] == 81920
    assert [item["message"] for item in result["problems"]] == ["nvidia-smi -q -x failed (rc 15): no output"]
