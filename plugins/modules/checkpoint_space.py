#!/usr/bin/python
# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: checkpoint_space
short_description: Whether a checkpoint revision fits on the model volume, counting what is already staged
version_added: 0.1.0
description:
  - Reads a model directory (its C(current) and C(previous) links, C(revisions/), C(incoming/) and C(manifests/))
    and the free space of its filesystem, and plans the room the target revision O(commit) needs. Changes nothing.
  - "needed = (target size - bytes of the target already staged) + margin, where the margin is
    max(margin_min_bytes, margin_ratio x target size) while anything is missing;
    available = free space + bytes of the revisions that are prunable now;
    the revision fits when needed <= available."
  - The target's size is that of its pinned manifest (C(manifests/<commit>.json)) as soon as one exists on the host,
    else O(target_bytes).
  - The same plan decides at download time (M(gpufleet.serving.checkpoint_stage)), so the preflight gate that runs this
    module and the download agree.
author:
  - gpufleet.serving contributors (@gpufleet)
options:
  model_dir:
    description: The model's directory under the checkpoint root; it need not exist yet (a first deployment).
    type: path
    required: true
  commit:
    description:
      - The 40-hex commit to be served. A branch, tag or empty value is planned as a revision with nothing staged.
    type: str
    default: ""
  target_bytes:
    description: The target's size when no manifest of O(commit) is on the host (the Hub listing, or the model profile's estimate).
    type: float
  target_bytes_exact:
    description: Whether O(target_bytes) is exact (the Hub's tree listing) rather than an estimate.
    type: bool
    default: false
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.serving.checkpoint_space
  - gpufleet.serving.checkpoint_space.margin
attributes:
  check_mode:
    support: full
    details: Read-only; it never changes anything.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Plan the room for the pinned revision
  gpufleet.serving.checkpoint_space:
    model_dir: /srv/models/moonshotai--Kimi-K3.1-Pro
    commit: 0123456789abcdef0123456789abcdef01234567
    target_bytes: 1.7e12
    rollback_copies: 1
  register: space

- name: Show the plan
  ansible.builtin.debug:
    msg: "{{ space.summary }}"
"""

RETURN = r"""
healthy:
  description: Whether the target fits (no critical problem).
  returned: always
  type: bool
problems:
  description: C({severity, code, message}); code C(insufficient_space) when it does not fit, C(space_unknown) when the plan cannot be made.
  returned: always
  type: list
  elements: dict
summary:
  description: One line with every number of the plan.
  returned: when the plan was made
  type: str
space:
  description:
    - The plan, C(target) (commit, bytes, source V(manifest), V(given) or V(profile), exact, present_bytes, missing_bytes),
      C(margin_bytes), C(needed_bytes), C(free_bytes), C(prunable) (commit, bytes, was), C(prunable_bytes),
      C(available_bytes), C(short_bytes), C(fits), C(staged) (current, previous, kept, retained, target), C(staged_bytes)
      and C(after_swap) (current, previous, kept, bytes, pruned).
  returned: when the plan was made
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_space import checkpoint_space


def main():
    module = AnsibleModule(
        argument_spec=dict(
            model_dir=dict(type="path", required=True),
            commit=dict(type="str", default=""),
            target_bytes=dict(type="float"),
            target_bytes_exact=dict(type="bool", default=False),
            rollback_copies=dict(type="int", default=1, choices=[0, 1]),
            keep=dict(type="list", elements="str", default=[]),
            prune=dict(type="bool", default=True),
            free_space_margin_ratio=dict(type="float", default=0.02),
            free_space_margin_min_bytes=dict(type="int", default=1073741824),
        ),
        supports_check_mode=True,
    )
    module.exit_json(**checkpoint_space(module.params))


if __name__ == "__main__":
    main()
