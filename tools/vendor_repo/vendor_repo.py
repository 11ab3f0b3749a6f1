#!/usr/bin/env python3
"""Stand-in NVIDIA / AMD apt repositories for the gpufleet sandbox (test tooling, never shipped).

    vendor_repo.py build --out DIR
    vendor_repo.py serve --dir DIR --bind IP --port PORT --pidfile FILE --log FILE
    vendor_repo.py stop --pidfile FILE

`build` turns packages.yml into signed apt repositories laid out like NVIDIA's CUDA repos (flat)
and AMD's amdgpu/ROCm repos (dists). Only the URL and the key differ from the real ones, so the
driver roles install from them exactly as in production. The packages hold no driver: their
maintainer scripts tell gpusim (tools/gpusim) what got installed. See README.md.

Stdlib + PyYAML (PyYAML only for `build`); needs gpg and dpkg-deb.
"""

import argparse
import contextlib
import gzip
import hashlib
import http.server
import io
import os
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import time
from email.utils import formatdate
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "packages.yml"
FILES = HERE / "files"
GNUPG_DIR = ".gnupg"  # under the output dir; the server never serves dot paths
KEY_ID_FILE = ".gnupg/key-fingerprint"
GPUSIM = '"${GPUSIM_ROOT:-}/usr/local/lib/gpusim/gpusim.py"'
SYSTEMD_UP = '[ -z "${GPUSIM_ROOT:-}" ] && [ -d /run/systemd/system ]'


# --------------------------------------------------------------------------- data

def load_data(path=DATA):
    import yaml  # only `build` needs it

    return yaml.safe_load(Path(path).read_text())


def subst(text, variables):
    return string.Template(text).substitute(variables)


def deb_filename(name, version):
    return f"{name}_{version.split(':', 1)[-1]}_all.deb"


def upstream(version):
    """Debian version without epoch and revision."""
    version = version.split(":", 1)[-1]
    return version.rsplit("-", 1)[0] if "-" in version else version


