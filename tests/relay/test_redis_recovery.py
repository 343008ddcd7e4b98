"""The optional Redis flow cache: a replacement relay restores flows; Redis down is harmless."""

from __future__ import annotations

import time

import redis

from testbed.processes import RedisServer, RelayProcess
from testbed.standin import StandInTransceiver, hint_request
from tests.support.loopback import collect, udp_client
from tests.support.waits import wait_for

CLIENTS = 10


def media_until_echo(relay: RelayProcess, clients, timeout_s: float = 3.0) -> dict:
    """Every 20 ms each client without an echo yet sends RTP; returns seconds to first echo."""
    started = time.monotonic()
    waiting = {c: i for i, c in enumerate(clients)}
    firsts: dict = {}
    while waiting and time.monotonic() - started < timeout_s:
        for c, i in waiting.items():
            c.sendto(b"\x80media %d" % i, relay.address)
        got = collect(list(waiting), len(waiting), timeout_s=0.02)
        for c, packets in got.items():
            if packets:
                firsts[c] = time.monotonic() - started
        waiting = {c: i for c, i in waiting.items() if c not in firsts}
    return firsts


def test_replacement_relay_restores_flows_from_redis_without_a_stun_packet():
    with RedisServer() as rds, StandInTransceiver(2) as peer:
        first = RelayProcess({2: peer.address}, workers=1, extra_args=["--redis-url", rds.url])
        with first:
            clients = [udp_client() for _ in range(CLIENTS)]
            for c in clients:
                c.sendto(hint_request(first.keyring, first.cluster, 2)[0], first.address)
            assert all(len(v) == 1 for v in collect(clients, CLIENTS).values())
            store = redis.Redis.from_url(rds.url)
            assert wait_for(lambda: len(store.keys(f"rtcedge:{first.cluster}:flow:*")), CLIENTS)
            key = f"rtcedge:{first.cluster}:flow:127.0.0.1:{clients[0].getsockname()[1]}"
            assert store.get(key) == f"{first.cluster}:2".encode()
            assert 0 < store.ttl(key) <= 2 * 45

        # A new relay process on the same public port, another internal address, same Redis.
        second = RelayProcess(
            {2: peer.address}, workers=1, keyring=first.keyring, cluster=first.cluster,
            extra_args=["--redis-url", rds.url],
        )  # fmt: skip
        second.port = first.port
        with second:
            firsts = media_until_echo(second, clients)
            assert len(firsts) == CLIENTS, "every call recovered without any STUN packet"
            assert wait_for(
                lambda: second.metric("rtcedge_relay_flows_restored_total", source="redis"),
                CLIENTS,
            )
            assert wait_for(
                lambda: (
                    second.metric("rtcedge_relay_redis_operations_total", result="hit") >= CLIENTS
                ),
                True,
            ), "counters are published on the one-second tick"
            assert peer.relay_addresses >= {second.internal_address(0)}


def test_without_redis_a_replacement_relay_waits_for_stun():
    with StandInTransceiver(2) as peer:
        first = RelayProcess({2: peer.address}, workers=1)
        with first:
            c = udp_client()
            c.sendto(hint_request(first.keyring, first.cluster, 2)[0], first.address)
            assert len(collect([c], 1)[c]) == 1
        second = RelayProcess(
            {2: peer.address}, workers=1, keyring=first.keyring, cluster=first.cluster
        )
        second.port = first.port
        with second:
            assert media_until_echo(second, [c], timeout_s=0.5) == {}
            c.sendto(hint_request(first.keyring, first.cluster, 2)[0], second.address)
            assert len(collect([c], 1)[c]) == 1, "the next ICE check re-creates the flow"
            assert media_until_echo(second, [c], timeout_s=1.0)


def test_redis_down_costs_nothing_but_counted_errors():
    dead = RedisServer()  # never started: nothing listens on its port
    with (
        StandInTransceiver(2) as peer,
        RelayProcess({2: peer.address}, workers=1, extra_args=["--redis-url", dead.url]) as relay,
    ):
        clients = [udp_client() for _ in range(5)]
        for c in clients:
            c.sendto(hint_request(relay.keyring, relay.cluster, 2)[0], relay.address)
        assert all(len(v) == 1 for v in collect(clients, 5).values())
        for i, c in enumerate(clients):
            c.sendto(b"\x80x%d" % i, relay.address)
        assert sum(map(len, collect(clients, 5).values())) == 5, "forwarding goes on"
        assert wait_for(
            lambda: relay.metric("rtcedge_relay_redis_operations_total", result="error") > 0, True
        )
