"""ICE for one session over the process's shared UDP socket (docs/design.md, "The transceiver").

aiortc gives every peer connection an ``aioice.Connection`` that binds its own sockets. Instead,
each session gets a ``SharedSocketConnection``:

- its local candidates are host candidates at relay addresses (the addresses a client may send
  to: its region's edge first, the cluster's relay last; ``transceiver.regions``), with strictly
  decreasing priorities; behind them is ONE virtual datagram transport that writes through the
  shared socket, so aioice's own ``StunProtocol`` still parses, answers and retransmits STUN,
  and a check arriving through any of those relays reaches the one agent of the session (the
  client is learned from the relay that forwarded it, whatever address it sent to);
- with a relay TCP address (``advertised_tcp``), also a passive ICE-TCP candidate there
  (RFC 6544), priced below every UDP one, behind a second virtual transport: aioice has no
  ICE-TCP, but it pairs checks by the protocol they arrived on, so a check the relay brought over
  TCP (``demux.is_tcp`` client) fed to that protocol becomes its own candidate pair, whose
  replies, DTLS and SRTP go back marked for TCP; aioice itself only ever sees plain addresses;
- its ufrag is the session's signed routing hint and its password is random;
- it is the controlled agent (full ICE: aioice cannot do ice-lite) and ignores every candidate the
  client offers: the client is learned as peer-reflexive from its first authenticated check
  through the relay, so nothing is ever sent toward an address the client merely claimed.

``transceiver.call.seam.install_ice`` swaps it into a peer connection after
``setRemoteDescription`` and before the answer is created, which is when aiortc gathers
candidates. What it needs of aioice's internals (its candidates, its protocols, its nominated
pair and check list) it asks of ``transceiver.call.seam.RelayAgent``, its base.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from common.addr import Addr, is_tcp, over_tcp
from transceiver.call.seam import (
    Candidate,
    CandidatePair,
    RelayAgent,
    StunProtocol,
    candidate_foundation,
    candidate_priority,
)

# RFC 6544 section 4.2: local preference = 2^13 * direction-pref + other-pref, a passive host
# candidate's direction-pref being 4; below the UDP candidates' 65535 - index, so that UDP wins
# whenever it works.
TCP_PASSIVE_LOCAL_PREF = (1 << 13) * 4 + 8191


class VirtualTransport(asyncio.DatagramTransport):
    """What aioice's StunProtocol sees as its socket: writes go through the shared socket."""

    def __init__(self, send: Callable[[bytes, Addr | None], None], local: Addr) -> None:
        super().__init__()
        self._send = send
        self._local = local
        self._protocol: asyncio.DatagramProtocol | None = None
        self._closing = False

    def sendto(self, data: Any, addr: Any = None) -> None:
        # The shared socket decides the way out (transceiver.socket.demux): STUN to ``addr`` if it
        # authenticated for this session, everything else along the session's latched path.
        if not self._closing:
            self._send(bytes(data), (addr[0], addr[1]) if addr else None)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._local if name == "sockname" else default

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol  # type: ignore[assignment]

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol  # type: ignore[return-value]

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            if self._protocol is not None:
                asyncio.get_running_loop().call_soon(self._protocol.connection_lost, None)

    def abort(self) -> None:
        self.close()