class Package:
    """One concrete package version: everything needed for the .deb and its Packages entry."""

    def __init__(self, spec, version, variables, maintainer):
        self.name = spec["name"]
        self.version = version
        v = dict(variables, version=version)
        self.vars = v
        self.maintainer = maintainer
        self.section = spec.get("section", "misc")
        self.summary = subst(spec["summary"], v)
        self.depends = [subst(d, v) for d in spec.get("depends", [])]
        self.suggests = [subst(d, v) for d in spec.get("suggests", [])]
        self.dirs = [subst(d, v) for d in spec.get("dirs", [])]
        self.services = list(spec.get("services", []))
        gpusim = spec.get("gpusim", {})
        self.role = gpusim.get("role")
        self.links = [subst(link, v) for link in gpusim.get("links", [])]
        self.opt_rocm_link = bool(spec.get("opt_rocm_link"))
        self.files = []
        for entry in spec.get("files", []):
            path = subst(entry["path"], v)
            text = (FILES / entry["template"]).read_text()
            placeholders = {"VERSION": version, "UPSTREAM": upstream(version), "PACKAGE": self.name,
                            "INFO_VERSION": v.get("info_version", "")}
            placeholders.update(entry.get("vars", {}))
            for key, value in placeholders.items():
                text = text.replace(f"@{key}@", str(value))
            self.files.append((path, text, int(str(entry.get("mode", "0644")), 8)))

    @property
    def filename(self):
        return deb_filename(self.name, self.version)

    def control_fields(self):
        size_kib = sum(len(text.encode()) for _, text, _ in self.files) // 1024 + 1 + len(self.files)
        fields = [("Package", self.name), ("Version", self.version), ("Architecture", "all"),
                  ("Maintainer", self.maintainer), ("Installed-Size", str(size_kib))]
        if self.depends:
            fields.append(("Depends", ", ".join(self.depends)))
        if self.suggests:
            fields.append(("Suggests", ", ".join(self.suggests)))
        fields += [("Section", self.section), ("Priority", "optional")]
        return fields

    def description(self):
        return (f"{self.summary} (gpufleet sandbox stand-in)\n"
                " Stand-in for the vendor package of the same name, built by tools/vendor_repo for the\n"
                " gpufleet sandbox. It holds no driver and no vendor code; its maintainer scripts tell\n"
                " the gpusim hardware simulator what is installed, and do nothing where gpusim is absent.")

    # ---- maintainer scripts

    def postinst(self):
        # abort-*: dpkg puts this version back after a failed upgrade or removal; tell gpusim again.
        lines = ["#!/bin/sh", f"# {self.name} {self.version}: gpufleet sandbox stand-in.", "set -e",
                 'case "$1" in', "configure|abort-upgrade|abort-remove|abort-deconfigure)"]
        if self.opt_rocm_link:
            target = f"rocm-{self.vars['rocm']}"
            lines += ['    R="${GPUSIM_ROOT:-}"',
                      '    if [ ! -e "$R/opt/rocm" ] || [ -L "$R/opt/rocm" ]; then',
                      f'        ln -sfn {target} "$R/opt/rocm"', "    fi"]
        args = [self.name, f"'{self.version}'"]
        if self.role:
            args += ["--role", self.role]
        for link in self.links:
            args += ["--link", link]
        lines += [f"    if [ -x {GPUSIM} ]; then", f"        {GPUSIM} package configure {' '.join(args)}", "    fi"]
        if self.services:
            lines.append(f"    if {SYSTEMD_UP}; then systemctl daemon-reload || true; fi")
        lines += ["    ;;", "esac", "exit 0", ""]
        return "\n".join(lines)

    def prerm(self):
        # On upgrade too: the old version's links go before dpkg removes its files (so its directories
        # can go), and the new version's postinst records itself. Kernel modules stay loaded either way.
        lines = ["#!/bin/sh", f"# {self.name} {self.version}: gpufleet sandbox stand-in.", "set -e",
                 'case "$1" in', "remove|upgrade|deconfigure)"]
        for service in self.services:
            lines.append(f'    if [ "$1" = remove ] && {SYSTEMD_UP}; then systemctl stop {service}.service || true; fi')
        lines += [f"    if [ -x {GPUSIM} ]; then", f"        {GPUSIM} package remove {self.name}", "    fi"]
        if self.opt_rocm_link:
            target = f"rocm-{self.vars['rocm']}"
            lines += ['    R="${GPUSIM_ROOT:-}"',
                      f'    if [ "$1" = remove ] && [ -L "$R/opt/rocm" ] && [ "$(readlink "$R/opt/rocm")" = {target} ]; then',
                      '        rm -f "$R/opt/rocm"', "    fi"]
        lines += ["    ;;", "esac", "exit 0", ""]
        return "\n".join(lines)

    def postrm(self):
        lines = ["#!/bin/sh", f"# {self.name} {self.version}: gpufleet sandbox stand-in.", "set -e",
                 'if [ "$1" = purge ]; then']
        # What deb-systemd-helper purge does: drop the enablement links `systemctl enable` made.
        lines += [f'    rm -f "${{GPUSIM_ROOT:-}}/etc/systemd/system/multi-user.target.wants/{service}.service"'
                  for service in self.services]
        lines += ["fi", 'if [ "$1" = remove ] || [ "$1" = purge ]; then',
                  f"    if {SYSTEMD_UP}; then systemctl daemon-reload || true; fi", "fi", "exit 0", ""]
        return "\n".join(lines)

    def build(self, out_dir, epoch):
        """dpkg-deb --build into OUT_DIR; returns the .deb path. Fixed mtimes make it reproducible."""
        out = out_dir / self.filename
        if out.exists():
            return out
        with tempfile.TemporaryDirectory(prefix="vendor-repo-") as tmp:
            stage = Path(tmp) / "pkg"
            debian = stage / "DEBIAN"
            debian.mkdir(parents=True)
            control = "".join(f"{k}: {v}\n" for k, v in self.control_fields())
            (debian / "control").write_text(control + f"Description: {self.description()}\n")
            scripts = {"postinst": self.postinst(), "prerm": self.prerm()}
            if self.services:
                scripts["postrm"] = self.postrm()
            for script, text in scripts.items():
                (debian / script).write_text(text)
                (debian / script).chmod(0o755)
            conffiles = [path for path, _, _ in self.files if path.startswith("/etc/")]
            if conffiles:
                (debian / "conffiles").write_text("".join(p + "\n" for p in conffiles))
            for path, text, mode in self.files:
                target = stage / path.lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
                target.chmod(mode)
            for directory in self.dirs:
                (stage / directory.lstrip("/")).mkdir(parents=True, exist_ok=True)
            doc = stage / "usr/share/doc" / self.name
            doc.mkdir(parents=True, exist_ok=True)
            (doc / "README.gpufleet").write_text(f"{self.name} {self.version}: {self.description()}\n")
            for path in [stage, *stage.rglob("*")]:
                if path.is_dir():
                    path.chmod(0o755)
                os.utime(path, (epoch, epoch), follow_symlinks=False)
            env = dict(os.environ, SOURCE_DATE_EPOCH=str(epoch))
            partial = out.with_suffix(".partial")
            out_dir.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(stage), str(partial)],
                                  capture_output=True, text=True, env=env, check=False)
            if done.returncode:
                raise SystemExit(f"vendor_repo: dpkg-deb failed for {self.filename}:\n{done.stderr}")
            partial.rename(out)
        return out


