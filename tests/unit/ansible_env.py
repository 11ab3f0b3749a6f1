"""The environment of an ansible-playbook run under test: the checkout's configuration, state under tmp_path."""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def isolated_ansible_env(tmp_path, **extra):
    """os.environ plus this checkout's ansible.cfg, Ansible's home and temp files in tmp_path, no colour."""
    env = dict(os.environ)
    env.update({
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
        "ANSIBLE_ALLOW_EMBEDDED_TEMPLATES": "false",
        "ANSIBLE_NOCOLOR": "1",
    })
    env.update(extra)
    return env
