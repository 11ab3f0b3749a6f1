# Copyright (c) 2026 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every hardware profile's rendered vllm unit, scored by systemd-analyze offline (tools/vllm_units).

The units come from the role's real template and validate entry point (one ansible-playbook run for
all of them); each must stay at or below the 3.0 acceptance bound and fail no systemd-analyze check
beyond the accepted ones, so dropping any scored hardening line fails here. The start limit must hold whole load cycles, and
the IP filter must deny all but loopback and the replica's peers.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tools" / "vllm_units"))

import score  # noqa: E402
from ansible_collections.gpufleet.serving.plugins.module_utils._profiles import HARDWARE_PROFILES, MODEL_PROFILES  # noqa: E402

pytestmark = pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze (systemd 252+) is not installed")

# The checks each unit may fail, at most by this much (systemd 252), and why: anything else that adds
# exposure, or more of it, means a protection was removed. Measured with tools/vllm_units/score.py.
ACCEPTED = {
    "PrivateNetwork=": 0.5,  # it serves HTTP; IPAddressDeny/Allow narrow it instead
    "RestrictAddressFamilies=~AF_(INET|INET6)": 0.3,  # HTTP and the multi-node rendezvous
    "PrivateDevices=": 0.2,  # the GPUs (DevicePolicy=closed with the profile's DeviceAllow)
    "PrivateMounts=": 0.2,
    "PrivateUsers=": 0.2,
    "SystemCallFilter=~@resources": 0.2,  # NUMA binding and pinned memory (mbind, setrlimit)
    "DeviceAllow=": 0.1,
    "IPAddressDeny=": 0.1,  # the allow list itself (localhost, peers)
    "MemoryDenyWriteExecute=": 0.1,  # torch.compile and Triton JIT
    "ProcSubset=": 0.1,  # CPU and NUMA topology from /proc
    "RestrictAddressFamilies=~AF_NETLINK": 0.1,  # interface discovery (NCCL, Gloo)
    "RestrictAddressFamilies=~AF_UNIX": 0.1,
    "RootDirectory=/RootImage=": 0.1,
    "UMask=": 0.1,  # 0027: group-readable caches
}
# The CPU build opens no devices: PrivateDevices=yes holds there.
ACCEPTED_BY_UNIT = {name: dict(ACCEPTED) for name in score.UNITS}
del ACCEPTED_BY_UNIT["cpu_sandbox"]["PrivateDevices="]

# Lines whose loss the check must notice in every profile's unit (those systemd-analyze scores; it does
# not score KeyringMode=private, AmbientCapabilities= or a umask of 0027 against 0022).
HARDENING = (
    "NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "ProtectKernelTunables=yes",
    "ProtectKernelModules=yes", "ProtectKernelLogs=yes", "ProtectControlGroups=yes", "ProtectClock=yes",
    "ProtectHostname=yes", "ProtectProc=invisible", "RestrictNamespaces=yes", "RestrictRealtime=yes",
    "RestrictSUIDSGID=yes", "LockPersonality=yes", "RemoveIPC=yes", "CapabilityBoundingSet=",
    "SystemCallArchitectures=native", "SystemCallFilter=@system-service", "SystemCallFilter=~@privileged",
    "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK", "IPAddressDeny=any", "User=vllm",
)
# Extra renders of the same play: overrides of the start limit and an address allowed on purpose.
CASES = {
    "b300-overrides": dict(score.UNITS["b300"], vllm_ready_timeout=900, vllm_restart_sec=10, vllm_start_limit_burst=2),
    # Off loopback the role requires an API key (or vllm_allow_unauthenticated_bind).
    "b300-clients": dict(score.UNITS["b300"], vllm_host="0.0.0.0", vllm_ip_address_allow=["localhost", "192.0.2.0/24"],
                         vllm_api_key="unit-render-key"),
    "b300-bound": dict(score.UNITS["b300"], vllm_host="10.0.0.5", vllm_allow_unauthenticated_bind=True),
}


@pytest.fixture(scope="module")
def units(tmp_path_factory):
    out = tmp_path_factory.mktemp("units")
    return {name: path.read_text() for name, path in score.render(out, units=dict(score.UNITS, **CASES)).items()}


def directives(text):
    found = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            found.setdefault(key, []).append(value)
    return found


def scored(text, tmp_path, name="unit"):
    path = tmp_path / ("%s.service" % name)
    path.write_text(text)
    return score.score(path)


def unaccepted(checks, name):
    return {check: value for check, value in checks.items() if value and value > ACCEPTED_BY_UNIT[name].get(check, 0)}