# --------------------------------------------------------------------------- signing

class Signer:
    """A throwaway signing key in a private GNUPGHOME under the output dir (reused when present)."""

    def __init__(self, out, uid):
        self.home = out / GNUPG_DIR
        self.env = dict(os.environ, GNUPGHOME=str(self.home))
        fpr_file = out / KEY_ID_FILE
        if fpr_file.exists():
            self.fingerprint = fpr_file.read_text().strip()
            return
        if self.home.exists():
            shutil.rmtree(self.home)
        self.home.mkdir(mode=0o700, parents=True)
        self.gpg("--quick-generate-key", uid, "ed25519", "sign", "never")
        listing = self.gpg("--list-secret-keys", "--with-colons").stdout
        self.fingerprint = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
        fpr_file.write_text(self.fingerprint + "\n")

    def gpg(self, *args):
        return subprocess.run(["gpg", "--batch", "--no-tty", "--pinentry-mode", "loopback", "--passphrase", "",
                               *args], check=True, capture_output=True, text=True, env=self.env)

    def public_key(self):
        return self.gpg("--armor", "--export", self.fingerprint).stdout

    def sign(self, release):
        """InRelease (clearsigned) and Release.gpg (detached, armored) beside RELEASE."""
        directory = release.parent
        self.gpg("--yes", "--digest-algo", "SHA256", "-u", self.fingerprint, "--clearsign",
                 "-o", str(directory / "InRelease"), str(release))
        self.gpg("--yes", "--digest-algo", "SHA256", "-u", self.fingerprint, "-abs",
                 "-o", str(directory / "Release.gpg"), str(release))

    def close(self):
        subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=self.env, capture_output=True, check=False)


# --------------------------------------------------------------------------- apt metadata

def file_hashes(data):
    return {"MD5Sum": hashlib.md5(data).hexdigest(), "SHA1": hashlib.sha1(data).hexdigest(),
            "SHA256": hashlib.sha256(data).hexdigest()}


def packages_entry(package, deb, filename):
    data = deb.read_bytes()
    hashes = file_hashes(data)
    fields = package.control_fields() + [("Filename", filename), ("Size", str(len(data))),
                                         ("MD5sum", hashes["MD5Sum"]), ("SHA1", hashes["SHA1"]),
                                         ("SHA256", hashes["SHA256"])]
    return "".join(f"{k}: {v}\n" for k, v in fields) + f"Description: {package.description()}\n"


def write_packages(directory, entries):
    """Packages and Packages.gz (gzip mtime 0: reproducible). Returns {relative name: bytes}."""
    directory.mkdir(parents=True, exist_ok=True)
    text = "\n".join(entries).encode()
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0) as gz:
        gz.write(text)
    (directory / "Packages").write_bytes(text)
    (directory / "Packages.gz").write_bytes(buffer.getvalue())
    return {"Packages": text, "Packages.gz": buffer.getvalue()}


def write_release(directory, header, files, epoch, signer):
    lines = [f"{k}: {v}" for k, v in header] + [f"Date: {formatdate(epoch, usegmt=True)}"]
    hashed = {name: (file_hashes(data), len(data)) for name, data in sorted(files.items())}
    for algorithm in ("MD5Sum", "SHA1", "SHA256"):
        lines.append(f"{algorithm}:")
        lines += [f" {hashes[algorithm]} {size:>16} {name}" for name, (hashes, size) in hashed.items()]
    release = directory / "Release"
    release.write_text("\n".join(lines) + "\n")
    signer.sign(release)


