# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the deployment playbooks (playbooks/vars/deploy.yml)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.serving.plugins.plugin_utils._deploy_replica import replica_layout


def deploy_replica(inventory_hosts, hostvars, own_host, port=29501):
    entries = []
    for host in inventory_hosts:
        variables = hostvars[host]
        address = variables.get("deploy_fabric_address") or variables.get("ansible_host") or host
        entries.append({"host": host, "replica": variables.get("deploy_replica"), "address": str(address)})
    try:
        return replica_layout(own_host, entries, port)
    except ValueError as exc:
        raise AnsibleFilterError("%s: %s" % (own_host, exc)) from exc


class FilterModule:
    def filters(self):
        return {"deploy_replica": deploy_replica}
