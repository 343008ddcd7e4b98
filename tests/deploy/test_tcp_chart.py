"""helm/rtcedge with ICE over TCP (``relay.tcp``): the relays' listener, its public port in every
mode, the NetworkPolicy, and the transceivers' passive TCP candidate, parsed by the real
``relay serve`` / ``transceiver serve``."""

from __future__ import annotations

import pytest

pytest.importorskip("helm_python", reason="the deploy extra: pip install -e '.[deploy]'")

from tests.deploy.render import (
    PUBLIC,
    ci_values,
    container,
    find,
    merge,
    one,
    relay_config,
    render,
    transceiver_config,
    workload,
)

TCP_ON = {"relay": {"tcp": {"enabled": True}}}


def test_tcp_is_off_by_default(monkeypatch):
    objects = render(PUBLIC)
    assert relay_config(objects, monkeypatch).listen_tcp is None
    assert transceiver_config(objects, monkeypatch).advertise_tcp is None


@pytest.mark.parametrize(
    ("mode", "extra", "public_port"),
    [
        ("loadBalancer", {}, 443),
        ("loadBalancer", {"tcp": {"servicePort": 8443}}, 8443),
        ("hostPort", {"tcp": {"hostPort": 3443}}, 3443),
        ("hostPort", {}, 443),
    ],
)
def test_the_relay_listens_and_answers_name_the_public_tcp_address(
    mode, extra, public_port, monkeypatch
):
    values = merge(merge(PUBLIC, TCP_ON), {"relay": {"mode": mode, **extra}})
    objects = render(values)
    relay = relay_config(objects, monkeypatch)
    assert relay.listen_tcp == ("0.0.0.0", 443)
    trx = transceiver_config(objects, monkeypatch)
    assert trx.advertise_tcp == ("203.0.113.10", public_port)
    ports = {p["name"]: p for p in container(workload(objects, "relay"))["ports"]}
    assert ports["relay-tcp"]["protocol"] == "TCP"
    assert ports["relay-tcp"]["containerPort"] == 443
    if mode == "hostPort":
        assert ports["relay-tcp"]["hostPort"] == public_port
    else:
        service = one(objects, "Service", "rtcedge-relay")
        by_name = {p["name"]: p for p in service["spec"]["ports"]}
        assert by_name["relay-tcp"] == {
            "name": "relay-tcp",
            "protocol": "TCP",
            "port": public_port,
            "targetPort": "relay-tcp",
        }
        assert by_name["relay-udp"]["protocol"] == "UDP"  # one Service, one IP, both ports


def test_the_network_policy_opens_the_tcp_port():
    objects = render(merge(PUBLIC, TCP_ON))
    policy = next(p for p in find(objects, "NetworkPolicy") if "relay" in p["metadata"]["name"])
    open_ports = [
        (p["protocol"], p["port"])
        for rule in policy["spec"]["ingress"]
        if "from" not in rule
        for p in rule["ports"]
    ]
    assert ("TCP", 443) in open_ports and ("UDP", 3478) in open_ports


def test_a_given_public_tcp_address_wins(monkeypatch):
    values = merge(merge(PUBLIC, TCP_ON), {"relay": {"tcp": {"publicAddress": "198.51.100.9:443"}}})
    trx = transceiver_config(render(values), monkeypatch)
    assert trx.advertise_tcp == ("198.51.100.9", 443)


def test_a_low_tcp_port_on_host_network_adds_net_bind_service():
    values = merge(
        ci_values("hostnetwork"), {"relay": {"port": 3478, "tcp": {"enabled": True, "port": 443}}}
    )
    c = container(workload(render(values), "relay"))
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}
