"""`model_hub` in sandbox fleet specs and inventories, and the state the sandbox serves it from."""

import sys

import pytest
import yaml
from modelhub_helpers import REPO

sys.path.insert(0, str(REPO / "tools" / "sandbox"))

from sandboxlib import model_hub  # noqa: E402
from sandboxlib.spec import SpecError, fleet_from_dict, fleet_from_inventory  # noqa: E402


def spec_dict(**overrides):
    return {"name": "t", "gateway": "10.250.0.1/24", "hosts": [{"name": "h1", "address": "10.250.0.11", "profile": "b300"}],
            **overrides}


@pytest.mark.parametrize(("value", "port"), [(None, 0), (False, 0), (True, 8090), ({"port": 8091}, 8091), ({}, 8090),
                                             ("true", 8090), ("false", 0)])
def test_model_hub_values(value, port):
    spec = fleet_from_dict(spec_dict(**({} if value is None else {"model_hub": value})))
    assert spec.model_hub_port == port and spec.model_hub == bool(port)
    assert fleet_from_dict(spec.to_dict()) == spec


@pytest.mark.parametrize("value", [{"port": 0}, {"port": 70000}, {"port": "8090"}, {"host": "x"}, "yes", 1])
def test_bad_model_hub_values_are_refused(value):
    with pytest.raises(SpecError, match="model_hub"):
        fleet_from_dict(spec_dict(model_hub=value))


def test_model_hub_cannot_take_the_vendor_repositories_port():
    with pytest.raises(SpecError, match="vendor repositories"):
        fleet_from_dict(spec_dict(vendor_repo=True, model_hub={"port": 8080}))


def test_inventory_variable(tmp_path):
    inventory = {"all": {"vars": {"gpufleet_sandbox_fleet": "inv", "gpufleet_sandbox_gateway": "10.250.1.1/24",
                                  "gpufleet_sandbox_model_hub": True},
                         "hosts": {"h1": {"ansible_host": "10.250.1.11", "gpufleet_sandbox_profile": "b300"}}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    spec = fleet_from_inventory(tmp_path)
    assert spec.model_hub_port == 8090
    assert model_hub.url(spec) == "http://10.250.1.1:8090"
    assert model_hub.state_dir(spec) == spec.state_dir / "modelhub"
    assert model_hub.status(spec) == {"url": "http://10.250.1.1:8090", "state": str(spec.state_dir / "modelhub"),
                                      "running": False}


def test_the_cache_key_follows_the_builder_source():
    assert len(model_hub.source_hash()) == 12
    assert model_hub.MODELHUB_TOOL.is_file()
