#!/usr/bin/python
# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: checkpoint_peer
short_description: Serve this host's verified checkpoint files to the other staging hosts for one run, or stop that service
version_added: 0.1.0
description:
  - With O(state=serving), listens on O(address) and O(port) and serves, read-only, the files of the model's
    revisions that this host has verified (a stamped revision, or a file the running download recorded as verified)
    and that the pinned manifest lists; nothing else exists for it. Every request must carry O(token) as a bearer
    token; the service keeps only its sha256. Range requests let a transfer cut off mid-file resume elsewhere.
  - It runs until it receives SIGTERM or O(serve_seconds) pass; run it with C(async) and C(poll) 0. It records its
    pid (with the process's start time, so that a reused pid is never signalled) in O(run_file) once it listens,
    and removes that file when it ends.
  - With O(state=stopped), stops the service that O(run_file) names (SIGTERM, then SIGKILL after 10 s) and fails when
    anything still listens on O(port) afterwards. In check mode it reports a running service or a listener on O(port)
    as a change, which is how the drift check finds one left behind.
  - The download side is M(gpufleet.serving.checkpoint_stage) with O(gpufleet.serving.checkpoint_stage#module:peers).
author:
  - gpufleet.serving contributors (@gpufleet)
options:
  model_dir:
    description: The model's directory under the checkpoint root.
    type: path
    required: true
  state:
    description: V(serving) runs the service (until stopped); V(stopped) makes sure none runs.
    type: str
    choices: [serving, stopped]
    default: stopped
  address:
    description: The address to listen on, this host's address on the backend network. Required with O(state=serving).
    type: str
  port:
    description: The TCP port of the service.
    type: int
    default: 29600
  token:
    description:
      - This run's token; the other staging hosts send it with each request. Required with O(state=serving).
      - Never on a command line, in the run file or in the result.
    type: str
  serve_seconds:
    description: The service stops by itself after this long, even if nobody stops it.
    type: int
    default: 7200
  run_file:
    description: Where the running service records its pid, address and port.
    type: path
    required: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: With O(state=stopped), reports whether a service runs or the port is held, and stops nothing. O(state=serving) does nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Serve verified files to the other hosts of this run
  gpufleet.serving.checkpoint_peer:
    model_dir: /srv/models/moonshotai--Kimi-K3.1-Pro
    state: serving
    address: 10.40.0.11
    token: "{{ run_token }}"
    run_file: /run/gpufleet/checkpoint-peer.json
  async: 7800
  poll: 0

- name: Stop it (nothing is left listening)
  gpufleet.serving.checkpoint_peer:
    model_dir: /srv/models/moonshotai--Kimi-K3.1-Pro
    state: stopped
    run_file: /run/gpufleet/checkpoint-peer.json
"""

RETURN = r"""
was_running:
  description: With O(state=stopped), whether the service ran.
  returned: state is stopped
  type: bool
listening:
  description: With O(state=stopped), whether anything listens on O(port) after the stop (in check mode, now).
  returned: state is stopped
  type: bool
bytes_served:
  description: With O(state=serving), bytes sent to each peer address.
  returned: state is serving
  type: dict
requests_refused:
  description: With O(state=serving), requests without the run's token, per address.
  returned: state is serving
  type: dict
timed_out:
  description: With O(state=serving), whether the service ended at O(serve_seconds) rather than being stopped.
  returned: state is serving
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_layout import Layout
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_manifest import CheckpointError
from ansible_collections.gpufleet.serving.plugins.module_utils._checkpoint_peer import serve, stop


def run_module(module):
    params = module.params
    if params["state"] == "stopped":
        result = stop(params["run_file"], params["port"], check_mode=module.check_mode)
        if result["listening"] and not module.check_mode:
            module.fail_json(msg="something still listens on port %d after the peer file service was stopped" % params["port"],
                             **result)
        module.exit_json(**result)
    if module.check_mode:
        module.exit_json(changed=False)
    for name in ("address", "token"):
        if not params[name]:
            module.fail_json(msg="state=serving needs %s" % name)
    try:
        result = serve(Layout(params["model_dir"]), params["address"], params["port"], params["token"],
                       params["serve_seconds"], params["run_file"])
    except CheckpointError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            model_dir=dict(type="path", required=True),
            state=dict(type="str", choices=["serving", "stopped"], default="stopped"),
            address=dict(type="str"),
            port=dict(type="int", default=29600),
            token=dict(type="str", no_log=True),
            serve_seconds=dict(type="int", default=7200),
            run_file=dict(type="path", required=True),
        ),
        supports_check_mode=True,
    )
    run_module(module)


if __name__ == "__main__":
    main()
