#!/usr/bin/python
# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: checkpoint_verify
short_description: Read-only, offline verification of a checkpoint revision against its manifest
version_added: 0.1.0
description:
  - Checks a model revision directory kept by the C(checkpoint) role against the manifest
    recorded when the revision was pinned, without any network access. It never changes the
    host.
  - Every file the manifest lists must exist as a regular file of the listed size and content.
    Files stored in LFS on the Hub (the weights) are compared by sha256, the others by their
    git blob id. A file that differs names both hashes. Files on disk that the manifest does
    not list are problems too, except under the top-level C(.cache) directory.
  - The revision must also be servable. It needs a top-level C(config.json), a tokenizer
    vocabulary and weights. A directory with several C(.safetensors) or C(.bin) shards needs
    their index, and every shard the index names must exist. With O(trust_remote_code), the
    revision must ship Python code.
  - A fast verification (the default) uses the stamp that a full verification left. A file
    whose size, mtime, ctime and inode still match the stamp is trusted without hashing, and
    the others are hashed. A missing or unusable stamp means that everything is hashed. A deep
    verification (O(deep=true)) ignores the stamp and hashes every file. This module only
    reads stamps and never writes one.
author:
  - gpufleet.serving contributors (@gpufleet)
options:
  path:
    description:
      - The revision directory, C(<checkpoint_root>/<model>/revisions/<commit>), or a symlink to
        one such as C(<checkpoint_root>/<model>/current). Symlinks are resolved first.
    type: path
    required: true
  manifest:
    description:
      - The manifest JSON file.
      - When omitted, it is derived from the resolved directory as
        C(<model_dir>/manifests/<commit>.json). Here C(<commit>) is the directory's name and
        C(<model_dir>) is its grandparent, so C(/models/kimi/current) resolving to
        C(/models/kimi/revisions/<commit>) gives C(/models/kimi/manifests/<commit>.json).
        A directory whose name is not a 40-digit commit sha then gives a problem.
    type: path
  stamp:
    description:
      - The verification stamp that a fast verification trusts.
      - Defaults to C(<commit>.stamp.json) beside the manifest, where C(<commit>) comes from the
        manifest. A stamp made for another commit or another manifest is not used.
    type: path
  deep:
    description:
      - Hash every file and ignore the stamp.
    type: bool
    default: false
  workers:
    description:
      - The number of files hashed in parallel, at least 1. Hashing runs in threads, and C(4)
        keeps a few NVMe drives busy without taking every core of a serving node.
    type: int
    default: 4
  trust_remote_code:
    description:
      - Whether the engine will run the checkpoint's own Python code. If it will, the revision
        must ship at least one C(.py) file.
    type: bool
    default: false
  fail_on_unhealthy:
    description:
      - Fail the task when any problem is found. The failure message names the first problems,
        and the result still carries every fact.
    type: bool
    default: false
notes:
  - "Problem kinds in RV(details): V(missing), V(size_mismatch), V(hash_mismatch),
    V(unreadable), V(not_a_file) and V(extra) for files; V(index_unreadable) for a weight
    index that does not parse; V(incomplete) for the completeness rules; V(manifest_missing),
    V(manifest_invalid), V(manifest_unknown) and V(commit_mismatch) for the manifest;
    V(internal_error)."
  - Every problem makes the result unhealthy. There are no warnings.
  - A deep verification reads the whole checkpoint, which is about 1.7 TB for the default
    model. Reading speed then decides its duration (see C(docs/benchmarks.md)).
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: The module only reads. It runs fully in check mode and never reports a change.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Verify the current revision (fast, trusting the stamp)
  gpufleet.serving.checkpoint_verify:
    path: /mnt/nvme/models/kimi-k3.1-pro/current
    trust_remote_code: true
  register: checkpoint

- name: Stop when the checkpoint is damaged
  ansible.builtin.assert:
    that:
      - checkpoint.healthy
    fail_msg: "{{ checkpoint.problems | join('; ') }}"

- name: Weekly deep verification that hashes every file
  gpufleet.serving.checkpoint_verify:
    path: /mnt/nvme/models/kimi-k3.1-pro/current
    deep: true
    workers: 8
    fail_on_unhealthy: true

- name: Verify a directory kept outside the checkpoint layout
  gpufleet.serving.checkpoint_verify:
    path: /srv/staging/tiny-llama
    manifest: /srv/staging/tiny-llama.manifest.json
