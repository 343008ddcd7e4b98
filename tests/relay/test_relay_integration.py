"""``relay serve`` with real sockets: 2 workers, 3 stand-in transceivers, 200 loopback clients."""

from __future__ import annotations

import os
import random
import secrets
import signal
import socket
import time

import pytest

from common import encap, stun
from common.hint import NONCE_LEN, Keyring, sign_hint
from testbed.processes import RelayProcess
from testbed.standin import StandInTransceiver, hint_request
from tests.support.loopback import collect, udp_client
from tests.support.waits import wait_for

CLIENTS = 200
TRANSCEIVERS = (0, 1, 2)


@pytest.fixture
def standins():
    peers = [StandInTransceiver(tid).start() for tid in TRANSCEIVERS]
    yield peers
    for p in peers:
        p.close()


@pytest.fixture
def relay(standins):
    r = RelayProcess(
        {p.tid: p.address for p in standins},
        workers=2,
        extra_args=["--max-pending-per-prefix", "1000"],
    )
    with r:
        yield r


def open_flows(relay: RelayProcess, clients: list[socket.socket], tids: list[int]) -> None:
    for c, tid in zip(clients, tids, strict=True):
        c.sendto(hint_request(relay.keyring, relay.cluster, tid)[0], relay.address)
    replies = collect(clients, len(clients))
    for c in clients:
        assert len(replies[c]) == 1, "every client gets its Binding success through the relay"
        msg = stun.parse(replies[c][0])
        assert msg.msg_type == stun.BINDING_SUCCESS
        assert stun.xor_mapped_address(replies[c][0], msg) == c.getsockname()


def test_200_clients_reach_their_own_transceiver_and_back(relay, standins):
    clients = [udp_client() for _ in range(CLIENTS)]
    tids = [TRANSCEIVERS[i % len(TRANSCEIVERS)] for i in range(CLIENTS)]
    open_flows(relay, clients, tids)
    # DTLS-like (first byte 22) and RTP-like (first byte 0x80) packets, tagged with the client.
    for round_ in range(3):
        for i, c in enumerate(clients):
            c.sendto(bytes([22]) + f"dtls {i} {round_}".encode(), relay.address)
            c.sendto(bytes([0x80]) + f"rtp {i} {round_}".encode(), relay.address)
    echoes = collect(clients, CLIENTS * 6)
    for i, c in enumerate(clients):
        prefix = f"T{tids[i]}:".encode()
        assert sorted(echoes[c]) == sorted(
            prefix + bytes([kind]) + f"{name} {i} {r}".encode()
            for r in range(3)
            for kind, name in ((22, "dtls"), (0x80, "rtp"))
        )
    # Each stand-in saw exactly its own clients, with their real addresses in the header.
    for peer in standins:
        media = [(ip, port, p) for ip, port, p in peer.received if p[0] >= 20]
        assert len(media) == 6 * tids.count(peer.tid)
        for ip, port, payload in media:
            i = int(payload[1:].split()[1])
            assert tids[i] == peer.tid
            assert (ip, port) == clients[i].getsockname()
    # Both workers carried traffic (SO_REUSEPORT spread the 200 flows).
    for w in ("0", "1"):
        assert relay.metric("rtcedge_relay_packets_total", worker=w) > 0
    # Gauges are published on the workers' one-second tick.
    assert wait_for(lambda: relay.metric("rtcedge_relay_flows_active", table="confirmed"), CLIENTS)
    for c in clients:
        c.close()


