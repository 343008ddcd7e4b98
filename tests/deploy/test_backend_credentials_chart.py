"""The chart gives the transceivers their backend's key and CA as files of mounted Secrets (or a
ConfigMap for the CA), never as arguments, values or variables (issue 24 #5); what the pods get
is accepted by the real ``transceiver serve`` option parser, with the files where the mounts put
them. docs/deploy.md names every ``transceiver.backend*`` value."""

from __future__ import annotations

import re

import pytest
import yaml

pytest.importorskip("helm_python", reason="the deploy extra: pip install -e '.[deploy]'")

import helm_python as helm

from tests.deploy.render import (
    CHART,
    PUBLIC,
    ROOT,
    container,
    merge,
    pod_config,
    render,
    workload,
)

URL = "wss://inference.ai.svc.cluster.local:8765/call"
KEY = "sk-from-the-secret-" + "k" * 16


def websocket(**transceiver: object) -> dict:
    return merge(
        PUBLIC, {"transceiver": {"backend": "websocket", "backendUrl": URL, **transceiver}}
    )


def volumes(pod: dict) -> dict[str, dict]:
    return {v["name"]: v for v in pod["spec"]["template"]["spec"]["volumes"]}


def mounts(pod: dict) -> dict[str, str]:
    return {m["name"]: m["mountPath"] for m in container(pod)["volumeMounts"]}


def test_the_key_is_a_file_of_the_mounted_secret(monkeypatch, tmp_path):
    objects = render(websocket(backendKeySecret={"existingSecret": "inference-key"}))
    trx = workload(objects, "transceiver")
    args = container(trx)["args"]
    assert "--backend-key-file=/etc/rtcedge/backend-key/key" in args
    assert volumes(trx)["backend-key"]["secret"] == {
        "secretName": "inference-key",
        "defaultMode": 0o440,
    }
    assert mounts(trx)["backend-key"] == "/etc/rtcedge/backend-key"
    env = {e["name"] for e in container(trx)["env"]}
    assert "RTCEDGE_BACKEND_KEY" not in env and "RTCEDGE_BACKEND_KEY_FILE" not in env
    config = pod_config(objects, monkeypatch, {"/etc/rtcedge/backend-key/key": KEY}, tmp_path)
    assert config.make_backend().config.headers() == {"Authorization": f"Bearer {KEY}"}
    custom = render(websocket(backendKeySecret={"existingSecret": "s", "secretKey": "token"}))
    assert (
        "--backend-key-file=/etc/rtcedge/backend-key/token"
        in container(workload(custom, "transceiver"))["args"]
    )


@pytest.mark.parametrize(
    ("source", "volume"),
    [
        ({"caSecret": "ca"}, {"secret": {"secretName": "ca", "defaultMode": 0o444}}),
        ({"caConfigMap": "trust", "caKey": "bundle.pem"}, {"configMap": {"name": "trust"}}),
    ],
)  # fmt: skip
def test_the_ca_is_a_file_of_a_mounted_secret_or_configmap(monkeypatch, tmp_path, source, volume):
    objects = render(websocket(backendTls=source))
    trx = workload(objects, "transceiver")
    path = f"/etc/rtcedge/backend-ca/{source.get('caKey', 'ca.crt')}"
    assert f"--backend-ca-file={path}" in container(trx)["args"]
    assert {k: v for k, v in volumes(trx)["backend-ca"].items() if k != "name"} == volume
    assert mounts(trx)["backend-ca"] == "/etc/rtcedge/backend-ca"
    config = pod_config(objects, monkeypatch, {path: "a CA bundle"}, tmp_path)
    assert config.websocket_backend_config().ca_file == str(tmp_path / path.lstrip("/"))


def test_without_them_nothing_is_mounted_or_passed():
    trx = workload(render(websocket()), "transceiver")
    assert not any(a.startswith(("--backend-key-file", "--backend-ca-file")) for a in
                   container(trx)["args"])  # fmt: skip
    assert {"backend-key", "backend-ca"}.isdisjoint(volumes(trx))


@pytest.mark.parametrize(
    ("values", "says"),
    [
        (merge(PUBLIC, {"transceiver": {"backendKeySecret": {"existingSecret": "k"}}}),
         "transceiver.backendKeySecret: the echo backend dials nothing"),
        (merge(PUBLIC, {"transceiver": {"backendTls": {"caSecret": "ca"}}}),
         "transceiver.backendTls: the echo backend dials nothing"),
        (websocket(backendTls={"caSecret": "ca", "caConfigMap": "ca"}),
         "transceiver.backendTls: set caSecret or caConfigMap, not both"),
        (websocket(backendUrl="ws://inference:8765/call", backendTls={"caSecret": "ca"}),
         "transceiver.backendTls: the CA is for a wss://"),
    ],
)  # fmt: skip
def test_credentials_that_cannot_work_refuse_to_render(values, says):
    with pytest.raises(helm.HelmError, match=re.escape(says)):
        render(values)


def test_the_realtime_and_media_streams_backends_get_them_too(monkeypatch, tmp_path):
    for backend, url in (("realtime", "wss://models.ai/v1/realtime?model=voice"),
                         ("media-streams", "wss://bot.ai/twilio")):  # fmt: skip
        objects = render(
            merge(PUBLIC, {"transceiver": {
                "backend": backend, "backendUrl": url,
                "backendKeySecret": {"existingSecret": "k"}, "backendTls": {"caSecret": "ca"},
            }})
        )  # fmt: skip
        files = {"/etc/rtcedge/backend-key/key": KEY, "/etc/rtcedge/backend-ca/ca.crt": "CA"}
        config = pod_config(objects, monkeypatch, files, tmp_path)
        assert (config.backend, config.backend_key) == (backend, KEY)
        assert config.backend_ca_file == str(tmp_path / "etc/rtcedge/backend-ca/ca.crt")


def flat(values: dict, prefix: str) -> list[str]:
    out = []
    for key, value in values.items():
        path = f"{prefix}.{key}"
        out += flat(value, path) if isinstance(value, dict) else [path]
    return out


def test_the_deploy_docs_name_every_backend_value_of_the_chart():
    transceiver = yaml.safe_load((CHART / "values.yaml").read_text())["transceiver"]
    backend = {k: v for k, v in transceiver.items() if k.startswith("backend")}
    names = flat(backend, "transceiver")
    assert {"transceiver.backendKeySecret.existingSecret", "transceiver.backendTls.caKey"} <= set(
        names
    )
    docs = (ROOT / "docs" / "deploy.md").read_text()
    assert [name for name in names if f"`{name}`" not in docs] == []


def test_a_plugin_in_the_image_is_a_backend_as_module_factory_a_typo_is_refused():
    plugin = merge(PUBLIC, {"transceiver": {"backend": "rtcedge_delay:make_backend"}})
    args = container(workload(render(plugin), "transceiver"))["args"]
    assert "--backend=rtcedge_delay:make_backend" in args
    for typo in ("websockt", "delay", "mod:"):
        with pytest.raises((helm.HelmError, helm.HelmValuesError), match="backend"):
            render(merge(PUBLIC, {"transceiver": {"backend": typo}}))
