"""The data channel's SCTP association with bounds: aiortc's RTCSctpTransport, limited per call.

Stock aiortc (1.16) keeps every DATA chunk a caller sends, even past the window it advertised;
re-sorts its whole set of out-of-order TSNs on every chunk; and queues every outbound message
until the caller acknowledges it, without bound (issue 21 #2: one skipped TSN then 6,000 tiny
chunks cost 655-842 us of CPU each and another call's audio a 0.7-2.9 s gap; 20,000 messages
parked behind a missing stream sequence number held 27.7 MB; a caller that never SACKs grew the
transceiver by 15 MB). Here, per session, the peer connection's one ``RTCSctpTransport`` becomes
a ``BoundedSctpTransport`` (its class is swapped by ``install`` after the offer is applied, as
``transceiver.call.inbound`` does to the audio receiver), whose rules are pure objects below:

- ``InboundWindow``: a DATA chunk is judged before aiortc stores it. Outside the receive window
  (more than ``max_misordered_tsns`` TSNs past the cumulative TSN, or more bytes than
  ``receive_window_bytes`` held) it is dropped unread and not acknowledged (RFC 9260 6.2: the
  sender retransmits it once the window opens) unless it is the next TSN, which always fits so
  the association cannot stall. A sender that honours the window never reaches the caps that end
  the session (``data_channel_limit``): reassembly over the window, over
  ``max_misordered_tsns + 64`` chunks, a message over ``MAX_MESSAGE_BYTES`` (what the answer's
  ``a=max-message-size`` says), or, while a gap stays open, more than a window's bytes sent
  beyond the window.
- ``TsnGaps``: the TSNs received past the cumulative TSN, a list kept sorted by insertion
  (bisect), so a chunk costs O(log n) and a SACK's gap blocks are cached until it changes.
- ``clip_gap_blocks``: a SACK's gap blocks are clipped to the TSNs we have outstanding before
  aiortc walks them TSN by TSN (made-up blocks of 65,535 TSNs cost it seconds per SACK).
- ``OutboundBacklog``: events toward the caller wait here, not in aiortc's queue; at most
  ``max_unacked_bytes`` are handed to aiortc and not yet acknowledged. Past that, events wait in
  the backlog, and the backlog drops its oldest to keep backlog + unacknowledged under the cap
  (counted): a caller that sends no SACK holds at most that much.

aiortc internals this module relies on (``check_aiortc`` verifies them at start, ``install`` on
the instance; an aiortc that moved them fails loudly):

- ``RTCSctpTransport`` methods replaced: ``_receive_data_chunk``, ``_receive_forward_tsn_chunk``,
  ``_send_sack``, ``_receive_sack_chunk`` (wrapped), ``_receive`` (wrapped),
  ``_data_channel_send`` (wrapped), ``_get_inbound_stream``, ``getCapabilities``; called:
  ``_receive``, ``_reset_deferred_streams``, ``_send_chunk``;
- its attributes: ``_last_received_tsn``, ``_sack_duplicates``, ``_sack_misordered`` (left empty),
  ``_sack_needed``, ``_advertised_rwnd``, ``_inbound_streams``, ``_inbound_streams_max``,
  ``_inbound_streams_count``, ``_sent_queue`` (its chunks' ``tsn``, ``_book_size``,
  ``protocol``), ``_last_sacked_tsn``, ``_local_tsn``, ``_remote_max_message_size``;
- ``InboundStream`` (``reassembly``, ``sequence_number``, ``add_chunk``, ``pop_messages``,
  ``prune_chunks``), ``SackChunk``, ``RTCSctpCapabilities``, ``WEBRTC_DCEP`` and the uint16/uint32
  helpers of ``aiortc.utils``.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiortc.rtcsctptransport import (
    WEBRTC_DCEP,
    InboundStream,
    RTCSctpCapabilities,
    RTCSctpTransport,
    SackChunk,
)
from aiortc.utils import uint16_add, uint16_gt, uint32_gt, uint32_gte

log = logging.getLogger("rtcedge.transceiver")

TSN_MODULO = 1 << 32
# The largest event a caller may send: what the answer advertises (a=max-message-size), and the
# session's own bound on an event (transceiver.call.session.MAX_EVENT_BYTES).
MAX_MESSAGE_BYTES = 16 * 1024
# Inbound streams we accept (the INIT/INIT-ACK's MIS): a call opens one data channel; aiortc's
# 65,535 let a caller make an InboundStream per id. DATA for a stream beyond is dropped.
MAX_INBOUND_STREAMS = 256

# Drop reasons (rtcedge_transceiver_data_channel_dropped_total{reason}): DATA chunks from the
# caller, then events toward it.
BEYOND_WINDOW = "beyond_window"  # a DATA chunk outside the receive window (RFC 9260 6.2)
INVALID_STREAM = "invalid_stream"  # a DATA chunk for a stream id past the negotiated count
UNACKED_FULL = "unacked_full"  # an event dropped, oldest first: the caller acknowledges too little
TOO_LARGE = "too_large"  # an event larger than the caller's a=max-message-size
DROP_REASONS = (BEYOND_WINDOW, INVALID_STREAM, UNACKED_FULL, TOO_LARGE)

# Why a session's data channel went over a cap (logged; the session ends data_channel_limit).
OVER_REASSEMBLY_BYTES = "reassembly over the receive window"
OVER_REASSEMBLY_CHUNKS = "too many chunks in reassembly"
OVER_MESSAGE = "a message over max-message-size"
OVER_WINDOW_FLOOD = "a window's bytes sent beyond the window with a gap open"

# What aiortc must have for this module (check_aiortc, install).
METHODS = (
    "_receive_data_chunk",
    "_receive_forward_tsn_chunk",
    "_receive_sack_chunk",
    "_send_sack",
    "_receive",
    "_data_channel_send",
    "_get_inbound_stream",
    "_reset_deferred_streams",
    "_send_chunk",
    "getCapabilities",
)
ATTRIBUTES = (
    "_last_received_tsn",
    "_sack_duplicates",
    "_sack_misordered",
    "_sack_needed",
    "_advertised_rwnd",
    "_inbound_streams",
    "_inbound_streams_max",
    "_inbound_streams_count",
    "_sent_queue",
    "_last_sacked_tsn",
    "_local_tsn",
    "_remote_max_message_size",
)
STREAM_ATTRIBUTES = ("reassembly", "sequence_number", "add_chunk", "pop_messages", "prune_chunks")


@dataclass(frozen=True)
class SctpLimits:
    """A call's data-channel bounds (``--sctp-*`` options, docs/security.md)."""

    receive_window_bytes: int = 64 * 1024  # advertised a_rwnd; reassembly past it ends the call
    max_misordered_tsns: int = 256  # TSNs tracked past the cumulative TSN; farther: dropped
    max_unacked_bytes: int = 256 * 1024  # toward the caller, handed to SCTP and not acknowledged

    @property
    def max_held_chunks(self) -> int:
        """Chunks in reassembly at most: the TSNs past a gap, and 64 more for messages whose
        first fragments came in order (a browser's fragments are ~1.2 KB: a 16 KiB message is
        14). aiortc rescans a stream's reassembly per chunk, so this bounds that scan too."""
        return self.max_misordered_tsns + 64


