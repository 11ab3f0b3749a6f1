# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Options of a pin on the Hub, shared by checkpoint_pin and checkpoint_plan (argument spec:
module_utils/_checkpoint_hub.py hub_argument_spec)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  model_dir:
    description: The model's directory under the checkpoint root (holds C(manifests/), C(revisions/), C(current)).
    type: path
    required: true
  repo_id:
    description: Repository id on the Hub, C(org/name).
    type: str
    required: true
  revision:
    description: The pin, a 40-hex commit, or a branch or tag (only without O(trust_remote_code)) resolved to its commit.
    type: str
    required: true
  endpoint:
    description: Hub endpoint or site mirror; the public Hub (U(https://huggingface.co)) when omitted.
    type: str
  token:
    description:
      - Hub token for gated or private repositories.
      - Used inside the module's own process only, as the request's C(Authorization) header; it is never put in an
        environment variable, on a command line or in the result.
    type: str
  trust_remote_code:
    description: Whether the engine will run the repository's code; requires a commit pin.
    type: bool
    default: false
  license_accepted:
    description: Acceptance of the repository's licence; required for the first revision of a repository.
    type: bool
    default: false
  timeout:
    description: Seconds to wait for each Hub API answer.
    type: int
    default: 30
"""
