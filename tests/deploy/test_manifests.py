"""Every rendered object against the Kubernetes OpenAPI schemas (kubernetes-validate, strict),
and what the release exposes to the outside world."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("helm_python", reason="the deploy extra: pip install -e '.[deploy]'")
pytest.importorskip("kubernetes_validate", reason="the deploy extra: pip install -e '.[deploy]'")

import kubernetes_validate
from kubernetes_validate.utils import latest_version

from tests.deploy.render import CI_VALUES, MONITORING, ci_values, render

CI_NAMES = [p.name.removesuffix("-values.yaml") for p in CI_VALUES]
# Custom resources kubernetes-validate has no schema for. Skipped by kind, nothing else is.
NO_SCHEMA_KINDS = {"ServiceMonitor"}
VERSIONS = ["1.28.0", latest_version()]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", CI_NAMES)
def test_rendered_objects_are_valid_kubernetes(name, version):
    """``kubernetes-validate --strict -k VERSION`` on each object, except that a kind without a
    schema fails here (the command line only warns) unless it is named in NO_SCHEMA_KINDS."""
    objects = render(
        ci_values(name), api_versions=(MONITORING,), kube_version=f"v{version.rsplit('.', 1)[0]}.0"
    )
    kinds = {o["kind"] for o in objects}
    assert "ServiceMonitor" in kinds  # the skipped kind is really rendered, and only skipped
    checked = 0
    for obj in objects:
        if obj["kind"] in NO_SCHEMA_KINDS:
            continue
        kubernetes_validate.validate(obj, version, strict=True)
        checked += 1
    assert checked >= 10


def _selects(selector: dict[str, str], obj: dict[str, Any]) -> bool:
    labels = obj["spec"]["template"]["metadata"]["labels"]
    return bool(selector) and selector.items() <= labels.items()


def public_udp(objects: list[dict[str, Any]]) -> dict[str, list[str]]:
    """component -> the UDP ports reachable from outside the cluster, by how they are exposed:
    a Service of type LoadBalancer or NodePort (or with externalIPs) selecting its pods, a pod
    on the node's network, or a hostPort."""
    workloads = [o for o in objects if o["kind"] in ("Deployment", "DaemonSet", "StatefulSet")]
    found: dict[str, list[str]] = {}

    def component(obj: dict[str, Any]) -> str:
        return obj["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]

    for svc in (o for o in objects if o["kind"] == "Service"):
        spec = svc["spec"]
        if spec.get("type") not in ("LoadBalancer", "NodePort") and not spec.get("externalIPs"):
            continue
        for port in spec["ports"]:
            if port.get("protocol", "TCP") == "UDP":
                for w in workloads:
                    if _selects(spec.get("selector", {}), w):
                        found.setdefault(component(w), []).append(
                            f"Service {svc['metadata']['name']} {spec['type']} {port['port']}"
                        )
    for w in workloads:
        pod = w["spec"]["template"]["spec"]
        for c in pod["containers"]:
            for port in c.get("ports", []):
                if port.get("protocol", "TCP") != "UDP":
                    continue
                if pod.get("hostNetwork"):
                    found.setdefault(component(w), []).append(
                        f"hostNetwork {port['containerPort']}"
                    )
                elif port.get("hostPort"):
                    found.setdefault(component(w), []).append(f"hostPort {port['hostPort']}")
    return found


@pytest.mark.parametrize("name", CI_NAMES)
def test_relay_exposes_one_public_udp_port_and_transceivers_none(name):
    values = ci_values(name)
    exposed = public_udp(render(values, api_versions=(MONITORING,)))
    assert set(exposed) == {"relay"}, exposed  # transceivers, Redis: nothing public
    (how,) = exposed["relay"]
    mode = values["relay"]["mode"]
    port = str(values["relay"].get("service", {}).get("port", 3478))
    wanted = {
        "loadBalancer": f"Service rtcedge-relay LoadBalancer {port}",
        "hostNetwork": f"hostNetwork {values['relay'].get('port', 3478)}",
        "hostPort": f"hostPort {values['relay'].get('hostPort', 3478)}",
    }[mode]
    assert how == wanted


def test_transceiver_pods_stay_on_the_pod_network():
    for name in CI_NAMES:
        objects = render(ci_values(name))
        (sts,) = [o for o in objects if o["kind"] == "StatefulSet"]
        pod = sts["spec"]["template"]["spec"]
        assert not pod.get("hostNetwork")
        assert all("hostPort" not in p for c in pod["containers"] for p in c.get("ports", []))
        for svc in (o for o in objects if o["kind"] == "Service"):
            if svc["spec"]["selector"].get("app.kubernetes.io/component") == "transceiver":
                assert svc["spec"].get("type", "ClusterIP") == "ClusterIP"
