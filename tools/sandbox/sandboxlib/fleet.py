"""Boot, inspect and destroy a fleet of systemd-nspawn mock hosts.

Each host: a copy-on-write overlay over the cached rootfs, its own network namespace with a veth
into the fleet's bridge and a static address, and systemd as PID 1 inside `systemd-nspawn --boot`.
Everything is found again from the spec (not only from state files), so a run that was killed
half-way is cleaned up by the next `up` or `down`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import model_hub, registry, rootfs, vendor, wheelhouse
from .rootfs import mounts_under
from .spec import STATE_ROOT, FleetSpec, HostSpec, fleet_from_dict

SSH_KEY = STATE_ROOT / "ssh" / "id_ed25519"
GPUSIM = Path(__file__).resolve().parents[2] / "gpusim" / "gpusim.py"
SUPERVISOR = Path(__file__).resolve().parents[1] / "nspawn-supervise.sh"
BOOT_TIMEOUT_S = 120
READY_STATES = ("running", "degraded")


class SandboxError(RuntimeError):
    pass


def sh(argv: list[str], check: bool = True, capture: bool = True, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, text=True, capture_output=capture, check=False, **kwargs)
    if check and result.returncode != 0:
        detail = (result.stderr or result.stdout or "").strip()
        raise SandboxError(f"{' '.join(argv)} exited {result.returncode}: {detail}")
    return result


# ---------------------------------------------------------------- discovery of what exists


def _processes():
    """(pid, argv) of every process, read from /proc, so a lost state file does not matter."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                yield int(entry.name), (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue


def nspawn_pids(root: Path) -> list[int]:
    """systemd-nspawn processes booting `root`."""
    wanted = str(root).encode()
    return [pid for pid, argv in _processes() if argv[0].endswith(b"systemd-nspawn") and wanted in argv]


def supervisor_pids(root: Path) -> list[int]:
    """nspawn-supervise.sh loops of the host at `root` (they restart nspawn after a reboot)."""
    wanted = str(root).encode()
    return [pid for pid, argv in _processes()
            if len(argv) > 2 and argv[1].endswith(SUPERVISOR.name.encode()) and argv[2] == wanted]


def container_leader(nspawn_pid: int) -> int | None:
    """The container's PID 1 as seen from the controller: the nspawn child running systemd."""
    try:
        children = Path(f"/proc/{nspawn_pid}/task/{nspawn_pid}/children").read_text().split()
    except OSError:
        return None
    for child in children:
        try:
            if Path(f"/proc/{child}/comm").read_text().strip() == "systemd":
                return int(child)
        except OSError:
            continue
    return None


def netns_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


# ---------------------------------------------------------------- per-host pieces


def host_root(spec: FleetSpec, host: HostSpec) -> Path:
    return spec.host_dir(host) / "root"


def host_state(spec: FleetSpec, host: HostSpec) -> str:
    """'running'/'degraded' when booted, 'starting' while booting, 'absent' when nothing runs."""
    root = host_root(spec, host)
    pids = nspawn_pids(root)
    if not pids:
        # Between a reboot's exit and the next nspawn, or before the first, only the supervisor runs.
        return "starting" if supervisor_pids(root) else "absent"
    leader = container_leader(pids[0])
    if leader is None:
        return "starting"
    result = sh(["nsenter", "-t", str(leader), "-a", "systemctl", "is-system-running"], check=False)
    return (result.stdout or "").strip() or "starting"


POWEROFF_WAIT_S = 5


