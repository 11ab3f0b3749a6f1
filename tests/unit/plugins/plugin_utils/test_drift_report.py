# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The drift report's logic: events of real drift check runs in, per-host findings and the verdict out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible.executor.task_result import censor_result
from ansible_collections.gpufleet.serving.plugins.plugin_utils import _drift_report as dr

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "drift_report"
RUN = {"run_id": "run-1", "started_at": "2026-12-03T07:25:30Z", "generated_at": "2026-12-03T07:25:53Z",
       "playbook": "drift_check.yml", "check_mode": True}
A = "c653372e19388aceffc19952790716821b5b715f"
B = "b337336195b3bca70ff5feb396cd8a0cbe139abc"


def replay(name):
    collector = dr.DriftCollector()
    for line in (FIXTURES / name).read_text().splitlines():
        event = json.loads(line)
        collector.host(event["host"])
        collector.record(event["event"], event["host"], event["task"], event["result"], event["ignore_errors"])
    return collector


def reports_of(collector):
    return {name: dr.host_report(raw, RUN) for name, raw in collector.hosts.items()}


def task(name="t", action="ansible.builtin.copy", role=None, tags=(), no_log=False, handler=False):
    return {"name": name, "action": action, "role": role, "tags": list(tags), "no_log": no_log, "handler": handler}


def test_clean_run_reports_nothing():
    reports = reports_of(replay("clean_run.jsonl"))
    assert sorted(reports) == ["drift-1", "drift-2"]
    for report in reports.values():
        assert report["status"] == "clean"
        assert report["changes"] == report["problems"] == report["failed"] == []
    summary = dr.summarize(reports, RUN, complete=True)
    assert summary["clean"] is True
    assert summary["message"] == "no drift: 2 host(s) clean"
    assert summary["totals"] == {"hosts": 2, "clean": 2, "drifted": 0, "unhealthy": 0, "unreachable": 0}


def test_drifted_run_names_exactly_the_hand_made_changes():
    reports = reports_of(replay("drifted_run.jsonl"))
    one, two = reports["drift-1"], reports["drift-2"]

    # drift-1: the package upgraded past its pin (its version and its dropped hold), and the GPU fault.
    assert one["status"] == "drifted, unhealthy"
    assert [(c["stage"], c["module"], c["kind"], c["item"]) for c in one["changes"]] == [
        ("nvidia_driver", "apt", "package", None),
        ("nvidia_driver", "dpkg_selections", "package hold", "nvidia-modprobe=580.95.05-1"),
    ]
    assert "DOWNGRADED:\n  nvidia-modprobe\n" in one["changes"][0]["diff"]
    # preflight and the drift check's own probe both ran gpu_health: the fault is named once.
    assert [(p["stage"], p["module"], p["problems"]) for p in one["problems"]] == [
        ("preflight", "gpu_health",
         ["[ecc_uncorrectable] GPU 3: 3 uncorrectable ECC error(s) since the last driver load (aggregate: 3)"]),
    ]
    assert [(f["stage"], f["module"]) for f in one["failed"]] == [("preflight", "fail")]
    assert "ecc_uncorrectable: GPU 3" in one["failed"][0]["msg"]

    # drift-2: the edited modules-load file (and the restart it would cause), and the moved `current`.
    assert two["status"] == "drifted"
    assert [(c["stage"], c["module"], c["kind"], c.get("handler", False)) for c in two["changes"]] == [
        ("nvidia_driver", "template", "file", False),
        ("checkpoint", "checkpoint_promote", "served revision", False),
        ("nvidia_driver", "systemd_service", "service", True),
    ]
    template_diff = two["changes"][0]["diff"]
    assert "-nvidia_uvm" in template_diff
    assert "+++ /etc/modules-load.d/gpufleet-nvidia.conf (as the role writes it)" in template_diff
    assert "ansible-local-" not in template_diff
    promote_diff = two["changes"][1]["diff"]
    assert "-current -> revisions/%s" % B in promote_diff and "+current -> revisions/%s" % A in promote_diff
    assert two["problems"] == two["failed"] == []


