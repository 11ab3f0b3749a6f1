# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Options of the checkpoint space plan, shared by checkpoint_space, checkpoint_pin, checkpoint_stage and checkpoint_promote."""

from __future__ import annotations


class ModuleDocFragment:
    # The planned layout: what is kept at every moment and what may be pruned.
    DOCUMENTATION = r"""
options:
  rollback_copies:
    description:
      - Revisions kept for rollback besides the served one, V(0) or V(1) (the layout has one C(previous) link).
      - With V(1), C(previous) stays until the new revision is promoted; then the old C(current) becomes C(previous)
        and the older one is pruned. With V(0), C(previous) is prunable before a download, and after the swap the old
        C(current) is pruned and no C(previous) link is left.
    type: int
    choices: [0, 1]
    default: 1
  keep:
    description: Further commits whose revision directories are never pruned.
    type: list
    elements: str
    default: []
  prune:
    description:
      - Remove the revisions the planned layout does not hold (neither C(current), nor C(previous) with O(rollback_copies=1),
        nor in O(keep), nor the target), and abandoned downloads of other commits. Only pruned bytes count as available.
    type: bool
    default: true
"""

    # The margin on top of the target's missing bytes.
    MARGIN = r"""
options:
  free_space_margin_ratio:
    description:
      - Free space required on top of the target's missing bytes, as a fraction of the target's size (only while bytes
        are missing).
    type: float
    default: 0.02
  free_space_margin_min_bytes:
    description: The smallest margin in bytes.
    type: int
    default: 1073741824
"""
