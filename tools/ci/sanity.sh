#!/usr/bin/env bash
# Runs `ansible-test sanity` on a copy of the working tree at .tmp/sanity/ansible_collections/gpufleet/serving
# (ansible-test needs that path shape). Offline-safe: ansible-test's bootstrap fetches get-pip from the
# internet; a stand-in in its cache makes it use ensurepip and the configured package index instead.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
work="$repo/.tmp/sanity"
dest="$work/ansible_collections/gpufleet/serving"
export HOME="$work/home"   # ansible-test keeps its cache and venvs under ~/.ansible/test
mkdir -p "$HOME/.ansible/test/cache" "$dest"

cat > "$HOME/.ansible/test/cache/get_pip_24_2.py" <<'PY'
"""Stand-in for get-pip.py: bootstrap pip from the stdlib, then install what ansible-test asked for."""
import os
import subprocess
import sys

subprocess.run([sys.executable, "-m", "ensurepip", "--upgrade"], check=True, stdout=subprocess.DEVNULL)
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
# ansible-test strips PIP_CERT from the environment; the system CA bundle is passed explicitly.
cert = "/etc/ssl/certs/ca-certificates.crt"
extra = ["--cert", cert] if os.path.exists(cert) else []
if args:
    subprocess.run([sys.executable, "-m", "pip", "install", *extra, *args], check=True)
PY

# Tracked and untracked-but-not-ignored files, as a clean clone has them, less the sandbox and
# Molecule tooling: build_ignore keeps those out of the artifact, and the stand-in GPU tools need
# the shebangs that sanity forbids outside modules. ruff and yamllint (make lint) cover them.
cd "$repo"
rm -rf "$dest" && mkdir -p "$dest"
rsync -a --files-from=<(git ls-files --cached --others --exclude-standard | grep -Ev '^(tools|molecule)/') ./ "$dest/"
cd "$dest"
rm -rf .git && git init -q && git add -A
exec "$repo/.venv/bin/ansible-test" sanity --venv --python 3.11 --color no "$@"
