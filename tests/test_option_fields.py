"""Each option of ``relay serve`` and ``transceiver serve`` is declared once, on its config field
(``common.options.option``); everything else that names it is checked against that field here:
its row in the doc's option table, and the helm chart value that sets it (``chart=``), or the
chart's pass-through (``extraArgs``/``extraEnv``) when no value of its own does. A new option is
its field plus its docs row; if the chart sets it, also its value and template line.

(``tests/test_docs.py`` checks the generated ``--help`` against the same tables, defaults
included.)"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import yaml

from common.options import Option, option_fields
from relay.config import RelayConfig
from tests.deploy.render import CHART, PUBLIC, container, merge, render, workload
from tests.test_docs import DOCS, option_table
from transceiver.config import TransceiverConfig

SERVICES = {
    "relay": (RelayConfig, "relay.md"),
    "transceiver": (TransceiverConfig, "transceiver.md"),
}
PASS_THROUGH = ("extraArgs", "extraEnv")
NOT_FIELDS = {"--log-level"}  # an option of both commands that configures logging, not a config
FIELDS = [
    (service, name, spec)
    for service, (config, _) in SERVICES.items()
    for name, spec in option_fields(config)
]
# The chart's values: values.yaml, and those it requires without a default (relay.publicAddress).
VALUES = merge(yaml.safe_load((CHART / "values.yaml").read_text()), PUBLIC)
# The chart's values with every part that sets an option turned on (documentation and private
# addresses).
FULL = merge(
    VALUES,
    {
        "relay": {
            "tcp": {"enabled": True},
            "denyNetworks": ["198.18.0.0/15"],
            "allowNetworks": ["10.8.0.0/16"],
            "maxHintAgeSeconds": 7200,
        },
        "globalRelay": {
            "routes": [{"cluster": 2, "addresses": ["10.20.0.10:3479"]}],
            "peerIngress": {"enabled": True, "networks": ["10.30.0.0/16"]},
        },
        "transceiver": {
            "backend": "websocket",
            "backendUrl": "wss://inference:8765/call",
            "backendKeySecret": {"existingSecret": "inference-key"},
            "backendTls": {"caConfigMap": "inference-ca"},
            "authToken": {"existingSecret": "whip-token"},
            "maxSessions": 40,
            "trustedProxies": ["10.244.7.0/24"],
            "regions": [{"name": "eu", "addresses": ["198.51.100.7:3478"]}],
            "regionHeader": "X-Region",
            "regionPrefixes": [{"cidr": "192.0.2.0/24", "region": "eu"}],
            "backupCandidate": False,
        },
        "redis": {
            "url": "rediss://redis.example:6380/0",
            "auth": {"existingSecret": "redis-password"},
            "tls": {"caSecret": "redis-ca"},
        },
    },
)
# The transceiver's id comes from its pod name (a shell in front) or from a label (the env).
ID_SOURCES = ("podName", "podIndexLabel")


MISSING = object()


def value_at(values: dict[str, Any], path: str, missing: Any = MISSING) -> Any:
    """The chart value at a dotted path ('relay.tcp.port'); KeyError names what is missing
    (unless a ``missing`` is given)."""
    for key in path.split("."):
        if not isinstance(values, dict) or key not in values:
            if missing is not MISSING:
                return missing
            raise KeyError(f"the chart has no value {path!r}")
        values = values[key]
    return values


def with_value(values: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """``values`` with the value at ``path`` replaced."""
    head, _, rest = path.partition(".")
    return {**values, head: with_value(values[head], rest, value) if rest else value}


def settings(values: dict[str, Any], service: str) -> dict[str, list[str]]:
    """Field name -> what the service's pods get for it from the chart (``--flag=value`` or
    ``--flag`` arguments, environment entries); a transceiver's over both ways it gets its id."""
    config, _ = SERVICES[service]
    by_flag = {f: name for name, spec in option_fields(config) for f in spec.flag.split("/")}
    by_env = {
        env: name
        for name, spec in option_fields(config)
        for env in (spec.env, spec.env_secret)
        if env
    }
    found: dict[str, list[str]] = {}
    for id_source in ID_SOURCES if service == "transceiver" else ID_SOURCES[:1]:
        objects = render(merge(values, {"transceiver": {"idSource": id_source}}))
        pod = container(workload(objects, service))
        words = " ".join(pod["command"]).split() + [str(arg) for arg in pod["args"]]
        for word in words:
            flag = word.strip("'\"").split("=")[0]
            if flag.startswith("--") and flag not in NOT_FIELDS:
                assert flag in by_flag, f"the chart passes {service} {flag}: no field declares it"
                found.setdefault(by_flag[flag], []).append(word)
        for entry in pod.get("env", []):
            name = entry["name"]
            if name.startswith("RTCEDGE_"):
                assert name in by_env, f"the chart sets {name} for {service}: no field reads it"
                found.setdefault(by_env[name], []).append(repr(entry))
    return found


@functools.cache
def full_settings(service: str) -> dict[str, list[str]]:
    return settings(FULL, service)


def charted(service: str, spec: Option) -> bool:
    """Whether a value of the chart's own sets the option (not only its pass-through)."""
    return spec.chart not in {f"{service}.{key}" for key in PASS_THROUGH}


@pytest.mark.parametrize(
    ("service", "spec"),
    [(service, spec) for service, _, spec in FIELDS],
    ids=[f"{service}{spec.name}" for service, _, spec in FIELDS],
)
def test_every_option_field_is_in_its_docs_table_and_names_its_chart_value(service, spec):
    _, doc = SERVICES[service]
    table = option_table(DOCS / doc)
    for flag in spec.flag.split("/"):
        assert flag in table, f"{flag} has no row in docs/{doc}'s option table"
        assert table[flag][0] == spec.env, f"docs/{doc} gives {flag} another variable"
    if spec.env_secret:
        row = next(
            line for line in (DOCS / doc).read_text().splitlines() if f"`{spec.name}`" in line
        )
        assert spec.env_secret in row, f"docs/{doc}'s {spec.name} row: name {spec.env_secret}"
    assert spec.chart, f"{spec.name}: say which chart value sets it (chart=...), or extraArgs"
    value_at(VALUES, spec.chart)


@pytest.mark.parametrize("service", SERVICES)
def test_the_chart_sets_exactly_the_options_whose_fields_name_a_chart_value(service):
    config, _ = SERVICES[service]
    declared = {name for name, spec in option_fields(config) if charted(service, spec)}
    assert set(full_settings(service)) == declared


NUMBERS_AND_SWITCHES = [
    (service, name, spec)
    for service, name, spec in FIELDS
    if spec.chart
    and charted(service, spec)
    and type(value_at(FULL, spec.chart, None)) in (int, bool)
]


@pytest.mark.parametrize(
    ("service", "name", "spec"),
    NUMBERS_AND_SWITCHES,
    ids=[f"{service}{spec.name}" for service, _, spec in NUMBERS_AND_SWITCHES],
)
def test_changing_an_options_chart_value_changes_what_its_pods_get(service, name, spec):
    before = value_at(FULL, spec.chart)
    after = (not before) if isinstance(before, bool) else before + 1
    changed = settings(with_value(FULL, spec.chart, after), service)
    assert changed.get(name) != full_settings(service).get(name), (
        f"{spec.chart} sets no {spec.name}"
    )