def test_drifted_run_verdict_and_markdown():
    reports = reports_of(replay("drifted_run.jsonl"))
    summary = dr.summarize(reports, dict(RUN, report_dir="/r"), complete=True)
    assert summary["clean"] is False
    assert summary["message"].splitlines() == [
        "2 of 2 host(s) not clean (report: /r):",
        "  drift-1: drifted, unhealthy - 2 change(s), 1 problem(s), 1 failed task(s)",
        "  drift-2: drifted - 3 change(s), 0 problem(s), 0 failed task(s)",
    ]
    text = dr.summary_markdown(summary, reports)
    assert "| drift-1 | drifted, unhealthy | 2 | 1 | 1 |" in text
    assert "**served revision** `/srv/models/gpufleet-test--tiny-kimi`: checkpoint / Make the verified revision current" in text
    assert "(handler)" in text
    # Noise stays out: not a single unchanged or skipped task is named.
    assert "Read the installed Hub client" not in text and "gather" not in text.lower()


SECRET = "s3cr3t-canary-token"


def test_no_log_results_are_named_without_values():
    collector = dr.DriftCollector()
    raw = {"changed": True, "dest": "/etc/secret.env", "msg": SECRET, "_ansible_no_log": True,
           "diff": {"before": "TOKEN=old\n", "after": "TOKEN=%s\n" % SECRET}}
    collector.record("ok", "h", task("Write the key", no_log=True, tags=["vllm"]), censor_result(raw))
    # A loop whose items are hidden keeps its shape but loses the labels.
    loop = {"changed": True, "results": [censor_result(dict(raw, item=SECRET, _ansible_item_label=SECRET))]}
    collector.record("ok", "h", task("Write keys", tags=["vllm"]), loop)
    # A failure of a no_log task: the message is hidden too.
    collector.record("failed", "h", task("Log in", action="ansible.builtin.uri", no_log=True), censor_result(dict(raw, failed=True)))
    # Defensive: a task marked no_log whose result was not censored by core.
    collector.record("ok", "h", task("Raw", no_log=True), dict(raw, _ansible_no_log=False))
    report = dr.host_report(collector.hosts["h"], RUN)
    dumped = json.dumps(report) + dr.host_markdown(report)
    assert SECRET not in dumped and "TOKEN=" not in dumped and "/etc/secret.env" not in dumped
    assert [c["task"] for c in report["changes"]] == ["Write the key", "Write keys", "Raw"]
    assert all(c["hidden"] and c["diff"] is None and c["item"] is None for c in report["changes"])
    assert report["failed"] == [dict(stage="play", role=None, task="Log in", module="uri", item=None, msg=dr.HIDDEN, hidden=True)]


def test_noise_ignored_failures_and_unreachable_hosts():
    collector = dr.DriftCollector()
    collector.record("ok", "a", task(), {"changed": False, "diff": {"before": "x", "after": "x"}})
    collector.record("skipped", "a", task(), {"skipped": True, "changed": False})
    collector.record("failed", "a", task(action="ansible.builtin.command"), {"failed": True, "msg": "non-zero"}, ignore_errors=True)
    collector.record("ok", "a", task(), {"changed": False, "healthy": True, "problems": []})
    collector.record("unreachable", "b", task(), {"unreachable": True, "msg": "ssh: connect to host b port 22: No route to host"})
    reports = reports_of(collector)
    assert reports["a"]["status"] == "clean"
    assert reports["b"]["status"] == "unreachable" and reports["b"]["reachable"] is False
    summary = dr.summarize(reports, RUN, complete=True)
    assert summary["clean"] is False
    assert summary["message"].splitlines()[1:] == ["  b: unreachable"]
    assert summary["totals"]["unreachable"] == 1


def test_failed_probe_is_reported_by_its_problems_only():
    collector = dr.DriftCollector()
    result = {"failed": True, "msg": "2 problems", "healthy": False, "problems": ["missing shard", "size differs"]}
    collector.record("failed", "h", task("Verify", action="gpufleet.serving.checkpoint_verify", tags=["checkpoint"]), result)
    collector.record("ok", "h", task("Probe", action="gpufleet.serving.checkpoint_verify"), {"changed": False, "healthy": False, "problems": []})
    report = dr.host_report(collector.hosts["h"], RUN)
    assert report["failed"] == []
    assert [p["problems"] for p in report["problems"]] == [["missing shard", "size differs"], ["healthy: false, no problem given"]]
    assert report["counts"] == {"changes": 0, "problems": 3, "failed": 0}


