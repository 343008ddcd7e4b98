"""The chart gives the transceivers their backend URL by the environment (a value, or a Secret for
one holding a credential), never as an argument: the transceiver refuses a credential in a URL
on its command line (issue 21 #7). Built by the real ``transceiver serve`` option parser."""

from __future__ import annotations

import pytest

pytest.importorskip("helm_python", reason="the deploy extra: pip install -e '.[deploy]'")

import helm_python as helm

from tests.deploy.render import (
    PUBLIC,
    container,
    env_of,
    merge,
    render,
    transceiver_config,
    workload,
)

URL = "wss://bot:sk-7c1f0e9a@inference.ai.svc.cluster.local:8765/call"


def websocket(**transceiver: object) -> dict:
    return merge(PUBLIC, {"transceiver": {"backend": "websocket", **transceiver}})


def test_a_backend_url_value_goes_by_the_environment(monkeypatch):
    objects = render(websocket(backendUrl=URL))
    trx = workload(objects, "transceiver")
    assert not any("backend-url" in a or URL in a for a in container(trx)["args"])
    assert env_of(trx)["RTCEDGE_BACKEND_URL"]["value"] == URL
    assert transceiver_config(objects, monkeypatch).backend_url == URL


def test_a_backend_url_from_a_secret_is_a_reference_in_the_manifest(monkeypatch):
    objects = render(websocket(backendUrlSecret={"existingSecret": "inference"}))
    trx = workload(objects, "transceiver")
    assert env_of(trx)["RTCEDGE_BACKEND_URL"]["valueFrom"] == {
        "secretKeyRef": {"name": "inference", "key": "url"}
    }
    assert not any("backend-url" in a for a in container(trx)["args"])
    assert transceiver_config(objects, monkeypatch).backend_url == "ws://from-a-secret/"


def test_a_websocket_backend_needs_one_url_source_only():
    with pytest.raises((helm.HelmError, helm.HelmValuesError), match="backendUrl"):
        render(websocket())
    with pytest.raises(helm.HelmError, match="give one"):
        render(websocket(backendUrl=URL, backendUrlSecret={"existingSecret": "inference"}))


def test_a_realtime_backend_needs_its_url_and_goes_to_the_transceivers(monkeypatch):
    realtime = merge(PUBLIC, {"transceiver": {"backend": "realtime"}})
    with pytest.raises((helm.HelmError, helm.HelmValuesError), match="backendUrl"):
        render(realtime)
    url = "wss://models.ai.svc.cluster.local/v1/realtime?model=voice"
    objects = render(merge(realtime, {"transceiver": {"backendUrl": url}}))
    config = transceiver_config(objects, monkeypatch)
    assert (config.backend, config.backend_url) == ("realtime", url)
