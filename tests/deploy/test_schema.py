"""values.schema.json: Helm refuses values of the wrong type, range or spelling before rendering."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

pytest.importorskip("helm_python", reason="the deploy extra: pip install -e '.[deploy]'")

import helm_python as helm

from tests.deploy.render import CHART, PUBLIC, merge, render

SCHEMA = json.loads((CHART / "values.schema.json").read_text())
DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())


def rejected(values: dict[str, Any]) -> str:
    """Helm's schema error for ``values`` (validated as install and render both do)."""
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmValuesError) as err:
        chart.validate_schema(values)
    with pytest.raises(helm.HelmValuesError):
        render(values)
    return str(err.value)


def test_defaults_plus_the_public_address_are_valid():
    with helm.Chart.load(CHART) as chart:
        chart.validate_schema(PUBLIC)


def test_the_public_address_is_required():
    assert "missing property 'publicAddress'" in rejected({})


@pytest.mark.parametrize(
    ("override", "where"),
    [
        ({"relay": {"port": "3478"}}, "/relay/port"),  # a string where a number belongs
        ({"relay": {"workers": 2.5}}, "/relay/workers"),
        ({"relay": {"pin": "yes"}}, "/relay/pin"),
        ({"transceiver": {"replicas": "2"}}, "/transceiver/replicas"),
        ({"transceiver": {"drainGraceSeconds": "30s"}}, "/transceiver/drainGraceSeconds"),
        ({"relay": {"extraArgs": "--batch 64"}}, "/relay/extraArgs"),
        ({"networkPolicy": {"enabled": "true"}}, "/networkPolicy/enabled"),
        ({"clusterId": "0"}, "/clusterId"),
    ],
)
def test_a_wrong_value_type_is_rejected(override, where):
    message = rejected(merge(PUBLIC, override))
    assert f"at '{where}'" in message and "want" in message, message


@pytest.mark.parametrize(
    ("override", "where"),
    [
        ({"relay": {"mode": "nodePort"}}, "/relay/mode"),  # not one of the three modes
        ({"relay": {"port": 0}}, "/relay/port"),
        ({"relay": {"port": 70000}}, "/relay/port"),
        ({"clusterId": 256}, "/clusterId"),
        ({"transceiver": {"replicas": 0}}, "/transceiver/replicas"),
        ({"transceiver": {"idSource": "hostname"}}, "/transceiver/idSource"),
        ({"transceiver": {"backend": "sip"}}, "/transceiver/backend"),
        ({"relay": {"publicAddress": "relay.example.com:3478"}}, "/relay/publicAddress"),
        ({"relay": {"publicAddress": "2001:db8::1:3478"}}, "/relay/publicAddress"),
        ({"relay": {"transceiverIds": "all"}}, "/relay/transceiverIds"),
        ({"redis": {"url": "http://redis:6379"}}, "/redis/url"),
        ({"image": {"digest": "latest"}}, "/image/digest"),
        ({"metrics": {"serviceMonitor": {"interval": "15"}}}, "/metrics/serviceMonitor/interval"),
        ({"transceiver": {"relayNetworks": ["10.0.0.0"]}}, "/transceiver/relayNetworks/0"),
    ],
)
def test_an_out_of_range_value_is_rejected(override, where):
    assert f"at '{where}'" in rejected(merge(PUBLIC, override))


def test_a_misspelt_value_is_rejected():
    message = rejected(merge(PUBLIC, {"relay": {"wokers": 4}}))
    assert "additional properties 'wokers' not allowed" in message


def test_host_network_with_a_network_policy_needs_the_node_cidrs():
    values = merge(PUBLIC, {"relay": {"mode": "hostNetwork"}})
    assert "relayNodeCIDRs" in rejected(values)
    with helm.Chart.load(CHART) as chart:
        chart.validate_schema(
            merge(values, {"networkPolicy": {"relayNodeCIDRs": ["192.0.2.0/24"]}})
        )
        chart.validate_schema(merge(values, {"networkPolicy": {"enabled": False}}))


def test_websocket_backend_needs_its_url():
    assert "backendUrl" in rejected(merge(PUBLIC, {"transceiver": {"backend": "websocket"}}))


def _leaves(node: Any, path: tuple[str, ...] = ()):
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from _leaves(value, (*path, key))
    else:
        yield path


def _schema_at(path: tuple[str, ...]) -> dict[str, Any]:
    node = SCHEMA
    for key in path:
        if key in node.get("properties", {}):
            node = node["properties"][key]
        elif isinstance(node.get("additionalProperties"), dict):  # a typed map (labels, ...)
            node = node["additionalProperties"]
        else:
            pytest.fail(f"{'.'.join(path)} is not described by values.schema.json")
    return node


@pytest.mark.parametrize("path", list(_leaves(DEFAULTS)), ids=".".join)
def test_every_value_has_a_typed_schema(path):
    node = _schema_at(path)
    assert "type" in node or "enum" in node, ".".join(path)


def _objects(node: Any, path: str = "") -> Any:
    if isinstance(node, dict):
        if "properties" in node:
            yield path, node
        for key, value in node.items():
            yield from _objects(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _objects(value, f"{path}/{i}")


def test_no_object_of_the_schema_accepts_unknown_keys():
    """Typos fail: every object with named properties closes itself (if/then parts excepted)."""
    for path, node in _objects(SCHEMA):
        if "/allOf/" in path:
            continue
        assert node.get("additionalProperties") is False, path