"""

RETURN = r"""
changed:
  description: Always V(false) because the module only reads.
  returned: always
  type: bool
  sample: false
healthy:
  description: V(true) if and only if there is no problem.
  returned: always
  type: bool
  sample: false
problems:
  description: One message for each problem. Hash mismatches name the file and both hashes.
  returned: always
  type: list
  elements: str
  sample:
    - >-
      model-00002-of-00002.safetensors: sha256 is
      bcc649cfdb8cc557053da67df7e7fcb740dcf7f721cebe1f2082597ad0d5e7d8, expected
      cea23dd4b87e8b00d19fb9ccaaef93e97353c7353e2070f3baf05aeb3995dff4
details:
  description: The problems as dicts, in the same order as RV(problems).
  returned: always
  type: list
  elements: dict
  contains:
    check:
      description: >-
        The check that found the problem, which is V(files), V(index), V(completeness),
        V(manifest) or V(internal).
      type: str
      sample: files
    path:
      description: >-
        The file concerned, relative to the revision directory, or V(null) when no single file
        is concerned.
      type: str
      sample: model-00002-of-00002.safetensors
    kind:
      description: The problem kind (see the notes).
      type: str
      sample: hash_mismatch
    expected:
      description: >-
        The value expected, which is a size in bytes or a hex digest, or V(null).
      type: raw
    found:
      description: The value found, or V(null).
      type: raw
    message:
      description: A human-readable explanation, the same text as in RV(problems).
      type: str
real_path:
  description: >-
    O(path) with symlinks resolved, which is the directory that is verified. The result has
    no C(path) key, so Ansible adds no file attributes to it.
  returned: always
  type: str
  sample: /mnt/nvme/models/kimi-k3.1-pro/revisions/4015b57a143aec5156fd1444a017a32137a3fd0f
manifest:
  description: >-
    The manifest used, or V(null) when none could be derived.
  returned: always
  type: str
  sample: /mnt/nvme/models/kimi-k3.1-pro/manifests/4015b57a143aec5156fd1444a017a32137a3fd0f.json
stamp:
  description: >-
    The stamp path looked at, or V(null) when there was no manifest to look beside.
  returned: always
  type: str
stamp_status:
  description: >-
    V(used), V(missing), V(unusable) (corrupt, or made for another commit or manifest),
    V(ignored) (deep) or V(none) (never looked at).
  returned: always
  type: str
  sample: used
commit:
  description: The commit that the manifest describes, or V(null) when no manifest loaded.
  returned: always
  type: str
  sample: 4015b57a143aec5156fd1444a017a32137a3fd0f
mode:
  description: V(deep) or V(fast).
  returned: always
  type: str
  sample: fast
files_total:
  description: The number of files that the manifest lists.
  returned: always
  type: int
  sample: 73
files_hashed:
  description: The number of files that were read and hashed.
  returned: always
  type: int
  sample: 0
bytes_hashed:
  description: The number of bytes that were read and hashed.
  returned: always
  type: int
  sample: 0
files_trusted_by_stamp:
  description: The number of files trusted because they still match the stamp.
  returned: always
  type: int
  sample: 73
extra_files:
  description: >-
    Files in the directory that the manifest does not list, outside the top-level C(.cache)
    directory.
  returned: always
  type: list
  elements: str
  sample: []
seconds:
  description: Wall-clock seconds that the verification took.
  returned: always
  type: float
  sample: 0.042
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_verify import checkpoint_verify, summary_message


def run_module(module):
    """Verify the revision and exit."""
    params = module.params
    if not params["path"].startswith("/"):
        module.fail_json(msg="path must be absolute, got %s" % params["path"])
    if params["workers"] < 1:
        module.fail_json(msg="workers must be at least 1, got %d" % params["workers"])
    result = checkpoint_verify(params["path"], manifest_path=params["manifest"], stamp_path=params["stamp"],
                               deep=params["deep"], workers=params["workers"],
                               trust_remote_code=params["trust_remote_code"])
    if params["fail_on_unhealthy"] and not result["healthy"]:
        module.fail_json(msg=summary_message(result, params["path"]), **result)
    module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            manifest=dict(type="path"),
            stamp=dict(type="path"),
            deep=dict(type="bool", default=False),
            workers=dict(type="int", default=4),
            trust_remote_code=dict(type="bool", default=False),
            fail_on_unhealthy=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    run_module(module)


if __name__ == "__main__":
    main()