def check_aiortc() -> None:
    """Fail at start, naming what is missing, on an aiortc without the internals used here:
    the methods replaced or called, ``InboundStream``'s, and the attributes a new transport
    sets (read from a throwaway one)."""
    missing = [m for m in METHODS if not callable(getattr(RTCSctpTransport, m, None))]
    missing += [
        f"InboundStream.{m}"
        for m in ("add_chunk", "pop_messages", "prune_chunks")
        if not callable(getattr(InboundStream, m, None))
    ]
    if not missing:
        missing += [a for a in ATTRIBUTES if not hasattr(_probe(), a)]
        stream = InboundStream()
        missing += [f"InboundStream.{a}" for a in STREAM_ATTRIBUTES if not hasattr(stream, a)]
    if missing:
        raise RuntimeError(
            f"aiortc's SCTP has no {', '.join(missing)} where transceiver.call.sctp expects it; "
            "this aiortc is not supported"
        )


def _probe() -> RTCSctpTransport:
    """A throwaway transport; its ``__init__`` takes the running event loop, so outside one it
    is made inside a loop of its own."""

    async def make() -> RTCSctpTransport:
        return RTCSctpTransport(_ProbeDtls())  # type: ignore[arg-type]

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(make())
        finally:
            loop.close()
    return RTCSctpTransport(_ProbeDtls())  # type: ignore[arg-type]


