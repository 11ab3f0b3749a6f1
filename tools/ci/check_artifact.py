"""Build the collection and check the artifact: shipped content in, sandbox and test tooling out."""

import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
# The drift check's callback beside it: an installed collection's drift_check.yml needs it.
MUST_SHIP = ("MANIFEST.json", "FILES.json", "meta/runtime.yml", "playbooks/deploy_b300.yml", "plugins/modules/gpu_health.py",
             "playbooks/callback_plugins/gpufleet_drift_report.py")
MUST_NOT_SHIP = ("tools/", "tests/", "molecule/", ".ci/", "inventories/sandbox/", ".collections/", ".venv/", ".tmp/", "Makefile")


def main() -> int:
    version = yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(["ansible-galaxy", "collection", "build", "--force", "--output-path", out, str(REPO)],
                       check=True, stdout=subprocess.DEVNULL)
        artifact = Path(out) / f"gpufleet-serving-{version}.tar.gz"
        with tarfile.open(artifact) as tar:
            names = tar.getnames()
    problems = [f"missing from the artifact: {p}" for p in MUST_SHIP if p not in names]
    problems += [f"must not ship: {n}" for n in names for p in MUST_NOT_SHIP if n == p.rstrip("/") or n.startswith(p)]
    for problem in problems:
        print(f"check_artifact: {problem}", file=sys.stderr)
    if not problems:
        print(f"check_artifact: gpufleet-serving-{version}.tar.gz holds {len(names)} entries, no test or sandbox tooling")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