def _rejected(relay: RelayProcess, standins, first_packet: bytes, reason: str) -> None:
    """Send a first packet and a media packet from a fresh client; nothing may be forwarded."""
    before = [len(p.received) for p in standins]
    drops_before = relay.metric("rtcedge_relay_dropped_packets_total", reason=reason)
    all_before = relay.metric("rtcedge_relay_dropped_packets_total")
    c = udp_client()
    c.sendto(first_packet, relay.address)
    c.sendto(b"\x80media", relay.address)
    c.sendto(b"\x16dtls", relay.address)
    assert wait_for(
        lambda: relay.metric("rtcedge_relay_dropped_packets_total", reason=reason) > drops_before,
        True,
    ), f"the first packet is dropped as {reason}"
    # The first packet is dropped for its reason; the two that follow find no flow.
    assert wait_for(lambda: relay.metric("rtcedge_relay_dropped_packets_total"), all_before + 3)
    time.sleep(0.1)
    assert [len(p.received) for p in standins] == before, "nothing reached any transceiver"
    assert collect([c], 1, timeout_s=0.2)[c] == [], "nothing came back"
    c.close()


def _request(ufrag: str, **kw) -> bytes:
    return stun.binding_request(f"{ufrag}:cli", secrets.token_bytes(12), **kw)


def test_forged_expired_wrongly_keyed_and_malformed_hints_forward_nothing(relay, standins):
    now = time.time()
    good = sign_hint(relay.keyring, relay.cluster, 1, now, secrets.token_bytes(NONCE_LEN))
    other_secret = Keyring({1: secrets.token_bytes(32)}, 1)
    unknown_id = Keyring({9: secrets.token_bytes(32)}, 9)
    tampered = good[:-3] + ("A" if good[-3] != "A" else "B") + good[-2:]
    cases = [
        (_request(tampered), "hint_bad_tag"),
        (_request("A" * 36), "hint_version"),
        (_request("-" * 36), "hint_malformed"),
        (_request("x" * 12), "hint_malformed"),
        (_request(sign_hint(other_secret, relay.cluster, 1, now, bytes(7))), "hint_bad_tag"),
        (_request(sign_hint(unknown_id, relay.cluster, 1, now, bytes(7))), "hint_unknown_key"),
        (
            _request(sign_hint(relay.keyring, relay.cluster, 1, now - 5 * 3600, bytes(7))),
            "hint_expired",
        ),
        (
            _request(sign_hint(relay.keyring, relay.cluster, 1, now + 3600, bytes(7))),
            "hint_future",
        ),
        (
            _request(sign_hint(relay.keyring, relay.cluster + 1, 1, now, bytes(7))),
            "unknown_cluster",
        ),
        (
            _request(sign_hint(relay.keyring, relay.cluster, 77, now, bytes(7))),
            "unknown_transceiver",
        ),
        (stun.binding_request(good, secrets.token_bytes(12)), "bad_username"),
        (_request(good)[:-8], "stun_malformed"),  # FINGERPRINT cut off: header length lies
        (
            stun.build(
                stun.BINDING_REQUEST, bytes(12), [(stun.ATTR_USERNAME, b"a:b")], None, False
            ),
            "stun_malformed",
        ),
        (b"\x00\x01" + os.urandom(60), "stun_malformed"),
        (b"\x80not a stun packet", "no_flow"),
    ]
    for packet, reason in cases:
        _rejected(relay, standins, packet, reason)


def test_metrics_health_and_readiness(relay):
    assert relay.http("/healthz")[0] == 200
    status, body = relay.http("/readyz")
    assert status == 200 and "workers 2/2" in body
    text = relay.http("/metrics")[1]
    for name in (
        "rtcedge_relay_packets_total",
        "rtcedge_relay_bytes_total",
        "rtcedge_relay_dropped_packets_total",
        "rtcedge_relay_flows_active",
        "rtcedge_relay_flows_created_total",
        "rtcedge_relay_flows_expired_total",
        "rtcedge_relay_receive_batch_packets_bucket",
        "rtcedge_relay_worker_restarts_total",
        "rtcedge_relay_workers_alive",
    ):
        assert f"\n{name}" in text, name
    assert relay.metric("rtcedge_relay_workers_alive") == 2


