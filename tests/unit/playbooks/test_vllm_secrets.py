# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The vllm role's secrets, run by ansible-playbook on localhost at -vvv with the drift report on.

- roles/vllm/tasks/unit.yml (after the real validate entry point): the API key and every
  vllm_extra_env value land only in the root-only 0600 secrets file; neither a --check --diff run,
  nor a real run, nor the drift report, nor the world-readable env file shows them; a converged
  re-run changes nothing.
- roles/vllm/tasks/validate.yml: a non-loopback bind without an API key is refused before anything
  is written, with the host, the input, what was found and how to allow it.

Only paths under pytest's tmp_path are written (the unit file path is moved there with -e); the play
ends before the role's restart handlers, which need systemd.
"""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path

import yaml
from ansible_env import isolated_ansible_env

REPO = Path(__file__).resolve().parents[3]
REVISION = "0123456789abcdef0123456789abcdef01234567"
KEY_CANARY = "sk-canary-vllm-key-8c1d2e3f4a5b"
ENV_CANARY = "canary-extra-env-value-6e7f8a9b0c1d"
PIP_CANARY = "canary-pip-password-3f9e1a7b"

PLAYBOOK = """
- name: The vllm role's unit files
  hosts: localhost
  connection: local
  gather_facts: false
  vars:
    gpufleet_drift_report: true
  tasks:
    - name: Validate as the role does
      ansible.builtin.include_role:
        name: gpufleet.serving.vllm
        tasks_from: validate
        public: true
      tags: [vllm]
    - name: Write the unit and its environment as the role does
      ansible.builtin.include_role:
        name: gpufleet.serving.vllm
        tasks_from: unit
      tags: [vllm]
    # The restart handlers need systemd; ending the play skips them.
    - name: Stop before the handlers
      ansible.builtin.meta: end_play