class _ProbeDtls:
    """Enough of a DTLS transport for ``RTCSctpTransport.__init__`` (it reads ``state``)."""

    state = "new"


# -- pure parts -----------------------------------------------------------------------------------
class TsnGaps:
    """TSNs received past the cumulative TSN, sorted. Filled by a caller's DATA chunks; at most
    ``SctpLimits.max_misordered_tsns`` (256), as ``InboundWindow`` drops any TSN farther.

    Sans-I/O: the cumulative TSN is passed in and the new one returned, so aiortc's
    ``_last_received_tsn`` stays the one truth (its INIT handling sets it). All the TSNs held are
    that close after the cumulative one, so ordering them by distance from it is their
    serial-number order (RFC 1982) even across the 2^32 wrap.
    """

    def __init__(self) -> None:
        self._tsns: list[int] = []
        self._base = 0  # the cumulative TSN they were last told: the sort key's origin
        self._blocks: list[tuple[int, int]] = []  # gap blocks for _base (cached)
        self._blocks_stale = False

    def __len__(self) -> int:
        return len(self._tsns)

    def __contains__(self, tsn: int) -> bool:
        key = self._key(tsn)
        i = bisect.bisect_left(self._tsns, key, key=self._key)
        return i < len(self._tsns) and self._tsns[i] == tsn

    def _key(self, tsn: int) -> int:
        return (tsn - self._base) % TSN_MODULO

    def add(self, cumulative: int, tsn: int) -> int:
        """Record ``tsn`` (new: neither at/before ``cumulative`` nor held); the new cumulative
        TSN (moved on over every TSN now contiguous with it)."""
        self._base = cumulative  # every TSN held is after it
        if tsn == (cumulative + 1) % TSN_MODULO:
            cumulative = tsn
        else:
            bisect.insort(self._tsns, tsn, key=self._key)
        self._blocks_stale = True
        return self._consolidate(cumulative)

    def forward(self, cumulative: int) -> int:
        """The caller moved the cumulative TSN to ``cumulative`` (FORWARD TSN, RFC 3758): forget
        what it passed; the new cumulative TSN."""
        drop = 0
        for tsn in self._tsns:
            if uint32_gt(tsn, cumulative):
                break
            drop += 1
        del self._tsns[:drop]
        self._blocks_stale = True
        return self._consolidate(cumulative)

    def _consolidate(self, cumulative: int) -> int:
        run = 0
        for tsn in self._tsns:
            if tsn != (cumulative + 1) % TSN_MODULO:
                break
            cumulative = tsn
            run += 1
        del self._tsns[:run]
        self._base = cumulative
        return cumulative

    def gap_blocks(self) -> list[tuple[int, int]]:
        """SACK gap ack blocks (start, end: offsets from the cumulative TSN, RFC 9260 3.3.4),
        made once per change, not per SACK."""
        if self._blocks_stale:
            blocks: list[list[int]] = []
            following = None
            for tsn in self._tsns:
                offset = (tsn - self._base) % TSN_MODULO
                if tsn == following:
                    blocks[-1][1] = offset
                else:
                    blocks.append([offset, offset])
                following = (tsn + 1) % TSN_MODULO
            self._blocks = [(a, b) for a, b in blocks]
            self._blocks_stale = False
        return self._blocks


def clip_gap_blocks(gaps: list[tuple[int, int]], outstanding: int) -> list[tuple[int, int]]:
    """A caller's SACK gap blocks reduced to what they can mean: sorted, merged, within the
    ``outstanding`` TSNs past its cumulative TSN (we sent no others), empty ones dropped.

    aiortc walks every TSN of every block (``range(start, end + 1)``): one SACK of ~290 blocks
    of 65,535 each, all made up, cost it 2.6 s of CPU. Clipped, a SACK costs at most one step
    per TSN outstanding, however many blocks it claims.
    """
    out: list[tuple[int, int]] = []
    for start, end in sorted(gaps):
        start, end = max(start, 1), min(end, outstanding)
        if start > end:
            continue
        if out and start <= out[-1][1] + 1:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
            continue
        out.append((start, end))
    return out


ACCEPT = "accept"
DUPLICATE = "duplicate"


