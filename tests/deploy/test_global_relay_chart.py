"""helm/rtcedge for Global Relay (docs/global-relay.md), rendered offline: an edge-only release
(relays, no transceivers) and a cluster release with an ingress for edges; the command lines
its pods would run, parsed by the real ``relay serve`` / ``transceiver serve``; the values the
chart refuses."""

from __future__ import annotations

import pytest

pytest.importorskip("helm_python", reason="the deploy extra: pip install -e '.[deploy]'")

import helm_python as helm

from relay import cli as relay_cli
from tests.deploy.render import (
    CHART,
    NAMESPACE,
    PUBLIC,
    container,
    expand,
    find,
    merge,
    notes,
    one,
    render,
    resolve_env,
    workload,
)
from transceiver import cli as transceiver_cli

# An edge in one region routing to two clusters, each with two ingress addresses (documentation
# and private ranges: nothing is ever sent there).
EDGE = {
    "clusterId": 9,
    "globalRelay": {
        "role": "edge",
        "routes": [
            {"cluster": 1, "addresses": ["10.20.0.10:3479", "10.20.0.11:3479"]},
            {"cluster": 2, "addresses": ["10.21.0.10:3479"]},
        ],
    },
    "relay": {"publicAddress": "198.51.100.7:3478"},
}
# A cluster whose relays take edges in from the backbone, and whose answers send European
# clients to their edge first.
CLUSTER = merge(
    PUBLIC,
    {
        "clusterId": 1,
        "globalRelay": {"peerIngress": {"enabled": True, "networks": ["10.30.0.0/16"]}},
        "transceiver": {
            "regions": [{"name": "eu", "addresses": ["198.51.100.7:3478"]}],
            "regionHeader": "X-Region",
            "trustedProxies": ["10.244.7.0/24"],
            "regionPrefixes": [{"cidr": "192.0.2.0/24", "region": "eu"}],
        },
    },
)


def relay_params(values: dict, monkeypatch, pod_ip: str = "10.1.2.3") -> tuple[list[str], dict]:
    """The relay container's expanded args, and what ``relay serve`` parses from them."""
    relay = workload(render(values), "relay")
    env = resolve_env(relay, pod_ip, monkeypatch)
    args = expand(container(relay)["args"], env)
    ctx = relay_cli.main.commands["serve"].make_context("serve", list(args))
    relay_cli.build_config(ctx.params)  # raises on anything the relay would refuse at start
    return args, ctx.params


def test_an_edge_release_runs_relays_only(monkeypatch):
    objects = render(EDGE)
    components = {o["metadata"]["labels"].get("app.kubernetes.io/component") for o in objects}
    assert "transceiver" not in components, "an edge has no transceivers"
    assert not find(objects, "StatefulSet")
    args, _ = relay_params(EDGE, monkeypatch)
    assert "--route=1=10.20.0.10:3479,10.20.0.11:3479" in args
    assert "--route=2=10.21.0.10:3479" in args
    assert not any(a.startswith("--transceiver") for a in args)
    assert not any(a.startswith("--peer-listen") for a in args)
    # Replies from the routed clusters' relays reach the internal ports, nothing else does.
    policy = one(objects, "NetworkPolicy", "rtcedge-relay")
    internal = next(
        r for r in policy["spec"]["ingress"] if "from" in r and r["ports"][0]["port"] == 4000
    )
    assert [p["ipBlock"]["cidr"] for p in internal["from"]] == [
        "10.20.0.10/32",
        "10.20.0.11/32",
        "10.21.0.10/32",
    ]
    assert "198.51.100.7:3478" in notes(EDGE)


def test_an_ipv6_edge_routes_to_ipv6_ingresses(monkeypatch):
    values = merge(
        EDGE,
        {
            "ipFamily": "IPv6",
            "relay": {"publicAddress": "[2001:db8::7]:3478"},
            "globalRelay": {"routes": [{"cluster": 1, "addresses": ["[fd00:20::10]:3479"]}]},
        },
    )
    args, _ = relay_params(values, monkeypatch, pod_ip="fd00::1:2:3")
    assert "--route=1=[fd00:20::10]:3479" in args
    policy = one(render(values), "NetworkPolicy", "rtcedge-relay")
    internal = next(r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] == 4000)
    assert internal["from"] == [{"ipBlock": {"cidr": "fd00:20::10/128"}}]


