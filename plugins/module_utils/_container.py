# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Engines in containers under systemd: pure decisions shared by the vllm and sglang roles.

* :func:`parse_image_reference` / :func:`image_problems`: an image is pinned by digest, as the
  checkpoint is by commit; a tag alone names whatever the registry holds today and is refused;
* :func:`run_argv`: the ``docker run`` / ``podman run`` argument list of a supervised engine
  (foreground, ``--rm``, a fixed name, GPUs as the hardware profile says, the model read-only);
* :func:`unit_commands`: ExecStartPre/ExecStart/ExecStop for the systemd unit that runs it;
* :func:`env_file_lines`: a ``--env-file`` (docker and podman read KEY=value literally, no quotes);
* :func:`container_drift`: how the running container differs from its unit (image, published ports).

No I/O here: the roles gather facts and pass them in.
"""

from __future__ import annotations

import re

RUNTIMES = ("docker", "podman")
# How a container reaches the GPUs: NVIDIA through the Container Toolkit (a CDI device, or docker's
# --gpus with the nvidia runtime), AMD through the KFD and DRI device nodes, CPU hosts not at all.
GPU_ACCESS_MODES = ("nvidia-cdi", "nvidia-gpus", "amd-kfd", "none")

# The hardware profile says nvidia, amd or none; the runtime decides how NVIDIA GPUs are reached.
PROFILE_GPU_ACCESS = {
    ("nvidia", "podman"): "nvidia-cdi",
    ("nvidia", "docker"): "nvidia-gpus",
    ("amd", "podman"): "amd-kfd",
    ("amd", "docker"): "amd-kfd",
    ("none", "podman"): "none",
    ("none", "docker"): "none",
}

_DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_PATH_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_DOMAIN = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::\d+)?$"
                     r"|^\[[0-9A-Fa-f:.]+\](?::\d+)?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CONTAINER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
DEFAULT_REGISTRY = "docker.io"


class ContainerError(ValueError):
    """Input a container cannot be built from (the message says which and why)."""


def parse_image_reference(reference):
    """Split ``[registry/]repository[:tag][@sha256:digest]`` as the distribution reference grammar does.

    Returns registry (``docker.io`` when none is named), repository (``library/`` added for Docker
    Hub's single-name images), tag, digest and ``pinned`` (a digest is present). Raises
    ContainerError for anything the grammar does not accept.
    """
    text = str(reference or "").strip()
    if not text:
        raise ContainerError("the image reference is empty")
    if any(ch.isspace() for ch in text):
        raise ContainerError("image reference %r contains white space" % text)
    name, digest = text, None
    if "@" in text:
        name, digest = text.split("@", 1)
        if not _DIGEST.match(digest):
            raise ContainerError("image reference %r: the digest must be sha256: and 64 lowercase hex digits, got %r" % (text, digest))
    tag = None
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name, tag = name.rsplit(":", 1)
        if not _TAG.match(tag):
            raise ContainerError("image reference %r: %r is not a valid tag" % (text, tag))
    parts = name.split("/")
    registry = DEFAULT_REGISTRY
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost" or parts[0].startswith("[")):
        registry = parts.pop(0)
        if not _DOMAIN.match(registry):
            raise ContainerError("image reference %r: %r is not a registry host[:port]" % (text, registry))
    if not parts or not all(_PATH_COMPONENT.match(part) for part in parts):
        raise ContainerError("image reference %r: the repository %r must be lowercase path components" % (text, "/".join(parts)))
    if registry == DEFAULT_REGISTRY and len(parts) == 1:
        parts.insert(0, "library")
    return {
        "registry": registry,
        "repository": "/".join(parts),
        "tag": tag,
        "digest": digest,
        "pinned": digest is not None,
    }


def image_problems(reference, expected_repository=None):
    """Why an engine image reference cannot be deployed ([] when it can).

    A digest is required; a tag may stay beside it for people to read (the digest decides).
    ``expected_repository``: the hardware profile's image repository; another one is allowed (a
    site mirror keeps the path under its own host), but a different final path component, such as
    a CUDA image on an AMD profile, is refused.
    """
    try:
        parsed = parse_image_reference(reference)
    except ContainerError as exc:
        return [str(exc)]
    problems = []
    if not parsed["pinned"]:
        problems.append(
            "image %r is not pinned: a tag (%s) names whatever the registry holds today; give the digest "
            "(%s/%s@sha256:...; `skopeo inspect` or `docker buildx imagetools inspect` prints it)"
            % (str(reference), parsed["tag"] or "latest, implicitly", parsed["registry"], parsed["repository"]))
    if expected_repository:
        wanted = expected_repository.rsplit("/", 1)[-1]
        found = parsed["repository"].rsplit("/", 1)[-1]
        if found != wanted:
            problems.append("image %r is a %s image, the hardware profile runs %s" % (str(reference), found, expected_repository))
    return problems


def pull_reference(reference):
    """The reference a runtime pulls and runs: by digest only (any tag beside it is dropped, so a
    moved tag can never change what runs)."""
    parsed = parse_image_reference(reference)
    if not parsed["pinned"]:
        raise ContainerError("image %r has no digest" % (reference,))
    repository = parsed["repository"]
    return "%s/%s@%s" % (parsed["registry"], repository, parsed["digest"])


def gpu_access_mode(profile_access, runtime):
    """The run-time GPU access for a profile's ``container_gpu_access`` under a runtime: podman
    reaches NVIDIA GPUs through the toolkit's CDI spec, docker through its nvidia runtime (--gpus)."""
    try:
        return PROFILE_GPU_ACCESS[(profile_access, runtime)]
    except KeyError:
        raise ContainerError("no GPU access for profile value %r under runtime %r" % (profile_access, runtime)) from None


