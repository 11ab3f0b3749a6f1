# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""No task hands a secret to a host through the task keyword `environment:`: Ansible then runs
`/bin/sh -c 'NAME=value python ...'`, so the value is in the host's process list, the -vvv EXEC line
(even with no_log) and, with sudo, the auth log. Secrets are no_log module options instead."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
SECRET = re.compile(r"token|api_key|password|secret|credential", re.I)


def tasks_of(node):
    if isinstance(node, list):
        for item in node:
            yield from tasks_of(item)
    elif isinstance(node, dict):
        yield node
        for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
            if key in node:
                yield from tasks_of(node[key])


def test_no_task_or_play_passes_a_secret_through_its_environment():
    files = sorted((REPO / "roles").glob("*/tasks/*.yml")) + sorted((REPO / "roles").glob("*/handlers/*.yml")) \
        + sorted((REPO / "playbooks").glob("*.yml"))
    assert files
    found = []
    for path in files:
        for task in tasks_of(yaml.safe_load(path.read_text()) or []):
            environment = task.get("environment")
            if environment is not None and SECRET.search(yaml.safe_dump(environment)):
                found.append("%s: %s" % (path.relative_to(REPO), task.get("name")))
    assert found == []