def test_a_cluster_release_has_an_ingress_for_edges(monkeypatch):
    objects = render(CLUSTER)
    args, _ = relay_params(CLUSTER, monkeypatch)
    assert "--peer-listen=0.0.0.0:3479" in args
    assert "--peer-network=10.30.0.0/16" in args
    assert any(a.startswith("--transceiver-dns=") for a in args)
    relay = workload(objects, "relay")
    ports = {p["name"]: p for p in container(relay)["ports"]}
    assert ports["peer-udp"] == {"name": "peer-udp", "containerPort": 3479, "protocol": "UDP"}
    service = one(objects, "Service", "rtcedge-relay-peers")
    assert service["spec"]["ports"][0]["targetPort"] == "peer-udp"
    assert service["spec"]["ports"][0]["protocol"] == "UDP"
    # Only the edges' networks reach the peer port.
    policy = one(objects, "NetworkPolicy", "rtcedge-relay")
    peer = next(r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] == 3479)
    assert peer["from"] == [{"ipBlock": {"cidr": "10.30.0.0/16"}}]
    # The public port stays open to all; the peer port is a separate rule.
    public = next(r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] == 3478)
    assert "from" not in public


def test_the_cluster_transceivers_answer_by_region(monkeypatch):
    trx = workload(render(CLUSTER), "transceiver")
    env = resolve_env(trx, "10.9.9.9", monkeypatch)
    args = ["--id", "1", *expand(container(trx)["args"], env)]
    assert "--region=eu=198.51.100.7:3478" in args
    assert "--region-header=X-Region" in args
    assert "--trusted-proxy=10.244.7.0/24" in args
    assert "--region-prefix=192.0.2.0/24=eu" in args
    assert "--no-backup-candidate" not in args
    ctx = transceiver_cli.main.commands["serve"].make_context("serve", list(args))
    transceiver_cli.build_config(ctx.params)  # raises on anything it would refuse at start
    off = merge(CLUSTER, {"transceiver": {"backupCandidate": False}})
    assert "--no-backup-candidate" in container(workload(render(off), "transceiver"))["args"]


@pytest.mark.parametrize("values", [EDGE, CLUSTER], ids=["edge", "cluster"])
def test_global_relay_releases_lint_without_warnings(values):
    report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE, kube_version="v1.30.0")
    assert not report["errors"], report
    assert not [m for m in report["messages"] if m["severity"] >= 2], report["messages"]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"globalRelay": {"role": "edge"}}, r"globalRelay\.routes is required"),
        (
            {"globalRelay": {"peerIngress": {"enabled": True}}},
            r"globalRelay\.peerIngress\.networks is required",
        ),
        (
            {"globalRelay": {"peerIngress": {"enabled": True, "networks": ["0.0.0.0/0"]}}},
            "is every address",
        ),
        (
            {"globalRelay": {"routes": [{"cluster": 0, "addresses": ["10.0.0.1:3479"]}]}},
            "own clusterId",
        ),
        ({"transceiver": {"regionHeader": "X-Region"}}, r"transceiver\.trustedProxies is required"),
        (
            {"globalRelay": {"routes": [{"cluster": 1, "addresses": ["[fd00::1]:3479"]}]}},
            "is not an IPv4 address",
        ),
        (
            {
                "globalRelay": {
                    "routes": [
                        {"cluster": 1, "addresses": ["10.0.0.1:3479"]},
                        {"cluster": 1, "addresses": ["10.0.0.2:3479"]},
                    ]
                }
            },
            "listed twice",
        ),
    ],
    ids=[
        "edge-without-routes",
        "ingress-without-networks",
        "ingress-from-anywhere",
        "own",
        "header-untrusted",
        "other-family",
        "twice",
    ],
)
def test_global_relay_values_that_cannot_work_are_refused(override, message):
    with pytest.raises(helm.HelmError, match=message):
        render(merge(PUBLIC, override))


@pytest.mark.parametrize(
    ("override", "where"),
    [
        ({"globalRelay": {"role": "core"}}, "/globalRelay/role"),
        ({"globalRelay": {"routes": [{"cluster": 300, "addresses": ["10.0.0.1:1"]}]}}, "cluster"),
        (
            {"globalRelay": {"routes": [{"cluster": 1, "addresses": ["relay.example:3479"]}]}},
            "addresses/0",
        ),
        ({"globalRelay": {"routes": [{"cluster": 1, "addresses": []}]}}, "addresses"),
        ({"globalRelay": {"peerIngress": {"networks": ["10.0.0.1"]}}}, "networks/0"),
        (
            {"transceiver": {"regions": [{"name": "eu", "addresses": ["eu.example:3478"]}]}},
            "addresses/0",
        ),
        ({"transceiver": {"regionPrefixes": [{"cidr": "192.0.2.0/24"}]}}, "regionPrefixes/0"),
    ],
)
def test_global_relay_values_are_typed(override, where):
    with pytest.raises(helm.HelmValuesError, match=where):
        render(merge(PUBLIC, override))
