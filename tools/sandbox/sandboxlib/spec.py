"""Fleet specifications: which mock hosts a sandbox fleet has, and the names derived from them.

A spec is plain data (a dict loaded from JSON/YAML, an Ansible inventory, or generated for a
benchmark). Everything the sandbox creates on the controller -- bridge, veths, namespaces, state
directories -- is derived from the spec by pure functions here, so a killed run's leftovers can
be found again from the same spec.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

PROFILES = ("b300", "gb300", "mi355x", "consumer")
# truncate(1) sizes: 512G or 4T are binary (GiB, TiB); 3840GB is decimal, as drive vendors count (3.84 TB).
DISK_SIZE_RE = re.compile(r"^[1-9][0-9]*[MGT]B?$")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,30}$")
# Linux limits interface names to 15 bytes; a short hash keeps derived names unique and short.
IFNAME_MAX = 15
DEFAULT_MTU = 1500
MODEL_HUB_DEFAULT_PORT = 8090
VENDOR_REPO_PORT = 8080
# The controller's wheelhouse (tools/wheelhouse), for hosts that install Python packages offline.
WHEELHOUSE_PORT = 8081
# An OCI registry (Debian's docker-registry) on the gateway address: the site mirror engine images come from.
REGISTRY_PORT = 5000
STATE_ROOT = Path("/var/lib/gpufleet-sandbox")
CACHE_ROOT = Path(os.environ.get("GPUFLEET_SANDBOX_CACHE", "/var/cache/gpufleet-sandbox"))


class SpecError(ValueError):
    """The fleet description is unusable; the message says which field and why."""


@dataclass(frozen=True)
class HostSpec:
    name: str
    address: str
    profile: str
    mtu: int = DEFAULT_MTU
    node_index: int = 0
    imex_peers: tuple[str, ...] = ()
    # A sparse, file-backed ext4 filesystem mounted in the host, standing in for the NVMe that
    # holds checkpoints (e.g. "4T" at /srv/models): real sizes for capacity checks, no real bytes.
    model_disk_size: str = ""
    model_disk_mount: str = "/srv/models"
    # No vendor tools until the driver packages are installed (driver role scenarios).
    bare: bool = False


@dataclass(frozen=True)
class FleetSpec:
    name: str
    gateway: str  # controller address on the bridge, with prefix length, e.g. 10.231.0.1/24
    hosts: tuple[HostSpec, ...] = field(default_factory=tuple)
    # Serve the stand-in NVIDIA/AMD apt repositories on the gateway address (driver role tests).
    vendor_repo: bool = False
    # Serve the sandbox model hub (tools/modelhub) on the gateway address at this port; 0: no hub.
    model_hub_port: int = 0
    # Serve the controller's wheelhouse cache on the gateway address, port 8081 (vllm role tests).
    wheelhouse: bool = False
    # Serve the sandbox's OCI registry on the gateway address, port 5000 (container engine tests).
    registry: bool = False

    @property
    def model_hub(self) -> bool:
        return self.model_hub_port > 0

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.ip_interface(self.gateway).network

    @property
    def gateway_ip(self) -> str:
        return str(ipaddress.ip_interface(self.gateway).ip)

    @property
    def bridge(self) -> str:
        return "gfb" + short_hash(self.name)

    @property
    def state_dir(self) -> Path:
        return STATE_ROOT / "fleets" / self.name

    def host(self, name: str) -> HostSpec:
        for host in self.hosts:
            if host.name == name:
                return host
        raise SpecError(f"fleet {self.name!r} has no host {name!r}; hosts: {', '.join(h.name for h in self.hosts)}")

    def netns(self, host: HostSpec) -> str:
        return f"gf-{self.name}-{host.name}"

    def veth(self, host: HostSpec) -> str:
        return "gfv" + short_hash(f"{self.name}/{host.name}")

    def mac(self, host: HostSpec) -> str:
        """Locally administered unicast MAC, stable for a fleet/host pair."""
        digest = hashlib.sha1(f"{self.name}/{host.name}".encode()).hexdigest()
        return "02:" + ":".join(digest[i:i + 2] for i in range(0, 10, 2))

    def host_dir(self, host: HostSpec) -> Path:
        return self.state_dir / "hosts" / host.name

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "gateway": self.gateway,
            "vendor_repo": self.vendor_repo,
            "model_hub": {"port": self.model_hub_port} if self.model_hub else False,
            "wheelhouse": self.wheelhouse,
            "registry": self.registry,
            "hosts": [
                {
                    "name": h.name,
                    "address": h.address,
                    "profile": h.profile,
                    "mtu": h.mtu,
                    "node_index": h.node_index,
                    "imex_peers": list(h.imex_peers),
                    "model_disk_size": h.model_disk_size,
                    "model_disk_mount": h.model_disk_mount,
                    "bare": h.bare,
                }
                for h in self.hosts
            ],
        }


def short_hash(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:8]


def fleet_from_dict(data: dict) -> FleetSpec:
    """Validate a spec dict; every error names the field and the value found."""
    if not isinstance(data, dict):
        raise SpecError(f"a fleet spec must be a mapping, found {type(data).__name__}")
    name = str(data.get("name", ""))
    if not NAME_RE.match(name):
        raise SpecError(f"fleet name {name!r} must match {NAME_RE.pattern}")
    gateway = str(data.get("gateway", ""))
    try:
        gw = ipaddress.ip_interface(gateway)
    except ValueError as exc:
        raise SpecError(f"fleet {name}: gateway {gateway!r} is not an address with prefix (e.g. 10.231.0.1/24): {exc}") from exc
    if gw.version != 4 or gw.network.prefixlen > 30:
        raise SpecError(f"fleet {name}: gateway {gateway!r} must be IPv4 in a network of /30 or larger")
    raw_hosts = data.get("hosts") or []
    if not raw_hosts:
        raise SpecError(f"fleet {name}: no hosts given")
    hosts = []
    seen_names: set[str] = set()
    seen_addresses: set[str] = {str(gw.ip)}
    for raw in raw_hosts:
        host = _host_from_dict(name, gw.network, raw)
        if host.name in seen_names:
            raise SpecError(f"fleet {name}: host name {host.name!r} appears twice")
        if host.address in seen_addresses:
            raise SpecError(f"fleet {name}: host {host.name}: address {host.address} is already used (gateway or another host)")
        seen_names.add(host.name)
        seen_addresses.add(host.address)
        hosts.append(host)
    vendor_repo = bool(data.get("vendor_repo", False))
    model_hub_port = _model_hub_port(name, data.get("model_hub", False))
    if vendor_repo and model_hub_port == VENDOR_REPO_PORT:
        raise SpecError(f"fleet {name}: model_hub port {model_hub_port} is the vendor repositories' port")
    wheelhouse = _flag(data.get("wheelhouse", False))
    if wheelhouse and model_hub_port == WHEELHOUSE_PORT:
        raise SpecError(f"fleet {name}: model_hub port {model_hub_port} is the wheelhouse's port")
    registry = _flag(data.get("registry", False))
    if registry and model_hub_port == REGISTRY_PORT:
        raise SpecError(f"fleet {name}: model_hub port {model_hub_port} is the registry's port")
    return FleetSpec(name=name, gateway=gateway, hosts=tuple(hosts), vendor_repo=vendor_repo, model_hub_port=model_hub_port,
                     wheelhouse=wheelhouse, registry=registry)


def _flag(value) -> bool:
    """A boolean spec key; a templated spec may carry it as text."""
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return bool(value)


def _model_hub_port(fleet: str, value) -> int:
    """`model_hub: true` (port 8090), `{port: N}`, or false/absent (0: no hub)."""
    if isinstance(value, str) and value.lower() in ("true", "false"):  # a templated spec may carry text
        value = value.lower() == "true"
    if value is None or value is False:
        return 0
    if value is True:
        return MODEL_HUB_DEFAULT_PORT
    if isinstance(value, dict) and set(value) <= {"port"}:
        port = value.get("port", MODEL_HUB_DEFAULT_PORT)
        if isinstance(port, int) and not isinstance(port, bool) and 1 <= port <= 65535:
            return port
    raise SpecError(f"fleet {fleet}: model_hub {value!r} must be true, false or {{port: N}} with 1 <= N <= 65535")


def _host_from_dict(fleet: str, network: ipaddress.IPv4Network, raw: dict) -> HostSpec:
    name = str(raw.get("name", ""))
    if not NAME_RE.match(name):
        raise SpecError(f"fleet {fleet}: host name {name!r} must match {NAME_RE.pattern}")
    profile = str(raw.get("profile", ""))
    if profile not in PROFILES:
        raise SpecError(f"fleet {fleet}: host {name}: profile {profile!r} is not one of {', '.join(PROFILES)}")
    address = str(raw.get("address", ""))
    try:
        ip = ipaddress.ip_address(address)
    except ValueError as exc:
        raise SpecError(f"fleet {fleet}: host {name}: address {address!r} is not an IP address") from exc
    if ip not in network or ip in (network.network_address, network.broadcast_address):
        raise SpecError(f"fleet {fleet}: host {name}: address {address} is not a host address in {network}")
    mtu = int(raw.get("mtu", DEFAULT_MTU))
    if not 576 <= mtu <= 9216:
        raise SpecError(f"fleet {fleet}: host {name}: mtu {mtu} is outside 576..9216")
    model_disk_size = str(raw.get("model_disk_size", "") or "")
    if model_disk_size and not DISK_SIZE_RE.match(model_disk_size):
        raise SpecError(f"fleet {fleet}: host {name}: model_disk_size {model_disk_size!r} must look like 512G or 4T (binary) or 3840GB (decimal)")
    model_disk_mount = str(raw.get("model_disk_mount", "/srv/models"))
    if not model_disk_mount.startswith("/") or ".." in model_disk_mount.split("/"):
        raise SpecError(f"fleet {fleet}: host {name}: model_disk_mount {model_disk_mount!r} must be an absolute path")
    return HostSpec(
        name=name,
        address=address,
        profile=profile,
        mtu=mtu,
        node_index=int(raw.get("node_index", 0)),
        imex_peers=tuple(str(p) for p in raw.get("imex_peers", ()) or ()),
        model_disk_size=model_disk_size,
        model_disk_mount=model_disk_mount,
        bare=bool(raw.get("bare", False)),
    )


def fleet_from_inventory(path: Path, limit: str | None = None) -> FleetSpec:
    """Read the sandbox inventory (YAML) so the inventory stays the one source of host addresses.

    Fleet-wide settings are the `all` group's `gpufleet_sandbox_fleet` and `gpufleet_sandbox_gateway`;
    each host's profile is `gpufleet_sandbox_profile` from its host or group vars, its address
    `ansible_host`, its link MTU `gpufleet_sandbox_mtu` (default 1500), an optional model disk
    `gpufleet_sandbox_model_disk_size` mounted at `gpufleet_sandbox_model_disk_mount`. The `all` group's
    `gpufleet_sandbox_vendor_repo`, `gpufleet_sandbox_model_hub`, `gpufleet_sandbox_wheelhouse` and `gpufleet_sandbox_registry` serve
    those on the bridge.
    """
    inventory_file = path / "hosts.yml" if path.is_dir() else path
    data = yaml.safe_load(inventory_file.read_text()) or {}
    top = data.get("all", {})
    top_vars = top.get("vars", {}) or {}
    hosts: dict[str, dict] = {}

    def walk(group_name: str, group: dict, inherited: dict, groups: tuple[str, ...]) -> None:
        group = group or {}
        merged = {**inherited, **(group.get("vars") or {})}
        chain = groups + (group_name,)
        for host_name, host_vars in (group.get("hosts") or {}).items():
            entry = hosts.setdefault(host_name, {"vars": {}, "groups": set()})
            entry["vars"] = {**merged, **entry["vars"], **(host_vars or {})}
            entry["groups"].update(chain)
        for child_name, child in (group.get("children") or {}).items():
            walk(child_name, child, merged, chain)

    walk("all", top, {}, ())
    fleet_name = top_vars.get("gpufleet_sandbox_fleet")
    gateway = top_vars.get("gpufleet_sandbox_gateway")
    if not fleet_name or not gateway:
        raise SpecError(f"{inventory_file}: all.vars must set gpufleet_sandbox_fleet and gpufleet_sandbox_gateway")
    raw_hosts = []
    for host_name, entry in hosts.items():
        if limit and limit != host_name and limit not in entry["groups"]:
            continue
        host_vars = entry["vars"]
        raw_hosts.append(
            {
                "name": host_name,
                "address": host_vars.get("ansible_host", ""),
                "profile": host_vars.get("gpufleet_sandbox_profile", ""),
                "mtu": host_vars.get("gpufleet_sandbox_mtu", DEFAULT_MTU),
                "node_index": host_vars.get("gpufleet_sandbox_node_index", 0),
                "imex_peers": host_vars.get("gpufleet_sandbox_imex_peers", []),
                "model_disk_size": host_vars.get("gpufleet_sandbox_model_disk_size", ""),
                "model_disk_mount": host_vars.get("gpufleet_sandbox_model_disk_mount", "/srv/models"),
                "bare": host_vars.get("gpufleet_sandbox_bare", False),
            }
        )
    if limit and not raw_hosts:
        raise SpecError(f"{inventory_file}: --limit {limit!r} matches no host or group")
    return fleet_from_dict({"name": fleet_name, "gateway": gateway, "hosts": raw_hosts,
                            "vendor_repo": top_vars.get("gpufleet_sandbox_vendor_repo", False),
                            "model_hub": top_vars.get("gpufleet_sandbox_model_hub", False),
                            "wheelhouse": top_vars.get("gpufleet_sandbox_wheelhouse", False),
                            "registry": top_vars.get("gpufleet_sandbox_registry", False)})


def generated_fleet(name: str, count: int, profile: str, gateway: str, mtu: int = DEFAULT_MTU) -> FleetSpec:
    """N identical hosts numbered from the gateway's next address (benchmarks, ad hoc fleets)."""
    gw = ipaddress.ip_interface(gateway)
    usable = list(gw.network.hosts())
    candidates = [ip for ip in usable if ip != gw.ip]
    if count > len(candidates):
        raise SpecError(f"fleet {name}: {count} hosts do not fit in {gw.network} ({len(candidates)} free addresses)")
    return fleet_from_dict(
        {
            "name": name,
            "gateway": gateway,
            "hosts": [
                {"name": f"{name}-{i:02d}", "address": str(candidates[i]), "profile": profile, "mtu": mtu}
                for i in range(count)
            ],
        }
    )


def load_spec_file(path: Path) -> FleetSpec:
    return fleet_from_dict(yaml.safe_load(path.read_text()))


def pidfile_argv(pidfile: Path) -> list[bytes]:
    """The command line of the process a pidfile names, or [] when there is none (a stale pid's
    process may be anything: callers check the argv is theirs)."""
    try:
        pid = int(pidfile.read_text().strip())
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return []
