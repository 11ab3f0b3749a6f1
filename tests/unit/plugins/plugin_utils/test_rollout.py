# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout role's decisions: batches as ansible-core makes them, the batch report, restorable states."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.serving.plugins.plugin_utils import _rollout as ro

HOSTS = ["n1", "n2", "n3", "n4", "n5"]
A = "8c23ccc4a5375e1ab9a166b68eeb6dc6ea43f46b"


@pytest.mark.parametrize("serial, batches", [
    ("100%", [HOSTS]),
    (None, [HOSTS]),
    (0, [HOSTS]),
    (1, [[h] for h in HOSTS]),
    ("2", [["n1", "n2"], ["n3", "n4"], ["n5"]]),
    ("40%", [["n1", "n2"], ["n3", "n4"], ["n5"]]),
    ("10%", [[h] for h in HOSTS]),  # int(0.5) is 0: at least one host
    ([1, "50%"], [["n1"], ["n2", "n3"], ["n4", "n5"]]),
    ([1, 2, -1], [["n1"], ["n2", "n3"], ["n4", "n5"]]),
])
def test_batches_are_ansible_cores(serial, batches):
    assert ro.serial_batches(HOSTS, serial) == batches


def test_batches_refuse_what_is_no_size():
    with pytest.raises(ValueError, match="serial 'two'"):
        ro.serial_batches(HOSTS, "two")


@pytest.mark.parametrize("serial", [1, "2", "40%", "10%", "100%", [1, "50%"], [1, 2, -1], [3]])
def test_ansible_core_splits_the_same_way(serial):
    # ansible-core's own batching, on stand-ins for the inventory and the play.
    from types import SimpleNamespace

    from ansible.executor.playbook_executor import PlaybookExecutor

    executor = SimpleNamespace(_inventory=SimpleNamespace(get_hosts=lambda pattern, order=None: list(HOSTS)))
    play = SimpleNamespace(hosts="all", order=None, serial=serial if isinstance(serial, list) else [serial])
    assert ro.serial_batches(HOSTS, serial) == PlaybookExecutor._get_serialized_batches(executor, play)


def test_a_host_lost_without_outcome_is_unreachable_and_stops_the_rollout():
    report = ro.batch_report(HOSTS, 2, active=["n2"], outcomes={"n2": "verified", "n1": ""}, finished=["n2"],
                             started=["n1", "n2"], max_fail_percentage=0)
    assert report["batch"] == ["n1", "n2"] and report["batch_number"] == 1 and report["batches"] == 3
    assert report["lost"] == ["n1"] and report["unreachable"] == ["n1"]
    assert report["not_started"] == ["n3", "n4", "n5"] and report["stop"] is True
    assert {row["host"]: row["outcome"] for row in report["hosts"]} == {
        "n1": "unreachable", "n2": "verified", "n3": "not started", "n4": "not started", "n5": "not started"}
    assert report["lines"][0] == "batch 1 of 3: n1, n2"
    assert "n1: unreachable" in report["lines"]
    assert report["lines"][-1].startswith("stopping the rollout: batch 1 lost 1 of 2 host(s) (n1), more than "
                                          "max_fail_percentage 0; not started: n3, n4, n5")


def test_a_loss_within_the_allowed_share_goes_on():
    report = ro.batch_report(HOSTS, 2, active=["n2"], outcomes={"n2": "deployed"}, finished=["n2"],
                             max_fail_percentage=50)
    assert report["lost"] == ["n1"] and report["stop"] is False
    assert not any(line.startswith("stopping") for line in report["lines"])


def test_the_last_batch_never_stops_anything():
    report = ro.batch_report(["n1", "n2"], "100%", active=["n2"], outcomes={}, finished=[], max_fail_percentage=0)
    assert report["unreachable"] == ["n1"] and report["not_started"] == [] and report["stop"] is False
    assert report["hosts"][1] == {"host": "n2", "batch": 1, "outcome": "not deployed in this run"}


def test_earlier_batches_keep_their_outcomes():
    outcomes = {"n1": "deployed", "n2": "rolled_back", "n3": "verified"}
    report = ro.batch_report(HOSTS, 1, active=["n3"], outcomes=outcomes, finished=["n1", "n2", "n3", "n4"],
                             max_fail_percentage=100)
    assert report["batch"] == ["n3"] and report["batch_number"] == 3
    rows = {row["host"]: (row["batch"], row["outcome"]) for row in report["hosts"]}
    assert rows["n1"] == (1, "deployed") and rows["n2"] == (2, "rolled_back") and rows["n3"] == (3, "verified")
    assert rows["n4"] == (4, "not started")
    assert report["lost"] == [] and report["stop"] is False


def test_a_finished_host_without_outcome_is_not_unreachable():
    # A run limited by tags records nothing, so no outcome; the host still reached its summary.
    report = ro.batch_report(HOSTS, 1, active=["n2"], outcomes={}, finished=["n1", "n2"])
    assert report["hosts"][0] == {"host": "n1", "batch": 1, "outcome": "not deployed in this run"}
    assert report["unreachable"] == []


def test_a_host_lost_before_it_started_is_not_called_unreachable():
    # It failed a task ahead of the rollout (a plan stage) or lost its connection at fact gathering.
    report = ro.batch_report(HOSTS, 2, active=["n2"], outcomes={}, finished=["n2"], started=["n2"],
                             max_fail_percentage=0)
    assert report["hosts"][0]["outcome"] == "failed or unreachable before the deployment"
    assert report["lost"] == ["n1"] and report["unreachable"] == [] and report["stop"] is True