def test_sighup_rotates_keys_without_dropping_flows(tmp_path, standins):
    old = Keyring.generate(1)
    path = tmp_path / "keyring.json"
    path.write_text(old.to_json())
    r = RelayProcess(
        {p.tid: p.address for p in standins}, workers=1, keyring=old, keyring_path=str(path)
    )
    with r:
        live = udp_client()
        open_flows(r, [live], [0])
        rotated = Keyring({**old.keys, 2: secrets.token_bytes(32)}, 2)
        new_client = udp_client()
        new_client.sendto(hint_request(rotated, r.cluster, 1)[0], r.address)
        assert collect([new_client], 1, 0.5)[new_client] == [], "key 2 unknown before the reload"
        path.write_text(rotated.to_json())
        assert r.proc is not None
        r.proc.send_signal(signal.SIGHUP)
        assert wait_for(lambda: r.metric("rtcedge_relay_config_reloads_total"), 1, timeout_s=5)
        # Ready again once every worker applied the reloaded configuration (on its next tick).
        assert wait_for(lambda: r.http("/readyz")[0], 200)
        fresh = udp_client()
        fresh.sendto(hint_request(rotated, r.cluster, 1)[0], r.address)
        assert len(collect([fresh], 1)[fresh]) == 1, "a hint signed with the new key is routed"
        live.sendto(b"\x80still here", r.address)
        assert collect([live], 1)[live] == [b"T0:\x80still here"], "the old flow survived"
        assert wait_for(lambda: r.metric("rtcedge_relay_flows_active", table="confirmed"), 2)


def test_ipv6_clients_through_an_ipv4_internal_network(standins):
    with RelayProcess({p.tid: p.address for p in standins}, workers=2, public_host="::1") as r:
        clients = []
        for _ in range(20):
            c = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
            c.bind(("::1", 0))
            c.setblocking(False)
            clients.append(c)
        for i, c in enumerate(clients):
            c.sendto(hint_request(r.keyring, r.cluster, i % 3)[0], r.address)
        replies = collect(clients, len(clients))
        for c in clients:
            msg = stun.parse(replies[c][0])
            assert stun.xor_mapped_address(replies[c][0], msg) == c.getsockname()[:2]
        for i, c in enumerate(clients):
            c.sendto(b"\x80v6 %d" % i, r.address)
        echoes = collect(clients, len(clients))
        for i, c in enumerate(clients):
            assert echoes[c] == [b"T%d:\x80v6 %d" % (i % 3, i)]
        seen = {(ip, port) for p in standins for ip, port, _ in p.received}
        assert {c.getsockname()[:2] for c in clients} <= seen


def test_garbage_on_both_sockets_is_dropped_and_counted_without_crashing(relay, standins):
    pids = relay.worker_pids()
    rng = random.Random(7)
    c = udp_client()
    outsider = udp_client()
    for length in range(0, 1501, 7):
        first = rng.choice([0, 1, 2, 3, 20, 23, 64, 128, 191, 255, rng.randrange(256)])
        junk = bytes([first]) + rng.randbytes(length)[: max(0, length - 1)] if length else b""
        if junk[:1] == b"\xff":  # never a valid header: the relay would send to a random address
            junk = b"\xff\x00" + junk[2:]
        c.sendto(junk, relay.address)
        for w in range(2):
            # From an allowlisted transceiver (bad encapsulation) and from an unknown address.
            standins[0].sock.sendto(junk, relay.internal_address(w))
            outsider.sendto(
                encap.encapsulate(b"\x80x", *c.getsockname()), relay.internal_address(w)
            )
    big = udp_client()
    big.sendto(b"\x00\x01" + bytes(3000), relay.address)  # larger than a receive slot
    sent_internal = 2 * len(range(0, 1501, 7))
    assert wait_for(
        lambda: relay.metric("rtcedge_relay_dropped_packets_total", reason="unknown_peer"),
        sent_internal,
    )
    assert relay.metric("rtcedge_relay_dropped_packets_total", reason="encap_malformed") > 0
    assert relay.metric("rtcedge_relay_dropped_packets_total", reason="empty_or_oversize") >= 1
    assert collect([c], 1, timeout_s=0.3)[c] == [], "nothing was sent to the unknown client"
    assert relay.worker_pids() == pids
    assert relay.metric("rtcedge_relay_worker_restarts_total") == 0