@dataclass
class InboundWindow:
    """The judge of each DATA chunk of a call (sans-I/O: numbers in, a verdict out).

    ``judge`` says ``ACCEPT``, ``DUPLICATE``, a drop reason (``BEYOND_WINDOW``,
    ``INVALID_STREAM``), or an ``OVER_*`` text: the call is over a cap and ends.
    """

    limits: SctpLimits
    beyond_bytes: int = 0  # sent beyond the window since the cumulative TSN last moved

    def judge(
        self,
        tsn: int,
        size: int,
        stream_id: int,
        streams: int,
        cumulative: int,
        held: TsnGaps,
        held_bytes: int,
    ) -> str:
        distance = (tsn - cumulative) % TSN_MODULO
        if distance == 0 or distance >= 1 << 31 or (distance > 1 and tsn in held):
            return DUPLICATE
        if stream_id >= streams:
            return INVALID_STREAM
        if distance == 1:  # the next TSN always fits: it moves the window on
            return ACCEPT
        limits = self.limits
        if distance > limits.max_misordered_tsns or held_bytes + size > limits.receive_window_bytes:
            # RFC 9260 6.2: out of buffer space while a gap is open, drop (and do not ack) it.
            self.beyond_bytes += size
            if self.beyond_bytes > limits.receive_window_bytes + MAX_MESSAGE_BYTES:
                return OVER_WINDOW_FLOOD  # a sender honouring a_rwnd sends one window at most
            return BEYOND_WINDOW
        return ACCEPT

    def moved(self) -> None:
        """The cumulative TSN moved: the sender's view of the window is new."""
        self.beyond_bytes = 0

    def over(self, held_bytes: int, held_chunks: int) -> str | None:
        """The cap reassembly is over, if any (checked after a chunk was stored)."""
        if held_bytes > self.limits.receive_window_bytes:
            return OVER_REASSEMBLY_BYTES
        if held_chunks > self.limits.max_held_chunks:
            return OVER_REASSEMBLY_CHUNKS
        return None


class OutboundBacklog:
    """Events toward the caller not yet given to SCTP, bounded with what SCTP holds unacked.

    Sans-I/O: ``push`` an event's size and item; ``take(unacked)`` says which to hand to SCTP
    now. Backlog + unacknowledged stay within ``max_bytes`` (plus one event: a lone event larger
    than the room still waits its turn), dropping the oldest waiting events first.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: deque[tuple[int, Any]] = deque()
        self.bytes = 0
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._items)

    def push(self, size: int, item: Any, unacked: int) -> int:
        """Queue an event; returns how many older ones were dropped to make room."""
        dropped = 0
        while self._items and self.bytes + unacked + size > self.max_bytes:
            old_size, _ = self._items.popleft()
            self.bytes -= old_size
            dropped += 1
        self._items.append((size, item))
        self.bytes += size
        self.dropped += dropped
        return dropped

    def take(self, unacked: int) -> list[Any]:
        """The events that fit beside ``unacked`` bytes (the first one always, if none are)."""
        out = []
        while self._items:
            size, item = self._items[0]
            if unacked and unacked + size > self.max_bytes:
                break
            self._items.popleft()
            self.bytes -= size
            unacked += size
            out.append(item)
        return out


# -- the transport ------------------------------------------------------------------------------
class _BoundedInboundStream(InboundStream):
    """aiortc's reassembly with a bisect insertion instead of a scan from the front."""

    def add_chunk(self, chunk: Any) -> None:
        reassembly = self.reassembly
        if not reassembly or uint32_gt(chunk.tsn, reassembly[-1].tsn):
            reassembly.append(chunk)
            return
        first = reassembly[0].tsn
        if uint32_gt(first, chunk.tsn):
            reassembly.insert(0, chunk)
            return
        key = (chunk.tsn - first) % TSN_MODULO
        i = bisect.bisect_left(reassembly, key, key=lambda c: (c.tsn - first) % TSN_MODULO)
        if i < len(reassembly) and reassembly[i].tsn == chunk.tsn:
            return  # a duplicate: InboundWindow refuses those before they get here
        reassembly.insert(i, chunk)


