#!/usr/bin/python
# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: checkpoint_promote
short_description: Switch the served checkpoint revision atomically, or roll back to the previous one
version_added: 0.1.0
description:
  - With O(state=current), makes the staged, verified revision O(commit) the one engines serve.
    C(<model_dir>/previous) is pointed at the old C(current), then C(current) at
    C(revisions/<commit>), each by renaming a new symlink over the old one. Older revisions (and
    abandoned downloads of other commits) are removed only after the swap, unless O(prune=false).
    With O(rollback_copies=0) no C(previous) link is left and the old C(current) is pruned too.
  - With O(state=rolled_back), swaps C(current) and C(previous) after checking that the previous
    revision still verifies against its manifest and stamp. No download; it takes milliseconds.
    A second run right after a rollback changes nothing (recorded in C(<model_dir>/rollback.json)).
  - A revision that is not staged, has no verification stamp or no longer verifies is never linked.
  - Outside check mode it takes C(<model_dir>/.lock) before it reads the links or the prune lists, and
    fails at once, naming the holder, when another checkpoint run holds it; each link swap is followed
    by an fsync of the model directory. It also finishes the removals an interrupted run left
    (C(*.deleting.<pid>)).
author:
  - gpufleet.serving contributors (@gpufleet)
options:
  model_dir:
    description: The model's directory under the checkpoint root.
    type: path
    required: true
  commit:
    description: The revision to make current; required with O(state=current).
    type: str
  state:
    description: V(current) promotes O(commit); V(rolled_back) goes back to the previous revision.
    type: str
    choices: [current, rolled_back]
    default: current
  trust_remote_code:
    description: Whether the verification before linking requires code files.
    type: bool
    default: false
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.serving.checkpoint_space
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: Shows the C(current) and C(previous) links before and after.
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Serve the staged revision
  gpufleet.serving.checkpoint_promote:
    model_dir: /srv/models/moonshotai--Kimi-K3.1-Pro
    commit: 0123456789abcdef0123456789abcdef01234567

- name: Go back to the previous revision
  gpufleet.serving.checkpoint_promote:
    model_dir: /srv/models/moonshotai--Kimi-K3.1-Pro
    state: rolled_back
"""

RETURN = r"""
current:
  description: The commit C(current) points at afterwards.
  returned: success
  type: str
previous:
  description: The commit C(previous) points at afterwards (V(null) when there is none).
  returned: success
  type: str
before:
  description: The links before the run, C({current, previous}).
  returned: success
  type: dict
pruned:
  description: Commits whose revision directories were removed (or would be, in check mode).
  returned: with O(state=current)
  type: list
  elements: str
pruned_incoming:
  description: Abandoned incoming entries of other commits that were removed.
  returned: with O(state=current)
  type: list
  elements: str
resumed_deletions:
  description: Leftovers of interrupted removals (C(*.deleting.<pid>)) that this run finished removing.
  returned: with O(state=current)
  type: list
  elements: str
would_resume_deletions:
  description: In check mode, the leftovers of interrupted removals that a run would finish removing.
  returned: with O(state=current), in check mode
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_layout import Layout, LayoutError
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_manifest import CheckpointError, is_commit_sha
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_stage import promote, rollback


def describe_links(links):
    return "".join("%s -> %s\n" % (name, ("revisions/" + links[name]) if links.get(name) else "(none)")
                   for name in ("current", "previous"))


def run_module(module):
    params = module.params
    layout = Layout(params["model_dir"])
    try:
        if params["state"] == "current":
            if not is_commit_sha(params["commit"] or ""):
                module.fail_json(msg="state=current needs commit, a 40-hex commit; got %r" % params["commit"])
            result = promote(layout, params["commit"], prune=params["prune"], keep=params["keep"],
                             check_mode=module.check_mode, trust_remote_code=params["trust_remote_code"],
                             rollback_copies=params["rollback_copies"])
        else:
            result = rollback(layout, check_mode=module.check_mode, trust_remote_code=params["trust_remote_code"])
    except (CheckpointError, LayoutError) as exc:
        module.fail_json(msg=str(exc))
    if module._diff and result["changed"]:
        result["diff"] = {"before": describe_links(result["before"]),
                          "after": describe_links({"current": result["current"], "previous": result["previous"]}),
                          "before_header": layout.model_dir, "after_header": layout.model_dir}
    module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            model_dir=dict(type="path", required=True),
            commit=dict(type="str"),
            state=dict(type="str", default="current", choices=["current", "rolled_back"]),
            prune=dict(type="bool", default=True),
            keep=dict(type="list", elements="str", default=[]),
            rollback_copies=dict(type="int", default=1, choices=[0, 1]),
            trust_remote_code=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    run_module(module)


if __name__ == "__main__":
    main()
