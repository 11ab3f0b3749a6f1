# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The nightly drift check through ansible-runner, as docs/drift_check.md sets it up.

The collection is built and installed from its artifact; the private data directory is
docs/examples/drift_runner with the recommended ansible.cfg, its project a link to the installed
playbooks. Only the site-specific parts change: the inventory (localhost), the paths of the
configuration and the collection, and the plan stage alone (--tags plan) to keep it short. localhost
is no GPU host, so the check is not clean: exit status 2, and the report in the run's artifacts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from ansible_env import REPO

BIN = Path(sys.executable).parent


def run(argv, **kwargs):
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=600, check=False, **kwargs)


def install_collection(tmp_path, env):
    # From tmp_path: the checkout's ansible.cfg (its collections path holds this checkout) stays out.
    built = run([BIN / "ansible-galaxy", "collection", "build", "--output-path", tmp_path / "dist", REPO], env=env, cwd=tmp_path)
    assert built.returncode == 0, built.stdout + built.stderr
    artifact = next((tmp_path / "dist").glob("gpufleet-serving-*.tar.gz"))
    installed = run([BIN / "ansible-galaxy", "collection", "install", "--offline", "-p", tmp_path / "collections", artifact],
                    env=env, cwd=tmp_path)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return tmp_path / "collections"


def test_the_runner_example_runs_the_installed_drift_check_and_keeps_its_report(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    # The runner's own environment: nothing from the checkout's Makefile (config, callbacks, home).
    env = dict((k, v) for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "GPUFLEET_", "AWX_")))
    env.update({"HOME": str(home), "PATH": "%s:%s" % (BIN, env.get("PATH", ""))})
    collections = install_collection(tmp_path, env)

    data = tmp_path / "drift"
    shutil.copytree(REPO / "docs" / "examples" / "drift_runner", data)
    config = tmp_path / "ansible.cfg"
    shutil.copy(REPO / "docs" / "ansible.cfg.recommended", config)
    envvars = yaml.safe_load((data / "env" / "envvars").read_text())
    envvars.update({"ANSIBLE_CONFIG": str(config), "ANSIBLE_COLLECTIONS_PATH": str(collections)})
    (data / "env" / "envvars").write_text(yaml.safe_dump(envvars))
    (data / "env" / "cmdline").write_text((data / "env" / "cmdline").read_text().strip() + " --tags plan\n")
    (data / "env" / "extravars").write_text(yaml.safe_dump({"drift_check_hosts": "localhost"}))
    (data / "inventory" / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    (data / "project").symlink_to(collections / "ansible_collections" / "gpufleet" / "serving" / "playbooks")

    proc = run([BIN / "ansible-runner", "run", data, "-p", "drift_check.yml", "--ident", "nightly", "--rotate-artifacts", "30"],
               env=env, cwd=tmp_path)
    artifacts = data / "artifacts" / "nightly"
    stdout = (artifacts / "stdout").read_text()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (artifacts / "rc").read_text().strip() == "2"
    assert (artifacts / "status").read_text().strip() == "failed"
    # The recommended configuration enables the callback: the copy beside the playbook stands down.
    assert stdout.count("DRIFT REPORT: ") == 1, stdout
    assert "1 of 1 host(s) not clean" in stdout
    summary = json.loads((artifacts / "drift_report" / "summary.json").read_text())
    assert summary["complete"] is True and summary["clean"] is False
    assert list(summary["hosts"]) == ["localhost"]
    assert (artifacts / "drift_report" / "hosts" / "localhost.md").is_file()
