"""Benchmark: time and memory to boot sandbox fleets of 1 (baseline), 8 and 32 mock hosts.

Prints, per fleet size: seconds from `up` to every host running with sshd answering, memory of
all processes of the fleet (PSS, so shared pages are counted once), the drop in the controller's
MemAvailable, and both per host as a ratio to the 1-host baseline measured in the same run.
Run as root: `make bench`. Not a test: figures vary with the machine; docs/benchmarks.md keeps them.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sandboxlib import fleet, rootfs  # noqa: E402
from sandboxlib.spec import generated_fleet  # noqa: E402


def mem_available_kib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def fleet_pss_kib(spec) -> int:
    """PSS of every process under the fleet's systemd-nspawn processes (the hosts' whole trees)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                parents[int(entry.name)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                continue
    roots = {pid for host in spec.hosts for pid in fleet.nspawn_pids(fleet.host_root(spec, host))}
    members = set(roots)
    changed = True
    while changed:
        changed = False
        for pid, ppid in parents.items():
            if ppid in members and pid not in members:
                members.add(pid)
                changed = True
    total = 0
    for pid in members:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


def measure(count: int, gateway: str) -> dict:
    spec = generated_fleet("bench", count, "b300", gateway)
    fleet.down(spec, log=lambda _m: None)
    time.sleep(1)
    before = mem_available_kib()
    start = time.monotonic()
    fleet.up(spec, log=lambda _m: None)
    boot_s = time.monotonic() - start
    time.sleep(3)  # let boot-time jobs finish so memory reflects idle hosts
    result = {
        "hosts": count,
        "boot_s": boot_s,
        "pss_mib": fleet_pss_kib(spec) / 1024,
        "memavail_drop_mib": (before - mem_available_kib()) / 1024,
    }
    fleet.down(spec, log=lambda _m: None)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,8,32", help="fleet sizes; the first is the per-host baseline")
    parser.add_argument("--gateway", default="10.240.0.1/24")
    args = parser.parse_args()
    rootfs.ensure_rootfs(print)
    fleet.ensure_controller_key()
    rows = [measure(int(n), args.gateway) for n in args.sizes.split(",")]
    base = rows[0]
    base_s, base_mib = base["boot_s"] / base["hosts"], base["pss_mib"] / base["hosts"]
    print(f"{'hosts':>5} {'boot s':>8} {'s/host':>7} {'x base':>7} {'PSS MiB':>8} {'MiB/host':>9} {'x base':>7} {'MemAvail drop MiB':>18}")
    for row in rows:
        per_s, per_mib = row["boot_s"] / row["hosts"], row["pss_mib"] / row["hosts"]
        print(f"{row['hosts']:>5} {row['boot_s']:>8.2f} {per_s:>7.2f} {per_s / base_s:>7.2f} {row['pss_mib']:>8.0f} "
              f"{per_mib:>9.1f} {per_mib / base_mib:>7.2f} {row['memavail_drop_mib']:>18.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
