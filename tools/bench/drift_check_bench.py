"""Benchmark: wall time of a no-op drift_check.yml on 4, 16 and 32 sandbox hosts, recommended vs stock settings.

Boots one sandbox fleet of the largest size (its own fleet and subnet, 10.232.9.0/24), converges it
with the stages that fit 32 hosts on a 2-core controller (preflight, nvidia_driver, checkpoint:
tools/bench/drift_check_converge.yml), then, for each size, times `drift_check.yml --check --diff`
limited to the first N hosts twice in a row: with stock Ansible settings (an empty ansible.cfg) and
with docs/ansible.cfg.recommended. Each run must exit 0 (a no-op check finds no drift). The vllm and
verify stages are skipped (--skip-tags vllm,verify): an engine takes about 2 GB of RSS per host.

Every run starts cold, as the nightly run does: a new ANSIBLE_HOME (no SSH master connection left
from an earlier run) and an empty fact cache. Prints seconds and ratios against the stock run of the
same size, measured in the same session. Not a test: figures vary with the machine; docs/benchmarks.md
keeps them. Run as root from the repository root: `.venv/bin/python tools/bench/drift_check_bench.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
SANDBOX = [PY, str(REPO / "tools" / "sandbox" / "sandbox.py")]
SSH_KEY = "/var/lib/gpufleet-sandbox/ssh/id_ed25519"


def run(argv, env=None, log=None, check=True):
    with open(log, "w") if log else open(os.devnull, "w") as out:
        proc = subprocess.run(argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, check=False)
    if check and proc.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, argv[:4]))} ... exited {proc.returncode}" + (f" (log: {log})" if log else ""))
    return proc.returncode


def fleet_spec(name, count, gateway):
    prefix = gateway.rsplit(".", 1)[0]
    return {
        "name": name,
        "gateway": gateway,
        "vendor_repo": True,
        "model_hub": True,
        "hosts": [{"name": f"{name}-{i:02d}", "address": f"{prefix}.{11 + i}", "profile": "b300"} for i in range(count)],
    }


def write_inventory(work, spec, revision, wheelhouse):
    gw = spec["gateway"].split("/")[0]
    inv = work / "inventory"
    (inv / "group_vars").mkdir(parents=True)
    hosts = {h["name"]: {"ansible_host": h["address"]} for h in spec["hosts"]}
    (inv / "hosts.yml").write_text(json.dumps({"all": {"children": {"b300": {"hosts": hosts}}}}, indent=1))
    group_vars = {
        "ansible_user": "root",
        "ansible_ssh_private_key_file": SSH_KEY,
        "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR",
        "ansible_python_interpreter": "/usr/bin/python3",
        "preflight_require_nvme": False,
        "checkpoint_require_mount": False,
        "drift_converge_model_dir": "/srv/models",
        "nvidia_driver_repo_url": f"http://{gw}:8080/nvidia/cuda/repos/debian12/x86_64/",
        "nvidia_driver_repo_key_url": f"http://{gw}:8080/nvidia/cuda/repos/gpufleet-test-archive-key.asc",
        "deploy_model_profile": "sandbox-tiny",
        "checkpoint_revision": revision,
        "checkpoint_hf_endpoint": f"http://{gw}:8090",
        "checkpoint_license_accepted": True,
        "checkpoint_pip_find_links": "/var/cache/gpufleet-wheels/hub-client",
        "checkpoint_pip_no_index": True,
        "drift_converge_wheelhouse": wheelhouse,
    }
    (inv / "group_vars" / "all.yml").write_text(json.dumps(group_vars, indent=1))
    return inv


def base_env(work, home):
    env = dict(os.environ)
    env.update({
        "PATH": f"{Path(PY).parent}:{env.get('PATH', '')}",
        "ANSIBLE_HOME": str(home),
        "ANSIBLE_LOCAL_TEMP": str(home / "tmp"),
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"),
        "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false",
        "ANSIBLE_ALLOW_EMBEDDED_TEMPLATES": "false",
        "ANSIBLE_NOCOLOR": "1",
        "GPUFLEET_DRIFT_REPORT_DIR": str(work / "report"),
    })
    return env


def close_masters(home):
    """Ends the SSH master connections a run left (ControlPersist), so the next run starts cold."""
    for sock in home.rglob("*"):
        if sock.is_socket():
            subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "dummy"], capture_output=True, check=False)


def timed_check(work, inv, kind, hosts, tag):
    home = work / f"home-{tag}"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir()
    env = base_env(work, home)
    if kind == "stock":
        cfg = work / "stock.cfg"
        cfg.write_text("")
        # Only what drift_check.yml needs to work at all: the report callback.
        env["ANSIBLE_CALLBACKS_ENABLED"] = "gpufleet.serving.drift_report"
    else:
        cfg = work / "recommended.cfg"
        text = (REPO / "docs" / "ansible.cfg.recommended").read_text()
        text = text.replace("~/.cache/gpufleet/facts", str(home / "facts")).replace("~/.ansible/cp", str(home / "cp"))
        cfg.write_text(text)
    env["ANSIBLE_CONFIG"] = str(cfg)
    argv = [str(Path(PY).parent / "ansible-playbook"), "-i", str(inv), str(REPO / "playbooks" / "drift_check.yml"),
            "--check", "--diff", "--skip-tags", "vllm,verify", "--limit", ",".join(hosts)]
    start = time.monotonic()
    rc = run(argv, env=env, log=work / f"check-{tag}.log", check=False)
    elapsed = time.monotonic() - start
    close_masters(home)
    if rc != 0:
        raise SystemExit(f"{kind} drift check on {len(hosts)} hosts exited {rc}, expected 0 on a converged fleet (log: {work}/check-{tag}.log)")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4,16,32")
    parser.add_argument("--gateway", default="10.232.9.1/24")
    parser.add_argument("--fleet", default="driftbench")
    parser.add_argument("--repeat", type=int, default=1, help="timed runs per size and setting (the median is printed)")
    parser.add_argument("--keep", action="store_true", help="leave the fleet running")
    args = parser.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="drift-bench-", dir=REPO / ".tmp" if (REPO / ".tmp").is_dir() else None))
    spec = fleet_spec(args.fleet, max(sizes), args.gateway)
    spec_file = work / "fleet.json"
    spec_file.write_text(json.dumps(spec))
    try:
        print(f"booting {max(sizes)} hosts (fleet {args.fleet}, {args.gateway}); work dir {work}", flush=True)
        run([*SANDBOX, "up", "--spec", str(spec_file)], log=work / "up.log")
        wheels = json.loads(subprocess.run([PY, str(REPO / "tools" / "sandbox" / "hub_client_wheels.py"), "--json"],
                                           capture_output=True, text=True, check=True).stdout.splitlines()[-1])["path"]
        revisions = json.loads(subprocess.run([*SANDBOX, "model-hub", "--fleet", args.fleet, "revisions"],
                                              capture_output=True, text=True, check=True, cwd=REPO).stdout)
        inv = write_inventory(work, spec, revisions["gpufleet-test/tiny-kimi"]["A"], wheels)
        print("converging preflight, nvidia_driver, checkpoint (vllm and verify skipped: ~2 GB RSS per engine)", flush=True)
        start = time.monotonic()
        env = base_env(work, work / "home-converge")
        env["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
        run([str(Path(PY).parent / "ansible-playbook"), "-i", str(inv), str(REPO / "tools" / "bench" / "drift_check_converge.yml")],
            env=env, log=work / "converge.log")
        print(f"converged in {time.monotonic() - start:.0f} s", flush=True)
        names = [h["name"] for h in spec["hosts"]]
        rows = []
        for size in sizes:
            times = {"stock": [], "recommended": []}
            for rep in range(args.repeat):
                # Alternate the order so neither setting always runs second.
                order = ("stock", "recommended") if rep % 2 == 0 else ("recommended", "stock")
                for kind in order:
                    times[kind].append(timed_check(work, inv, kind, names[:size], f"{kind}-{size}-{rep}"))
                    print(f"  {size:>2} hosts {kind:<11} {times[kind][-1]:7.1f} s", flush=True)
            rows.append((size, sorted(times["stock"])[len(times["stock"]) // 2], sorted(times["recommended"])[len(times["recommended"]) // 2]))
        print()
        print(f"{'hosts':>5} {'stock s':>9} {'recommended s':>14} {'recommended/stock':>18} {'speed-up':>9}")
        for size, stock, rec in rows:
            print(f"{size:>5} {stock:>9.1f} {rec:>14.1f} {rec / stock:>18.2f} {stock / rec:>8.2f}x")
    finally:
        if not args.keep:
            run([*SANDBOX, "down", "--spec", str(spec_file)], log=work / "down.log", check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