def place(deb, target):
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        target.unlink()
    try:
        os.link(deb, target)
    except OSError:
        shutil.copyfile(deb, target)


# --------------------------------------------------------------------------- build

def build_nvidia(data, out, cache, signer, epoch):
    spec = data["nvidia"]
    packages = [Package(p, version, {}, data["maintainer"]) for p in spec["packages"] for version in p["versions"]]
    debs = [(package, package.build(cache, epoch)) for package in packages]
    base = out / spec["base"]
    for distro in spec["distros"]:
        for arch in spec["arches"]:
            repo = base / distro / arch
            entries = []
            for package, deb in debs:
                place(deb, repo / package.filename)
                entries.append(packages_entry(package, deb, f"./{package.filename}"))
            files = write_packages(repo, entries)
            header = [("Origin", spec["origin"]), ("Label", f"{spec['label']} {distro} {arch}"),
                      ("Architecture", arch)]
            write_release(repo, header, files, epoch, signer)
    key = out / spec["key"]
    key.parent.mkdir(parents=True, exist_ok=True)
    key.write_text(signer.public_key())
    return packages


def build_amd(data, out, cache, signer, epoch):
    spec = data["amd"]
    built = []
    for rocm, release in spec["releases"].items():
        for dist, os_suffix in spec["dists"].items():
            versions = {name: subst(v, {"os": os_suffix}) for name, v in release["versions"].items()}
            variables = {"rocm": rocm, "os": os_suffix, "info_version": release["info_version"]}
            variables.update({"v_" + name.replace("-", "_"): v for name, v in versions.items()})
            by_repo = {}
            for package_spec in spec["packages"]:
                package = Package(package_spec, versions[package_spec["name"]], variables, data["maintainer"])
                by_repo.setdefault(package_spec["repo"], []).append(package)
                built.append(package)
            for repo_name, packages in by_repo.items():
                repo_spec = spec["repos"][repo_name]
                root = out / subst(repo_spec["path"], {"rocm": rocm})
                entries = []
                for package in packages:
                    deb = package.build(cache / rocm / os_suffix, epoch)
                    pool = f"pool/main/{package.name[0]}/{package.name}/{package.filename}"
                    place(deb, root / pool)
                    entries.append(packages_entry(package, deb, pool))
                dist_dir = root / "dists" / dist
                component = "main/binary-amd64"
                files = {f"{component}/{name}": body
                         for name, body in write_packages(dist_dir / component, entries).items()}
                header = [("Origin", spec["origin"]), ("Label", f"{repo_spec['label']} {rocm}"), ("Suite", dist),
                          ("Codename", dist), ("Version", rocm), ("Architectures", "amd64"), ("Components", "main"),
                          ("Description", f"{repo_spec['label']} {rocm} for {dist} (gpufleet sandbox)")]
                write_release(dist_dir, header, files, epoch, signer)
    key = out / spec["key"]
    key.parent.mkdir(parents=True, exist_ok=True)
    key.write_text(signer.public_key())
    return built


def build(out, data_path=DATA):
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    data = load_data(data_path)
    epoch = int(data["source_date_epoch"])
    cache = out / ".debs"  # each .deb is built once per build, then linked into every repo that has it
    for created in ("nvidia", "amd", ".debs"):  # rebuilt from scratch; only the key is kept
        shutil.rmtree(out / created, ignore_errors=True)
    signer = Signer(out, data["key_uid"])
    try:
        packages = build_nvidia(data, out, cache, signer, epoch) + build_amd(data, out, cache, signer, epoch)
    finally:
        signer.close()
    return {"out": str(out), "fingerprint": signer.fingerprint, "packages": len(packages)}


# --------------------------------------------------------------------------- serve

