#!/usr/bin/env python3
# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Write what lists the profiles and the stages from the data (plugins/module_utils/_profiles.py,
_deploy_stages.py): the roles' argument-spec choices and the docs' hardware table.

Argument specs are static YAML that ansible-core reads before any code of ours runs, so their
choices cannot be computed at run time; this tool writes them, and `--check` (run by `make lint`
and a unit test) fails when one is out of step. A new hardware target is one entry in
HARDWARE_PROFILES and one run of this tool (docs/development.md#adding-a-hardware-target).

    tools/profiles_sync.py           rewrite the out-of-step files
    tools/profiles_sync.py --check   only say which are out of step (exit 1)
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / ".collections"))

from ansible_collections.gpufleet.serving.plugins.module_utils._deploy_stages import DEPLOY_STAGES  # noqa: E402
from ansible_collections.gpufleet.serving.plugins.module_utils._profiles import (  # noqa: E402
    DRIVER_STAGES,
    HARDWARE_PROFILES,
    profile_names,
    profiles_of_vendor,
)

# The driver roles take only their vendor's profiles.
VENDOR_OF_ROLE = {stage: vendor for vendor, stage in DRIVER_STAGES.items() if stage}
TABLE_BEGIN = "<!-- profiles_sync: hardware table -->"
TABLE_END = "<!-- /profiles_sync -->"
# Rows of the docs' hardware table: (label, key or function of the profile).
TABLE_ROWS = (
    ("vendor", "vendor"),
    ("architecture", "architecture"),
    ("gpu_model_pattern", "gpu_model_pattern"),
    ("gpu_count (per node)", "gpu_count"),
    ("min_memory_mib_per_gpu", "min_memory_mib_per_gpu"),
    ("gpu_link_type", "gpu_link_type"),
    ("fabric_must_be_completed", "fabric_must_be_completed"),
    ("min_driver_version / min_rocm_version", lambda p: p["min_driver_version"] or p["min_rocm_version"]),
    ("tensor / pipeline parallel", lambda p: "%d / %d" % (p["tensor_parallel_size"], p["pipeline_parallel_size"])),
    ("nodes_per_replica", "nodes_per_replica"),
    ("driver stage", lambda p: DRIVER_STAGES[p["vendor"]]),
    ("interconnect_ib_ports / min rate (Gb/s)", lambda p: "%s / %s" % (p["interconnect_ib_ports"], p["interconnect_ib_min_rate_gbps"])),
    ("interconnect_imex", "interconnect_imex"),
    ("busbw minimum intra / multi-node (GB/s)",
     lambda p: "%s / %s" % (p["interconnect_intra_node_min_busbw_gbps"], p["interconnect_multi_node_min_busbw_gbps"])),
    ("vllm_runtime_default", "vllm_runtime_default"),
    ("container_gpu_access", "container_gpu_access"),
    ("vllm_image_repository", lambda p: "`%s`" % p["vllm_image_repository"]),
)


def choices_for(role, option):
    """The choices an option must offer, or None when the tool does not own them."""
    if option.endswith("_hardware_profile"):
        vendor = VENDOR_OF_ROLE.get(role)
        return profiles_of_vendor(vendor) if vendor else profile_names("hardware")
    if option.endswith("_model_profile"):
        return profile_names("model")
    if option == "plan_stages":
        return list(DEPLOY_STAGES)
    return None


def sync_argument_specs(text, role):
    """The argument spec with every owned option's `choices:` line rewritten."""
    lines = text.splitlines(keepends=True)
    keys = []  # (indent, key) of every mapping key that opens a block, in file order
    for index, line in enumerate(lines):
        match = re.match(r"^( *)([a-z0-9_]+):\s*$", line)
        if match:
            keys.append((len(match.group(1)), match.group(2)))
            continue
        choice = re.match(r"^( +)choices: \[.*\]\s*$", line)
        if choice:
            # The option is the nearest key above that is less indented than its choices.
            option = next((key for indent, key in reversed(keys) if indent < len(choice.group(1))), None)
            wanted = choices_for(role, option) if option else None
            if wanted is not None:
                lines[index] = "%schoices: [%s]\n" % (choice.group(1), ", ".join(wanted))
    return "".join(lines)


def _cell(value):
    if value is None:
        return "-"
    if value is True:
        return "yes"
    if value is False:
        return "no"
    return str(value)


def hardware_table():
    names = [name for name in profile_names("hardware") if name != "cpu_sandbox"] + ["cpu_sandbox"]
    rows = ["| key | %s |" % " | ".join(names), "|---|%s" % ("---|" * len(names))]
    for label, key in TABLE_ROWS:
        values = [key(HARDWARE_PROFILES[name]) if callable(key) else HARDWARE_PROFILES[name][key] for name in names]
        rows.append("| %s | %s |" % (label, " | ".join(_cell(value) for value in values)))
    return "\n".join(rows)


def sync_docs(text):
    begin, end = text.find(TABLE_BEGIN), text.find(TABLE_END)
    if begin < 0 or end < begin:
        raise SystemExit("docs/profiles.md: the markers %s ... %s are missing" % (TABLE_BEGIN, TABLE_END))
    return text[:begin] + TABLE_BEGIN + "\n" + hardware_table() + "\n" + text[end:]


def planned_files(repo=REPO):
    """{path: (current text, wanted text)} for every file the tool owns."""
    files = {}
    for spec in sorted((repo / "roles").glob("*/meta/argument_specs.yml")):
        text = spec.read_text()
        files[spec] = (text, sync_argument_specs(text, spec.parent.parent.name))
    docs = repo / "docs" / "profiles.md"
    text = docs.read_text()
    files[docs] = (text, sync_docs(text))
    return files


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report the files that are out of step")
    args = parser.parse_args(argv)
    stale = {path: wanted for path, (current, wanted) in planned_files().items() if current != wanted}
    for path, wanted in stale.items():
        print("%s %s" % ("out of step:" if args.check else "rewrote", path.relative_to(REPO)))
        if not args.check:
            path.write_text(wanted)
    return 1 if (stale and args.check) else 0


if __name__ == "__main__":
    sys.exit(main())
