# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_health results as Prometheus textfile metrics."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from ansible_collections.gpufleet.serving.plugins.module_utils._metrics import gpu_health_metrics
from ansible_collections.gpufleet.serving.plugins.module_utils._profiles import get_profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_preflight import probe_sim_host  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gpusim"))
from gpusim_helpers import install  # noqa: E402

# One sample line of the text exposition format: name, optional labels, a number.
SAMPLE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? -?[0-9.e+]+$')


def render(tmp_path, *fault):
    host = install(tmp_path / "b300", "b300", "node-b300")
    if fault:
        host.fault(*fault)
    return gpu_health_metrics(probe_sim_host(host, get_profile("hardware", "b300")))


def samples(text):
    return [line for line in text.splitlines() if not line.startswith("#")]


def test_healthy_node_exports_a_valid_exposition(tmp_path):
    text = render(tmp_path)
    assert text.endswith("\n")
    assert all(SAMPLE.match(line) for line in samples(text)), samples(text)
    assert "gpufleet_gpu_health_healthy 1" in text
    assert "gpufleet_gpu_health_gpus 8" in text
    assert 'gpufleet_gpu_health_problems{severity="critical"} 0' in text
    assert len([s for s in samples(text) if s.startswith("gpufleet_gpu_health_fabric_completed{")]) == 8
    assert "gpufleet_gpu_health_problem{" not in text
    # Volatile readings stay out, so a converged node's file does not change between runs.
    assert "temperature" not in text and "power" not in text


def test_a_fault_shows_as_a_problem_sample_and_a_counter(tmp_path):
    text = render(tmp_path, "row_remap_pending", "--gpu", "5")
    assert "gpufleet_gpu_health_healthy 0" in text
    assert 'gpufleet_gpu_health_problem{code="row_remap_pending",gpu="5",severity="critical"} 1' in text
    pending = [s for s in samples(text) if s.startswith("gpufleet_gpu_health_row_remap_pending{")]
    assert [s.rsplit(" ", 1)[1] for s in pending] == ["0"] * 5 + ["1"] + ["0"] * 2


def test_the_same_health_renders_the_same_text(tmp_path):
    assert render(tmp_path / "a") == render(tmp_path / "b")


def test_unknown_values_are_left_out_not_guessed():
    text = gpu_health_metrics({"healthy": False, "gpu_count": None, "gpus": [{"index": 0}], "problems": [
        {"severity": "critical", "code": "tool_failed", "gpu": None, "message": "x"}]})
    assert "gpufleet_gpu_health_gpus" not in text
    assert "memory_total_bytes" not in text
    assert 'gpufleet_gpu_health_problem{code="tool_failed",gpu="",severity="critical"} 1' in text