def test_every_hardware_profile_and_rank_is_rendered():
    profiles = {hostvars["vllm_hardware_profile"] for hostvars in score.UNITS.values()}
    assert profiles == set(HARDWARE_PROFILES)
    assert {name for name, hostvars in score.UNITS.items() if hostvars["vllm_hardware_profile"] == "gb300"} == {"gb300-rank0", "gb300-rank1"}


@pytest.mark.parametrize("name", sorted(score.UNITS))
def test_exposure_at_most_3_and_no_protection_missing(units, tmp_path, name):
    exposure, checks, table = scored(units[name], tmp_path, name)
    assert exposure <= score.MAX_EXPOSURE, table
    assert unaccepted(checks, name) == {}, "%s: checks failing beyond the accepted ones:\n%s" % (name, table)


@pytest.mark.parametrize("line", HARDENING)
def test_removing_a_hardening_line_is_caught(units, tmp_path, line):
    for name in score.UNITS:
        text = units[name]
        assert line in text.splitlines(), "%s has no %s" % (name, line)
        weaker = "\n".join(kept for kept in text.splitlines() if kept != line) + "\n"
        assert unaccepted(scored(weaker, tmp_path, name)[1], name), "%s: dropping %s went unnoticed" % (name, line)


def test_the_tool_fails_when_a_unit_is_above_the_bound(tmp_path, monkeypatch, capsys):
    bare = "[Service]\nExecStart=/bin/true\n"

    def render(out):
        Path(out).mkdir(parents=True, exist_ok=True)
        path = Path(out) / "bare.service"
        path.write_text(bare)
        return {"bare": path}

    monkeypatch.setattr(score, "render", render)
    assert score.main(["--out", str(tmp_path / "out")]) == 1
    assert re.search(r"bare +exposure 9\.\d ABOVE 3\.0", capsys.readouterr().out)


def ready_timeout(name):
    model = score.UNITS[name].get("vllm_model_profile", "kimi-k3.1-pro")
    return MODEL_PROFILES[model]["vllm_engine_ready_timeout_s"]


@pytest.mark.parametrize("name", sorted(score.UNITS))
def test_start_limit_holds_whole_load_cycles(units, name):
    unit = directives(units[name])
    interval, burst = int(unit["StartLimitIntervalSec"][0]), int(unit["StartLimitBurst"][0])
    restart = int(unit["RestartSec"][0])
    timeout = ready_timeout(name)
    assert ("VLLM_ENGINE_READY_TIMEOUT_S=%d" % timeout) in units[name]
    # An engine that dies just as its load finishes starts again after RestartSec: `burst` such
    # cycles must fit in the interval, or the counter resets and it reloads forever.
    assert interval > burst * (timeout + restart), "%s: %d starts per %d s never trips with %d s loads" % (name, burst, interval, timeout)
    assert unit["Restart"] == ["on-failure"]


def test_start_limit_follows_the_ready_timeout_and_overrides(units):
    unit = directives(units["b300-overrides"])
    assert unit["StartLimitIntervalSec"] == [str(2 * (900 + 10 + 120))]
    assert unit["StartLimitBurst"] == ["2"]


@pytest.mark.parametrize("name, allowed", [
    ("b300", ["localhost"]),
    ("mi355x", ["localhost"]),
    ("cpu_sandbox", ["localhost"]),
    ("gb300-rank0", ["localhost", "10.0.0.1", "10.0.0.2"]),
    ("gb300-rank1", ["localhost", "10.0.0.1"]),
])
def test_ip_filter_denies_all_but_loopback_and_the_peers(units, name, allowed):
    unit = directives(units[name])
    assert unit["IPAddressDeny"] == ["any"]
    assert unit["IPAddressAllow"] == [" ".join(allowed)]


def test_an_address_allowed_on_purpose_and_the_bind_address(units):
    assert directives(units["b300-clients"])["IPAddressAllow"] == ["localhost 192.0.2.0/24"]
    # Bound to one address, the host's own probes (verify) reach the engine there.
    assert directives(units["b300-bound"])["IPAddressAllow"] == ["localhost 10.0.0.5"]


def test_a_host_name_in_the_allow_list_is_refused(tmp_path):
    with pytest.raises(RuntimeError, match=re.escape("'gateway.example' is not an IP address or prefix")):
        score.render(tmp_path, units={"b300": score.UNITS["b300"]},
                     extra_vars={"vllm_ip_address_allow": ["localhost", "gateway.example"]})
