"""One datagram's verdict, in order: unwrap, who may send, STUN guard, session; or a drop reason.

Sans-I/O, in the manner of str0m's ``accepts``: the datagram's bytes and its source address in,
a ``Delivery`` (session, client address, payload) or a ``Drop`` (``common.verdict``) out; no
socket, no clock, no counter. ``transceiver.socket.media.MediaSocket`` receives, asks, counts and
delivers. The order, as the code runs it:

1. unwrap: a datagram whose first byte is 0xFF was encapsulated by a relay (``common.encap``):
   the client is the address in its header (``encap_malformed`` if it does not decode), marked
   as a TCP client (``demux.over_tcp``) when the header has ``FLAG_TCP``, the relay is its
   source; any other datagram came straight from its source, the client;
2. who may send: with relay networks configured (``--relay-network``) only those may
   encapsulate, and nobody may talk to the socket directly (``relay_not_allowed``,
   ``direct_not_allowed``); a datagram with nothing after its header is dropped (``empty``);
3. STUN guard: a payload whose first byte is below 4 (RFC 7983) must pass our strict parser,
   then aioice's own, which raises ``struct.error`` (not ValueError) on attributes of the wrong
   size that are well-formed TLVs (found by fuzzing): the session's aioice must never see it
   (``stun_malformed``, ``stun_rejected_by_aioice``). STUN is rare (checks, consent): parsing it
   twice costs nothing;
4. the session: ``Demux.route`` (by client address, else an authenticated, fresh check's
   ufrag), with its own reasons (``demux.DROP_REASONS``).

Per packet, the client address of an encapsulation header is decoded once: the header's bytes
(as they come, hop limit and flags included) are remembered with the address they name, and
the next datagram with the same header skips the decoding (the client and its relay send
thousands; ``socket.inet_ntop`` and a tuple each time were a tenth of the receive path).

Attacker and bound: whoever reaches the socket chooses the source address of encapsulated
datagrams and their headers, so the relay allowlist's memo of verdicts per host is cleared once
it holds more than ``MAX_RELAY_MEMO`` hosts, and the header memo once it holds more than
``MAX_HEADER_MEMO`` headers (a flood of new headers costs each its decoding, as without it).
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any, Generic, NamedTuple, TypeVar

from aioice import stun as aioice_stun

from common import encap, stun
from common.addr import Addr, over_tcp
from common.verdict import Drop, drop
from transceiver.socket.demux import DROP_REASONS as DEMUX_DROP_REASONS
from transceiver.socket.demux import Demux

S = TypeVar("S")
MAX_RELAY_MEMO = 4096  # hosts whose allowlist verdict is remembered
MAX_HEADER_MEMO = 16384  # encapsulation headers whose client address is remembered (~3 MB)
_HEADER_LEN = {encap.VERSION_FAMILY[f]: encap.HEADER_LEN[f] for f in encap.HEADER_LEN}

# The verdicts, made once: a drop is returned, never built, per datagram (common.verdict).
ENCAP_MALFORMED = drop("encap_malformed")
RELAY_NOT_ALLOWED = drop("relay_not_allowed")
DIRECT_NOT_ALLOWED = drop("direct_not_allowed")
EMPTY = drop("empty")
STUN_MALFORMED = drop("stun_malformed")
STUN_REJECTED_BY_AIOICE = drop("stun_rejected_by_aioice")
_DEMUX_DROPS = {reason: drop(reason) for reason in DEMUX_DROP_REASONS}
DROP_REASONS = (
    *(
        verdict.reason
        for verdict in (
            ENCAP_MALFORMED,
            RELAY_NOT_ALLOWED,
            DIRECT_NOT_ALLOWED,
            EMPTY,
            STUN_MALFORMED,
            STUN_REJECTED_BY_AIOICE,
        )
    ),
    *DEMUX_DROP_REASONS,
)
"""Every reason ``Classifier.classify`` gives, in the order it checks them."""


class Delivery(NamedTuple, Generic[S]):
    """A datagram for ``session``: hand ``payload`` to it as coming from ``client``.

    A named tuple, made once per datagram: a third of the cost of a frozen dataclass."""

    session: S
    client: Addr
    payload: bytes
    learned: bool = False  # an authenticated check from a new address: the first-check deadline


class Classifier(Generic[S]):
    """Decapsulation, the relay allowlist and the STUN guard in front of a ``Demux``."""

    def __init__(self, demux: Demux[S], relay_networks: tuple[str, ...] = ()) -> None:
        self.demux = demux
        self._relay_networks = [ipaddress.ip_network(n, strict=False) for n in relay_networks]
        self._relay_allowed: dict[str, bool] = {}
        self._clients: dict[bytes, Addr] = {}  # encapsulation header -> the client it names

    def classify(self, data: bytes, source: Any) -> Delivery[S] | Drop:
        """Decide one datagram from ``source`` (a socket address: host, port, ...)."""
        relay: Addr | None = None
        if data[:1] == b"\xff":
            offset = _HEADER_LEN.get(data[1], 0) if len(data) > 1 else 0
            header = data[:offset]
            client = self._clients.get(header) if offset else None
            if client is None:
                try:
                    client, offset = self._decode(data)
                except encap.EncapError:
                    return ENCAP_MALFORMED
            relay = source if len(source) == 2 else (source[0], source[1])
            if self._relay_networks and not self._is_relay(source[0]):
                return RELAY_NOT_ALLOWED
            payload = data[offset:]
        else:
            if self._relay_networks:  # behind relays, nobody talks to the socket directly
                return DIRECT_NOT_ALLOWED
            client = (source[0], source[1])
            payload = data
        if not payload:
            return EMPTY
        if payload[0] < 4:
            try:
                stun.parse(payload)
            except stun.StunError:
                return STUN_MALFORMED
            try:
                aioice_stun.parse_message(payload)
            except Exception:
                return STUN_REJECTED_BY_AIOICE
        route = self.demux.route(payload, client, relay)
        if route.session is None:
            return _DEMUX_DROPS[route.reason]
        return Delivery(route.session, client, payload, route.learned)

    def _decode(self, data: bytes) -> tuple[Addr, int]:
        """The client an encapsulation header names, and where its payload starts; remembered
        by the header's bytes. EncapError if the header does not decode."""
        family, packed, port, _hop, offset = encap.decode_packed(data)
        fam = socket.AF_INET if family == 4 else socket.AF_INET6
        client: Addr = (socket.inet_ntop(fam, packed), port)
        if data[encap.FLAGS_OFFSET] & encap.FLAG_TCP:
            client = over_tcp(client)
        if len(self._clients) >= MAX_HEADER_MEMO:
            self._clients.clear()
        self._clients[bytes(data[:offset])] = client
        return client, offset

    def _is_relay(self, host: str) -> bool:
        allowed = self._relay_allowed.get(host)
        if allowed is None:
            ip = ipaddress.ip_address(host)
            allowed = any(ip in net for net in self._relay_networks)
            if len(self._relay_allowed) > MAX_RELAY_MEMO:
                self._relay_allowed.clear()
            self._relay_allowed[host] = allowed
        return allowed