class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Static files for apt: GET and HEAD; never a dot path (the signing key lives under .gnupg)."""

    log_file = None
    server_version = "gpufleet-vendor-repo"

    def send_head(self):
        path = self.path.split("?", 1)[0].split("#", 1)[0]
        if any(part.startswith(".") and part not in (".", "..") for part in path.split("/")) or "/../" in path:
            self.send_error(404, "File not found")
            return None
        return super().send_head()

    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        if self.log_file:
            with open(self.log_file, "a") as handle:
                handle.write(f"{self.log_date_time_string()} {self.address_string()} {format % args}\n")


def serve_foreground(directory, bind, port, log):
    QuietHandler.log_file = log

    def handler(*args, **kwargs):
        return QuietHandler(*args, directory=directory, **kwargs)

    http.server.ThreadingHTTPServer.allow_reuse_address = True
    server = http.server.ThreadingHTTPServer((bind, port), handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.serve_forever()
    finally:
        server.server_close()


def _accepts(bind, port):
    try:
        with socket.create_connection((bind, port), timeout=0.5):
            return True
    except OSError:
        return False


def serve(directory, bind, port, pidfile, log, timeout=10.0):
    directory = Path(directory).resolve()
    if not directory.is_dir():
        raise SystemExit(f"vendor_repo: no such directory {directory}")
    stop(pidfile, quiet=True)
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as log_handle:
        child = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "_serve-foreground", "--dir",
                                  str(directory), "--bind", bind, "--port", str(port), "--log", str(log)],
                                 stdin=subprocess.DEVNULL, stdout=log_handle, stderr=log_handle,
                                 start_new_session=True, cwd="/")
    Path(pidfile).parent.mkdir(parents=True, exist_ok=True)
    Path(pidfile).write_text(f"{child.pid}\n")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            Path(pidfile).unlink(missing_ok=True)
            tail = Path(log).read_text()[-2000:]
            raise SystemExit(f"vendor_repo: server exited with {child.returncode}:\n{tail}")
        if _accepts(bind, port):
            return child.pid
        time.sleep(0.05)
    stop(pidfile, quiet=True)
    raise SystemExit(f"vendor_repo: server did not accept connections on {bind}:{port} within {timeout}s")


def _our_server(pid):
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"_serve-foreground" in cmdline and any(arg.endswith(b"vendor_repo.py") for arg in cmdline)


def stop(pidfile, quiet=False):
    """Stop the server named by PIDFILE; a missing or stale pidfile is fine."""
    path = Path(pidfile)
    try:
        pid = int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        path.unlink(missing_ok=True)
        return False
    stopped = False
    if _our_server(pid):
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            if not _our_server(pid):
                break
            with contextlib.suppress(ChildProcessError):  # reap it when it is our own child (tests)
                os.waitpid(pid, os.WNOHANG)
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)
        stopped = True
    elif not quiet:
        print(f"vendor_repo: pidfile {pidfile} was stale (pid {pid} is not a vendor_repo server)")
    path.unlink(missing_ok=True)
    return stopped


# --------------------------------------------------------------------------- CLI

def main(argv=None):
    parser = argparse.ArgumentParser(prog="vendor_repo.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_build = sub.add_parser("build", help="build the signed repositories into DIR")
    p_build.add_argument("--out", required=True)
    p_build.add_argument("--data", default=str(DATA), help=argparse.SUPPRESS)
    for name in ("serve", "_serve-foreground"):
        p_serve = sub.add_parser(name, help="serve DIR over HTTP, detached" if name == "serve" else argparse.SUPPRESS)
        p_serve.add_argument("--dir", required=True)
        p_serve.add_argument("--bind", default="127.0.0.1")
        p_serve.add_argument("--port", type=int, required=True)
        p_serve.add_argument("--log", required=True)
        if name == "serve":
            p_serve.add_argument("--pidfile", required=True)
    p_stop = sub.add_parser("stop", help="stop a server started by serve")
    p_stop.add_argument("--pidfile", required=True)
    args = parser.parse_args(argv)
    if args.command == "build":
        result = build(args.out, args.data)
        print(f"built {result['packages']} package versions into {result['out']} (key {result['fingerprint']})")
    elif args.command == "serve":
        pid = serve(args.dir, args.bind, args.port, args.pidfile, args.log)
        print(f"serving {args.dir} on http://{args.bind}:{args.port}/ (pid {pid})")
    elif args.command == "_serve-foreground":
        serve_foreground(args.dir, args.bind, args.port, args.log)
    elif args.command == "stop":
        stop(args.pidfile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
