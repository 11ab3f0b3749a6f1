"""Benchmark: fleet staging against every host downloading from the hub, on 1, 2, 4 and 8 sandbox hosts.

Models a site whose uplink is slower than its backend network. Boots one sandbox fleet of 8 hosts (its
own fleet and subnet, 10.232.41.0/24) and serves a synthetic revision (the tiny model's config,
tokenizer and licence, and SHARDS random shards of SHARD_MB each) from a second sandbox model hub on
the bridge (port 8091, its own state). tc then limits the hub's egress to R (an htb class for its
source port on the bridge) and each host's link to 4R both ways (htb on the host's veth on the
machine's side, and on eth0 inside the host).

For each N and each mode, every host's model directory is emptied and
tools/bench/checkpoint_staging_bench.yml (the checkpoint role) runs on the first N hosts:
- naive: checkpoint_staging false, each host downloads the revision from the hub;
- staged: checkpoint_staging true.
It reads the origin bytes from the hub's request log (bytes sent for file requests), the staging time
(the slowest host's download, from the stamps' download_seconds) and the playbook's wall time, and
prints origin bytes / checkpoint bytes and staging time(N) / staging time(1) for each mode.

Not a test: figures vary with the machine; docs/benchmarks.md keeps them. Run as root from the
repository root, with nothing else using the sandbox:
`.venv/bin/python tools/bench/checkpoint_staging_bench.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
SANDBOX = [PY, str(REPO / "tools" / "sandbox" / "sandbox.py")]
MODELHUB = REPO / "tools" / "modelhub"
SSH_KEY = "/var/lib/gpufleet-sandbox/ssh/id_ed25519"
REPO_ID = "gpufleet-bench/synthetic"
MODEL_DIR = "/srv/models/gpufleet-bench--synthetic"
HUB_PORT = 8091


def run(argv, env=None, log=None, check=True):
    with open(log, "a") if log else open(os.devnull, "w") as out:
        proc = subprocess.run(argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, check=False)
    if check and proc.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, argv[:6]))} ... exited {proc.returncode}" + (f" (log: {log})" if log else ""))
    return proc.returncode


def output(argv):
    return subprocess.run(argv, capture_output=True, text=True, check=True, cwd=REPO).stdout


def build_synthetic_hub(state, shards, shard_bytes, seed=7):
    """A hub state with one repository, REPO_ID, whose revision A is the tiny model plus random shards."""
    sys.path.insert(0, str(MODELHUB))
    import modelhub  # noqa: PLC0415 (tools/modelhub is not a package)
    import tinymodel  # noqa: PLC0415

    with tempfile.TemporaryDirectory(prefix="synthetic-") as scratch:
        files = Path(scratch) / "files"
        tinymodel.build(files, seed=seed, name="synthetic")
        for old in files.glob("model-*.safetensors"):
            old.unlink()
        names = ["model-%05d-of-%05d.safetensors" % (i + 1, shards) for i in range(shards)]
        rng = random.Random(seed)
        for name in names:
            (files / name).write_bytes(rng.randbytes(shard_bytes))
        index = {"metadata": {"total_parameters": shards * shard_bytes // 4, "total_size": shards * shard_bytes},
                 "weight_map": {"layers.%d.weight" % i: name for i, name in enumerate(names)}}
        (files / "model.safetensors.index.json").write_text(json.dumps(index, indent=1) + "\n")
        (files / ".gitattributes").write_text(modelhub.GITATTRIBUTES)
        repo_dir = Path(state) / "repos" / REPO_ID
        record = modelhub.ingest_revision(repo_dir, files, modelhub.RevisionPlan("A", "Synthetic shards for the staging benchmark"), None, 0)
    refs = {"labels": {"A": record["sha"]}, "branches": {"main": record["sha"]}, "tags": {}}
    (repo_dir / "refs.json").write_text(json.dumps(refs, indent=1, sort_keys=True) + "\n")
    return record["sha"]


def fleet_spec(name, count, gateway):
    prefix = gateway.rsplit(".", 1)[0]
    return {"name": name, "gateway": gateway,
            "hosts": [{"name": f"{name}-{i + 1}", "address": f"{prefix}.{11 + i}", "profile": "b300"} for i in range(count)]}


def write_inventory(work, spec, commit, wheelhouse, small_file_bytes):
    gw = spec["gateway"].split("/")[0]
    inv = work / "inventory"
    (inv / "group_vars").mkdir(parents=True)
    hosts = {h["name"]: {"ansible_host": h["address"]} for h in spec["hosts"]}
    (inv / "hosts.yml").write_text(json.dumps({"all": {"children": {"bench": {"hosts": hosts}}}}, indent=1))
    group_vars = {
        "ansible_user": "root",
        "ansible_ssh_private_key_file": SSH_KEY,
        "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR",
        "ansible_python_interpreter": "/usr/bin/python3",
        "checkpoint_model_profile": "sandbox-tiny",
        "checkpoint_repo_id": REPO_ID,
        "checkpoint_revision": commit,
        "checkpoint_require_mount": False,
        "checkpoint_hf_endpoint": f"http://{gw}:{HUB_PORT}",
        "checkpoint_license_accepted": True,
        "checkpoint_pip_find_links": "/var/cache/gpufleet-wheels/hub-client",
        "checkpoint_pip_no_index": True,
        "checkpoint_progress_interval": 2,
        "checkpoint_peer_address": "{{ ansible_host }}",
        "checkpoint_free_space_margin_min_bytes": 0,
        "checkpoint_small_file_bytes": small_file_bytes,
        "bench_wheelhouse": wheelhouse,
    }
    (inv / "group_vars" / "all.yml").write_text(json.dumps(group_vars, indent=1))
    return inv


def ansible_env(work):
    env = dict(os.environ)
    env.update({
        "PATH": f"{Path(PY).parent}:{env.get('PATH', '')}",
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_HOME": str(work / "home"),
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"),
        "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false",
        "ANSIBLE_ALLOW_EMBEDDED_TEMPLATES": "false",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORKS": "10",
    })
    return env


def bridge_of(gateway_ip):
    for line in output(["ip", "-o", "-4", "addr", "show"]).splitlines():
        fields = line.split()
        if f"{gateway_ip}/" in line:
            return fields[1]
    raise SystemExit(f"no interface holds {gateway_ip}")


def ports_of(bridge):
    return [line.split(":")[1].strip().split("@")[0] for line in output(["ip", "-o", "link", "show", "master", bridge]).splitlines()]


def htb(dev, rate_bits, sport=None, exec_prefix=()):
    """An htb root on dev: everything at rate_bits, or only traffic from source port sport (the rest unlimited)."""
    tc = [*exec_prefix, "tc"]
    cmds = [[*tc, "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "10"]]
    if sport is None:
        cmds.append([*tc, "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate", f"{rate_bits}bit", "ceil", f"{rate_bits}bit"])
    else:
        cmds += [[*tc, "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate", "10gbit"],
                 [*tc, "class", "add", "dev", dev, "parent", "1:", "classid", "1:20", "htb", "rate", f"{rate_bits}bit", "ceil", f"{rate_bits}bit"],
                 [*tc, "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
                  "match", "ip", "sport", str(sport), "0xffff", "flowid", "1:20"]]
    for cmd in cmds:
        subprocess.run(cmd, check=True, capture_output=True)


def request_lines(state):
    path = Path(state) / "requests.log"
    return path.read_text().splitlines() if path.exists() else []


def origin_bytes(state, since):
    """Bytes the hub sent for file requests since line ``since`` of its request log."""
    total = 0
    for line in request_lines(state)[since:]:
        entry = json.loads(line)
        if entry.get("method") == "GET" and "/resolve/" in entry.get("path", ""):
            total += int(entry.get("bytes") or 0)
    return total


def host_exec(fleet, host, *argv):
    return output([*SANDBOX, "exec", "--fleet", fleet, host, "--", *argv])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,2,4,8")
    parser.add_argument("--shards", type=int, default=32)
    parser.add_argument("--shard-mb", type=float, default=6.0)
    # The role batches files under checkpoint_small_file_bytes (16 MB) into one download; a real
    # checkpoint's shards are gigabytes, each its own batch. The synthetic shards are scaled down, so
    # the threshold is too: each shard stays a file of its own, as at full size.
    parser.add_argument("--small-file-mb", type=float, default=1.0, help="checkpoint_small_file_bytes, below --shard-mb")
    parser.add_argument("--rate-mbit", type=float, default=64.0, help="R: the hub's egress; each host's link gets 4R")
    parser.add_argument("--gateway", default="10.232.41.1/24")
    parser.add_argument("--fleet", default="stagebench")
    parser.add_argument("--keep", action="store_true", help="leave the fleet running")
    args = parser.parse_args()
    if args.small_file_mb >= args.shard_mb:
        parser.error("--small-file-mb must be below --shard-mb: each shard is its own download, as at full size")
    sizes = [int(n) for n in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="staging-bench-", dir=REPO / ".tmp" if (REPO / ".tmp").is_dir() else None))
    spec = fleet_spec(args.fleet, max(sizes), args.gateway)
    spec_file = work / "fleet.json"
    spec_file.write_text(json.dumps(spec))
    gw = args.gateway.split("/")[0]
    state = work / "hub"
    rate = int(args.rate_mbit * 1e6)
    try:
        print(f"building the synthetic revision: {args.shards} shards of {args.shard_mb} MB", flush=True)
        commit = build_synthetic_hub(state, args.shards, int(args.shard_mb * 1e6))
        print(f"booting {max(sizes)} hosts (fleet {args.fleet}, {args.gateway}); work dir {work}", flush=True)
        run([*SANDBOX, "up", "--spec", str(spec_file)], log=work / "up.log")
        run([PY, str(MODELHUB / "modelhub.py"), "serve", "--state", str(state), "--bind", gw, "--port", str(HUB_PORT), "--daemon"],
            log=work / "hub.log")
        bridge = bridge_of(gw)
        htb(bridge, rate, sport=HUB_PORT)
        for veth in ports_of(bridge):
            htb(veth, 4 * rate)
        names = [h["name"] for h in spec["hosts"]]
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda h: htb("eth0", 4 * rate, exec_prefix=(*SANDBOX, "exec", "--fleet", args.fleet, h, "--")), names))
        print(f"tc: the hub sends at most {args.rate_mbit:g} Mbit/s in all; each host's link {4 * args.rate_mbit:g} Mbit/s each way", flush=True)
        wheels = json.loads(output([PY, str(REPO / "tools" / "sandbox" / "hub_client_wheels.py"), "--json"]).splitlines()[-1])["path"]
        inv = write_inventory(work, spec, commit, wheels, int(args.small_file_mb * 1e6))
        env = ansible_env(work)
        playbook = str(REPO / "tools" / "bench" / "checkpoint_staging_bench.yml")
        # The Hub client venv and the pin on every host first, so that each timed run stages only.
        run([str(Path(PY).parent / "ansible-playbook"), "-i", str(inv), playbook, "-e", "bench_setup=true"], env=env, log=work / "setup.log")
        since = 0
        results = []
        for mode in ("naive", "staged"):
            for size in sizes:
                with ThreadPoolExecutor(max_workers=8) as pool:
                    list(pool.map(lambda h: host_exec(args.fleet, h, "rm", "-rf", MODEL_DIR), names))
                since = len(request_lines(state))
                log = work / f"{mode}-{size}.log"
                start = time.monotonic()
                run([str(Path(PY).parent / "ansible-playbook"), "-i", str(inv), playbook, "--limit", ",".join(names[:size]),
                     "-e", f"checkpoint_staging={'true' if mode == 'staged' else 'false'}"], env=env, log=log)
                wall = time.monotonic() - start
                origin = origin_bytes(state, since)
                stamps = [json.loads(host_exec(args.fleet, h, "cat", f"{MODEL_DIR}/manifests/{commit}.stamp.json")) for h in names[:size]]
                manifest = json.loads(host_exec(args.fleet, names[0], "cat", f"{MODEL_DIR}/manifests/{commit}.json"))
                staging = max(float(s.get("download_seconds") or 0) for s in stamps)
                results.append({"mode": mode, "hosts": size, "origin_bytes": origin, "checkpoint_bytes": manifest["total_bytes"],
                                "staging_s": staging, "playbook_s": wall})
                print(f"  {mode:<6} {size} host(s): origin {origin / 1e6:8.1f} MB, staging {staging:6.1f} s, playbook {wall:6.1f} s", flush=True)
        (work / "results.json").write_text(json.dumps(results, indent=1))
        print()
        print(f"checkpoint: {results[0]['checkpoint_bytes'] / 1e6:.1f} MB in {args.shards} shards, each its own download "
              f"(small files under {args.small_file_mb:g} MB); hub egress {args.rate_mbit:g} Mbit/s, host links {4 * args.rate_mbit:g} Mbit/s")
        print(f"{'mode':<7}{'hosts':>6}{'origin/checkpoint':>19}{'staging s':>11}{'t(N)/t(1)':>11}{'playbook s':>12}")
        for row in results:
            base = next(r for r in results if r["mode"] == row["mode"] and r["hosts"] == sizes[0])
            print(f"{row['mode']:<7}{row['hosts']:>6}{row['origin_bytes'] / row['checkpoint_bytes']:>19.2f}{row['staging_s']:>11.1f}"
                  f"{row['staging_s'] / base['staging_s']:>11.2f}{row['playbook_s']:>12.1f}")
    finally:
        run([PY, str(MODELHUB / "modelhub.py"), "stop", "--state", str(state)], log=work / "hub.log", check=False)
        if not args.keep:
            run([*SANDBOX, "down", "--spec", str(spec_file)], log=work / "down.log", check=False)
            shutil.rmtree(state, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