class SharedSocketConnection(RelayAgent):
    """An aioice Connection whose candidates are relay addresses, on the shared socket; ICE
    connected as soon as it completes (``transceiver.call.seam.PromptConnection``)."""

    def __init__(
        self,
        ufrag: str,
        password: str,
        advertised: Sequence[Addr],
        send: Callable[[bytes, Addr | None], None],
        on_selected: Callable[[Addr], None] = lambda addr: None,
        advertised_tcp: Addr | None = None,
    ):
        """``advertised``: the relay addresses the answer names, most preferred first;
        ``advertised_tcp``: the relay's ICE-TCP address, or None."""
        super().__init__(ice_controlling=False, local_username=ufrag, local_password=password)
        if not advertised:
            raise ValueError("at least one advertised address")
        self._advertised = tuple(advertised)
        self._advertised_tcp = advertised_tcp
        self.tcp_protocol: StunProtocol | None = None
        self._send_datagram = send
        self._on_selected = on_selected
        self._selected: Addr | None = None
        self.protocol: StunProtocol | None = None
        # Once the call's SRTP is up: takes an RTP/RTCP datagram directly, True if it did
        # (``transceiver.call.inbound.direct_rtp``); else datagrams queue for aiortc's DTLS task.
        self.rtp_sink: Callable[[bytes], bool] | None = None

    async def get_component_candidates(
        self, component: int, addresses: list[str], timeout: int = 5
    ) -> list[Candidate]:
        """One protocol (the virtual transport) and one host candidate per advertised address.

        Priorities decrease strictly in the given order (the local preference counts down from
        aioice's 65535), so a client tries the first address first; each candidate has its own
        foundation, so a client does not freeze the backup behind a dead edge on the same host.
        aioice pairs the client's checks with ``protocol.local_candidate`` (the first): the
        others exist only in the answer (aiortc writes every local candidate, and the first
        in the c= line).
        """
        candidates = [
            Candidate(
                foundation=candidate_foundation("host", "udp", f"{host}|{port}"),
                component=component,
                transport="udp",
                priority=candidate_priority(component, "host", local_pref=65535 - index),
                host=host,
                port=port,
                type="host",
            )
            for index, (host, port) in enumerate(self._advertised)
        ]
        transport = VirtualTransport(self._send_datagram, self._advertised[0])
        self.protocol = self.add_protocol(transport, candidates[0])
        if self._advertised_tcp is not None:
            candidates.append(self._tcp_candidate(component, self._advertised_tcp))
        return candidates

    def _tcp_candidate(self, component: int, addr: Addr) -> Candidate:
        """The passive ICE-TCP candidate at the relay's TCP address and its own protocol, whose
        writes are marked for TCP (``demux.over_tcp``)."""
        send = self._send_datagram
        transport = VirtualTransport(
            lambda data, to: send(data, over_tcp(to) if to is not None else None), addr
        )
        host, port = addr
        candidate = Candidate(
            foundation=candidate_foundation("host", "tcp", f"{host}|{port}"),
            component=component,
            transport="tcp",
            priority=candidate_priority(component, "host", local_pref=TCP_PASSIVE_LOCAL_PREF),
            host=host,
            port=port,
            type="host",
            tcptype="passive",
        )
        self.tcp_protocol = self.add_protocol(transport, candidate)
        return candidate

    def _client_of(self, pair: CandidatePair) -> Addr:
        """The client as the demultiplexer names it: marked when the pair is over TCP."""
        if pair.protocol is self.tcp_protocol:
            return over_tcp(pair.remote_addr)
        return pair.remote_addr

    def get_default_candidate(self, component: int) -> Candidate | None:
        """The most preferred candidate (aioice's own picks the lowest priority)."""
        return next((c for c in self.local_candidates if c.component == component), None)

    def check_complete(self, pair: CandidatePair) -> None:
        """aioice's bookkeeping, plus moving media only after a proven round trip.

        aioice calls this when one of our checks got its authenticated answer from the address
        it was sent to (RFC 8445 7.2.5.3), or when the client nominates a pair that already did.
        Once the session is connected, a pair that has just succeeded toward a new client
        address (NAT rebinding, another client interface) becomes the one media and consent
        checks use; without this aioice keeps sending, and checking consent, toward the dead
        address until consent expires. The pair it replaces goes back to Frozen, so that media
        returns there only after a new round trip (a check from the old address triggers one),
        never on an incoming check alone: that could be a replayed capture.
        """
        super().check_complete(pair)
        current = self.nominated_pair(pair.component)
        if (
            current is not None
            and pair is not current
            and pair.state == CandidatePair.State.SUCCEEDED
            and self._client_of(pair) != self._client_of(current)
        ):
            pair.nominated = True
            self.use_pair(pair)
            current.nominated = False
            current.remote_nominated = False
            current.state = CandidatePair.State.FROZEN
        selected = self.nominated_pair(1)
        if selected is not None and self._client_of(selected) != self._selected:
            self._selected = self._client_of(selected)
            self._on_selected(self._selected)

    def forget_address(self, addr: Addr) -> None:
        """Drop the client candidate at ``addr`` and its pairs (the demultiplexer forgot the
        address): aioice's lists then stay as small as the demultiplexer's table."""
        if self._selected == addr:
            return
        self.drop_pairs(lambda pair: self._client_of(pair) == addr)
        # A candidate is per (IP, port), whatever the transport: kept while a pair uses it.
        used = {(p.remote_candidate.host, p.remote_candidate.port) for p in self.pairs()}
        self.drop_remote_candidates(
            lambda c: (c.host, c.port) == addr[:2] and (c.host, c.port) not in used
        )

    async def add_remote_candidate(self, remote_candidate: Candidate | None) -> None:
        """Ignore the client's candidates, end-of-candidates included.

        Without end-of-candidates aioice keeps waiting for the client's checks instead of failing
        on an empty check list; the session's own deadline bounds that wait.
        """

    def datagram_received(self, data: bytes, addr: Addr) -> None:
        """Feed one datagram of this session (already demultiplexed and, if STUN, parsed).

        STUN from a TCP client goes to the TCP candidate's protocol (none: the answer named no
        TCP candidate, so it is ignored), as the plain address aioice knows. Once the call's
        SRTP is up, RTP goes to ``rtp_sink`` directly (``transceiver.call.inbound.direct_rtp``)."""
        first = data[0]
        if first < 4:
            protocol = self.protocol
            if is_tcp(addr):
                protocol, addr = self.tcp_protocol, addr[:2]
            if protocol is not None:
                protocol.datagram_received(data, addr)
        elif not (127 < first < 192 and self.rtp_sink is not None and self.rtp_sink(data)):
            self.data_received(data, 1)