def test_a_failed_host_counts_as_lost_with_its_outcome():
    report = ro.batch_report(HOSTS, 2, active=["n2"], outcomes={"n1": "rollback_failed"}, finished=["n1"],
                             max_fail_percentage=0)
    assert report["lost"] == ["n1"] and report["unreachable"] == [] and report["stop"] is True


def test_the_report_needs_an_active_host_and_a_number():
    with pytest.raises(ValueError, match="no active host"):
        ro.batch_report(HOSTS, 1, active=["elsewhere"], outcomes={}, finished=[])
    with pytest.raises(ValueError, match="max_fail_percentage 'none'"):
        ro.batch_report(HOSTS, 1, active=["n1"], outcomes={}, finished=[], max_fail_percentage="none")


def full_state():
    return {
        "model": "kimi-local", "model_path": "/srv/models/m/current", "revision": A, "vllm_version": "0.32.0",
        "trust_remote_code": False,
        "engine": {"unit": "vllm.service", "unit_file": "/etc/systemd/system/vllm.service", "unit_content": "[Unit]\n",
                   "env_file": "/etc/gpufleet/vllm/vllm.env", "env_content": "A=1\n",
                   "secrets_file": "/etc/gpufleet/vllm/vllm.secrets.env", "secrets_sha256": None,
                   "venv": "/opt/gpufleet/vllm/0.32.0", "url": "http://127.0.0.1:8000", "ready_timeout": 600},
    }


def test_a_full_record_can_be_restored():
    assert ro.restore_problems(full_state()) == []


def test_a_record_of_revision_and_version_only_cannot():
    problems = ro.restore_problems({"model": "kimi-local", "model_path": "/srv/models/m/current", "revision": A,
                                    "vllm_version": "0.32.0"})
    assert len(problems) == 1
    assert problems[0].startswith("the recorded state lacks engine.unit, engine.unit_file, engine.unit_content")
    assert "engine.ready_timeout" in problems[0]


def test_blank_values_and_a_bad_revision_are_named():
    state = full_state()
    state["engine"]["unit_content"] = "  "
    state["engine"]["env_content"] = ""  # an empty environment file is still a recorded one
    state["revision"] = "main"
    problems = ro.restore_problems(state)
    assert problems == ["the recorded state lacks engine.unit_content (recorded before full-state records: a "
                        "verified run of deploy_b300.yml records them)",
                        "the recorded revision 'main' is not a 40-hex commit"]


@pytest.mark.parametrize("state, problem", [(None, "no verified state recorded"),
                                            ([], "the state file does not hold a JSON object")])
def test_no_state_is_no_restore(state, problem):
    assert ro.restore_problems(state) == [problem]


IMAGE = "10.232.14.1:5000/lmsysorg/sglang:v0.5@sha256:" + "0123456789ab" * 5 + "cdef"


def container_state():
    state = full_state()
    del state["vllm_version"]
    state["engine"].update({"name": "sglang", "runtime": "container", "image": IMAGE, "container_engine": "podman",
                            "venv": "", "unit": "sglang.service", "url": "http://127.0.0.1:30000"})
    return state


def test_a_container_record_needs_its_image_and_runtime_not_a_venv():
    assert ro.restore_problems(container_state()) == []
    state = container_state()
    del state["engine"]["container_engine"]
    assert ro.restore_problems(state) == ["the recorded state lacks engine.container_engine (recorded before full-state "
                                          "records: a verified run of deploy_b300.yml records them)"]


def test_a_container_record_with_a_tag_only_image_cannot_be_restored():
    state = container_state()
    state["engine"]["image"] = "lmsysorg/sglang:v0.5"
    assert ro.restore_problems(state) == ["the recorded image 'lmsysorg/sglang:v0.5' is not pinned by digest"]


def test_an_unknown_engine_or_runtime_is_named():
    state = full_state()
    state["engine"].update({"name": "tgi", "runtime": "conda"})
    assert ro.restore_problems(state) == ["the recorded engine 'tgi' is none of vllm, sglang",
                                          "the recorded runtime 'conda' is none of venv, container"]


def test_a_record_from_before_container_engines_is_a_vllm_venv_one():
    assert "name" not in full_state()["engine"]
    assert ro.engine_label(full_state()["engine"], "0.32.0") == "vLLM 0.32.0"


@pytest.mark.parametrize("engine, version, label", [
    ({"name": "sglang", "runtime": "container", "image": IMAGE}, None, "SGLang in lmsysorg/sglang@sha256:0123456789ab"),
    ({"engine": "sglang", "runtime": "container", "image": IMAGE}, None, "SGLang in lmsysorg/sglang@sha256:0123456789ab"),
    ({"runtime": "container", "version": "0.32.0", "image": "vllm/vllm-openai-rocm@sha256:" + "ab" * 32}, None,
     "vLLM 0.32.0 in vllm/vllm-openai-rocm@sha256:abababababab"),
    ({"runtime": "venv", "version": "0.32.0", "image": ""}, None, "vLLM 0.32.0"),
    (None, "0.31.1", "vLLM 0.31.1"),
])
def test_engine_labels(engine, version, label):
    assert ro.engine_label(engine, version) == label
