"""The media socket's protocol: count each datagram's verdict, deliver it; send along paths.

Every decision about an incoming datagram is ``transceiver.socket.classify``'s; this protocol only
counts the verdict (``rtcedge_transceiver_dropped_datagrams_total{reason}``) and hands the
payload to the session's ICE agent. It adds two reasons of its own: ``session_error`` (the
session raised on a datagram) and ``no_path`` (a session sent before ICE proved a way back).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol

from common import encap, stun
from common.addr import is_tcp
from common.verdict import Drop
from transceiver.metrics import TransceiverMetrics
from transceiver.socket.classify import Classifier
from transceiver.socket.demux import Demux

log = logging.getLogger("rtcedge.transceiver")

BINDING_REQUEST = stun.BINDING_REQUEST.to_bytes(2, "big")  # a STUN message's first two bytes
MAX_LOGGED_SESSION_ERRORS = 10  # then only counted (rtcedge_transceiver_dropped_datagrams_total)
MAX_HEADERS = 65536  # encapsulation headers remembered, one per client address
SESSION_ERROR = "session_error"
NO_PATH = "no_path"


class Receiver(Protocol):
    """What the socket uses of a session (``transceiver.call.session.Session``), and nothing
    more."""

    id: str  # named in logs
    lifecycle: Any  # .check_received(now): its first authenticated check arrived
    ice: Any  # .datagram_received(payload, client): its ICE agent takes the datagram


class MediaSocket(asyncio.DatagramProtocol):
    """The shared UDP socket: classify and deliver what comes in, send along latched paths."""

    def __init__(
        self,
        demux: Demux[Receiver],
        metrics: TransceiverMetrics,
        relay_networks: tuple[str, ...] = (),
    ) -> None:
        self.demux = demux
        self.classifier = Classifier(demux, relay_networks)
        self.metrics = metrics
        self._session_errors = 0
        self.transport: asyncio.DatagramTransport | None = None
        self._headers: dict[tuple[str, int], bytes] = {}
        self._received = metrics.tallies["datagrams_in"]
        self._sent = metrics.tallies["datagrams_out"]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def drop(self, reason: str) -> None:
        """Count a datagram dropped for ``reason`` (also the socket edge's own reasons)."""
        self.metrics.dropped.labels(reason).inc()

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self._received.inc()
        verdict = self.classifier.classify(data, addr)
        if isinstance(verdict, Drop):
            self.drop(verdict.reason)
            return
        session = verdict.session
        if verdict.learned:  # an authenticated check: the session's first-check deadline is met
            session.lifecycle.check_received(time.monotonic())
        try:
            session.ice.datagram_received(verdict.payload, verdict.client)
        except Exception:  # one bad datagram must never take the socket down
            self.drop(SESSION_ERROR)
            self._session_errors += 1
            if self._session_errors <= MAX_LOGGED_SESSION_ERRORS:  # no traceback spam
                log.exception("session %s rejected a datagram", session.id)

    def send(self, ufrag: str, data: bytes, to: tuple[str, int] | None = None) -> None:
        """Send a session's datagram: STUN to the learned address ``to`` it answers or checks,
        anything else (DTLS, SRTP) along the path ICE last proved with a round trip."""
        if to is not None and data[:1] and data[0] < 4:
            # Our own checks spend the address's credit (no amplification toward an address
            # that never answers); answers go to any learned address, one per check it sent.
            if data[:2] == BINDING_REQUEST:
                path = self.demux.request_path(ufrag, to)
            else:
                path = self.demux.path_to(ufrag, to)
        else:
            path = self.demux.path(ufrag)
        if path is None or self.transport is None:
            self.drop(NO_PATH)
            return
        self._sent.inc()
        if path.relay is None:
            self.transport.sendto(data, path.client[:2])
            return
        header = self._headers.get(path.client)
        if header is None:
            # A TCP client's datagrams keep FLAG_TCP: the relay frames them onto its connection.
            flags = encap.FLAG_TCP if is_tcp(path.client) else 0
            header = encap.encode_header(path.client[0], path.client[1], flags=flags)
            if len(self._headers) > MAX_HEADERS:
                self._headers.clear()
            self._headers[path.client] = header
        self.transport.sendto(header + data, path.relay)