def test_loop_items_changed_and_failed():
    collector = dr.DriftCollector()
    result = {"changed": True, "failed": True, "msg": "One or more items failed", "results": [
        {"changed": True, "item": {"name": "a"}, "_ansible_item_label": "a", "diff": {"before": "1\n", "after": "2\n"}},
        {"changed": False, "item": "b"},
        {"failed": True, "item": "c", "msg": "boom"},
    ]}
    collector.record("failed", "h", task("Loop", action="ansible.builtin.lineinfile", tags=["nvidia_driver"]), result)
    report = dr.host_report(collector.hosts["h"], RUN)
    assert [(c["item"], c["kind"]) for c in report["changes"]] == [("a", "file")]
    assert [(f["item"], f["msg"]) for f in report["failed"]] == [("c", "boom")]


@pytest.mark.parametrize(("diff", "expected"), [
    (None, None),
    ({"before": "a\n", "after": "a\n"}, None),
    ({"prepared": "The following packages will be upgraded:\n  x\n"}, "The following packages will be upgraded:\n  x"),
    ({"before": "a\n", "after": "b\n", "before_header": "/etc/f"},
     "--- /etc/f\n+++ after\n@@ -1 +1 @@\n-a\n+b"),
    ([{"before": {"state": "absent"}, "after": {"state": "directory"}, "before_header": "/d", "after_header": "/d"}],
     '--- /d\n+++ /d\n@@ -1,3 +1,3 @@\n {\n-  "state": "absent"\n+  "state": "directory"\n }'),
])
def test_render_diff(diff, expected):
    assert dr.render_diff(diff) == expected


def test_problem_text_and_kind():
    assert dr.problem_text({"severity": "critical", "gpu": 0, "code": "gpu_missing", "message": "not found"}) == "[gpu_missing] GPU 0: not found"
    assert dr.problem_text({"code": "fabric", "gpu": None, "message": "not Completed"}) == "[fabric] not Completed"
    assert dr.problem_text("plain") == "plain"
    assert dr.change_kind("template", "/etc/systemd/system/vllm.service") == "unit file"
    assert dr.change_kind("template", "/etc/default/vllm") == "file"
    assert dr.change_kind("something_new", None) == "other"
    assert dr.stage_of(["always", "verify"], None) == "verify"
    assert dr.stage_of([], "gpufleet.serving.vllm") == "vllm"


def test_a_template_in_check_mode_is_named_by_the_file_its_diff_names():
    # What the template module returns in check mode: changed, a diff, no dest.
    result = {"changed": True, "diff": [{"before_header": "/etc/systemd/system/vllm.service", "before": "a\n",
                                         "after_header": "/tmp/ansible-local-1/tmpx/vllm.service.j2", "after": "b\n"}]}
    target = dr.change_target(result)
    assert target == "/etc/systemd/system/vllm.service"
    assert dr.change_kind("template", target) == "unit file"
    assert dr.change_target({"changed": True, "diff": {"before": "x", "after": "y"}}) is None


def test_report_dir_resolution():
    assert dr.resolve_report_dir("/srv/r", {"AWX_ISOLATED_DATA_DIR": "/a"}, "/cwd") == "/srv/r"
    assert dr.resolve_report_dir("rel", {}, "/cwd") == "/cwd/rel"
    assert dr.resolve_report_dir("", {"AWX_ISOLATED_DATA_DIR": "/pdd/artifacts/x"}, "/cwd") == "/pdd/artifacts/x/drift_report"
    assert dr.resolve_report_dir("", {}, "/cwd") == "/cwd/reports/drift"


def test_files_are_this_runs_and_only_this_runs(tmp_path):
    run = dict(RUN, report_dir=str(tmp_path))
    (tmp_path / "hosts").mkdir()
    (tmp_path / "hosts" / "retired-host.json").write_text("{}")
    collector = replay("drifted_run.jsonl")
    summary = dr.write_reports(collector, run, complete=False)
    assert sorted(p.name for p in (tmp_path / "hosts").iterdir()) == ["drift-1.json", "drift-1.md", "drift-2.json", "drift-2.md"]
    assert json.loads((tmp_path / "hosts" / "drift-2.json").read_text())["schema"] == dr.HOST_SCHEMA
    assert dr.read_summary(run) == summary
    with pytest.raises(ValueError, match="belongs to run run-1, not to this run run-2"):
        dr.read_summary(dict(run, run_id="run-2"))
    with pytest.raises(ValueError, match="wrote no report in this run"):
        dr.read_summary(dict(run, report_dir=str(tmp_path / "nowhere")))
    assert dr.safe_name("rack 1/node:2") == "rack_1_node_2"


def test_no_host_is_not_clean():
    assert dr.verdict({"hosts": {}}) == {"clean": False, "message": "the drift check saw no host: nothing was checked"}
