"""Fleet specs: parsing, validation messages and the names derived for controller objects."""

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tools" / "sandbox"))

from sandboxlib.spec import (  # noqa: E402
    IFNAME_MAX,
    SpecError,
    fleet_from_dict,
    fleet_from_inventory,
    generated_fleet,
)


def spec_dict(**overrides):
    base = {
        "name": "t",
        "gateway": "10.250.0.1/24",
        "hosts": [{"name": "h1", "address": "10.250.0.11", "profile": "b300"}],
    }
    base.update(overrides)
    return base


def test_sandbox_inventory_is_a_valid_fleet_with_every_profile():
    spec = fleet_from_inventory(REPO / "inventories" / "sandbox")
    assert spec.name == "sandbox"
    assert spec.vendor_repo  # the demo installs the driver stack from the stand-in repositories
    assert {h.profile for h in spec.hosts} == {"b300", "gb300", "mi355x", "consumer"}
    b300 = [h for h in spec.hosts if h.profile == "b300"]
    assert [h.name for h in b300] == ["b300-1", "b300-2"]
    assert all(h.mtu == 9000 for h in b300)
    trays = [h for h in spec.hosts if h.profile == "gb300"]
    assert [h.node_index for h in trays] == [0, 1]
    assert trays[0].imex_peers == ("10.231.0.21", "10.231.0.22")


def test_inventory_limit_selects_a_group():
    spec = fleet_from_inventory(REPO / "inventories" / "sandbox", limit="b300")
    assert [h.name for h in spec.hosts] == ["b300-1", "b300-2"]
    with pytest.raises(SpecError, match="matches no host or group"):
        fleet_from_inventory(REPO / "inventories" / "sandbox", limit="nonexistent")


def test_derived_interface_names_fit_the_kernel_limit_and_are_unique():
    spec = generated_fleet("a-rather-long-fleet-name", 32, "b300", "10.250.0.1/24")
    names = [spec.veth(h) for h in spec.hosts] + [spec.bridge]
    assert all(len(n) <= IFNAME_MAX for n in names)
    assert len(set(names)) == len(names)
    macs = [spec.mac(h) for h in spec.hosts]
    assert len(set(macs)) == len(macs)
    # Locally administered (bit 1) unicast (bit 0 clear) addresses never clash with real NICs.
    assert all(re.fullmatch(r"02(:[0-9a-f]{2}){5}", mac) for mac in macs)


def test_generated_fleet_refuses_more_hosts_than_addresses():
    assert len(generated_fleet("big", 253, "b300", "10.250.0.1/24").hosts) == 253
    with pytest.raises(SpecError, match="do not fit"):
        generated_fleet("big", 254, "b300", "10.250.0.1/24")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"name": "Bad_Name"}, "fleet name 'Bad_Name'"),
        ({"gateway": "10.250.0.1"}, "network of /30 or larger"),
        ({"gateway": "nonsense"}, "is not an address with prefix"),
        ({"hosts": []}, "no hosts given"),
        ({"hosts": [{"name": "h1", "address": "10.250.0.11", "profile": "h100"}]}, "profile 'h100' is not one of"),
        ({"hosts": [{"name": "h1", "address": "10.9.9.9", "profile": "b300"}]}, "not a host address in 10.250.0.0/24"),
        ({"hosts": [{"name": "h1", "address": "10.250.0.1", "profile": "b300"}]}, "already used"),
        ({"hosts": [{"name": "h1", "address": "10.250.0.11", "profile": "b300", "mtu": 100}]}, "mtu 100 is outside"),
        ({"hosts": [{"name": "h1", "address": "10.250.0.11", "profile": "b300", "model_disk_size": "3.84TB"}]},
         r"model_disk_size '3.84TB' must look like 512G or 4T \(binary\) or 3840GB"),
        (
            {"hosts": [{"name": "h1", "address": "10.250.0.11", "profile": "b300"}, {"name": "h1", "address": "10.250.0.12", "profile": "b300"}]},
            "appears twice",
        ),
    ],
)
def test_bad_specs_are_refused_naming_the_field(overrides, message):
    with pytest.raises(SpecError, match=message):
        fleet_from_dict(spec_dict(**overrides))


def test_model_disk_sizes_are_binary_or_decimal_as_truncate_reads_them():
    for size in ("64M", "4T", "3840GB"):
        spec = fleet_from_dict(spec_dict(hosts=[{"name": "h1", "address": "10.250.0.11", "profile": "b300", "model_disk_size": size}]))
        assert spec.hosts[0].model_disk_size == size


def test_spec_round_trips_through_its_dict_form():
    spec = fleet_from_dict(spec_dict())
    assert fleet_from_dict(spec.to_dict()) == spec


def test_a_fleet_may_serve_a_registry_on_its_own_port():
    spec = fleet_from_dict(spec_dict(registry=True))
    assert spec.registry is True and fleet_from_dict(spec.to_dict()) == spec
    assert fleet_from_dict(spec_dict(registry="false")).registry is False
    with pytest.raises(SpecError, match="model_hub port 5000 is the registry's port"):
        fleet_from_dict(spec_dict(registry=True, model_hub={"port": 5000}))