def env_file_lines(env):
    """KEY=value lines for ``--env-file``: both runtimes take the value literally (quotes included),
    so nothing is quoted and a value with a newline, which cannot be written, is refused."""
    lines = []
    for key, value in sorted((env or {}).items()):
        if not _ENV_NAME.match(str(key)):
            raise ContainerError("environment variable name %r is not valid" % (key,))
        text = str(value)
        if "\n" in text or "\r" in text:
            raise ContainerError("environment variable %s has a line break, which an --env-file cannot carry" % key)
        lines.append("%s=%s" % (key, text))
    return lines


def host_group_ids(names, group_database):
    """The host's numeric IDs of the groups an engine container joins (``--group-add``).

    A device node keeps its host group inside the container, while a group name is looked up in
    the image's /etc/group: render's ID differs between hosts and images, and many images have no
    render group, which fails the start. ``group_database`` is getent's group database
    (name -> [password, gid, members]).
    """
    ids = []
    missing = []
    for name in names or []:
        entry = (group_database or {}).get(name)
        if not entry or len(entry) < 2 or not str(entry[1]).isdigit():
            missing.append(name)
        else:
            ids.append(str(entry[1]))
    if missing:
        raise ContainerError("the host has no group %s, which the GPU devices belong to (the driver stage creates it)"
                             % " or ".join(missing))
    return ids


def _gpu_args(runtime, gpu_access, devices, groups):
    if gpu_access not in GPU_ACCESS_MODES:
        raise ContainerError("gpu_access must be one of %s, got %r" % (", ".join(GPU_ACCESS_MODES), gpu_access))
    if gpu_access == "nvidia-cdi":
        return ["--device", "nvidia.com/gpu=all"]
    if gpu_access == "nvidia-gpus":
        if runtime != "docker":
            raise ContainerError("--gpus is docker's (with the NVIDIA runtime); podman reaches NVIDIA GPUs through CDI (nvidia-cdi)")
        return ["--gpus", "all"]
    args = []
    if gpu_access == "amd-kfd":
        # The device nodes and their groups are the hardware profile's (container_devices, container_groups).
        if not devices or not groups:
            raise ContainerError("amd-kfd needs the GPU device nodes and the groups that own them, got devices %r, groups %r"
                                 % (devices, groups))
        for device in devices:
            args += ["--device", device]
        for group in groups:
            args += ["--group-add", group]
    return args


