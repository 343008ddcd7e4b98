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

``install`` swaps it into a peer connection after ``setRemoteDescription`` and before the answer
is created, which is when aiortc gathers candidates. This touches a few private attributes of
aiortc and aioice; ``check_versions`` refuses versions these were not verified with.
"""

from __future__ import annotations

import asyncio
import contextlib
from asyncio import FIRST_COMPLETED
from collections.abc import Callable, Sequence
from typing import Any

import aioice
import aiortc
from aioice.candidate import Candidate, candidate_foundation, candidate_priority
from aioice.ice import CandidatePair, StunProtocol

from common.addr import Addr, is_tcp, over_tcp

# RFC 6544 section 4.2: local preference = 2^13 * direction-pref + other-pref, a passive host
# candidate's direction-pref being 4; below the UDP candidates' 65535 - index, so that UDP wins
# whenever it works.
TCP_PASSIVE_LOCAL_PREF = (1 << 13) * 4 + 8191

# Versions whose private attributes ``install`` and ``SharedSocketConnection`` rely on.
VERIFIED_AIORTC = ((1, 9), (1, 16))
VERIFIED_AIOICE = ((0, 9), (0, 13))


def _version(text: str) -> tuple[int, int]:
    major, minor = text.split(".")[:2]
    return int(major), int(minor)


def check_versions() -> None:
    """Fail at start, with a clear message, on an aiortc/aioice this module was not built for."""
    for name, module, (low, high) in (
        ("aiortc", aiortc, VERIFIED_AIORTC),
        ("aioice", aioice, VERIFIED_AIOICE),
    ):
        version = _version(module.__version__)
        if not low <= version <= high:
            raise RuntimeError(
                f"{name} {module.__version__} is outside the verified range "
                f"{'.'.join(map(str, low))}..{'.'.join(map(str, high))}"
            )


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

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            if self._protocol is not None:
                asyncio.get_running_loop().call_soon(self._protocol.connection_lost, None)

    def abort(self) -> None:
        self.close()


class PromptConnection(aioice.Connection):
    """An aioice Connection whose ``connect`` returns as soon as its check list completes.

    aioice runs its checks on a 20 ms timer (Ta, RFC 8445 6.1.4.2) and sees only at its next
    tick that the check list completed: up to 20 ms of nothing before aiortc starts DTLS. Here
    ``connect`` returns at completion; aioice's loop ends by itself at that tick and goes on as
    before (it cancels leftover checks and starts consent freshness, RFC 7675). What completes
    the check list is aioice's rule, unchanged. The benchmarks' aiortc callers use it too
    (``prompt``), as browsers do not wait for a timer either. It relies on aioice calling
    ``_check_list_maybe_complete`` when a pair completes (0.13): an aioice that does not simply
    connects at its own pace, as before.
    """

    # Class attributes, so that ``prompt`` can turn a plain aioice Connection into one.
    _completed: asyncio.Future[None] | None = None  # set when the check list completes
    _checks_loop: asyncio.Task[None] | None = None  # aioice's own connect(), in a task

    async def connect(self) -> None:
        """aioice's ``connect``, returning as soon as the check list completes.

        For the transceiver, the controlled agent, that is when the client nominated a pair
        whose round trip our own check proved (RFC 8445 7.3.1.5: the client's USE-CANDIDATE
        check on a succeeded pair, or our triggered check's answer on a pair the client had
        nominated): an incoming check alone completes nothing.
        """
        loop = asyncio.get_running_loop()
        self._completed = loop.create_future()
        self._checks_loop = loop.create_task(super().connect())
        # Its failure is also ours (below); retrieved here too, in case nobody awaits us.
        self._checks_loop.add_done_callback(lambda t: t.cancelled() or t.exception())
        await asyncio.wait({self._checks_loop, self._completed}, return_when=FIRST_COMPLETED)
        if self._checks_loop.done():
            self._checks_loop.result()  # aioice's ConnectionError on failure

    def _check_list_maybe_complete(self) -> bool:
        complete = super()._check_list_maybe_complete()
        if complete and self._completed is not None and not self._completed.done():
            self._completed.set_result(None)
        return complete

    async def close(self) -> None:
        # Completed, aioice's loop may still sleep out its last tick, and would then start
        # consent checks on a closed connection: it has nothing left to do, so it is cancelled.
        # Not completed, it is left to aioice, whose close() makes it fail as it always did.
        loop_task, completed = self._checks_loop, self._completed
        if loop_task is not None and not loop_task.done() and completed and completed.done():
            loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop_task
        await super().close()


def prompt(connection: aioice.Connection) -> None:
    """Make a plain aioice Connection a ``PromptConnection`` (before its ``connect``)."""
    if type(connection) is not aioice.Connection:
        raise TypeError(f"not a plain aioice Connection: {type(connection).__name__}")
    connection.__class__ = PromptConnection


class SharedSocketConnection(PromptConnection):
    """An aioice Connection whose candidates are relay addresses, on the shared socket; ICE
    connected as soon as it completes (``PromptConnection``)."""

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

    async def gather_candidates(self) -> None:
        # No interface enumeration, no STUN/TURN servers: the candidates are the relays'.
        if not self._local_candidates_start:
            self._local_candidates_start = True
            self._local_candidates += await self.get_component_candidates(1, [])
            self._local_candidates_end = True

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
        protocol = StunProtocol(self)
        transport = VirtualTransport(self._send_datagram, self._advertised[0])
        transport._protocol = protocol
        protocol.connection_made(transport)
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
        protocol.local_candidate = candidates[0]
        self._protocols.append(protocol)
        self.protocol = protocol
        if self._advertised_tcp is not None:
            candidates.append(self._tcp_candidate(component, self._advertised_tcp))
        return candidates

    def _tcp_candidate(self, component: int, addr: Addr) -> Candidate:
        """The passive ICE-TCP candidate at the relay's TCP address and its own protocol, whose
        writes are marked for TCP (``demux.over_tcp``)."""
        send = self._send_datagram
        protocol = StunProtocol(self)
        transport = VirtualTransport(
            lambda data, to: send(data, over_tcp(to) if to is not None else None), addr
        )
        transport._protocol = protocol
        protocol.connection_made(transport)
        host, port = addr
        protocol.local_candidate = Candidate(
            foundation=candidate_foundation("host", "tcp", f"{host}|{port}"),
            component=component,
            transport="tcp",
            priority=candidate_priority(component, "host", local_pref=TCP_PASSIVE_LOCAL_PREF),
            host=host,
            port=port,
            type="host",
            tcptype="passive",
        )
        self._protocols.append(protocol)
        self.tcp_protocol = protocol
        return protocol.local_candidate

    def _client_of(self, pair: CandidatePair) -> Addr:
        """The client as the demultiplexer names it: marked when the pair is over TCP."""
        if pair.protocol is self.tcp_protocol:
            return over_tcp(pair.remote_addr)
        return pair.remote_addr

    def get_default_candidate(self, component: int) -> Candidate | None:
        """The most preferred candidate (aioice's own picks the lowest priority)."""
        return next((c for c in self._local_candidates if c.component == component), None)

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
        current = self._nominated.get(pair.component)
        if (
            current is not None
            and pair is not current
            and pair.state == CandidatePair.State.SUCCEEDED
            and self._client_of(pair) != self._client_of(current)
        ):
            pair.nominated = True
            self._nominated[pair.component] = pair
            current.nominated = False
            current.remote_nominated = False
            current.state = CandidatePair.State.FROZEN
        selected = self._nominated.get(1)
        if selected is not None and self._client_of(selected) != self._selected:
            self._selected = self._client_of(selected)
            self._on_selected(self._selected)

    def forget_address(self, addr: Addr) -> None:
        """Drop the client candidate at ``addr`` and its pairs (the demultiplexer forgot the
        address): aioice's lists then stay as small as the demultiplexer's table."""
        if self._selected == addr:
            return
        for pair in [p for p in self._check_list if self._client_of(p) == addr]:
            if pair.task is not None:
                pair.task.cancel()
            self._check_list.remove(pair)
        # A candidate is per (IP, port), whatever the transport: kept while a pair uses it.
        used = {(p.remote_candidate.host, p.remote_candidate.port) for p in self._check_list}
        self._remote_candidates = [
            c
            for c in self._remote_candidates
            if (c.host, c.port) != addr[:2] or (c.host, c.port) in used
        ]

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


def install(pc: aiortc.RTCPeerConnection, connection: SharedSocketConnection) -> None:
    """Make ``connection`` the ICE agent of ``pc``'s single (BUNDLE) transport.

    Call after ``setRemoteDescription(offer)`` and before ``createAnswer``. Raises ValueError when
    the offer did not leave exactly one ICE transport (no BUNDLE).
    """
    transports = {t.receiver.transport.transport for t in pc.getTransceivers()}
    if pc.sctp is not None:
        transports.add(pc.sctp.transport.transport)
    if len(transports) != 1:
        raise ValueError("the offer must BUNDLE all media on one transport")
    ice = transports.pop()
    if ice.iceGatherer.state != "new":
        raise RuntimeError("install() must run before candidates are gathered")
    ice.iceGatherer._connection = connection
    ice._connection = connection
    ice._recv = connection.recv
    ice._send = connection.send
