#!/usr/bin/env python3
"""gpufleet sandbox: a fleet of systemd-nspawn mock hosts with simulated GPUs, for tests and the demo.

Test tooling only: it is not part of the collection artifact and the collection's roles never call it.

  sandbox.py up   (--inventory DIR [--limit GROUP] | --spec FILE | --fleet NAME --count N --profile P --gateway CIDR)
  sandbox.py down (--inventory DIR | --spec FILE | --fleet NAME | --all)
  sandbox.py status [--fleet NAME | --spec FILE | --inventory DIR] [--json]
  sandbox.py exec --fleet NAME HOST -- COMMAND...
  sandbox.py fault --fleet NAME HOST (add KIND [--gpu N] [--link N] [--port NAME] | clear [KIND] | list)
  sandbox.py model-hub --fleet NAME COMMAND [ARGS...]   (tools/modelhub/modelhub.py COMMAND on the fleet's hub)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sandboxlib import fleet, model_hub, registry, wheelhouse  # noqa: E402
from sandboxlib.spec import (  # noqa: E402
    PROFILES,
    STATE_ROOT,
    SpecError,
    fleet_from_inventory,
    generated_fleet,
    load_spec_file,
)


def log(message: str) -> None:
    print(f"sandbox: {message}", flush=True)


def spec_from_args(args: argparse.Namespace):
    if getattr(args, "inventory", None):
        return fleet_from_inventory(Path(args.inventory), getattr(args, "limit", None))
    if getattr(args, "spec", None):
        return load_spec_file(Path(args.spec))
    if getattr(args, "count", None):
        return generated_fleet(args.fleet, args.count, args.profile, args.gateway, args.mtu)
    if getattr(args, "fleet", None):
        spec = fleet.recorded_spec(args.fleet)
        if spec is None:
            raise SpecError(f"no fleet named {args.fleet!r} is recorded under {STATE_ROOT}/fleets")
        return spec
    raise SpecError("say which fleet: --inventory DIR, --spec FILE or --fleet NAME")


def require_root() -> None:
    if os.geteuid() != 0:
        raise SystemExit("sandbox: needs root (network namespaces, overlay mounts, systemd-nspawn)")


def cmd_up(args):
    require_root()
    result = fleet.up(spec_from_args(args), log)
    if args.json:
        print(json.dumps(result))


def cmd_down(args):
    require_root()
    specs = fleet.registered_fleets() if args.all else [spec_from_args(args)]
    for spec in specs:
        fleet.down(spec, log)
    if args.all:
        leftovers = [ns.name for ns in Path("/run/netns").glob("gf-*")] if Path("/run/netns").exists() else []
        for ns in leftovers:
            fleet.sh(["ip", "netns", "delete", ns], check=False)


def cmd_status(args):
    chosen = args.fleet or args.spec or args.inventory
    specs = [spec_from_args(args)] if chosen else fleet.registered_fleets()
    rows = [{"fleet": s.name, **row} for s in specs for row in fleet.status(s)]
    if args.json:
        # One fleet: its object; none chosen: a list of them. Services show where tests reach them.
        fleets = [{"fleet": s.name, "hosts": [r for r in rows if r["fleet"] == s.name],
                   "model_hub": model_hub.status(s), "wheelhouse": wheelhouse.status(s),
                   "registry": registry.status(s)} for s in specs]
        print(json.dumps(fleets[0] if chosen else fleets, indent=1))
        return
    if not rows:
        print("no sandbox fleet is running")
    for row in rows:
        print(f"{row['fleet']:<16} {row['host']:<20} {row['address']:<15} {row['profile']:<9} mtu {row['mtu']:<5} {row['state']}")


def cmd_exec(args):
    spec = spec_from_args(args)
    leader = fleet.leader_of(spec, spec.host(args.host))
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    sys.exit(subprocess.call(["nsenter", "-t", str(leader), "-a", *command]))


def cmd_fault(args):
    spec = spec_from_args(args)
    host = spec.host(args.host)
    root = fleet.host_root(spec, host)
    env = {**os.environ, "GPUSIM_ROOT": str(root)}
    sys.exit(subprocess.call([sys.executable, str(fleet.GPUSIM), "fault", *args.fault_args], env=env))


def cmd_model_hub(args):
    spec = spec_from_args(args)
    if not spec.model_hub:
        raise SpecError(f"fleet {spec.name} has no model hub (model_hub: true in its spec)")
    command = args.hub_args[1:] if args.hub_args[:1] == ["--"] else args.hub_args
    if not command:
        raise SpecError("model-hub: give a modelhub.py command (revisions, fault, requests, mark, ...)")
    argv = [sys.executable, str(model_hub.MODELHUB_TOOL), command[0], "--state", str(model_hub.state_dir(spec)), *command[1:]]
    sys.exit(subprocess.call(argv))


def cmd_registry(args):
    """Stop or start a fleet's registry (a site mirror that is down), or print its address."""
    require_root()
    spec = spec_from_args(args)
    if not spec.registry:
        raise SpecError(f"fleet {spec.name} has no registry (registry: true in its spec)")
    if args.action == "stop":
        registry.down(spec)
    elif args.action == "start":
        registry.up(spec, log)
    print(json.dumps(registry.status(spec)))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sandbox", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command_name", required=True)

    def fleet_source(p, with_generated=False):
        p.add_argument("--inventory", help="sandbox inventory directory or hosts.yml")
        p.add_argument("--limit", help="with --inventory: only hosts of this group (or this host)")
        p.add_argument("--spec", help="fleet spec file (JSON or YAML)")
        p.add_argument("--fleet", help="fleet name")
        if with_generated:
            p.add_argument("--count", type=int, help="generate COUNT identical hosts")
            p.add_argument("--profile", choices=PROFILES, default="b300")
            p.add_argument("--gateway", default="10.240.0.1/24", help="controller address on the fleet bridge")
            p.add_argument("--mtu", type=int, default=1500)

    p_up = sub.add_parser("up", help="create or converge a fleet")
    fleet_source(p_up, with_generated=True)
    p_up.add_argument("--json", action="store_true")
    p_up.set_defaults(func=cmd_up)

    p_down = sub.add_parser("down", help="destroy a fleet and everything it created")
    fleet_source(p_down)
    p_down.add_argument("--all", action="store_true", help="every recorded fleet and any gf-* namespace")
    p_down.set_defaults(func=cmd_down)

    p_status = sub.add_parser("status", help="list hosts and their systemd state")
    fleet_source(p_status)
    p_status.add_argument("--json", action="store_true")
    p_status.set_defaults(func=cmd_status)

    p_exec = sub.add_parser("exec", help="run a command inside a host (all its namespaces)")
    fleet_source(p_exec)
    p_exec.add_argument("host")
    p_exec.add_argument("command", nargs=argparse.REMAINDER)
    p_exec.set_defaults(func=cmd_exec)

    p_fault = sub.add_parser("fault", help="inject or clear a simulated hardware fault on a host")
    fleet_source(p_fault)
    p_fault.add_argument("host")
    p_fault.add_argument("fault_args", nargs=argparse.REMAINDER, help="add KIND [--gpu N] ... | clear [KIND] | list")
    p_fault.set_defaults(func=cmd_fault)

    p_hub = sub.add_parser("model-hub", help="run a tools/modelhub command (revisions, fault, requests, mark) on the fleet's hub")
    fleet_source(p_hub)
    p_hub.add_argument("hub_args", nargs=argparse.REMAINDER, help="revisions | fault KIND ... | fault --clear | requests [--since N] | mark")
    p_hub.set_defaults(func=cmd_model_hub)

    p_registry = sub.add_parser("registry", help="stop, start or show the fleet's OCI registry")
    fleet_source(p_registry)
    p_registry.add_argument("action", choices=["stop", "start", "status"])
    p_registry.set_defaults(func=cmd_registry)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except (SpecError, fleet.SandboxError) as exc:
        print(f"sandbox: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