class BoundedSctpTransport(RTCSctpTransport):
    """aiortc's SCTP transport with ``SctpLimits``. Never constructed: ``install`` turns a peer
    connection's own transport into one (``__class__``), before it starts."""

    _limits: SctpLimits
    _window: InboundWindow
    _gaps: TsnGaps
    _backlog: OutboundBacklog
    _unacked_bytes: int
    _held_chunks: int
    _over_limit: str | None
    _on_limit: Callable[[str], None]
    _on_drop: Callable[[str, int], None]

    @classmethod
    def getCapabilities(cls) -> RTCSctpCapabilities:
        """What the answer's ``a=max-message-size`` says: the largest event we take."""
        return RTCSctpCapabilities(maxMessageSize=MAX_MESSAGE_BYTES)

    # -- inbound ----------------------------------------------------------------------------------
    def _held_bytes(self) -> int:
        # aiortc lowers _advertised_rwnd by each chunk stored and raises it by each message
        # delivered or pruned: the window less it is what reassembly holds.
        return self._limits.receive_window_bytes - self._advertised_rwnd

    def _get_inbound_stream(self, stream_id: int) -> InboundStream:
        streams = self._inbound_streams
        stream = streams.get(stream_id)
        if stream is None:
            stream = _BoundedInboundStream()
            if stream_id < self._inbound_streams_count:
                streams[stream_id] = stream  # else a scratch one, forgotten (FORWARD TSN)
        return stream

    async def _receive_data_chunk(self, chunk: Any) -> None:
        """aiortc's, behind ``InboundWindow`` and with ``TsnGaps`` for its sorted set."""
        self._sack_needed = True
        cumulative = self._last_received_tsn
        if cumulative is None or self._over_limit is not None:
            return  # before the association (aiortc would raise), or the call is ending
        size = len(chunk.user_data)
        verdict = self._window.judge(
            chunk.tsn,
            size,
            chunk.stream_id,
            self._inbound_streams_count,
            cumulative,
            self._gaps,
            self._held_bytes(),
        )
        if verdict is not ACCEPT:
            if verdict is DUPLICATE:
                self._sack_duplicates.append(chunk.tsn)
            elif verdict in DROP_REASONS:
                self._on_drop(verdict, 1)
            else:
                self._limit(verdict)
            return
        self._last_received_tsn = self._gaps.add(cumulative, chunk.tsn)
        if self._last_received_tsn != cumulative:
            self._window.moved()
        stream = self._get_inbound_stream(chunk.stream_id)
        before = len(stream.reassembly)
        stream.add_chunk(chunk)
        self._advertised_rwnd -= size
        try:
            for message in stream.pop_messages():
                self._advertised_rwnd += len(message[2])
                await self._receive(*message)
        finally:
            self._held_chunks += len(stream.reassembly) - before
        over = self._window.over(self._held_bytes(), self._held_chunks)
        if over is not None:
            self._limit(over)
            return
        await self._reset_deferred_streams()

    async def _receive_forward_tsn_chunk(self, chunk: Any) -> None:
        """aiortc's (RFC 3758 3.6), with ``TsnGaps`` and only the negotiated streams."""
        self._sack_needed = True
        cumulative = self._last_received_tsn
        if cumulative is None or uint32_gte(cumulative, chunk.cumulative_tsn):
            return
        self._last_received_tsn = self._gaps.forward(chunk.cumulative_tsn)
        self._window.moved()
        for stream_id, stream_seq in chunk.streams:
            if stream_id >= self._inbound_streams_count:
                continue
            stream = self._get_inbound_stream(stream_id)
            sequence_number = uint16_add(stream_seq, 1)
            if uint16_gt(sequence_number, stream.sequence_number):
                stream.sequence_number = sequence_number
            for message in stream.pop_messages():
                self._advertised_rwnd += len(message[2])
                await self._receive(*message)
        for stream in self._inbound_streams.values():
            self._advertised_rwnd += stream.prune_chunks(self._last_received_tsn)
        self._held_chunks = sum(len(s.reassembly) for s in self._inbound_streams.values())
        await self._reset_deferred_streams()

    async def _send_sack(self) -> None:
        """aiortc's, its gap blocks from ``TsnGaps`` (cached) instead of sorting a set."""
        sack = SackChunk()
        sack.cumulative_tsn = self._last_received_tsn
        sack.advertised_rwnd = max(0, self._advertised_rwnd)
        sack.duplicates = self._sack_duplicates[:]
        sack.gaps = list(self._gaps.gap_blocks())
        await self._send_chunk(sack)
        self._sack_duplicates.clear()
        self._sack_needed = False

    async def _receive(self, stream_id: int, pp_id: int, data: bytes) -> None:
        if len(data) > MAX_MESSAGE_BYTES:
            self._limit(OVER_MESSAGE)  # RFC 8841 6: larger than our a=max-message-size
            return
        await super()._receive(stream_id, pp_id, data)

    def _limit(self, why: str) -> None:
        if self._over_limit is None:
            self._over_limit = why
            log.warning("data channel over its limits (%s): the session ends", why)
            self._on_limit(why)

    # -- outbound ---------------------------------------------------------------------------------
    def _data_channel_send(self, channel: Any, data: bytes | str) -> None:
        """Into the backlog; handed to aiortc as acknowledgements make room."""
        size = len(data.encode("utf8") if isinstance(data, str) else data) or 1
        remote = self._remote_max_message_size
        if remote and size > remote:
            self._on_drop(TOO_LARGE, 1)  # aiortc would raise into whoever sent it
            return
        dropped = self._backlog.push(size, (channel, data, size), self._unacked_bytes)
        if dropped:
            self._on_drop(UNACKED_FULL, dropped)
        self._pump()

    def _pump(self) -> None:
        for channel, data, size in self._backlog.take(self._unacked_bytes):
            if channel.readyState != "open":
                continue
            self._unacked_bytes += size
            super()._data_channel_send(channel, data)

    async def _receive_sack_chunk(self, chunk: Any) -> None:
        """aiortc's, its gap blocks clipped (``clip_gap_blocks``); then what it acknowledged
        makes room for the backlog."""
        if chunk.gaps:
            outstanding = (self._local_tsn - 1 - chunk.cumulative_tsn) % TSN_MODULO
            outstanding = min(outstanding, len(self._sent_queue))
            chunk.gaps = clip_gap_blocks(chunk.gaps, outstanding) if outstanding else []
        if not uint32_gt(self._last_sacked_tsn, chunk.cumulative_tsn):
            acked = 0
            for sent in self._sent_queue:  # what aiortc is about to pop: acknowledged
                if uint32_gt(sent.tsn, chunk.cumulative_tsn):
                    break
                if sent.protocol != WEBRTC_DCEP:
                    acked += sent._book_size
            self._unacked_bytes = max(0, self._unacked_bytes - acked)
        await super()._receive_sack_chunk(chunk)
        if self._backlog:
            self._pump()

    @property
    def unacked_bytes(self) -> int:
        """Event bytes handed to aiortc and not acknowledged by the caller."""
        return self._unacked_bytes

    @property
    def backlog_bytes(self) -> int:
        return self._backlog.bytes

    @property
    def held_chunks(self) -> int:
        return self._held_chunks

    @property
    def misordered_tsns(self) -> int:
        return len(self._gaps)


