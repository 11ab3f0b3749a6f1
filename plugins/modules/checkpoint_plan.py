#!/usr/bin/python
# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: checkpoint_plan
short_description: Check a checkpoint pin against the Hub before anything is written (read-only probe)
version_added: 0.2.0
description:
  - Applies the rules of M(gpufleet.serving.checkpoint_pin) to O(revision) of O(repo_id) without pinning it, and
    reports every problem at once in RV(problems), each with what was found and what is expected.
  - Refuses a malformed repository id, an empty revision, the all-zero placeholder commit, and a branch or tag while
    O(trust_remote_code) is set.
  - Resolves the revision with the Hub's JSON API (C(GET /api/models/{repo}/revision/{rev}) for a branch or tag) and
    lists the commit with C(GET /api/models/{repo}/tree/{commit}?recursive=true), following C(Link) pages; a commit the
    Hub or site mirror does not have is a problem. RV(total_bytes) is the exact size of the revision.
  - A commit whose manifest is recorded under O(model_dir) is answered from that manifest without any request, as the
    pin is; with O(trust_remote_code), such a manifest must record the commit itself as the requested revision.
  - The first revision of a repository under O(model_dir) requires O(license_accepted), as for the pin.
  - Needs no Hub client (only Python's standard library through Ansible's URL helper), so it runs on a bare host.
author:
  - gpufleet.serving contributors (@gpufleet)
options:
  validate_certs:
    description: Verify the endpoint's TLS certificate.
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.serving.checkpoint_hub
attributes:
  check_mode:
    support: full
    details: The module only reads (GET requests and the manifests under O(model_dir)); it never reports a change.
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - "Problem checks: V(repo_id), V(revision), V(trust_remote_code), V(license), V(endpoint)."
"""

EXAMPLES = r"""
- name: Check the pin before the deployment changes anything
  gpufleet.serving.checkpoint_plan:
    model_dir: /srv/models/moonshotai--Kimi-K3.1-Pro
    repo_id: moonshotai/Kimi-K3.1-Pro
    revision: 0123456789abcdef0123456789abcdef01234567
    trust_remote_code: true
    license_accepted: true
    token: "{{ vault_hf_token }}"
  register: pin_plan
  no_log: true

- name: Refuse the pin, naming every problem
  ansible.builtin.fail:
    msg: "{{ pin_plan.problems | map(attribute='text') | join('; ') }}"
  when: not pin_plan.healthy
"""

RETURN = r"""
changed:
  description: Always V(false); the module only reads.
  returned: always
  type: bool
  sample: false
healthy:
  description: Whether the pin can be made (no problems).
  returned: always
  type: bool
  sample: true
problems:
  description: Each problem as C(check), C(found), C(expected), C(message) and C(text) (the line to print).
  returned: always
  type: list
  elements: dict
commit:
  description: The commit the revision resolves to; V(null) when it could not be resolved.
  returned: always
  type: str
  sample: 0123456789abcdef0123456789abcdef01234567
total_bytes:
  description: Exact sum of the sizes of the revision's files; V(null) when the revision could not be listed.
  returned: always
  type: int
  sample: 1702115343872
files:
  description: Number of files in the revision; V(null) when it could not be listed.
  returned: always
  type: int
first_download:
  description: Whether no revision of the repository is pinned under O(model_dir) yet.
  returned: always
  type: bool
license_file:
  description: The repository's licence file, V(null) when it has none or the revision could not be listed.
  returned: always
  type: str
manifest_recorded:
  description: Whether the commit's manifest is already recorded under O(model_dir) (no request was made then).
  returned: always
  type: bool
hub_requests:
  description: Whether the Hub was asked anything.
  returned: always
  type: bool
"""

import json

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import fetch_url
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_hub import hub_argument_spec
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_layout import Layout
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_plan import plan_revision


def json_getter(module):
    """GET a URL and return (status, lower-case headers, JSON or None, error text or None)."""
    headers = {"Accept": "application/json", "User-Agent": "gpufleet.serving-checkpoint_plan"}
    if module.params["token"]:
        headers["Authorization"] = "Bearer %s" % module.params["token"]

    def get_json(url):
        response, info = fetch_url(module, url, headers=headers, method="GET", timeout=module.params["timeout"])
        status = info.get("status")
        found = {str(k).lower(): v for k, v in info.items() if isinstance(k, str)}
        if status is None or status < 0:
            return None, found, None, info.get("msg") or "no answer"
        body = response.read() if response is not None else info.get("body") or b""
        try:
            data = json.loads(body) if body else None
        except ValueError:
            data = None
        error = None if status == 200 else (info.get("msg") or "HTTP %s" % status)
        return status, found, data, error

    return get_json


def run_module(module):
    params = module.params
    result = plan_revision(json_getter(module), Layout(params["model_dir"]), params["repo_id"], params["revision"],
                           params["trust_remote_code"], params["license_accepted"], endpoint=params["endpoint"],
                           has_token=bool(params["token"]))
    module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec=dict(hub_argument_spec(), validate_certs=dict(type="bool", default=True)),
        supports_check_mode=True,
    )
    run_module(module)


if __name__ == "__main__":
    main()
