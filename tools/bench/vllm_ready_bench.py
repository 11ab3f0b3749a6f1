#!/usr/bin/env python3
# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Time to ready of the vllm role's engine: a cold start (empty compile cache) against a warm restart.

On a sandbox host where the role has deployed vllm.service (the molecule/engines scenario's fleet), each
round stops the unit, empties this configuration's compile cache directories (cold) or keeps them
(warm), starts the unit and measures the time until ``/v1/models`` lists the alias, polled on the
host's loopback every 0.25 s, as the role's readiness wait sees it. The cold start is the baseline
measured in the same run; the script prints every round and the ratio warm / cold of the medians.
Nothing is asserted; figures go to docs/benchmarks.md.

    .venv/bin/python tools/bench/vllm_ready_bench.py --fleet vllm --host vllm-node --rounds 2

The host's other load matters (the sandbox shares the controller's cores): run it on a quiet machine
and read the ratio rather than the absolute seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SANDBOX = REPO / "tools" / "sandbox" / "sandbox.py"

# Runs inside the host (python3 of the host, standard library only).
ON_HOST = r"""
import json, os, shlex, subprocess, sys, time, urllib.request
unit, alias, port, cold, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "cold", float(sys.argv[5])
env = {}
for line in open("/etc/gpufleet/vllm/%s.env" % unit.rsplit(".", 1)[0]):
    if "=" in line and not line.startswith("#"):
        key, value = line.rstrip("\n").split("=", 1)
        env[key] = shlex.split(value)[0] if value else ""
subprocess.run(["systemctl", "stop", unit], check=True)
subprocess.run(["systemctl", "reset-failed", unit], check=False)  # back-to-back starts would hit the start limit
caches = [env[k] for k in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "XDG_CACHE_HOME")]
if cold:
    for cache in caches:  # empty them, keep the directories (owner and mode come from the role)
        subprocess.run(["find", cache, "-mindepth", "1", "-delete"], check=True)
size = sum(os.path.getsize(os.path.join(d, f)) for c in caches for d, _, fs in os.walk(c) for f in fs)
start = time.monotonic()
subprocess.run(["systemctl", "start", unit], check=True)
ready = None
while time.monotonic() - start < timeout:
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/v1/models" % port, timeout=2) as answer:
            if alias in [m.get("id") for m in json.load(answer).get("data", [])]:
                ready = time.monotonic() - start
                break
    except OSError:
        pass
    time.sleep(0.25)
print(json.dumps({"ready_s": ready, "cache_bytes_before": size}))
"""


def one_round(args, cold: bool) -> dict:
    argv = [sys.executable, str(SANDBOX), "exec", "--fleet", args.fleet, args.host, "--", "python3", "-c", ON_HOST,
            args.unit, args.alias, str(args.port), "cold" if cold else "warm", str(args.timeout)]
    done = subprocess.run(argv, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"vllm_ready_bench: the round failed on the host: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleet", default="vllm")
    parser.add_argument("--host", default="vllm-node")
    parser.add_argument("--unit", default="vllm.service")
    parser.add_argument("--alias", default="kimi-local")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--rounds", type=int, default=2, help="cold/warm pairs")
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("vllm_ready_bench: needs root (sandbox exec)")
    rows = []
    for index in range(args.rounds):
        for kind in ("cold", "warm"):
            result = one_round(args, cold=kind == "cold")
            rows.append({"round": index + 1, "kind": kind, **result})
            print(f"round {index + 1} {kind:<4} ready in {result['ready_s']:.1f} s "
                  f"(compile cache {result['cache_bytes_before'] / 2**20:.1f} MiB before the start)", flush=True)
    cold = [r["ready_s"] for r in rows if r["kind"] == "cold" and r["ready_s"] is not None]
    warm = [r["ready_s"] for r in rows if r["kind"] == "warm" and r["ready_s"] is not None]
    if not cold or not warm:
        print("some starts never became ready; no ratio", file=sys.stderr)
        return 1
    load = os.getloadavg()
    print(f"machine: {platform.node()}, {os.cpu_count()} cores, load {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}")
    print(f"cold start (empty compile cache, baseline): median {statistics.median(cold):.1f} s over {len(cold)}")
    print(f"warm restart (compile cache kept):           median {statistics.median(warm):.1f} s over {len(warm)}")
    print(f"ratio warm / cold: {statistics.median(warm) / statistics.median(cold):.2f} "
          f"(the warm restart takes {100 * statistics.median(warm) / statistics.median(cold):.0f}% of the cold start)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
