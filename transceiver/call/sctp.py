"""The data channel's SCTP association with bounds: aiortc's RTCSctpTransport, limited per call.

Stock aiortc (1.16) keeps every DATA chunk a caller sends, even past the window it advertised;
re-sorts its whole set of out-of-order TSNs on every chunk; and queues every outbound message
until the caller acknowledges it, without bound (issue 21 #2: one skipped TSN then 6,000 tiny
chunks cost 655-842 us of CPU each and another call's audio a 0.7-2.9 s gap; 20,000 messages
parked behind a missing stream sequence number held 27.7 MB; a caller that never SACKs grew the
transceiver by 15 MB). Here, per session, the peer connection's one ``RTCSctpTransport`` becomes
a ``BoundedSctpTransport`` (its class is swapped by ``transceiver.call.seam.install_sctp`` after
the offer is applied, as the audio receiver's is), whose rules are pure objects here:

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

The transport itself, ``BoundedSctpTransport``, and the aiortc internals it relies on (checked at
start) are in ``transceiver.call.seam``; ``install_sctp`` swaps it in.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass
from typing import Any

from aiortc.utils import uint32_gt

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