def install(
    sctp: Any,
    limits: SctpLimits,
    on_limit: Callable[[str], None],
    on_drop: Callable[[str, int], None],
) -> BoundedSctpTransport:
    """Make ``sctp`` (``pc.sctp``) a ``BoundedSctpTransport``. Call after the offer is applied and
    before the answer is made (it advertises our max-message-size) and the association starts.
    ``on_limit(why)``: the caller went over a cap (end the session); ``on_drop(reason, n)``:
    count."""
    if type(sctp) is not RTCSctpTransport:
        raise RuntimeError(f"expected aiortc's RTCSctpTransport, found {type(sctp).__name__}")
    missing = [name for name in ATTRIBUTES if not hasattr(sctp, name)]
    if missing:
        raise RuntimeError(
            f"aiortc's RTCSctpTransport has no {', '.join(missing)} where transceiver.call.sctp "
            "expects it; this aiortc is not supported"
        )
    if sctp._last_received_tsn is not None or sctp._inbound_streams:
        raise RuntimeError("sctp.install() must run before the association starts")
    sctp.__class__ = BoundedSctpTransport
    sctp._limits = limits
    sctp._window = InboundWindow(limits)
    sctp._gaps = TsnGaps()
    sctp._backlog = OutboundBacklog(limits.max_unacked_bytes)
    sctp._unacked_bytes = 0
    sctp._held_chunks = 0
    sctp._over_limit = None
    sctp._on_limit = on_limit
    sctp._on_drop = on_drop
    sctp._advertised_rwnd = limits.receive_window_bytes  # the INIT(-ACK)'s a_rwnd
    sctp._inbound_streams_max = MAX_INBOUND_STREAMS  # the INIT(-ACK)'s MIS
    return sctp
