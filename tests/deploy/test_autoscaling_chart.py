"""helm/rtcedge with ``transceiver.autoscaling``: the HorizontalPodAutoscaler (autoscaling/v2) or
KEDA ScaledObject for the transceiver StatefulSet, never both; the StatefulSet leaving the count
to it; the relays routing to every id the autoscaler may start (parsed by the real
``relay serve``); the values the schema or the templates refuse; and the objects valid for
Kubernetes 1.28 and the newest version kubernetes-validate knows."""

from __future__ import annotations

import re

import pytest
import yaml

pytest.importorskip("helm_python", reason="the deploy extra: pip install -e '.[deploy]'")
pytest.importorskip("kubernetes_validate", reason="the deploy extra: pip install -e '.[deploy]'")

import helm_python as helm
import kubernetes_validate
from kubernetes_validate.utils import latest_version

from tests.deploy.render import (
    CHART,
    PUBLIC,
    find,
    merge,
    notes,
    one,
    relay_config,
    render,
    workload,
)
from transceiver.metrics import TransceiverMetrics

KEDA = "keda.sh/v1alpha1"
VERSIONS = ["1.28.0", latest_version()]
UTILIZATION = "rtcedge_transceiver_session_utilization"


def autoscaling(**over) -> dict:
    return merge(PUBLIC, {"transceiver": {"autoscaling": {"enabled": True, **over}}})


def custom(provider: str) -> dict:
    return autoscaling(customMetrics={"provider": provider})


def hpa_of(objects: list[dict]) -> dict:
    return one(objects, "HorizontalPodAutoscaler", "rtcedge-transceiver")


def test_off_by_default_with_a_fixed_count():
    objects = render(PUBLIC)
    assert not find(objects, "HorizontalPodAutoscaler") and not find(objects, "ScaledObject")
    assert workload(objects, "transceiver")["spec"]["replicas"] == 2


def test_the_hpa_scales_the_statefulset_on_cpu_and_slowly_down():
    objects = render(autoscaling(minReplicas=3, maxReplicas=12))
    hpa = hpa_of(objects)
    assert hpa["apiVersion"] == "autoscaling/v2"
    sts = workload(objects, "transceiver")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "name": sts["metadata"]["name"],
    }
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 12)
    (cpu,) = hpa["spec"]["metrics"]
    assert cpu["resource"] == {
        "name": "cpu",
        "target": {"type": "Utilization", "averageUtilization": 60},
    }
    down = hpa["spec"]["behavior"]["scaleDown"]
    assert down["stabilizationWindowSeconds"] >= 600 and down["selectPolicy"] == "Min"
    assert down["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": 600}]
    assert "replicas" not in sts["spec"], "the autoscaler owns the count (offline: no lookup)"


@pytest.mark.parametrize("max_replicas", [1, 10, 40])
def test_the_relays_route_to_every_id_the_autoscaler_may_start(max_replicas, monkeypatch):
    values = autoscaling(minReplicas=1, maxReplicas=max_replicas)
    relay = relay_config(render(values), monkeypatch)
    assert relay.transceiver_ids == tuple(range(max_replicas))


def test_given_relay_ids_must_cover_max_replicas(monkeypatch):
    covering = merge(autoscaling(maxReplicas=10), {"relay": {"transceiverIds": "0-3,4,5-15"}})
    assert relay_config(render(covering), monkeypatch).transceiver_ids == tuple(range(16))
    short = merge(autoscaling(maxReplicas=10), {"relay": {"transceiverIds": "0-4,6-9"}})
    with pytest.raises(helm.HelmError, match=r"relay\.transceiverIds \(0-4,6-9\) must cover"):
        render(short)


def test_prometheus_adapter_adds_the_session_utilization_and_its_rule():
    objects = render(custom("prometheus-adapter"))
    cpu, sessions = hpa_of(objects)["spec"]["metrics"]
    assert cpu["type"] == "Resource"
    assert sessions == {
        "type": "Pods",
        "pods": {
            "metric": {"name": UTILIZATION},
            "target": {"type": "AverageValue", "averageValue": "700m"},
        },
    }
    rules = one(objects, "ConfigMap", "rtcedge-transceiver-prometheus-adapter-rules")
    (rule,) = yaml.safe_load(rules["data"]["rules.yaml"])["rules"]["custom"]
    assert rule["seriesQuery"].startswith(UTILIZATION + "{")
    assert rule["name"]["as"] == UTILIZATION
    assert rule["resources"]["overrides"]["pod"] == {"resource": "pod"}
    assert not find(objects, "ScaledObject")