def run_argv(spec):
    """The ``run`` argument list of an engine container that systemd supervises.

    ``spec`` keys: runtime, binary (path of docker/podman), name, image (pinned), entrypoint
    (optional), command (list), env_files (list of paths), mounts (list of {source, target,
    read_only}), network (``bridge`` or ``host``), publish (list of {host_ip, host_port,
    container_port}), gpu_access, devices, groups, ipc (``host`` or ``private``), shm_size (with a
    private IPC namespace), stop_timeout, ulimits (list of ``name=soft[:hard]``), security_opts,
    user, extra_args.
    """
    runtime = spec.get("runtime")
    if runtime not in RUNTIMES:
        raise ContainerError("runtime must be one of %s, got %r" % (", ".join(RUNTIMES), runtime))
    name = str(spec.get("name") or "")
    if not _CONTAINER_NAME.match(name):
        raise ContainerError("container name %r is not valid (letters, digits, _ . -)" % name)
    argv = [spec.get("binary") or "/usr/bin/%s" % runtime, "run", "--rm", "--name", name,
            # The role pulled it (by digest) before the unit starts: a start never waits on a registry.
            "--pull=never"]
    network = spec.get("network") or "bridge"
    if network == "host":
        argv += ["--network", "host"]
        if spec.get("publish"):
            raise ContainerError("host networking publishes nothing: the engine binds its own address")
    elif network != "bridge":
        raise ContainerError("network must be bridge or host, got %r" % network)
    for port in spec.get("publish") or []:
        host_ip = str(port.get("host_ip") or "")
        if not host_ip:
            raise ContainerError("a published port needs a host address (127.0.0.1 keeps it on loopback)")
        bracketed = "[%s]" % host_ip if ":" in host_ip else host_ip
        argv += ["--publish", "%s:%d:%d" % (bracketed, int(port["host_port"]), int(port["container_port"]))]
    ipc = spec.get("ipc") or "host"
    if ipc == "host":
        argv += ["--ipc", "host"]
    elif ipc == "private":
        if not spec.get("shm_size"):
            raise ContainerError("a private IPC namespace needs shm_size (the engines' workers share tensors through /dev/shm)")
        argv += ["--shm-size", str(spec["shm_size"])]
    else:
        raise ContainerError("ipc must be host or private, got %r" % ipc)
    argv += _gpu_args(runtime, spec.get("gpu_access") or "none", spec.get("devices"), spec.get("groups"))
    for option in spec.get("security_opts") or []:
        argv += ["--security-opt", str(option)]
    for limit in spec.get("ulimits") or []:
        argv += ["--ulimit", str(limit)]
    if spec.get("user"):
        argv += ["--user", str(spec["user"])]
    for path in spec.get("env_files") or []:
        argv += ["--env-file", str(path)]
    for mount in spec.get("mounts") or []:
        source, target = str(mount["source"]), str(mount["target"])
        if not source.startswith("/") or not target.startswith("/"):
            raise ContainerError("mount %s -> %s: both ends must be absolute paths" % (source, target))
        if "," in source or "," in target:
            raise ContainerError("mount %s -> %s: a comma cannot be passed in --mount" % (source, target))
        option = "type=bind,source=%s,target=%s" % (source, target)
        if mount.get("read_only", True):
            option += ",readonly"
        argv += ["--mount", option]
    if spec.get("stop_timeout") is not None:
        argv += ["--stop-timeout", str(int(spec["stop_timeout"]))]
    argv += [str(arg) for arg in spec.get("extra_args") or []]
    if spec.get("entrypoint"):
        argv += ["--entrypoint", str(spec["entrypoint"])]
    argv.append(pull_reference(spec["image"]))
    argv += [str(arg) for arg in spec.get("command") or []]
    return argv


def unit_commands(spec):
    """ExecStartPre / ExecStart / ExecStop argv lists for the unit that runs ``run_argv(spec)``.

    A container left behind by a killed runtime would hold the name (and the GPUs): it is removed
    before each start. systemd stops the engine through the runtime so the engine gets SIGTERM and
    ``stop_timeout`` seconds to shut down cleanly before SIGKILL.
    """
    binary = spec.get("binary") or "/usr/bin/%s" % spec.get("runtime")
    name = str(spec["name"])
    stop_timeout = int(spec.get("stop_timeout") or 60)
    return {
        "pre": [binary, "rm", "--force", "--ignore", name] if spec.get("runtime") == "podman" else [binary, "rm", "--force", name],
        "start": run_argv(spec),
        "stop": [binary, "stop", "--time", str(stop_timeout), name],
        # What the unit gives the whole stop: the runtime's own timeout and a margin for it to reap.
        "timeout_stop_sec": stop_timeout + 30,
    }


def _published(ports):
    """{(host_ip, host_port, container_port/proto)} from an inspect's NetworkSettings.Ports."""
    found = set()
    for container_port, bindings in sorted((ports or {}).items()):
        for binding in bindings or []:
            found.add(("%s:%s" % (binding.get("HostIp") or "0.0.0.0", binding.get("HostPort")), str(container_port)))
    return found


def container_drift(inspect, image, publish, network="bridge"):
    """How the running container differs from what its unit runs ([] when it does not).

    ``inspect``: the parsed output of ``docker|podman container inspect NAME`` (a list of one, or
    the object); ``image``: the pinned reference of the unit; ``publish``: its list of {host_ip,
    host_port, container_port}. The unit's file can be right while the container that runs was
    started from another one (a hand edit, restarted, then reverted): only the container says so.
    """
    if isinstance(inspect, list):
        inspect = inspect[0] if inspect else None
    if not isinstance(inspect, dict):
        return ["no container of this unit is running"]
    problems = []
    state = inspect.get("State") or {}
    if state.get("Running") is False:
        problems.append("the container is %s, not running" % (state.get("Status") or "stopped"))
    # podman records the reference it ran in ImageName, docker in Config.Image.
    running = inspect.get("ImageName") or (inspect.get("Config") or {}).get("Image") or ""
    wanted = pull_reference(image)
    try:
        running_ref = pull_reference(running)
    except ContainerError:
        running_ref = running
    if running_ref != wanted:
        problems.append("runs image %s, the unit runs %s" % (running or "unknown", wanted))
    expected = set()
    for port in publish or []:
        host_ip = str(port.get("host_ip"))
        expected.add(("%s:%d" % (host_ip, int(port["host_port"])), "%d/tcp" % int(port["container_port"])))
    found = _published((inspect.get("NetworkSettings") or {}).get("Ports"))
    if network == "host":
        found = set()
    if found != expected:
        def show(ports):
            return ", ".join("%s->%s" % port for port in sorted(ports)) or "none"
        problems.append("publishes %s, the unit publishes %s" % (show(found), show(expected)))
    return problems
