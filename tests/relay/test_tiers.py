"""Relay tiers with real processes on loopback: an edge relay routes a hint for another cluster
to that cluster's relay ingress (--route, --peer-listen), which forwards it to the transceiver
and sends the replies back through the edge."""

from __future__ import annotations

import os
import signal
import socket

import pytest
import redis

from common import encap, stun
from relay.flows import route_id
from testbed.ports import free_port
from testbed.processes import RedisServer, RelayProcess
from testbed.standin import StandInTransceiver, hint_request
from tests.support.loopback import drain, udp
from tests.support.waits import wait_for

CLUSTER = 1
EDGE_CLUSTER = 9
DROPS = "rtcedge_relay_dropped_packets_total"
PACKETS = "rtcedge_relay_packets_total"


@pytest.fixture
def standin():
    with StandInTransceiver(0) as t:
        yield t


@pytest.fixture
def cluster_relay(standin):
    with RelayProcess(
        {0: standin.address}, cluster=CLUSTER, peer_networks=("127.0.0.0/8",)
    ) as relay:
        yield relay


def edge_of(cluster_relay: RelayProcess, *routes: tuple[str, int], **kw) -> RelayProcess:
    return RelayProcess(
        {},
        cluster=EDGE_CLUSTER,
        keyring=cluster_relay.keyring,
        routes={CLUSTER: list(routes)},
        **kw,
    )


def stun_through(relay: RelayProcess, client: socket.socket, cluster: int = CLUSTER) -> bool:
    """A valid-hint Binding request to ``relay``; True when the success came back from its
    public address, naming the client."""
    client.sendto(hint_request(relay.keyring, cluster, 0)[0], relay.address)
    try:
        reply, source = client.recvfrom(4096)
    except TimeoutError:
        return False
    msg = stun.parse(reply)
    assert msg.msg_type == stun.BINDING_SUCCESS
    assert stun.xor_mapped_address(reply, msg) == client.getsockname()
    assert source[:2] == relay.address, "the reply leaves from the edge's public port"
    return True


def media_both_ways(edge: RelayProcess, client: socket.socket, standin: StandInTransceiver) -> None:
    for i in range(5):
        client.sendto(b"\x80rtp %d" % i, edge.address)
        reply, source = client.recvfrom(4096)
        assert reply == b"T0:\x80rtp %d" % i
        assert source[:2] == edge.address
    assert (*client.getsockname(), b"\x80rtp 4") in standin.received


def first_echo(edge: RelayProcess, client: socket.socket) -> bytes | None:
    """RTP (never STUN) through ``edge`` every ~20 ms until one comes back, at most ~2 s
    (``client`` with a short timeout)."""
    for i in range(100):
        client.sendto(b"\x80rtp %d" % i, edge.address)
        try:
            return client.recv(4096)
        except TimeoutError:
            continue
    return None


def test_a_hint_for_another_cluster_reaches_its_transceiver_through_the_edge(
    cluster_relay, standin
):
    with edge_of(cluster_relay, cluster_relay.peer_address) as edge:
        client = udp(timeout_s=2.0)
        assert stun_through(edge, client)
        # The transceiver saw the client's own address in the header, from the cluster relay.
        ip, port, payload = standin.received[0]
        assert (ip, port) == client.getsockname() and payload[0] < 4
        assert standin.relay_of_client[(ip, port)][1] in (
            cluster_relay.internal_base,
            cluster_relay.internal_base + 1,
        )
        media_both_ways(edge, client, standin)
        # Counted by peer: the edge's route, the cluster relay's edges.
        assert wait_for(lambda: edge.metric(PACKETS, peer=f"cluster_{CLUSTER}") >= 12, True)
        assert edge.metric(PACKETS, peer="transceiver") == 0
        assert cluster_relay.metric(PACKETS, peer="edge") >= 12
        # The edge journals its flow to the route like any other (one confirmed flow).
        assert wait_for(lambda: edge.metric("rtcedge_relay_flows_active", table="confirmed"), 1)
        assert wait_for(
            lambda: cluster_relay.metric("rtcedge_relay_flows_active", table="peer_confirmed"), 1
        )
        client.close()


