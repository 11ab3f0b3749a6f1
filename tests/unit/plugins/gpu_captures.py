# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Helpers that read the real captures in tests/fixtures and derive variants from them.

Variants are made by small, named edits of a real capture (never by writing a whole
document by hand), so every test still runs on the tool's real layout.
"""

from __future__ import annotations

import re
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"

A100_XML = "nvidia-smi/nvidia-smi_-q-x_A100-SXM4-80GB_MIG_535.54.03.xml"
DRIVER_ERROR = "nvidia-smi/nvidia-smi_error_failed-communicate-driver_A100-gcp.txt"
NVLINK_GB200 = "nvidia-smi/nvidia-smi_nvlink-s_GB200_EXCERPT.txt"
TOPO_H100 = "topo/topo_4xH100_NV6_4NIC_PIX_LEGEND-TRUNCATED.txt"
TOPO_DELLA = "topo/topo_2xA100-PCIe_della_SYS_mlx5-columns_tabs.txt"
ROCM_MI100 = "rocm/rocm-smi_json_4xMI100_rocm602_telegraf.json"
AMD_STATIC_MI350X = "rocm/amd-smi_static_MI350X_GPU0_EXCERPT.txt"

# The driver-not-loaded message exactly as nvidia-smi prints it (second line of the capture;
# the first line is the poster's '>>> nvidia-smi' prompt).
DRIVER_NOT_LOADED = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)


def read(name):
    return (FIXTURES / name).read_text(encoding="utf-8")


def replace_once(text, old, new):
    assert old in text, "capture no longer contains %r" % old
    return text.replace(old, new, 1)


def a100_xml(gpus=1, attached=None, mig=True):
    """The real A100 capture, optionally with its one <gpu> element repeated ``gpus`` times
    (each copy with a distinct UUID and bus id) and attached_gpus set to match."""
    text = read(A100_XML)
    if not mig:
        text = text.replace("<current_mig>Enabled</current_mig>", "<current_mig>Disabled</current_mig>")
        text = text.replace("<pending_mig>Enabled</pending_mig>", "<pending_mig>Disabled</pending_mig>")
    if gpus != 1:
        match = re.search(r"(?s)    <gpu id=.*?</gpu>\n", text)
        element = match.group(0)
        copies = []
        for number in range(gpus):
            copy = element.replace("GPU-513536b6-7d19-9063-b049-1e69664bb298",
                                   "GPU-513536b6-7d19-9063-b049-1e69664bb2%02d" % number)
            copy = copy.replace("00000000:01:00.0", "00000000:%02X:00.0" % (number + 1))
            copies.append(copy)
        text = text[:match.start()] + "".join(copies) + text[match.end():]
    count = gpus if attached is None else attached
    return replace_once(text, "<attached_gpus>4</attached_gpus>", "<attached_gpus>%d</attached_gpus>" % count)


# Added to tests/fixtures by another engineer (provenance in nvidia-smi/PROVENANCE.md there);
# tests that use it skip when it is absent.
BLACKWELL_590_XML = "nvidia-smi/nvidia-smi_-q-x_RTX-PRO-6000-Blackwell_590.44.01_v13_TRIMMED.xml"


def exists(name):
    return (FIXTURES / name).is_file()