def clean_host(spec: FleetSpec, host: HostSpec, keep_dir: bool = False) -> None:
    """Stop the host if it runs and remove its mounts, namespace and veth; tolerant of partial state."""
    root = host_root(spec, host)
    # The supervisor goes first, so a poweroff below is not taken for a reboot and undone.
    for pid in supervisor_pids(root):
        _signal(pid, signal.SIGKILL)
    pids = nspawn_pids(root)
    for pid in pids:
        leader = container_leader(pid)
        if leader is not None:
            _signal(leader, signal.SIGRTMIN + 4)  # systemd: orderly poweroff
    # A host is thrown away: its engines get a few seconds to stop, not their production stop timeout
    # (a serving vLLM or SGLang container held every teardown for the whole wait).
    deadline = time.monotonic() + POWEROFF_WAIT_S
    while pids and time.monotonic() < deadline:
        time.sleep(0.2)
        pids = nspawn_pids(root)
    for pid in pids:
        _signal(pid, signal.SIGKILL)
    for mount_point in mounts_under(spec.host_dir(host)):
        if sh(["umount", mount_point], check=False).returncode != 0:
            sh(["umount", "-l", mount_point], check=False)
    if netns_exists(spec.netns(host)):
        # Processes still holding the namespace (a killed run's stragglers) would keep it alive.
        for pid in sh(["ip", "netns", "pids", spec.netns(host)], check=False).stdout.split():
            _signal(int(pid), signal.SIGKILL)
        sh(["ip", "netns", "delete", spec.netns(host)], check=False)
    if link_exists(spec.veth(host)):
        sh(["ip", "link", "delete", spec.veth(host)], check=False)
    if link_exists(spec.bridge):
        sh(["ip", "neigh", "flush", "to", host.address, "dev", spec.bridge], check=False)
    if not keep_dir and spec.host_dir(host).exists():
        shutil.rmtree(spec.host_dir(host))


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def prepare_host(spec: FleetSpec, host: HostSpec, lower: Path) -> None:
    base = spec.host_dir(host)
    for sub in ("upper", "work", "root"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    root = base / "root"
    sh(["mount", "-t", "overlay", "overlay", "-o",
        f"lowerdir={lower},upperdir={base / 'upper'},workdir={base / 'work'}", str(root)])
    write_names(spec, host, root)
    ssh_dir = root / "root/.ssh"
    ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    (ssh_dir / "authorized_keys").write_text(SSH_KEY.with_suffix(".pub").read_text())
    (ssh_dir / "authorized_keys").chmod(0o600)
    host_key = root / "etc/ssh/ssh_host_ed25519_key"
    if not host_key.exists():
        sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{host.name}", "-f", str(host_key)])
    install_simulated_hardware(root, host)
    if host.model_disk_size:
        attach_model_disk(base, root, host)
    if spec.registry:
        attach_disk(base / "containers-disk.img", CONTAINERS_DISK_SIZE, "containers", root / CONTAINERS_MOUNT.lstrip("/"))
    (base / "host.json").write_text(json.dumps(spec.to_dict()["hosts"][spec.hosts.index(host)], indent=1))


def write_names(spec: FleetSpec, host: HostSpec, root: Path) -> None:
    """The host's name, its fleet's names in /etc/hosts, and a resolver that fails at once.

    The bridge reaches no name server: the machine's resolver, which debootstrap copied into the
    rootfs, made every other lookup wait 10 s (c10d's reverse lookup of its peer at each multi-node
    engine start). A loopback name server with nothing listening answers "refused" at once, as a
    site's DNS answers "no such name".
    """
    (root / "etc/hostname").write_text(host.name + "\n")
    hosts_lines = ["127.0.0.1 localhost", f"{spec.gateway_ip} controller"]
    hosts_lines += [f"{h.address} {h.name}" for h in spec.hosts]
    (root / "etc/hosts").write_text("\n".join(hosts_lines) + "\n")
    resolv = root / "etc/resolv.conf"
    resolv.unlink(missing_ok=True)
    resolv.write_text("# gpufleet sandbox: no name server on the bridge; the fleet's names are in /etc/hosts.\n"
                      "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")


def attach_model_disk(base: Path, root: Path, host: HostSpec) -> None:
    attach_disk(base / "model-disk.img", host.model_disk_size, "models", root / host.model_disk_mount.lstrip("/"))


# Container engines' storage on a fleet with a registry: a disk of its own, so that tearing a host
# down unmounts it and deletes one sparse file instead of walking the image store's many files.
CONTAINERS_DISK_SIZE = "64G"
CONTAINERS_MOUNT = "/var/lib/containers"


def attach_disk(image: Path, size: str, label: str, target: Path) -> None:
    """Mount a sparse ext4 image inside the host before it boots (nspawn carries the mount in).

    Without a journal and with lazy inode tables, a 4 TB image costs about 60 MB of real disk and
    formats in well under a second; `mount -o loop` sets autoclear, so unmounting frees the loop device.
    """
    if not image.exists():
        sh(["truncate", "-s", size, str(image)])
        sh(["mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", "-E", "lazy_itable_init=1,nodiscard",
            "-L", label, str(image)])
    target.mkdir(parents=True, exist_ok=True)
    sh(["mount", "-o", "loop", str(image), str(target)])


def install_simulated_hardware(root: Path, host: HostSpec) -> None:
    """Stand-in vendor tools for the host's hardware profile; the collection's roles never do this."""
    argv = [sys.executable, str(GPUSIM), "install", "--root", str(root), "--profile", host.profile,
            "--hostname", host.name, "--node-index", str(host.node_index), "--ip", host.address]
    if host.imex_peers:
        argv += ["--imex-peers", ",".join(host.imex_peers)]
    if host.bare:
        argv.append("--bare")  # the vendor tools arrive with the driver packages
    sh(argv)


def plumb_network(spec: FleetSpec, host: HostSpec) -> None:
    ns, veth = spec.netns(host), spec.veth(host)
    prefix = spec.network.prefixlen
    sh(["ip", "netns", "add", ns])
    # A MAC derived from the spec keeps the controller's neighbour entry valid when a host is made
    # again; a new random MAC would leave the old entry pointing nowhere for about 30 s.
    sh(["ip", "link", "add", veth, "mtu", str(host.mtu), "type", "veth", "peer", "name", "eth0",
        "mtu", str(host.mtu), "address", spec.mac(host), "netns", ns])
    sh(["ip", "link", "set", veth, "master", spec.bridge, "up"])
    in_ns = ["ip", "netns", "exec", ns]
    sh(in_ns + ["ip", "link", "set", "lo", "up"])
    sh(in_ns + ["ip", "addr", "add", f"{host.address}/{prefix}", "dev", "eth0"])
    sh(in_ns + ["ip", "link", "set", "eth0", "up"])
    # A default route makes ansible_default_ipv4 (and the engines' interface discovery) work.
    sh(in_ns + ["ip", "route", "add", "default", "via", spec.gateway_ip])


# An AMD host's GPU device nodes as a container runtime sees them: /dev/kfd and the DRM card and render
# nodes under /dev/dri. Each is /dev/null's device number (one every host may open), so `--device
# /dev/kfd --device /dev/dri` resolves and the engine's container starts; the GPUs are gpusim's. The
# /dev/dri nodes are real device files in a directory bound over it: podman walks that directory by
# entry type, and a file bound onto a mount point reads as a regular file there.
AMD_DRI_NODES = ("card0", "renderD128")


def simulated_device_binds(spec: FleetSpec, host: HostSpec) -> list[str]:
    vendor = json.loads((GPUSIM.parent / "profiles" / f"{host.profile}.json").read_text()).get("vendor")
    if vendor != "amd":
        return []
    dri = spec.host_dir(host) / "dev-dri"
    dri.mkdir(parents=True, exist_ok=True)
    null = os.stat("/dev/null").st_rdev
    for name in AMD_DRI_NODES:
        if not (dri / name).exists():
            os.mknod(dri / name, 0o666 | stat.S_IFCHR, null)
            os.chmod(dri / name, 0o666)
    return ["--bind=/dev/null:/dev/kfd", f"--bind={dri}:/dev/dri"]


def boot_host(spec: FleetSpec, host: HostSpec) -> subprocess.Popen:
    log_path = spec.host_dir(host) / "console.log"
    argv = [
        "systemd-nspawn", "--boot", "--register=no", "--keep-unit", "--console=passive",
        "--link-journal=no", "--resolv-conf=off", "--timezone=off",
        f"--machine={host.name}", f"--hostname={host.name}",
        f"--network-namespace-path=/run/netns/{spec.netns(host)}",
        # The host's own network namespace is its to change, as a real host's is: nested container
        # runtimes (netavark) make their bridge and port rules with it (nspawn grants it for
        # --private-network, not for a namespace given by path).
        "--capability=CAP_NET_ADMIN",
        *simulated_device_binds(spec, host),
        "-D", str(host_root(spec, host)),
    ]
    supervised = [str(SUPERVISOR), str(host_root(spec, host)), "--", *argv]
    # /proc/sys/net writable (the rest of /proc/sys stays read-only): netavark sets ip_forward and
    # route_localnet for the port it publishes on loopback. nspawn does this itself for
    # --private-network only.
    env = dict(os.environ, SYSTEMD_NSPAWN_API_VFS_WRITABLE="network")
    with open(log_path, "ab") as log_file:
        # A session of its own: the host outlives this command and ignores the caller's Ctrl-C.
        return subprocess.Popen(supervised, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                                start_new_session=True, env=env)


# ---------------------------------------------------------------- fleet-wide


def ensure_controller_key() -> Path:
    if not SSH_KEY.exists():
        SSH_KEY.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpufleet-sandbox-controller", "-f", str(SSH_KEY)])
    return SSH_KEY


# Each booted systemd holds a dozen inotify instances; the kernel default of 128 per user stops the
# 11th host ("Failed to create control group inotify object: Too many open files").
CONTROLLER_SYSCTL_FLOORS = {
    "fs/inotify/max_user_instances": 8192,
    "fs/inotify/max_user_watches": 524288,
}


def raise_controller_limits(log=print) -> None:
    """Raise (never lower) the controller's kernel limits that many booted hosts would exhaust."""
    for key, floor in CONTROLLER_SYSCTL_FLOORS.items():
        path = Path("/proc/sys") / key
        current = int(path.read_text().split()[0])
        if current < floor:
            path.write_text(f"{floor}\n")
            log(f"raised {key.replace('/', '.')} from {current} to {floor} for the mock hosts")


def ensure_bridge(spec: FleetSpec) -> None:
    for other in registered_fleets():
        if other.name != spec.name and other.network.overlaps(spec.network):
            raise SandboxError(f"fleet {spec.name}: network {spec.network} overlaps fleet {other.name} ({other.network}); "
                               f"give it another gateway or run 'sandbox down --fleet {other.name}'")
    if not link_exists(spec.bridge):
        sh(["ip", "link", "add", spec.bridge, "type", "bridge"])
    addresses = sh(["ip", "-o", "-4", "addr", "show", "dev", spec.bridge]).stdout
    if spec.gateway not in addresses:
        sh(["ip", "addr", "flush", "dev", spec.bridge])
        sh(["ip", "addr", "add", spec.gateway, "dev", spec.bridge])
    sh(["ip", "link", "set", spec.bridge, "up"])
    _allow_bridge_forwarding(spec, add=True)


def _allow_bridge_forwarding(spec: FleetSpec, add: bool) -> None:
    """With bridge netfilter on, a FORWARD policy of DROP (dockerd sets one) silently cuts hosts apart."""
    iptables = shutil.which("iptables")
    try:
        bridged = Path("/proc/sys/net/bridge/bridge-nf-call-iptables").read_text().strip() == "1"
    except OSError:
        bridged = False
    if not iptables or not bridged:
        return
    rule = ["FORWARD", "-i", spec.bridge, "-o", spec.bridge, "-j", "ACCEPT"]
    present = sh([iptables, "-C", *rule], check=False).returncode == 0
    if add and not present:
        sh([iptables, "-I", *rule])
    elif not add and present:
        sh([iptables, "-D", *rule])


def registered_fleets() -> list[FleetSpec]:
    fleets = []
    for spec_file in sorted((STATE_ROOT / "fleets").glob("*/fleet.json")):
        try:
            fleets.append(fleet_from_dict(json.loads(spec_file.read_text())))
        except (ValueError, OSError):
            continue
    return fleets


def recorded_spec(name: str) -> FleetSpec | None:
    spec_file = STATE_ROOT / "fleets" / name / "fleet.json"
    if not spec_file.exists():
        return None
    return fleet_from_dict(json.loads(spec_file.read_text()))


def up(spec: FleetSpec, log=print) -> dict:
    """Bring every host of the spec to a booted state; hosts already running as specified are left alone."""
    lower = rootfs.ensure_rootfs(log)
    ensure_controller_key()
    raise_controller_limits(log)
    previous = recorded_spec(spec.name)
    if previous is not None:
        # Hosts that left the spec (or whose spec changed) go first, so nothing stale keeps running.
        for old in previous.hosts:
            if old not in spec.hosts:
                log(f"{old.name}: removing (no longer in the spec as it was)")
                clean_host(previous, old)
    spec.state_dir.mkdir(parents=True, exist_ok=True)
    (spec.state_dir / "fleet.json").write_text(json.dumps(spec.to_dict(), indent=1))
    ensure_bridge(spec)
    started, kept, supervisors = [], [], {}
    for host in spec.hosts:
        if _host_matches(spec, host) and host_state(spec, host) in READY_STATES:
            kept.append(host.name)
            continue
        clean_host(spec, host)  # leftovers of a killed run, or a host that failed to boot
        prepare_host(spec, host, lower)
        plumb_network(spec, host)
        supervisors[host.name] = boot_host(spec, host)
        started.append(host)
    if spec.vendor_repo:
        vendor.up(spec, log)
    if spec.model_hub:
        model_hub.up(spec, log)
    else:
        model_hub.down(spec)  # one that an earlier spec of this fleet asked for
    if spec.wheelhouse:
        wheelhouse.up(spec, log)
    else:
        wheelhouse.down(spec)
    if spec.registry:
        registry.up(spec, log)
    else:
        registry.down(spec)
    if kept:
        log(f"already running, left as they are: {', '.join(kept)}")
    if started:
        wait_ready(spec, started, log, supervisors=supervisors)
    return {"fleet": spec.name, "started": [h.name for h in started], "kept": kept}


def _host_matches(spec: FleetSpec, host: HostSpec) -> bool:
    recorded = spec.host_dir(host) / "host.json"
    if not recorded.exists():
        return False
    return json.loads(recorded.read_text()) == spec.to_dict()["hosts"][spec.hosts.index(host)]


def wait_ready(spec: FleetSpec, hosts: list[HostSpec], log=print, timeout: float = BOOT_TIMEOUT_S,
               supervisors: dict[str, subprocess.Popen] | None = None) -> None:
    """Wait until every host runs and answers SSH; fail early when a host's supervisor has exited.

    Until the supervisor has exec'd, /proc shows the forking Python's command line, so a host can look
    "absent" for a moment right after boot_host: only an exited supervisor proves it died.
    """
    supervisors = supervisors or {}
    deadline = time.monotonic() + timeout
    pending = {h.name: h for h in hosts}
    states: dict[str, str] = {}
    while pending and time.monotonic() < deadline:
        with ThreadPoolExecutor(max_workers=8) as pool:
            results = dict(zip(pending, pool.map(lambda h: (host_state(spec, h), _ssh_open(h)), pending.values())))
        for name, (state, ssh_open) in results.items():
            states[name] = state
            if state in READY_STATES and ssh_open:
                del pending[name]
            elif state == "absent" and (name not in supervisors or supervisors[name].poll() is not None):
                console = (spec.host_dir(pending[name]) / "console.log").read_text(errors="replace")[-2000:]
                raise SandboxError(f"host {name}: systemd-nspawn exited during boot; console:\n{console}")
        if pending:
            time.sleep(0.25)
    if pending:
        detail = ", ".join(f"{n} ({states.get(n, 'unknown')})" for n in pending)
        raise SandboxError(f"fleet {spec.name}: not ready after {timeout:.0f} s: {detail}")
    log(f"fleet {spec.name}: {len(hosts)} host(s) booted: {', '.join(h.name for h in hosts)}")


def _ssh_open(host: HostSpec) -> bool:
    try:
        with socket.create_connection((host.address, 22), timeout=0.5):
            return True
    except OSError:
        return False


def down(spec: FleetSpec, log=print) -> None:
    vendor.down(spec)
    model_hub.down(spec)
    wheelhouse.down(spec)
    registry.down(spec)
    with ThreadPoolExecutor(max_workers=8) as pool:
        # Each host's directory stays for discard() below, which takes the whole fleet's at once.
        list(pool.map(functools.partial(clean_host, spec, keep_dir=True), spec.hosts))
    if link_exists(spec.bridge):
        _allow_bridge_forwarding(spec, add=False)
        sh(["ip", "link", "delete", spec.bridge], check=False)
    for mount_point in mounts_under(spec.state_dir):
        sh(["umount", "-l", mount_point], check=False)
    # Namespaces of hosts that are no longer in the spec but were left by an older run of this fleet.
    for ns in Path("/run/netns").glob(f"gf-{spec.name}-*") if Path("/run/netns").exists() else ():
        sh(["ip", "netns", "delete", ns.name], check=False)
    discard(spec.state_dir)
    log(f"fleet {spec.name}: destroyed")


TRASH = STATE_ROOT / "trash"


def discard(path: Path) -> None:
    """Remove a directory at once and delete its files in a detached process.

    A fleet's hosts hold engine venvs of tens of thousands of files: deleting them took 10 to 40 s of
    each teardown, waiting on the disk. The directory is renamed into the trash (same filesystem), so
    the name is free again immediately; `rm --one-file-system` never follows a mount a lazy unmount left.
    """
    if not path.exists():
        return
    TRASH.mkdir(parents=True, exist_ok=True)
    target = TRASH / f"{path.name}-{os.getpid()}-{time.monotonic_ns()}"
    try:
        path.rename(target)
    except OSError:
        shutil.rmtree(path, ignore_errors=True)
        return
    subprocess.Popen(
        ["rm", "-rf", "--one-file-system", str(target)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def status(spec: FleetSpec) -> list[dict]:
    return [
        {"host": h.name, "address": h.address, "profile": h.profile, "mtu": h.mtu, "state": host_state(spec, h)}
        for h in spec.hosts
    ]


def leader_of(spec: FleetSpec, host: HostSpec) -> int:
    pids = nspawn_pids(host_root(spec, host))
    leader = container_leader(pids[0]) if pids else None
    if leader is None:
        raise SandboxError(f"host {host.name} of fleet {spec.name} is not running")
    return leader
