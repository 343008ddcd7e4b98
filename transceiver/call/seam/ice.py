"""aioice's agent and aiortc's ICE transport, where the transceiver reaches inside them.

What each name here touches, and why, is in the table of ``transceiver.call.seam``. The ICE
policy (relay candidates, media moved only after a round trip) is ``transceiver.call.ice``'s,
written against ``RelayAgent``'s methods below, not against aioice's attributes.
"""

from __future__ import annotations

import asyncio
import contextlib
from asyncio import FIRST_COMPLETED
from collections.abc import Callable
from typing import Any

import aioice
from aioice.candidate import Candidate, candidate_foundation, candidate_priority
from aioice.ice import CandidatePair, StunProtocol

__all__ = [
    "Candidate",
    "CandidatePair",
    "PromptConnection",
    "RelayAgent",
    "StunProtocol",
    "candidate_foundation",
    "candidate_priority",
    "check_ice",
    "divert_rtp",
    "install_ice",
    "prompt",
    "prompt_ice",
    "send_on_nominated_pair",
]

# aioice's Connection: methods overridden or called here, and the state RelayAgent reads or sets
# (set by its constructor).
CONNECTION_METHODS = (
    "_check_list_maybe_complete",
    "check_complete",
    "connect",
    "close",
    "data_received",
    "get_component_candidates",
    "gather_candidates",
)
CONNECTION_ATTRIBUTES = (
    "_local_candidates",
    "_local_candidates_start",
    "_local_candidates_end",
    "_protocols",
    "_nominated",
    "_check_list",
    "_remote_candidates",
)


class PromptConnection(aioice.Connection):
    """An aioice Connection whose ``connect`` returns as soon as its check list completes.

    aioice runs its checks on a 20 ms timer (Ta, RFC 8445 6.1.4.2) and sees only at its next
    tick that the check list completed: up to 20 ms of nothing before aiortc starts DTLS. Here
    ``connect`` returns at completion; aioice's loop ends by itself at that tick and goes on as
    before (it cancels leftover checks and starts consent freshness, RFC 7675). What completes
    the check list is aioice's rule, unchanged. The benchmarks' aiortc callers use it too
    (``prompt_ice``), as browsers do not wait for a timer either. It relies on aioice calling
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


def prompt_ice(pc: Any) -> None:
    """Make every ICE agent of an aiortc ``pc`` a ``PromptConnection``: connected as soon as its
    check list completes, as a browser is. Call after ``setLocalDescription`` (its ICE
    transports exist) and before the answer."""
    transports = {t.receiver.transport.transport for t in pc.getTransceivers()}
    if pc.sctp is not None:
        transports.add(pc.sctp.transport.transport)
    for transport in transports:
        if not isinstance(transport.iceGatherer._connection, PromptConnection):
            prompt(transport.iceGatherer._connection)


class RelayAgent(PromptConnection):
    """A ``PromptConnection`` whose candidates are its subclass's, with the few of aioice's
    internals ICE over the shared socket needs as methods (``transceiver.call.ice``)."""

    async def gather_candidates(self) -> None:
        """No interface enumeration, no STUN/TURN servers: the candidates are whatever
        ``get_component_candidates(1, [])`` returns (component 1: BUNDLE and rtcp-mux)."""
        if not self._local_candidates_start:
            self._local_candidates_start = True
            self._local_candidates += await self.get_component_candidates(1, [])
            self._local_candidates_end = True

    def add_protocol(self, transport: asyncio.DatagramTransport, local: Candidate) -> StunProtocol:
        """aioice's own ``StunProtocol`` over ``transport``, for checks paired with ``local``:
        it parses, answers and retransmits STUN as it does over a socket of its own."""
        protocol = StunProtocol(self)
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        protocol.local_candidate = local
        self._protocols.append(protocol)
        return protocol

    def nominated_pair(self, component: int) -> CandidatePair | None:
        """The pair media and consent checks use (aioice's nominated one)."""
        return self._nominated.get(component)

    def use_pair(self, pair: CandidatePair) -> None:
        """Make ``pair`` the one media and consent checks use, for its component."""
        self._nominated[pair.component] = pair

    def pairs(self) -> list[CandidatePair]:
        """aioice's check list (its own list: read it, do not change it)."""
        return self._check_list

    def drop_pairs(self, drop: Callable[[CandidatePair], bool]) -> None:
        """Remove the pairs ``drop`` names from the check list, their checks cancelled."""
        for pair in [p for p in self._check_list if drop(p)]:
            if pair.task is not None:
                pair.task.cancel()
            self._check_list.remove(pair)

    def drop_remote_candidates(self, drop: Callable[[Candidate], bool]) -> None:
        """Forget the client candidates ``drop`` names."""
        self._remote_candidates = [c for c in self._remote_candidates if not drop(c)]


def install_ice(pc: Any, connection: aioice.Connection) -> None:
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
        raise RuntimeError("install_ice() must run before candidates are gathered")
    ice.iceGatherer._connection = connection
    ice._connection = connection
    ice._recv = connection.recv
    ice._send = connection.send


def send_on_nominated_pair(sender: Any) -> Callable[[bytes], None]:
    """A send for an aiortc ``sender``'s datagrams along the ICE pair its agent nominated, as
    aiortc's would go (nothing before there is one): the benchmarks' clocked callers."""

    def send(data: bytes) -> None:
        pair = sender.transport.transport._connection._nominated.get(1)
        if pair is not None:
            pair.protocol.transport.sendto(data, pair.remote_addr)

    return send


def divert_rtp(dtls: Any, sink: Callable[[bytes], bool]) -> None:
    """Offer every RTP/RTCP datagram a stock aioice agent under ``dtls`` receives to ``sink``
    first (from aioice's socket callback); what it does not take (False) goes to aiortc's queue
    as before. The benchmarks' light callers; the transceiver's own agent has ``rtp_sink``."""
    connection = dtls.transport._connection
    aioice_data_received = connection.data_received

    def data_received(data: bytes, component: int) -> None:
        if not (127 < data[0] < 192 and sink(data)):
            aioice_data_received(data, component)

    connection.data_received = data_received


def check_ice() -> list[str]:
    """What aioice lacks of what this module uses (empty: all there)."""
    missing = [
        f"Connection.{m}"
        for m in CONNECTION_METHODS
        if not callable(getattr(aioice.Connection, m, None))
    ]
    probe = aioice.Connection(ice_controlling=False)
    missing += [f"Connection.{a}" for a in CONNECTION_ATTRIBUTES if not hasattr(probe, a)]
    missing += [
        f"StunProtocol.{m}"
        for m in ("connection_made", "datagram_received")
        if not callable(getattr(StunProtocol, m, None))
    ]
    return missing
