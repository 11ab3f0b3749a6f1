"""Harness checks on every host of the default scenario (testinfra, run by Molecule's verifier)."""

import os
import xml.etree.ElementTree as ET

import yaml

with open(os.environ["MOLECULE_INSTANCE_CONFIG"], encoding="utf-8") as handle:
    INSTANCES = yaml.safe_load(handle)


def test_systemd_is_pid1_and_system_is_up(host):
    assert host.run("cat /proc/1/comm").stdout.strip() == "systemd"
    state = host.run("systemctl is-system-running").stdout.strip()
    assert state in ("running", "degraded"), state
    assert host.service("ssh").is_running


def test_host_identity_is_its_own(host):
    name = host.run("hostname").stdout.strip()
    assert name in {i["instance"] for i in INSTANCES}
    # An empty template machine-id would make journald and D-Bus treat every host as one.
    machine_id = host.file("/etc/machine-id").content_string.strip()
    assert len(machine_id) == 32


def test_hosts_reach_each_other_with_jumbo_frames(host):
    assert "mtu 9000" in host.run("ip link show dev eth0").stdout
    for instance in INSTANCES:
        # 8972 bytes of payload + 28 of headers = 9000: fails unless every link carries the MTU.
        result = host.run(f"ping -c1 -W2 -M do -s 8972 {instance['address']}")
        assert result.rc == 0, f"{instance['instance']} unreachable: {result.stdout}{result.stderr}"


def test_default_route_via_the_controller(host):
    assert host.run("ip route show default").stdout.startswith("default via ")


def test_simulated_nvidia_smi_answers_with_xml(host):
    result = host.run("nvidia-smi -q -x")
    assert result.rc == 0, result.stderr
    root = ET.fromstring(result.stdout)
    assert root.tag == "nvidia_smi_log"
    assert int(root.findtext("attached_gpus")) == 8
    assert len(root.findall("gpu")) == 8
    assert len(host.run("nvidia-smi -L").stdout.strip().splitlines()) == 8
