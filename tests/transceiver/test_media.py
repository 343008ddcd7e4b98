"""The media socket's protocol without a socket: it counts the classifier's verdicts, delivers,
counts its own two reasons (session_error, no_path) and sends along the demultiplexer's paths."""

from __future__ import annotations

import secrets
from types import SimpleNamespace

from common import encap, stun
from transceiver.metrics import TransceiverMetrics
from transceiver.socket.demux import Demux
from transceiver.socket.media import MediaSocket

UFRAG, PASSWORD = "ufragA", "passwordA-0123456789abcd"
RELAY, CLIENT = ("10.0.0.1", 4000), ("198.51.100.7", 50000)


class Transport:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, tuple[str, int]]] = []

    def sendto(self, data: bytes, addr: tuple[str, int]) -> None:
        self.sent.append((data, addr))


class StandIn:
    """What the socket needs of a session: an id, a lifecycle and an ICE agent."""

    def __init__(self, fail: bool = False) -> None:
        self.id = "s1"
        self.received: list[tuple[bytes, tuple[str, int]]] = []
        self.checks_at: list[float] = []
        self.fail = fail
        self.ice = SimpleNamespace(datagram_received=self._ice_received)
        self.lifecycle = SimpleNamespace(check_received=self.checks_at.append)

    def _ice_received(self, data: bytes, addr: tuple[str, int]) -> None:
        if self.fail:
            raise ValueError("a datagram the session could not take")
        self.received.append((data, addr))


def socket_with(session: StandIn, relay_networks: tuple[str, ...] = ("10.0.0.0/24",)):
    demux: Demux[StandIn] = Demux()
    demux.add(UFRAG, PASSWORD, session)
    metrics = TransceiverMetrics()
    media = MediaSocket(demux, metrics, relay_networks)  # type: ignore[arg-type]
    transport = Transport()
    media.connection_made(transport)  # type: ignore[arg-type]
    return media, metrics, transport


def check() -> bytes:
    username = f"{UFRAG}:cli"
    return stun.binding_request(username, secrets.token_bytes(12), integrity_key=PASSWORD.encode())


def dropped(metrics: TransceiverMetrics, reason: str) -> float:
    return metrics.dropped.labels(reason)._value.get()


def test_a_delivery_reaches_the_session_and_its_first_check_meets_the_deadline():
    session = StandIn()
    media, metrics, _ = socket_with(session)
    first = check()
    media.datagram_received(encap.encapsulate(first, *CLIENT), RELAY)
    media.datagram_received(encap.encapsulate(b"\x80rtp", *CLIENT), RELAY)
    assert session.received == [(first, CLIENT), (b"\x80rtp", CLIENT)]
    assert len(session.checks_at) == 1, "only the check that taught the address counts"
    metrics.flush()  # the per-packet tallies, folded as before a scrape
    assert metrics.datagrams.labels("in")._value.get() == 2
    dropped = [x for x in metrics.dropped.collect()[0].samples if x.name.endswith("_total")]
    assert not [x for x in dropped if x.value], "nothing dropped"


def test_a_classifier_drop_is_counted_by_its_reason_and_delivers_nothing():
    session = StandIn()
    media, metrics, _ = socket_with(session)
    media.datagram_received(check(), CLIENT)
    assert dropped(metrics, "direct_not_allowed") == 1
    assert not session.received


def test_a_session_that_raises_is_a_session_error_and_the_socket_goes_on():
    session = StandIn(fail=True)
    media, metrics, _ = socket_with(session)
    for _ in range(3):
        media.datagram_received(encap.encapsulate(check(), *CLIENT), RELAY)
    assert dropped(metrics, "session_error") == 3


def test_sending_before_ice_proved_a_path_is_no_path():
    media, metrics, transport = socket_with(StandIn())
    media.send(UFRAG, b"\x80media")  # no path yet
    media.send(UFRAG, b"\x01\x01answer", ("203.0.113.9", 1))  # an address never learned
    media.send("nobody", b"\x80media")
    assert dropped(metrics, "no_path") == 3
    assert not transport.sent


def test_replies_go_back_encapsulated_through_the_relay_or_straight_to_a_direct_client():
    relayed_session = StandIn()
    media, metrics, transport = socket_with(relayed_session)
    media.datagram_received(encap.encapsulate(check(), *CLIENT), RELAY)
    media.send(UFRAG, b"\x01\x01answer", CLIENT)
    media.demux.select(UFRAG, CLIENT)
    media.send(UFRAG, b"\x80media")
    header = encap.encode_header(*CLIENT)
    assert transport.sent == [(header + b"\x01\x01answer", RELAY), (header + b"\x80media", RELAY)]
    metrics.flush()
    assert metrics.datagrams.labels("out")._value.get() == 2

    media, _, transport = socket_with(StandIn(), relay_networks=())
    media.datagram_received(check(), CLIENT)
    media.demux.select(UFRAG, CLIENT)
    media.send(UFRAG, b"\x80media")
    assert transport.sent == [(b"\x80media", CLIENT)]