def test_a_route_fails_over_to_its_next_address_when_the_first_is_down(cluster_relay, standin):
    dead = ("127.0.0.1", free_port())  # nothing listens there
    with edge_of(
        cluster_relay,
        dead,
        cluster_relay.peer_address,
        extra_args=["--route-probe-interval", "0.2"],
    ) as edge:
        # Three unanswered probes (0.6 s) and each worker moves to the second address.
        assert wait_for(lambda: edge.metric("rtcedge_relay_route_failovers_total"), 2, 5.0)
        client = udp(timeout_s=2.0)
        assert stun_through(edge, client)
        media_both_ways(edge, client, standin)
        client.close()


def test_a_hint_for_an_unknown_cluster_is_dropped_and_counted(cluster_relay, standin):
    with edge_of(cluster_relay, cluster_relay.peer_address) as edge:
        client = udp()
        assert not stun_through(edge, client, cluster=5)
        assert wait_for(lambda: edge.metric(DROPS, reason="unknown_cluster"), 1)
        assert standin.received == []
        client.close()


def test_an_edge_refuses_encapsulated_datagrams_from_outside_its_routes(cluster_relay, standin):
    """An edge takes encapsulated datagrams only from its routes' addresses: one "from" another
    source, naming a live client, is dropped and counted on every socket it can reach, and the
    client hears nothing of it (no spoofed reply, no re-pointed flow)."""
    with edge_of(cluster_relay, cluster_relay.peer_address, workers=1) as edge:
        client = udp(timeout_s=2.0)
        assert stun_through(edge, client)
        media_both_ways(edge, client, standin)
        forged = encap.encapsulate(b"\x80forged", *client.getsockname())
        intruder = udp()
        for target in (edge.internal_address(0), edge.address):
            for _ in range(5):
                intruder.sendto(forged, target)
        assert wait_for(lambda: edge.metric(DROPS, reason="unknown_peer"), 5)
        assert wait_for(lambda: edge.metric(DROPS, reason="no_flow"), 5)  # public: not STUN
        client.settimeout(0.5)
        assert drain(client) == [], "a forged datagram reached the client"
        media_both_ways(edge, client, standin)  # the flow still goes to the cluster
        intruder.close()
        client.close()


def test_a_looping_map_stops_at_the_hop_limit(standin):
    # A routes cluster 2 to B's ingress, B routes it to A's: a misconfiguration.
    a = RelayProcess({0: standin.address}, cluster=8, peer_networks=("127.0.0.0/8",))
    b = RelayProcess(
        {0: standin.address}, cluster=9, keyring=a.keyring, peer_networks=("127.0.0.0/8",)
    )
    a.routes = {2: [b.peer_address]}
    b.routes = {2: [a.peer_address]}
    with a, b:
        client = udp()
        assert not stun_through(a, client, cluster=2)
        drops = lambda: a.metric(DROPS, reason="hop_limit") + b.metric(DROPS, reason="hop_limit")  # noqa: E731
        assert wait_for(drops, 1)
        # Edge A sent it with hop limit 4: B, A and B again forwarded it (3, 2, 1), A dropped it.
        forwarded = lambda: a.metric(PACKETS, peer="edge") + b.metric(PACKETS, peer="edge")  # noqa: E731
        assert wait_for(forwarded, 3)
        assert standin.received == []
        client.close()


def test_the_peer_ingress_refuses_sources_outside_its_peer_networks(standin):
    with RelayProcess(
        {0: standin.address}, cluster=CLUSTER, peer_networks=("127.0.0.1/32",)
    ) as relay:
        first = hint_request(relay.keyring, CLUSTER, 0)[0]
        outsider = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        outsider.bind(("127.0.0.2", 0))
        outsider.sendto(encap.encapsulate(first, "198.51.100.7", 4000), relay.peer_address)
        assert wait_for(lambda: relay.metric(DROPS, reason="peer_denied"), 1)
        assert standin.received == []
        # The same datagram from inside the peer network goes through.
        insider = udp()
        insider.sendto(encap.encapsulate(first, "198.51.100.7", 4000), relay.peer_address)
        reply = insider.recv(4096)
        header, offset = encap.decode_header(reply)
        assert (header.client_ip, header.client_port) == ("198.51.100.7", 4000)
        assert stun.parse(reply[offset:]).msg_type == stun.BINDING_SUCCESS
        outsider.close()
        insider.close()


