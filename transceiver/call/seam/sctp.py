"""aiortc's SCTP transport, where the transceiver reaches inside it: ``BoundedSctpTransport``.

The rules it applies are pure objects in ``transceiver.call.sctp`` (the receive window, the gap
tracking, the outbound backlog: why each exists is there). Here is how they sit inside aiortc's
``RTCSctpTransport``: the methods replaced, wrapped or called, and the state read and set; the
table of ``transceiver.call.seam`` lists them.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable
from typing import Any

from aiortc.rtcsctptransport import (
    WEBRTC_DCEP,
    InboundStream,
    RTCSctpCapabilities,
    RTCSctpTransport,
    SackChunk,
)
from aiortc.utils import uint16_add, uint16_gt, uint32_gt, uint32_gte

from transceiver.call.sctp import (
    ACCEPT,
    DROP_REASONS,
    DUPLICATE,
    MAX_INBOUND_STREAMS,
    MAX_MESSAGE_BYTES,
    OVER_MESSAGE,
    TOO_LARGE,
    TSN_MODULO,
    UNACKED_FULL,
    InboundWindow,
    OutboundBacklog,
    SctpLimits,
    TsnGaps,
    clip_gap_blocks,
)
from transceiver.call.seam.guard import check_instance

log = logging.getLogger("rtcedge.transceiver")

# What aiortc must have for this module (check_sctp at start, install_sctp per transport).
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


def check_sctp(dtls: Any) -> list[str]:
    """What aiortc's SCTP lacks of what this module uses (empty: all there): the methods
    replaced or called, ``InboundStream``'s, and the attributes a new transport sets (read from
    a throwaway one over ``dtls``, inside a running event loop)."""
    missing = [
        f"RTCSctpTransport.{m}" for m in METHODS if not callable(getattr(RTCSctpTransport, m, None))
    ]
    missing += [
        f"InboundStream.{m}"
        for m in ("add_chunk", "pop_messages", "prune_chunks")
        if not callable(getattr(InboundStream, m, None))
    ]
    if not missing:
        probe = RTCSctpTransport(dtls)
        missing += [f"RTCSctpTransport.{a}" for a in ATTRIBUTES if not hasattr(probe, a)]
        stream = InboundStream()
        missing += [f"InboundStream.{a}" for a in STREAM_ATTRIBUTES if not hasattr(stream, a)]
    return missing


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
    """aiortc's SCTP transport with ``SctpLimits``. Never constructed: ``install_sctp`` turns a peer
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


def install_sctp(
    sctp: Any,
    limits: SctpLimits,
    on_limit: Callable[[str], None],
    on_drop: Callable[[str, int], None],
) -> BoundedSctpTransport:
    """Make ``sctp`` (``pc.sctp``) a ``BoundedSctpTransport``. Call after the offer is applied and
    before the answer is made (it advertises our max-message-size) and the association starts.
    ``on_limit(why)``: the caller went over a cap (end the session); ``on_drop(reason, n)``:
    count."""
    check_instance(sctp, RTCSctpTransport, ATTRIBUTES)
    if sctp._last_received_tsn is not None or sctp._inbound_streams:
        raise RuntimeError("install_sctp() must run before the association starts")
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
