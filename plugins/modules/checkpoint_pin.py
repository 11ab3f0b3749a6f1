#!/usr/bin/python
# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: checkpoint_pin
short_description: Pin a Hugging Face model revision and record its manifest for offline verification
version_added: 0.1.0
description:
  - Resolves O(revision) of O(repo_id) to a commit, lists the commit's files with the Hub's tree
    API and writes the manifest (every file's path, size, git blob id and LFS sha256) to
    C(<model_dir>/manifests/<commit>.json). Every later check of the staged files is made against
    this manifest, without the Hub.
  - A commit whose manifest is already recorded is answered without any request to the Hub, so a
    re-run of a pinned deployment is offline.
  - The weight index is read at pin time and every shard it names must be in the commit; the
    repository's licence file is returned, and the first revision of a repository pinned under
    O(model_dir) requires O(license_accepted).
  - When O(trust_remote_code) is set, O(revision) must be a 40-hex commit; branches and tags are
    refused, because C(--trust-remote-code) executes the repository's code.
  - Needs C(huggingface_hub) in the Python that runs the module (the checkpoint role's venv). The
    O(token) is handed to it inside the module's process; O(timeout) sets E(HF_HUB_ETAG_TIMEOUT) and
    E(HF_HUB_DOWNLOAD_TIMEOUT) there.
author:
  - gpufleet.serving contributors (@gpufleet)
requirements:
  - huggingface_hub >= 1.0
options:
  license_max_chars:
    description: How much of the licence text to return.
    type: int
    default: 4000
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.serving.checkpoint_hub
  - gpufleet.serving.checkpoint_space
  - gpufleet.serving.checkpoint_space.margin
attributes:
  check_mode:
    support: full
    details: Resolves and lists (read-only requests) but writes no manifest.
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - Malformed repository ids, unknown repositories or revisions and incomplete revisions fail before anything is written.
"""

EXAMPLES = r"""
- name: Pin Kimi K3.1 Pro at a reviewed commit
  gpufleet.serving.checkpoint_pin:
    model_dir: /srv/models/moonshotai--Kimi-K3.1-Pro
    repo_id: moonshotai/Kimi-K3.1-Pro
    revision: 0123456789abcdef0123456789abcdef01234567
    trust_remote_code: true
    license_accepted: true
    token: "{{ vault_hf_token }}"
  no_log: true
"""

RETURN = r"""
commit:
  description: The pinned commit.
  returned: success
  type: str
  sample: 0123456789abcdef0123456789abcdef01234567
manifest_path:
  description: Where the manifest is (or would be, in check mode) recorded.
  returned: success
  type: str
total_bytes:
  description: Sum of the sizes of the revision's files.
  returned: success
  type: int
files:
  description: Number of files in the revision.
  returned: success
  type: int
shards:
  description: Number of weight shards in the revision.
  returned: success
  type: int
hub_requests:
  description: Whether the Hub was asked anything (false on a re-run of a recorded commit).
  returned: success
  type: bool
license_file:
  description: The repository's licence file, V(null) when it has none.
  returned: success
  type: str
license_text:
  description: The start of the licence text when it was read in this run.
  returned: success
  type: str
first_download:
  description: Whether this is the first revision of the repository pinned under O(model_dir).
  returned: when the manifest was built in this run
  type: bool
"""

import os
import tempfile
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_hub import check_pin_request, hub_argument_spec, pin
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_layout import Layout
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_manifest import CheckpointError

try:
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError
    HF_IMPORT_ERROR = None
except ImportError:
    HF_IMPORT_ERROR = traceback.format_exc()


def free_bytes_of(layout):
    """Space available under the model directory (or its nearest existing parent)."""
    path = layout.model_dir
    while not os.path.isdir(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def run_module(module):
    params = module.params
    try:
        # Bad input is refused before the Hub library is even needed.
        check_pin_request(params["repo_id"], params["revision"], params["trust_remote_code"])
    except CheckpointError as exc:
        module.fail_json(msg=str(exc))
    if HF_IMPORT_ERROR:
        module.fail_json(msg=missing_required_lib("huggingface_hub"), exception=HF_IMPORT_ERROR)
    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", str(params["timeout"]))
    os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", str(params["timeout"]))
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    layout = Layout(params["model_dir"])
    # None lets huggingface_hub fall back to its own sources (HF_TOKEN, the token file) as it does anywhere.
    token = params["token"] or None
    api = HfApi(endpoint=params["endpoint"], token=token)

    def fetch_text(path, commit):
        # Small files (index, licence) go to a throw-away directory: pinning writes only the manifest.
        with tempfile.TemporaryDirectory(prefix="gpufleet-pin-") as scratch:
            local = hf_hub_download(params["repo_id"], path, revision=commit, endpoint=params["endpoint"], token=token,
                                    local_dir=scratch)
            with open(local, encoding="utf-8", errors="replace") as handle:
                return handle.read()

    try:
        result = pin(api, fetch_text, layout, params["repo_id"], params["revision"], params["endpoint"],
                     params["trust_remote_code"], params["license_accepted"], check_mode=module.check_mode,
                     license_max_chars=params["license_max_chars"], free_bytes=free_bytes_of(layout),
                     margin_ratio=params["free_space_margin_ratio"], margin_min_bytes=params["free_space_margin_min_bytes"],
                     rollback_copies=params["rollback_copies"], keep=params["keep"], prune=params["prune"])
    except CheckpointError as exc:
        module.fail_json(msg=str(exc))
    except RepositoryNotFoundError:
        module.fail_json(msg="repository %s not found at %s (or it is private or gated and no valid token was given)"
                         % (params["repo_id"], params["endpoint"] or "the Hub"))
    except RevisionNotFoundError:
        module.fail_json(msg="revision %s not found in %s" % (params["revision"], params["repo_id"]))
    except HfHubHTTPError as exc:
        module.fail_json(msg="the Hub at %s answered an error for %s@%s: %s"
                         % (params["endpoint"] or "the default endpoint", params["repo_id"], params["revision"], exc))
    except Exception as exc:  # pylint: disable=broad-except
        # Connection and TLS errors come from the HTTP client as its own types; name them, never a traceback.
        module.fail_json(msg="cannot reach the Hub at %s or write under %s: %s: %s"
                         % (params["endpoint"] or "the default endpoint", layout.model_dir, type(exc).__name__, exc))
    module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            hub_argument_spec(),
            license_max_chars=dict(type="int", default=4000),
            free_space_margin_ratio=dict(type="float", default=0.02),
            free_space_margin_min_bytes=dict(type="int", default=1073741824),
            rollback_copies=dict(type="int", default=1, choices=[0, 1]),
            keep=dict(type="list", elements="str", default=[]),
            prune=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    run_module(module)


if __name__ == "__main__":
    main()
