#!/usr/bin/python
# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: checkpoint_stage
short_description: Download a pinned revision into the incoming area, verify every file, and stage it
version_added: 0.1.0
description:
  - Makes C(<model_dir>/revisions/<commit>/) exist with every file of the pinned manifest (see
    M(gpufleet.serving.checkpoint_pin)), each one's sha256 (LFS files) or git blob id (small files)
    checked. It never touches C(current); M(gpufleet.serving.checkpoint_promote) does.
  - Files are fetched with C(huggingface_hub) into C(<model_dir>/incoming/<commit>/), each by its own
    child process, at most O(workers) at a time. A child whose download made no progress for
    O(stall_seconds) is killed and the file retried with exponential back-off, with Xet disabled
    when O(xet_fallback) is set; at most O(retries) retries per file.
  - A finished file is verified against the manifest and fsynced before it is recorded, and every
    rename (file into place, revision directory into C(revisions/)) is followed by an fsync of its
    directories before the verification stamp is written, so a power loss cannot leave a stamp
    that vouches for data that never reached the disk. A run that was killed goes on where it
    stopped; files it had verified are neither fetched nor hashed again.
  - Outside check mode it takes C(<model_dir>/.lock) before it reads any state, and fails at once,
    naming the holder, when another checkpoint run holds it. It then finishes the removals an
    interrupted run left (C(*.deleting.<pid>)) and reports them.
  - Before any byte is fetched, the rest of the revision plus a margin must fit in the free space
    of the filesystem while C(current) and C(previous) stay; otherwise it fails and says how much
    is missing.
  - Progress (bytes done and total, rate, ETA) is written to C(<model_dir>/incoming/<commit>.progress.json)
    and appended to C(<model_dir>/incoming/<commit>.log) about once a second; run the module with
    C(async) to watch it during a long download.
  - A staged revision that no longer verifies and is not linked as C(current) or C(previous) is
    moved back to the incoming area and only its damaged files are fetched again.
author:
  - gpufleet.serving contributors (@gpufleet)
requirements:
  - huggingface_hub >= 1.0 in the Python that runs the module
