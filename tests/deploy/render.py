"""Render helm/rtcedge offline with Helm's own engine, and read what it made.

Helm comes from the PyPI package ``helm-python-sdk`` (Helm's Go SDK behind a C ABI, called
through ctypes): no helm binary, no cluster. ``Chart.render`` exposes only the release name,
namespace and install/upgrade flags, while the C ABI's render options also take
``kube_version`` and ``api_versions`` - what ``helm template --kube-version --api-versions``
set - so ``render`` calls it directly (helm-python-sdk is pinned to the version this was
checked against). ``lookup`` finds nothing offline, as in ``helm template``. Without the
deploy extra, rendering skips the test, naming the extra.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from relay import cli as relay_cli
from tests.deploy.paths import CHART, ROOT  # noqa: F401 - ROOT: the tests take it from here
from transceiver import cli as transceiver_cli

DEPLOY_EXTRA = "the deploy extra: pip install -e '.[deploy]'"

CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
RELEASE = "rtcedge"
NAMESPACE = "voice"
MONITORING = "monitoring.coreos.com/v1"
# The values a user must always set: the relays' public address (a documentation address, RFC
# 5737) and, relays being pods by default, the pod CIDR they send to the transceivers from.
PUBLIC = {
    "relay": {"publicAddress": "203.0.113.10:3478"},
    "transceiver": {"relayNetworks": ["10.244.0.0/16"]},
}


# What a Secret holds in a test, for the variables whose form is checked at start.
FROM_SECRETS = {"RTCEDGE_BACKEND_URL": "ws://from-a-secret/"}


def ci_values(name: str) -> dict[str, Any]:
    """The values of helm/rtcedge/ci/<name>-values.yaml."""
    return yaml.safe_load((CHART / "ci" / f"{name}-values.yaml").read_text()) or {}


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Deep merge, ``over`` winning (what several ``-f`` files or ``--set`` do)."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def render_files(
    values: dict[str, Any],
    *,
    api_versions: tuple[str, ...] = (),
    kube_version: str = "v1.28.0",
    release: str = RELEASE,
    namespace: str = NAMESPACE,
    is_install: bool = True,
) -> dict[str, str]:
    """Template path -> rendered text, as ``helm install --dry-run`` (or ``upgrade``) would
    render it."""
    opts = {
        "name": release,
        "namespace": namespace,
        "is_install": is_install,
        "is_upgrade": not is_install,
        "kube_version": kube_version,
        "api_versions": list(api_versions),
    }
    # Imported here: a module that only reads values (tests/test_option_fields.py) loads without
    # the extra, and its rendering tests skip naming it.
    helm = pytest.importorskip("helm_python", reason=DEPLOY_EXTRA)
    from helm_python import _native

    with helm.Chart.load(CHART) as chart:
        rendered = _native.call_string(
            "helm_render", chart._raw(), json.dumps(values), json.dumps(opts)
        )
    return json.loads(rendered)


def render(values: dict[str, Any], **kw: Any) -> list[dict[str, Any]]:
    """Every Kubernetes object the chart renders (NOTES.txt excluded)."""
    objects = []
    for path, text in sorted(render_files(values, **kw).items()):
        if path.endswith("NOTES.txt"):
            continue
        objects += [doc for doc in yaml.safe_load_all(text) if doc]
    return objects


def notes(values: dict[str, Any], **kw: Any) -> str:
    return next(t for p, t in render_files(values, **kw).items() if p.endswith("NOTES.txt"))


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict]:
    return [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = find(objects, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


def workload(objects: list[dict[str, Any]], component: str) -> dict[str, Any]:
    """The Deployment/DaemonSet/StatefulSet of a component (relay, transceiver, redis)."""
    found = [
        o
        for o in objects
        if o["kind"] in ("Deployment", "DaemonSet", "StatefulSet")
        and o["metadata"]["labels"].get("app.kubernetes.io/component") == component
    ]
    assert len(found) == 1, f"expected one {component} workload, got {len(found)}"
    return found[0]


def container(obj: dict[str, Any]) -> dict[str, Any]:
    (only,) = obj["spec"]["template"]["spec"]["containers"]
    return only


def env_of(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container(obj).get("env", [])}


def resolve_env(obj: dict[str, Any], pod_ip: str, monkeypatch: Any) -> dict[str, str]:
    """The container's environment with the downward API filled in as the kubelet would."""
    for key in [k for k in os.environ if k.startswith("RTCEDGE_")]:
        monkeypatch.delenv(key)
    env: dict[str, str] = {}
    for name, entry in env_of(obj).items():
        if "value" in entry:
            env[name] = expand([entry["value"]], env)[0]  # only variables defined before it
            continue
        ref = entry["valueFrom"]
        if "fieldRef" in ref:
            env[name] = {
                "status.podIP": pod_ip,
                "metadata.name": "rtcedge-transceiver-1",
                "metadata.labels['apps.kubernetes.io/pod-index']": "1",
            }[ref["fieldRef"]["fieldPath"]]
        else:  # a Secret's value, well-formed where the option checks its form
            env[name] = FROM_SECRETS.get(name, "from-a-secret")
    for name, value in env.items():
        if name.startswith("RTCEDGE_"):
            monkeypatch.setenv(name, value)
    return env


def expand(args: list[str], env: dict[str, str]) -> list[str]:
    """The kubelet's $(VAR) expansion in command and args."""
    out = []
    for arg in args:
        for name, value in env.items():
            arg = arg.replace(f"$({name})", value)
        out.append(arg)
    return out


def relay_config(objects: list[dict[str, Any]], monkeypatch: Any) -> Any:
    """The RelayConfig the relay pod's command line makes, built by the real ``relay serve``."""
    relay = workload(objects, "relay")
    args = expand(container(relay)["args"], resolve_env(relay, "10.1.2.3", monkeypatch))
    serve = relay_cli.main.commands["serve"]
    return relay_cli.build_config(serve.make_context("serve", list(args)).params)


def transceiver_config(objects: list[dict[str, Any]], monkeypatch: Any) -> Any:
    """The TransceiverConfig of transceiver pod 1, built by the real ``transceiver serve``."""
    trx = workload(objects, "transceiver")
    c = container(trx)
    args = expand(c["args"], resolve_env(trx, "10.9.9.9", monkeypatch))
    if c["command"][0] == "/bin/sh":
        args = ["--id", "1", *args]
    serve = transceiver_cli.main.commands["serve"]
    return transceiver_cli.build_config(serve.make_context("serve", list(args)).params)


def pod_config(objects: list[dict[str, Any]], monkeypatch: Any, files: dict[str, str], root: Path):
    """The TransceiverConfig of transceiver pod 1 with its mounted files (mount path -> content)
    written under ``root`` and the arguments pointed there: what reads a file at start (a
    backend's key) reads it."""
    trx = workload(objects, "transceiver")
    args = expand(container(trx)["args"], resolve_env(trx, "10.9.9.9", monkeypatch))
    for path, content in files.items():
        local = root / path.lstrip("/")
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(content)
        args = [arg.replace(f"={path}", f"={local}") for arg in args]
    serve = transceiver_cli.main.commands["serve"]
    return transceiver_cli.build_config(serve.make_context("serve", ["--id", "1", *args]).params)
