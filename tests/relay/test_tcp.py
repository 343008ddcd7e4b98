"""ICE over TCP at the relay (``--listen-tcp``), with real relay processes, real TCP sockets and
stand-in transceivers: RFC 4571 frames in, encapsulated datagrams with FLAG_TCP out, replies
framed back onto the same connection; malformed framing closes and is counted."""

from __future__ import annotations

import os
import secrets
import signal
import socket
from pathlib import Path

import pytest

from common import encap, stun
from relay.framing import frame
from testbed.processes import RelayProcess
from testbed.standin import StandInTransceiver, hint_request
from tests.support.loopback import FramedClient, collect, udp_client
from tests.support.waits import wait_for

TID = 3


@pytest.fixture
def standin():
    with StandInTransceiver(TID) as s:
        yield s


@pytest.fixture
def relay(standin):
    with RelayProcess(
        {TID: standin.address},
        workers=2,
        tcp=True,
        extra_args=["--tcp-pending-timeout", "1", "--tcp-write-buffer", "16384"],
    ) as r:
        yield r


def closed(relay: RelayProcess, reason: str) -> float:
    return relay.metric("rtcedge_relay_tcp_connections_closed_total", reason=reason)


def tcp_drops(relay: RelayProcess, reason: str) -> float:
    return relay.metric("rtcedge_relay_dropped_packets_total", reason=reason, transport="tcp")


def connected(relay: RelayProcess, **kw) -> FramedClient:
    """A client whose hinted Binding request was admitted and answered over TCP."""
    client = FramedClient(relay.tcp_address, **kw)
    request, _ = hint_request(relay.keyring, relay.cluster, TID)
    client.send(request)
    (reply,) = client.frames(1)
    msg = stun.parse(reply)
    assert msg.msg_type == stun.BINDING_SUCCESS
    assert stun.xor_mapped_address(reply, msg) == client.address  # the TCP connection's
    return client


def test_a_hinted_binding_request_over_tcp_reaches_the_transceiver_flagged_and_is_answered(
    relay, standin
):
    client = connected(relay)
    assert standin.received[-1][:2] == client.address
    assert standin.received_flags[-1] == encap.FLAG_TCP
    # Then DTLS and RTP, both ways, on the same connection.
    client.send(b"\x16dtls hello, ok")
    client.send(b"\x80rtp 1 of many")
    assert client.frames(2) == [b"T3:\x16dtls hello, ok", b"T3:\x80rtp 1 of many"]
    assert standin.received_flags[-2:] == [encap.FLAG_TCP] * 2
    relay_worker = standin.relay_of_client[client.address]
    standin.send_to_client(relay_worker, client.address, b"\x80from T3", flags=encap.FLAG_TCP)
    assert client.frames(1) == [b"\x80from T3"]
    sent = relay.metric("rtcedge_relay_packets_total", transport="tcp")
    assert sent == 3 + 4  # request, dtls, rtp in; success, two echoes, one push out
    assert relay.metric("rtcedge_relay_bytes_total", transport="tcp") > 0
    # UDP flows are served beside it as before.
    udp = udp_client()
    udp.sendto(hint_request(relay.keyring, relay.cluster, TID)[0], relay.address)
    assert len(collect([udp], 1)[udp]) == 1
    udp.close()
    client.close()


def test_ipv6_clients_over_tcp_through_an_ipv4_internal_network(standin):
    with RelayProcess({TID: standin.address}, workers=1, public_host="::1", tcp=True) as r:
        client = connected(r)
        assert standin.received[-1][:2] == client.address
        assert standin.received_flags[-1] == encap.FLAG_TCP
        client.send(b"\x80rtp over v6")
        assert client.frames(1) == [b"T3:\x80rtp over v6"]
        client.close()


def test_media_before_the_transceiver_answered_is_not_forwarded():
    # A transceiver that never answers (a socket nobody reads): the connection stays unconfirmed.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
        silent.bind(("127.0.0.1", 0))
        with RelayProcess({TID: silent.getsockname()}, workers=1, tcp=True) as r:
            client = FramedClient(r.tcp_address)
            client.send(hint_request(r.keyring, r.cluster, TID)[0])
            client.send(b"\x80early media")
            assert wait_for(lambda: tcp_drops(r, "not_confirmed"), 1)
            assert r.metric("rtcedge_relay_packets_total", transport="tcp") == 1  # the request
            client.close()