options:
  model_dir:
    description: The model's directory under the checkpoint root.
    type: path
    required: true
  repo_id:
    description: Repository id on the Hub; must match the manifest.
    type: str
    required: true
  commit:
    description: The pinned 40-hex commit; its manifest must be recorded already.
    type: str
    required: true
  endpoint:
    description: Hub endpoint or site mirror (E(HF_ENDPOINT) of the download processes).
    type: str
  token:
    description:
      - Hub token for gated or private repositories.
      - Handed to the download processes in their environment (E(HF_TOKEN)) only; never on a command line, in the
        progress file, the log or the result.
    type: str
  trust_remote_code:
    description: Whether code files are required in the revision.
    type: bool
    default: false
  workers:
    description:
      - Files downloaded at the same time.
      - With peers (fleet staging) this is the whole fleet's number of transfers from the origin, at least
        one per host; peer transfers have their own limit.
    type: int
    default: 4
  verify_workers:
    description: Files hashed at the same time.
    type: int
    default: 4
  stall_seconds:
    description: A download attempt with no new bytes for this long is killed and retried.
    type: int
    default: 120
  retries:
    description: Retries per file after failures, stalls or a wrong hash (a wrong hash is retried at most twice).
    type: int
    default: 5
  backoff_base:
    description: First back-off delay in seconds; doubles with each failure of the same file.
    type: float
    default: 2.0
  backoff_cap:
    description: Longest back-off delay in seconds.
    type: float
    default: 60.0
  disable_xet:
    description: Download over plain HTTP from the start (E(HF_HUB_DISABLE_XET)).
    type: bool
    default: false
  xet_fallback:
    description: After a stall, retry that file with Xet disabled.
    type: bool
    default: true
  small_file_bytes:
    description:
      - Files smaller than this are fetched together by one child process (one interpreter start instead
        of one per file); larger files each get their own child, watchdog and retries.
    type: int
    default: 16777216
  deadline_seconds:
    description: Give up when the whole download takes longer than this (no limit when omitted).
    type: int
  peers:
    description:
      - Fleet staging. The hosts staging this revision in the same run, this one included, each with the URL of its
        peer file service (M(gpufleet.serving.checkpoint_peer)). A file a peer holds verified is fetched from it; a
        file no peer holds comes from the origin only on the host that owns it (files are shared out by size over
        the hosts), so the origin sends about one checkpoint per run whatever the number of hosts.
      - Every file from a peer is verified against the manifest like one from the origin. A peer whose file fails is
        named in RV(refused_peers) and not asked for it again; a transfer cut off mid-file resumes from the next
        source. When a host that owns files stops answering, the live hosts share them out.
      - Files unchanged since a revision this host already holds are taken from it (reflink or copy) with or without
        peers; see RV(bytes_reused_locally).
    type: list
    elements: dict
    suboptions:
      name:
        description: The host's name (the inventory name); O(peer_name) must be one of them.
        type: str
        required: true
      url:
        description: The base URL of its peer file service, C(http://<backend address>:<port>).
        type: str
        required: true
  peer_name:
    description: This host's name in O(peers).
    type: str
  peer_token:
    description: This run's token for the peer file services (never on a command line, in the progress file or the result).
    type: str
  peer_workers:
    description: Transfers from peers at the same time (besides O(workers) from the origin).
    type: int
    default: 4
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.serving.checkpoint_space
  - gpufleet.serving.checkpoint_space.margin
attributes:
  check_mode:
    support: full
    details: Reports whether a download or repair would happen; downloads and writes nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Stage the pinned revision (watch incoming/<commit>.log while it runs)
  gpufleet.serving.checkpoint_stage:
    model_dir: /srv/models/moonshotai--Kimi-K3.1-Pro
    repo_id: moonshotai/Kimi-K3.1-Pro
    commit: 0123456789abcdef0123456789abcdef01234567
    trust_remote_code: true
    workers: 8
  async: 86400
  poll: 0
  register: stage_job
"""

RETURN = r"""
state:
  description: V(present) (already staged and verified), V(staged) (downloaded in this run), or in check mode V(would_download) or V(would_repair).
  returned: success
  type: str
revision_dir:
  description: The staged revision's directory.
  returned: success
  type: str
total_bytes:
  description: Size of the revision from the manifest.
  returned: success
  type: int
bytes_downloaded:
  description: Bytes fetched in this run (0 when nothing was missing).
  returned: success
  type: int
hub_requests:
  description: Whether any file was requested from the Hub.
  returned: success
  type: bool
files_resumed:
  description: Files a previous run had already verified and that were kept.
  returned: when a download or repair ran
  type: int
files_rehashed:
  description: Files a previous run left complete but unrecorded, hashed again instead of fetched.
  returned: when a download or repair ran
  type: int
files_to_download:
  description: Files that had to be fetched.
  returned: when a download or repair ran
  type: int
bytes_by_source:
  description: Bytes of verified files by where they came from, V(origin) or a peer's name.
  returned: when files were fetched
  type: dict
refused_peers:
  description: Files a peer sent that failed verification, each with the peer's name, the path and the problem.
  returned: when files were fetched
  type: list
  elements: dict
bytes_reused_locally:
  description: Bytes taken from revisions already on this host instead of being fetched.
  returned: when a download or repair ran
  type: int
files_reused_locally:
  description: Files taken from revisions already on this host, by how (V(reflink) or V(copy)).
  returned: when a download or repair ran
  type: dict
retries:
  description: Retries made (failures, stalls and wrong hashes).
  returned: when files were fetched
  type: int
download_seconds:
  description: Wall time of the download.
  returned: when files were fetched
  type: float
events:
  description: Per-file events (start, stall, error, corrupt, retry, verified), the last 200.
  returned: when files were fetched
  type: list
  elements: dict
space:
  description:
    - The space plan shared with the preflight gate (M(gpufleet.serving.checkpoint_space) returns the same keys); made
      before any byte is fetched.
  returned: when a download or repair ran, or would run
  type: dict
pruned_before_download:
  description: Commits (revisions and abandoned downloads) the plan counted as prunable now and that were removed before the download.
  returned: when a download or repair ran
  type: list
  elements: str
resumed_deletions:
  description: Leftovers of interrupted removals (C(*.deleting.<pid>)) that this run finished removing.
  returned: success
  type: list
  elements: str
would_resume_deletions:
  description: In check mode, the leftovers of interrupted removals that a run would finish removing.
  returned: in check mode
  type: list
  elements: str
would_prune:
  description: In check mode, the commits that would be pruned before the download.
  returned: in check mode, when a download or repair would run
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_layout import Layout, LayoutError
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_manifest import CheckpointError, is_commit_sha
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_stage import stage


def free_bytes_of(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def run_module(module):
    params = module.params
    if not is_commit_sha(params["commit"]):
        module.fail_json(msg="commit must be a 40-hex commit (pin the revision with checkpoint_pin), got %r" % params["commit"])
    options = dict((key, params[key]) for key in (
        "endpoint", "trust_remote_code", "workers", "verify_workers", "stall_seconds", "retries", "backoff_base",
        "backoff_cap", "disable_xet", "xet_fallback", "deadline_seconds", "small_file_bytes", "peers", "peer_name",
        "peer_token", "peer_workers"))
    if params["peers"]:
        names = [peer["name"] for peer in params["peers"]]
        if not params["peer_name"] or params["peer_name"] not in names or not params["peer_token"]:
            module.fail_json(msg="peers needs peer_token and peer_name, one of %s; got peer_name %r" % (names, params["peer_name"]))
    options.update({
        "token": params["token"] or None,
        "margin_ratio": params["free_space_margin_ratio"],
        "margin_min_bytes": params["free_space_margin_min_bytes"],
        "rollback_copies": params["rollback_copies"],
        "keep": params["keep"],
        "prune": params["prune"],
    })
    try:
        result = stage(Layout(params["model_dir"]), params["commit"], params["repo_id"], options, free_bytes_of,
                       check_mode=module.check_mode)
    except (CheckpointError, LayoutError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            model_dir=dict(type="path", required=True),
            repo_id=dict(type="str", required=True),
            commit=dict(type="str", required=True),
            endpoint=dict(type="str"),
            token=dict(type="str", no_log=True),
            trust_remote_code=dict(type="bool", default=False),
            workers=dict(type="int", default=4),
            verify_workers=dict(type="int", default=4),
            stall_seconds=dict(type="int", default=120),
            retries=dict(type="int", default=5),
            backoff_base=dict(type="float", default=2.0),
            backoff_cap=dict(type="float", default=60.0),
            disable_xet=dict(type="bool", default=False),
            xet_fallback=dict(type="bool", default=True),
            free_space_margin_ratio=dict(type="float", default=0.02),
            free_space_margin_min_bytes=dict(type="int", default=1073741824),
            rollback_copies=dict(type="int", default=1, choices=[0, 1]),
            keep=dict(type="list", elements="str", default=[]),
            prune=dict(type="bool", default=True),
            deadline_seconds=dict(type="int"),
            small_file_bytes=dict(type="int", default=16777216),
            peers=dict(type="list", elements="dict", options=dict(name=dict(type="str", required=True),
                                                                  url=dict(type="str", required=True))),
            peer_name=dict(type="str"),
            peer_token=dict(type="str", no_log=True),
            peer_workers=dict(type="int", default=4),
        ),
        supports_check_mode=True,
    )
    run_module(module)


if __name__ == "__main__":
    main()