def test_the_metric_the_chart_scales_on_is_the_one_the_transceiver_exports():
    names = {m.name for m in TransceiverMetrics().registry.collect()}
    assert UTILIZATION in names


def test_keda_renders_a_scaled_object_and_no_hpa():
    objects = render(custom("keda"), api_versions=(KEDA,))
    assert not find(objects, "HorizontalPodAutoscaler"), "KEDA makes its own HPA"
    scaled = one(objects, "ScaledObject", "rtcedge-transceiver")
    spec = scaled["spec"]
    assert spec["scaleTargetRef"]["kind"] == "StatefulSet"
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (2, 10)
    cpu, prom = spec["triggers"]
    assert cpu == {"type": "cpu", "metricType": "Utilization", "metadata": {"value": "60"}}
    assert prom["metricType"] == "AverageValue" and prom["metadata"]["threshold"] == "0.7"
    assert re.fullmatch(
        rf'sum\({UTILIZATION}\{{namespace="voice",pod=~"rtcedge-transceiver-\[0-9\]\+"\}}\)',
        prom["metadata"]["query"],
    )
    behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 1800
    assert "replicas" not in workload(objects, "transceiver")["spec"]


def test_keda_without_keda_in_the_cluster_is_refused():
    with pytest.raises(helm.HelmError, match=r"provider=keda needs KEDA in the cluster"):
        render(custom("keda"))


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (autoscaling(minReplicas=5, maxReplicas=4), r"minReplicas \(5\) must not exceed .*\(4\)"),
        (
            merge(custom("keda"), {"transceiver": {"autoscaling": {"enabled": False}}}),
            r"provider=keda needs transceiver\.autoscaling\.enabled=true",
        ),
    ],
)
def test_settings_the_schema_cannot_judge_are_refused_by_name(values, message):
    with pytest.raises(helm.HelmError, match=message):
        render(values, api_versions=(KEDA,))


@pytest.mark.parametrize(
    ("override", "where"),
    [
        ({"maxReplicas": 0}, "/transceiver/autoscaling/maxReplicas"),
        ({"maxReplicas": 5000}, "/transceiver/autoscaling/maxReplicas"),
        ({"minReplicas": "2"}, "/transceiver/autoscaling/minReplicas"),
        ({"targetCPUUtilizationPercentage": 0}, "/transceiver/autoscaling/targetCPU"),
        ({"targetSessionUtilization": 1.5}, "/transceiver/autoscaling/targetSession"),
        ({"customMetrics": {"provider": "datadog"}}, "/transceiver/autoscaling/customMetrics"),
        (
            {"behavior": {"scaleDown": {"policies": [{"type": "Calls", "value": 1}]}}},
            "/transceiver/autoscaling/behavior/scaleDown/policies/0",
        ),
        ({"maxReplica": 4}, "/transceiver/autoscaling"),  # misspelt
    ],
)
def test_the_schema_refuses_bad_autoscaling_values(override, where):
    values = autoscaling(**override)
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmValuesError) as err:
        chart.validate_schema(values)
    assert f"at '{where}" in str(err.value), str(err.value)


def test_notes_say_the_transceivers_are_autoscaled():
    assert "2-10 autoscaled transceivers" in notes(autoscaling())


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("provider", ["none", "prometheus-adapter"])
def test_rendered_objects_are_valid_kubernetes(provider, version):
    objects = render(custom(provider), kube_version=f"v{version.rsplit('.', 1)[0]}.0")
    assert find(objects, "HorizontalPodAutoscaler")
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("version", VERSIONS)
def test_with_keda_every_object_but_the_scaled_object_is_valid_kubernetes(version):
    """kubernetes-validate has no schema for KEDA's custom resource: skipped by kind only."""
    objects = render(
        custom("keda"), api_versions=(KEDA,), kube_version=f"v{version.rsplit('.', 1)[0]}.0"
    )
    kinds = [o["kind"] for o in objects]
    assert kinds.count("ScaledObject") == 1
    for obj in objects:
        if obj["kind"] != "ScaledObject":
            kubernetes_validate.validate(obj, version, strict=True)
