# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The drift_report callback and lookup inside real ansible-playbook runs on localhost.

A check-mode play that would change a file, change a no_log file holding a canary secret, fail a
task (rescued), fail an ignored task and skip one; a last play asks the lookup for the verdict as
drift_check.yml does. Also drift_check.yml's own guard (no --check) and the callback it loads by itself.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from ansible_env import isolated_ansible_env

REPO = Path(__file__).resolve().parents[4]
CANARY = "drift-canary-5d1e7c9b3a"

PLAYBOOK = """
- name: Collected play
  hosts: localhost
  connection: local
  gather_facts: false
  vars:
    gpufleet_drift_report: true
  tasks:
    - name: A file that drifted
      ansible.builtin.copy:
        content: "wanted\\n"
        dest: "{tmp}/drifted.conf"
        mode: "0644"
    - name: A file already as wanted
      ansible.builtin.copy:
        content: "same\\n"
        dest: "{tmp}/same.conf"
        mode: "0644"
    - name: A secret file that drifted
      ansible.builtin.copy:
        content: "TOKEN={canary}\\n"
        dest: "{tmp}/secret.env"
        mode: "0600"
      no_log: true
    - name: A stage that fails and is rescued
      block:
        - name: Fail like a gate
          ansible.builtin.fail:
            msg: "gate says no"
      rescue:
        - name: Go on
          ansible.builtin.set_fact:
            rescued: true
    - name: An ignored failure
      ansible.builtin.command: /bin/false
      changed_when: false
      ignore_errors: true
    - name: A skipped task
      ansible.builtin.debug:
        msg: never
      when: false

- name: Verdict
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Read the verdict
      ansible.builtin.set_fact:
        summary: "{{{{ lookup('gpufleet.serving.drift_report') }}}}"
    - name: Fail when not clean
      ansible.builtin.assert:
        that: summary.clean
        fail_msg: "{{{{ summary.message }}}}"
"""


def ansible_playbook(tmp_path, *args, callback=True):
    env = isolated_ansible_env(tmp_path)
    env.update({
        "ANSIBLE_PYTHON_INTERPRETER": str(REPO / ".venv" / "bin" / "python"),
        "GPUFLEET_DRIFT_REPORT_DIR": str(tmp_path / "report"),
    })
    env.pop("GPUFLEET_DRIFT_REPORT_RUN", None)
    if callback:
        env["ANSIBLE_CALLBACKS_ENABLED"] = "gpufleet.serving.drift_report"
    else:
        env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    argv = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", *args]
    return subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)


def write_playbook(tmp_path):
    (tmp_path / "drifted.conf").write_text("by hand\n")
    (tmp_path / "same.conf").write_text("same\n")
    (tmp_path / "secret.env").write_text("TOKEN=old-value\n")
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK.format(tmp=tmp_path, canary=CANARY))
    return playbook


def everything_written(tmp_path):
    return "\n".join(p.read_text() for p in sorted((tmp_path / "report").rglob("*")) if p.is_file())


def test_drift_is_reported_and_fails_the_run(tmp_path):
    proc = ansible_playbook(tmp_path, "--check", "--diff", "-v", str(write_playbook(tmp_path)))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "1 of 1 host(s) not clean" in proc.stdout
    host = json.loads((tmp_path / "report" / "hosts" / "localhost.json").read_text())
    assert host["status"] == "drifted, unhealthy"
    assert [(c["task"], c.get("hidden", False)) for c in host["changes"]] == [
        ("A file that drifted", False), ("A secret file that drifted", True)]
    assert "-by hand" in host["changes"][0]["diff"] and "+wanted" in host["changes"][0]["diff"]
    assert [(f["task"], f["msg"]) for f in host["failed"]] == [("Fail like a gate", "gate says no")]
    assert host["problems"] == []
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["complete"] is True and summary["clean"] is False
    assert summary["hosts"] == {"localhost": {"status": "drifted, unhealthy", "changes": 2, "problems": 0, "failed": 1}}
    # The secret never reaches the report, and the check changed nothing.
    assert CANARY not in everything_written(tmp_path)
    assert (tmp_path / "drifted.conf").read_text() == "by hand\n"


def test_clean_run_exits_zero(tmp_path):
    playbook = write_playbook(tmp_path)
    text = playbook.read_text()
    start, end = text.index("    - name: A file that drifted"), text.index("    - name: A file already as wanted")
    text = text[:start] + text[end:]
    start, end = text.index("    - name: A secret file"), text.index("    - name: An ignored failure")
    playbook.write_text(text[:start] + text[end:])
    proc = ansible_playbook(tmp_path, "--check", "--diff", str(playbook))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no drift: 1 host(s) clean" in proc.stdout


def test_other_playbooks_write_nothing(tmp_path):
    playbook = tmp_path / "deploy.yml"
    playbook.write_text("- name: Not a drift check\n  hosts: localhost\n  connection: local\n  gather_facts: false\n"
                        "  tasks:\n    - name: Change\n      ansible.builtin.copy:\n        content: x\n"
                        "        dest: %s/x\n        mode: '0644'\n" % tmp_path)
    proc = ansible_playbook(tmp_path, str(playbook))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (tmp_path / "report").exists()


def test_drift_check_refuses_to_run_without_check(tmp_path):
    proc = ansible_playbook(tmp_path, str(REPO / "playbooks" / "drift_check.yml"), "-e", "drift_check_hosts=localhost",
                            "--limit", "localhost")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "drift_check.yml only reports, it never changes a host: run it with --check --diff" in proc.stdout
    assert "Drift check - the deploy stages" not in proc.stdout
    assert "changed=0" in proc.stdout


def test_drift_check_loads_its_callback_without_configuration(tmp_path):
    # The nightly command as the quickstart gives it, by FQCN, with no callbacks_enabled: the copy beside
    # the playbook (playbooks/callback_plugins) collects and writes the report.
    proc = ansible_playbook(tmp_path, "gpufleet.serving.drift_check", "--check", "--diff", "-e", "drift_check_hosts=localhost",
                            "-e", "ansible_connection=local", "--tags", "plan", callback=False)
    assert "the drift_report callback is not enabled" not in proc.stdout, proc.stdout
    assert proc.stdout.count("DRIFT REPORT: ") == 1, proc.stdout
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["complete"] is True and list(summary["hosts"]) == ["localhost"]
    # localhost is no GPU host: the stages fail there, and the verdict says so with exit status 2.
    assert proc.returncode == 2 and summary["clean"] is False, proc.stdout + proc.stderr


def test_drift_check_writes_one_report_when_the_callback_is_also_enabled(tmp_path):
    proc = ansible_playbook(tmp_path, str(REPO / "playbooks" / "drift_check.yml"), "--check", "-e", "drift_check_hosts=localhost",
                            "-e", "ansible_connection=local", "--tags", "plan")
    assert proc.stdout.count("DRIFT REPORT: ") == 1, proc.stdout
    assert json.loads((tmp_path / "report" / "summary.json").read_text())["complete"] is True


def test_the_lookup_names_the_missing_callback_in_other_playbooks(tmp_path):
    playbook = tmp_path / "verdict.yml"
    playbook.write_text("- name: Verdict only\n  hosts: localhost\n  connection: local\n  gather_facts: false\n  tasks:\n"
                        "    - name: Read the run\n      ansible.builtin.debug:\n"
                        "        msg: \"{{ lookup('gpufleet.serving.drift_report', 'run') }}\"\n")
    proc = ansible_playbook(tmp_path, str(playbook), callback=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "the drift_report callback is not enabled in this run" in proc.stdout