def test_an_edge_replaced_with_redis_restores_its_flows_without_a_stun_packet(standin):
    # One cluster relay worker: the new edge's internal ports hash its datagrams to some worker
    # of --peer-listen's SO_REUSEPORT group, and peer flows are per worker (docs/relay.md).
    cluster_relay = RelayProcess(
        {0: standin.address}, cluster=CLUSTER, workers=1, peer_networks=("127.0.0.0/8",)
    )
    with RedisServer() as rds, cluster_relay:
        redis_args = ["--redis-url", rds.url]
        first = edge_of(cluster_relay, cluster_relay.peer_address, extra_args=redis_args)
        client = udp(timeout_s=0.2)
        with first:
            assert stun_through(first, client)
            store = redis.Redis.from_url(rds.url)
            key = f"rtcedge:{EDGE_CLUSTER}:flow:127.0.0.1:{client.getsockname()[1]}"
            # The route's target id (65536 + cluster) is what Redis keeps for the edge's flow.
            assert wait_for(lambda: store.get(key), f"{EDGE_CLUSTER}:{route_id(CLUSTER)}".encode())
        # A new edge process on the same public port, another internal address, same Redis.
        second = edge_of(cluster_relay, cluster_relay.peer_address, extra_args=redis_args)
        second.port = first.port
        with second:
            echoed = first_echo(second, client)
            assert echoed and echoed.startswith(b"T0:\x80rtp"), "recovered without STUN"
            assert second.metric("rtcedge_relay_flows_restored_total", source="redis") >= 1
        client.close()


def resumes_without_stun(
    edge: RelayProcess, client: socket.socket, cluster_relay: RelayProcess, source: str
) -> None:
    """Media through ``edge`` comes back, with no STUN sent, by a peer flow ``cluster_relay``
    restored from ``source`` (journal or redis)."""
    client.settimeout(0.02)
    echoed = first_echo(edge, client)
    assert echoed and echoed.startswith(b"T0:\x80rtp"), "recovered without STUN"
    restored = cluster_relay.metric(
        "rtcedge_relay_flows_restored_total", table="peer", source=source
    )
    assert restored == 1


def test_a_killed_cluster_relay_worker_restores_its_peer_flows_from_the_journal(standin):
    cluster_relay = RelayProcess(
        {0: standin.address}, cluster=CLUSTER, workers=2, peer_networks=("127.0.0.0/8",)
    )
    with cluster_relay, edge_of(cluster_relay, cluster_relay.peer_address) as edge:
        client = udp(timeout_s=2.0)
        assert stun_through(edge, client)
        media_both_ways(edge, client, standin)
        # The worker that carries the call: the one whose internal port the transceiver saw.
        worker = standin.relay_of_client[client.getsockname()][1] - cluster_relay.internal_base
        victim = cluster_relay.worker_pids()[worker]
        os.kill(victim, signal.SIGKILL)
        restarts = lambda: cluster_relay.metric(  # noqa: E731
            "rtcedge_relay_worker_restarts_total", worker=str(worker)
        )
        assert wait_for(restarts, 1)
        resumes_without_stun(edge, client, cluster_relay, "journal")
        assert cluster_relay.metric(DROPS, reason="no_flow") == 0
        client.close()


def test_a_cluster_relay_replaced_with_redis_restores_its_peer_flows_on_the_first_media(standin):
    with RedisServer() as rds:
        redis_args = ["--redis-url", rds.url]
        first = RelayProcess(
            {0: standin.address},
            cluster=CLUSTER,
            peer_networks=("127.0.0.0/8",),
            extra_args=redis_args,
        )
        second = RelayProcess(
            {0: standin.address},
            cluster=CLUSTER,
            keyring=first.keyring,
            peer_networks=("127.0.0.0/8",),
            extra_args=[*redis_args, "--takeover"],
        )
        second.port, second.peer_port = first.port, first.peer_port
        client = udp(timeout_s=2.0)
        try:
            first.start()
            with edge_of(first, first.peer_address) as edge:
                assert stun_through(edge, client)
                media_both_ways(edge, client, standin)
                # Written behind under the client's key, as a client flow of this cluster is.
                store = redis.Redis.from_url(rds.url)
                key = f"rtcedge:{CLUSTER}:flow:127.0.0.1:{client.getsockname()[1]}"
                assert wait_for(lambda: store.get(key), f"{CLUSTER}:0".encode())
                # A new cluster relay process on the same public and peer ports, then the old
                # one gone: its peer flows with it.
                second.start()
                first.stop()
                resumes_without_stun(edge, client, second, "redis")
                # The edge's next datagrams (the replies, too) follow the restored flow.
                client.settimeout(0.3)
                drain(client)  # echoes of the probing packets still on their way
                client.settimeout(2.0)
                media_both_ways(edge, client, standin)
        finally:
            second.stop()
            first.stop()
            client.close()
