# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.serving.storage_probe run through its real main() on this machine's own paths.

Nothing is faked: the module reads the real /proc/self/mountinfo, /sys and statvfs of the
test host. Module arguments go in through ansible-core's own
``ansible.module_utils.testing.patch_module_args``; exit_json/fail_json print the result and
exit, so each test reads the JSON the module printed.  Device facts depend on the host, so
only their shape is checked here (test_storage.py covers them on fake sysfs trees).
"""

from __future__ import annotations

import json
import os

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpufleet.serving.plugins.module_utils._storage import TRANSPORTS
from ansible_collections.gpufleet.serving.plugins.modules import storage_probe

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/mountinfo"), reason="needs Linux /proc")

HUGE = 10**18  # 1 EB: more than any disk of the test host


def run_module(capsys, **args):
    with patch_module_args(args), pytest.raises(SystemExit) as exited:
        storage_probe.main()
    result = json.loads(capsys.readouterr().out)
    return exited.value.code, result


def assert_facts(result, path):
    assert result["changed"] is False
    assert result["path"] == path
    assert result["mount_point"] is not None and result["fs_type"]
    assert result["mount_source"] is not None and result["major_minor"]
    assert result["size_bytes"] > 0 and result["free_bytes"] >= 0
    assert result["used_bytes"] >= 0 and result["reserved_bytes"] >= 0
    assert result["size_bytes"] >= result["free_bytes"]
    assert result["transport"] in TRANSPORTS
    assert result["on_nvme"] in (True, False, None)


def test_existing_directory(capsys, tmp_path):
    code, result = run_module(capsys, path=str(tmp_path))
    assert code == 0
    assert_facts(result, str(tmp_path))
    assert result["exists"] is True and result["probed_path"] == str(tmp_path)
    assert result["real_path"] == os.path.realpath(str(tmp_path))
    assert result["real_path"].startswith(result["mount_point"])
    assert result["healthy"] is True and result["problems"] == []
    assert result["required_bytes"] is None and result["enough_space"] is None


def test_enough_space(capsys, tmp_path):
    code, result = run_module(capsys, path=str(tmp_path), required_bytes=1)
    assert code == 0
    assert result["enough_space"] is True and result["healthy"] is True


def test_required_bytes_larger_than_the_disk(capsys, tmp_path):
    code, result = run_module(capsys, path=str(tmp_path), required_bytes=HUGE)
    assert code == 0
    assert_facts(result, str(tmp_path))
    assert result["healthy"] is False and result["enough_space"] is False
    assert [(item["severity"], item["code"]) for item in result["problems"]] == [("critical", "insufficient_space")]
    message = result["problems"][0]["message"]
    assert "{:,} bytes".format(result["free_bytes"]) in message
    assert "1,000,000,000,000,000,000 bytes (1.00 EB / 888.18 PiB)" in message


def test_check_mode_behaves_the_same(capsys, tmp_path):
    _code, normal = run_module(capsys, path=str(tmp_path), required_bytes=HUGE)
    code, checked = run_module(capsys, path=str(tmp_path), required_bytes=HUGE, _ansible_check_mode=True)
    assert code == 0
    for key in ("changed", "healthy", "exists", "probed_path", "mount_point", "fs_type", "device", "transport",
                "on_nvme", "size_bytes", "enough_space"):
        assert checked[key] == normal[key], key
    assert [item["code"] for item in checked["problems"]] == ["insufficient_space"]


def test_missing_path_probes_its_nearest_ancestor(capsys, tmp_path):
    missing = str(tmp_path / "models" / "deepseek-r1")
    code, result = run_module(capsys, path=missing)
    assert code == 0
    assert_facts(result, missing)
    assert result["exists"] is False and result["probed_path"] == str(tmp_path)
    assert [(item["severity"], item["code"]) for item in result["problems"]] == [("warning", "path_missing")]
    assert result["healthy"] is True


def test_fail_on_unhealthy_keeps_the_facts(capsys, tmp_path):
    code, result = run_module(capsys, path=str(tmp_path), required_bytes=HUGE, fail_on_unhealthy=True)
    assert code == 1
    assert result["failed"] is True and result["changed"] is False
    assert result["msg"].startswith("Storage check failed with 1 critical problem(s): [insufficient_space] free space on ")
    assert result["size_bytes"] > 0 and result["mount_point"] is not None and result["healthy"] is False


def test_root_filesystem(capsys):
    code, result = run_module(capsys, path="/")
    assert code == 0
    assert_facts(result, "/")
    assert result["mount_point"] == "/"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"path": "relative/models"}, "path must be absolute"),
        ({"path": "/tmp", "required_bytes": -1}, "required_bytes must not be negative"),
        ({}, "missing required arguments: path"),
    ],
)
def test_invalid_arguments(capsys, args, message):
    code, result = run_module(capsys, **args)
    assert code == 1 and result["failed"] is True
    assert message in result["msg"]