@pytest.mark.parametrize(
    ("data", "reason", "drop"),
    [
        (b"\x00\x00", "zero_length", None),
        (b"\x08\x00" + bytes(100), "oversize", None),  # 2048 > --tcp-max-frame 2047
        (b"\x00\x05\x80rtp!", "first_frame", "no_flow"),
        (None, "first_frame", "hint_bad_tag"),  # a forged hint
        (b"\x00\x50" + bytes(10), "stalled", None),  # a half frame, never completed
        (b"", "pending_timeout", None),  # nothing at all
    ],
    ids=["zero-length", "oversize", "not-stun", "forged-hint", "half-frame", "silent"],
)
def test_malformed_framing_closes_the_connection_and_is_counted(relay, standin, data, reason, drop):
    if data is None:
        _, ufrag = hint_request(relay.keyring, relay.cluster, TID)
        forged = ufrag[:-3] + ("A" if ufrag[-3] != "A" else "B") + ufrag[-2:]
        data = frame(stun.binding_request(f"{forged}:cli", secrets.token_bytes(12)))
    before = closed(relay, reason)
    drops_before = tcp_drops(relay, drop) if drop else 0
    received = len(standin.received)
    client = FramedClient(relay.tcp_address)
    if data:
        client.send_raw(data)
    assert client.closed_by_peer(), "the relay closes the connection"
    assert wait_for(lambda: closed(relay, reason), before + 1)
    if drop:
        assert tcp_drops(relay, drop) == drops_before + 1
    assert len(standin.received) == received, "nothing reached the transceiver"
    client.close()


def test_a_closed_connection_forgets_its_flow_at_once(relay, standin):
    client = connected(relay)
    address = client.address
    worker = standin.relay_of_client[address]
    before = closed(relay, "client_closed")
    client.close()
    assert wait_for(lambda: closed(relay, "client_closed"), before + 1)
    drops = tcp_drops(relay, "no_flow")
    standin.send_to_client(worker, address, b"\x80late", flags=encap.FLAG_TCP)
    assert wait_for(lambda: tcp_drops(relay, "no_flow"), drops + 1)


def test_a_slow_reader_is_closed_not_buffered(relay, standin):
    client = connected(relay, rcvbuf=4096)
    worker = standin.relay_of_client[client.address]
    rss = _workers_rss_kib(relay)
    # ~2.4 MB toward a client that reads nothing: far beyond the kernel's buffers and the
    # relay's --tcp-write-buffer (16 KiB).
    for i in range(2000):
        standin.send_to_client(worker, client.address, b"\x80" + bytes(1199), flags=encap.FLAG_TCP)
        if i % 200 == 199 and closed(relay, "slow_reader"):
            break
    assert wait_for(lambda: closed(relay, "slow_reader"), 1)
    assert _workers_rss_kib(relay) - rss < 8 * 1024
    assert client.closed_by_peer()
    client.close()


def test_a_flood_of_idle_connections_from_one_source_is_bounded_and_calls_go_on(relay, standin):
    call = connected(relay)  # a call in progress before the flood
    rss = _workers_rss_kib(relay)
    accepted = relay.metric("rtcedge_relay_tcp_connections_accepted_total")
    flood = []
    for _ in range(2000):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex(relay.tcp_address)
        flood.append(s)
    assert wait_for(
        lambda: relay.metric("rtcedge_relay_tcp_connections_accepted_total") - accepted,
        2000,
        timeout_s=15,
    ), "the relay accepted every connection of the flood (and closed most at once)"
    # Open now: accepted less closed, both counted as they happen (the gauge waits for a tick).
    kept = relay.metric("rtcedge_relay_tcp_connections_accepted_total") - relay.metric(
        "rtcedge_relay_tcp_connections_closed_total"
    )
    assert kept <= 2 * 64, "at most --tcp-max-per-prefix per worker were kept, the call included"
    assert relay.metric("rtcedge_relay_tcp_connections_closed_total", reason="evicted") >= (
        2000 - 2 * 64
    )
    assert _workers_rss_kib(relay) - rss < 8 * 1024, "memory stayed flat"
    # The call in progress was never at risk (only pending connections are evicted) ...
    call.send(b"\x80still here, ok")
    assert call.frames(1) == [b"T3:\x80still here, ok"]
    # ... and a new call gets in.
    fresh = connected(relay)
    fresh.send(b"\x16new call, ok")
    assert fresh.frames(1) == [b"T3:\x16new call, ok"]
    # The flood's survivors time out (--tcp-pending-timeout 1).
    assert wait_for(
        lambda: relay.metric("rtcedge_relay_tcp_connections", state="pending"), 0, timeout_s=5
    )
    for s in flood:
        s.close()
    call.close()
    fresh.close()


def _workers_rss_kib(relay: RelayProcess) -> int:
    total = 0
    for pid in relay.worker_pids():
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total


def test_the_listener_survives_a_worker_restart(relay, standin):
    """A replacement worker inherits its predecessor's listening socket (the supervisor's)."""
    pids = relay.worker_pids()
    os.kill(pids[0], signal.SIGKILL)
    assert wait_for(lambda: len(set(relay.worker_pids()) - set(pids)), 1, timeout_s=5)
    assert wait_for(lambda: relay.http("/readyz")[0], 200, timeout_s=5)

    def accepted(worker: str) -> float:
        return relay.metric("rtcedge_relay_tcp_connections_accepted_total", worker=worker)

    before = {w: accepted(w) for w in ("0", "1")}
    for _ in range(64):  # until both workers' listeners took a call (the kernel hashes them)
        connected(relay).close()
        if all(accepted(w) > before[w] for w in before):
            break
    assert all(accepted(w) > before[w] for w in before)