"""


def role_vars(tmp_path, **changes):
    base = {
        "ansible_python_interpreter": str(REPO / ".venv" / "bin" / "python"),
        "vllm_hardware_profile": "cpu_sandbox", "vllm_model_profile": "sandbox-tiny", "vllm_version": "0.32.0",
        "vllm_validate_revision": REVISION, "vllm_model_dir": str(tmp_path / "model"), "vllm_user": "root",
        "vllm_config_dir": str(tmp_path / "etc"), "vllm_compile_cache_dir": str(tmp_path / "cache"),
        "vllm_venv_root": str(tmp_path / "venvs"), "vllm_port": 18431,
        "__vllm_unit_file": str(tmp_path / "systemd" / "vllm.service"),
        "vllm_api_key": KEY_CANARY,
        "vllm_extra_env": {"WANDB_API_KEY": ENV_CANARY, "VLLM_LOGGING_LEVEL": "DEBUG"},
        # Only the install uses it; validation and every message must still keep it hidden.
        "vllm_pip_index_url": "https://mirror-user:%s@mirror.invalid/simple" % PIP_CANARY,
    }
    base.update(changes)
    return base


def ansible_playbook(tmp_path, variables, *args):
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK)
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    env = isolated_ansible_env(tmp_path)
    env.update({
        "ANSIBLE_LOG_PATH": str(tmp_path / "ansible.log"),
        "ANSIBLE_CALLBACKS_ENABLED": "gpufleet.serving.drift_report",
        "GPUFLEET_DRIFT_REPORT_DIR": str(tmp_path / "report"),
    })
    env.pop("GPUFLEET_DRIFT_REPORT_RUN", None)
    argv = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", "-e", "@" + str(tmp_path / "vars.json"),
            "-vvv", *args, str(playbook)]
    proc = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    return proc, proc.stdout + proc.stderr + (tmp_path / "ansible.log").read_text()


def report_text(tmp_path):
    return "\n".join(p.read_text() for p in sorted((tmp_path / "report").rglob("*")) if p.is_file())


def assert_no_canary(*texts):
    for text in texts:
        assert KEY_CANARY not in text and ENV_CANARY not in text and PIP_CANARY not in text


def seed(tmp_path):
    """A host whose files drifted: both environment files hold old content."""
    (tmp_path / "etc").mkdir()
    (tmp_path / "systemd").mkdir()
    (tmp_path / "etc" / "vllm.env").write_text("OLD_SETTING=1\n")
    (tmp_path / "etc" / "vllm.secrets.env").write_text('VLLM_API_KEY="old-key"\n')
    (tmp_path / "etc" / "vllm.secrets.env").chmod(0o600)


def test_secrets_stay_in_the_root_only_file_and_out_of_diffs_output_and_the_drift_report(tmp_path):
    seed(tmp_path)
    variables = role_vars(tmp_path)

    proc, text = ansible_playbook(tmp_path, variables, "--check", "--diff")
    assert proc.returncode == 0, text[-6000:]
    assert_no_canary(text, report_text(tmp_path))
    # Diffs are on: the world-readable file's diff is shown (without any extra_env value) ...
    assert "-OLD_SETTING=1" in proc.stdout and '+HF_HUB_OFFLINE="1"' in proc.stdout
    host = json.loads((tmp_path / "report" / "hosts" / "localhost.json").read_text())
    changes = {c["task"]: c for c in host["changes"]}
    env_change = changes["Write the engine's environment (hardware set, offline Hub, caches, served revision)"]
    assert "+HF_HUB_OFFLINE" in env_change["diff"] and "WANDB_API_KEY" not in env_change["diff"]
    # ... the secrets file's is not, neither on screen nor in the report, where its task is named only.
    secret_change = changes["Write the API key and the extra environment to a root-only environment file"]
    assert secret_change["hidden"] is True and secret_change["diff"] is None
    assert "old-key" not in proc.stdout and "old-key" not in report_text(tmp_path)
    assert (tmp_path / "etc" / "vllm.env").read_text() == "OLD_SETTING=1\n"

    proc, text = ansible_playbook(tmp_path, variables, "--diff")
    assert proc.returncode == 0, text[-6000:]
    assert_no_canary(text)
    public = tmp_path / "etc" / "vllm.env"
    secrets = tmp_path / "etc" / "vllm.secrets.env"
    assert stat.S_IMODE(public.stat().st_mode) == 0o644
    assert_no_canary(public.read_text(), (tmp_path / "systemd" / "vllm.service").read_text())
    assert "VLLM_LOGGING_LEVEL" not in public.read_text()
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600 and secrets.stat().st_uid == 0
    lines = secrets.read_text().splitlines()
    assert 'VLLM_API_KEY="%s"' % KEY_CANARY in lines and 'WANDB_API_KEY="%s"' % ENV_CANARY in lines
    assert 'VLLM_LOGGING_LEVEL="DEBUG"' in lines
    # No world-readable file the role wrote holds a secret.
    written = [p for d in ("etc", "systemd", "cache") for p in (tmp_path / d).rglob("*") if p.is_file()]
    assert public in written and secrets in written
    for path in written:
        if path.stat().st_mode & stat.S_IROTH:
            assert_no_canary(path.read_text(errors="replace"))

    # Converged: a check run changes nothing and shows nothing.
    proc, text = ansible_playbook(tmp_path, variables, "--check", "--diff")
    assert proc.returncode == 0, text[-6000:]
    assert "changed=0" in proc.stdout
    assert_no_canary(text, report_text(tmp_path))


def test_a_non_loopback_bind_without_an_api_key_is_refused_before_anything_changes(tmp_path):
    variables = role_vars(tmp_path, vllm_host="0.0.0.0", vllm_api_key="")
    proc, text = ansible_playbook(tmp_path, variables)
    assert proc.returncode == 2, text[-6000:]
    assert "localhost: vllm input rejected, nothing was changed: [host] the engine would serve its API on 0.0.0.0" in proc.stdout
    assert "found vllm_host 0.0.0.0 with no vllm_api_key" in proc.stdout
    assert "vllm_allow_unauthenticated_bind: true" in proc.stdout
    assert not (tmp_path / "etc").exists()
    assert ENV_CANARY not in text

    # Allowed on purpose: the same bind passes validation.
    proc, text = ansible_playbook(tmp_path, dict(variables, vllm_allow_unauthenticated_bind=True), "--check")
    assert proc.returncode == 0, text[-6000:]


def unit_tasks():
    return {task["name"]: task for task in yaml.safe_load((REPO / "roles" / "vllm" / "tasks" / "unit.yml").read_text())}


def test_the_secrets_file_task_keeps_its_content_out_of_results():
    # Both layers, each on its own: no_log hides the result, diff: false keeps the content out of it.
    task = unit_tasks()["Write the API key and the extra environment to a root-only environment file"]
    assert task["no_log"] is True and task["diff"] is False
    assert task["ansible.builtin.template"]["mode"] == "0600" and task["ansible.builtin.template"]["owner"] == "root"
    public = (REPO / "roles" / "vllm" / "templates" / "vllm.env.j2").read_text()
    assert "vllm_extra_env" not in public and "vllm_api_key" not in public and "__vllm_secret_env" not in public


def walk_tasks(tasks):
    for task in tasks or ():
        yield task
        for section in ("block", "rescue", "always"):
            yield from walk_tasks(task.get(section))


PIP_SOURCES = {
    ("vllm", "install.yml", "pip.conf.j2"): ("vllm_pip_index_url", "vllm_pip_extra_index_url", "vllm_pip_find_links"),
    ("checkpoint", "hub_client.yml", "hub_client_pip.conf.j2"): ("checkpoint_pip_index_url", "checkpoint_pip_find_links"),
}


def test_pip_sources_reach_pip_through_a_root_only_config_removed_afterwards_never_its_argv():
    for (role, tasks_file, template), variables in PIP_SOURCES.items():
        tasks = list(walk_tasks(yaml.safe_load((REPO / "roles" / role / "tasks" / tasks_file).read_text())))
        commands = [t["ansible.builtin.command"] for t in tasks if "ansible.builtin.command" in t]
        assert commands, tasks_file
        for command in commands:
            argv = str(command.get("argv", "")) + str(command.get("cmd", ""))
            assert not [v for v in variables if v in argv], (role, command)
        writes = [t for t in tasks if t.get("ansible.builtin.template", {}).get("src") == template]
        assert len(writes) == 1, (role, template)
        write = writes[0]
        assert write["ansible.builtin.template"]["mode"] == "0600" and write["ansible.builtin.template"]["owner"] == "root"
        assert write["no_log"] is True and write["diff"] is False
        # The block that writes it removes it in `always`, also when pip failed.
        blocks = [t for t in tasks if write in (t.get("block") or ())]
        assert len(blocks) == 1, (role, template)
        removals = [t["ansible.builtin.file"] for t in blocks[0].get("always") or () if "ansible.builtin.file" in t]
        assert [r["path"] for r in removals] == [write["ansible.builtin.template"]["dest"]]
        assert removals[0]["state"] == "absent"
        text = (REPO / "roles" / role / "templates" / template).read_text()
        assert all(v in text for v in variables), (role, template)
