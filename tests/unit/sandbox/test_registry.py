"""The sandbox registry's configuration: bound to the fleet's gateway address, shared storage."""

import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tools" / "sandbox"))

from sandboxlib import registry  # noqa: E402
from sandboxlib.spec import fleet_from_dict  # noqa: E402


def test_the_registry_listens_on_the_gateway_only_and_keeps_images_across_fleets():
    one = fleet_from_dict({"name": "a", "gateway": "10.250.1.1/24", "registry": True,
                           "hosts": [{"name": "h1", "address": "10.250.1.11", "profile": "b300"}]})
    two = fleet_from_dict({"name": "b", "gateway": "10.250.2.1/24", "registry": True,
                           "hosts": [{"name": "h2", "address": "10.250.2.11", "profile": "b300"}]})
    first, second = yaml.safe_load(registry.config_text(one)), yaml.safe_load(registry.config_text(two))
    assert first["http"]["addr"] == "10.250.1.1:5000" and second["http"]["addr"] == "10.250.2.1:5000"
    assert first["storage"]["filesystem"]["rootdirectory"] == second["storage"]["filesystem"]["rootdirectory"] == str(registry.STORAGE)
    assert registry.status(one) == {"address": "10.250.1.1:5000", "storage": str(registry.STORAGE), "running": False}
