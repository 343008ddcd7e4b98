"""A low-latency audio jitter buffer for inbound RTP audio (``transceiver.call.inbound`` feeds it).

aiortc's audio buffer (``JitterBuffer(capacity=16, prefetch=4)``) holds four frames (80 ms) and,
after a single lost packet, waits until 16 packets stand behind the hole before skipping it: a
~300 ms stall, after which the ~14 frames it then holds stay queued for the rest of the call
(aiortc issue #543). For a voice agent that is 280 ms more latency on every turn after the first
loss, and a relay fail-over that loses one or two packets would cost a third of a second of audio.

``AudioJitterBuffer`` releases at most one packet per packet pushed (``push(packet) -> packet
or None``), with another policy than aiortc's:

- in order: each packet is released as it arrives (no prefetch);
- a hole is declared lost once ``hole_wait`` packets wait behind it (40 ms by default), so a
  packet reordered by one is still played;
- at most ``max_backlog`` frames wait after a release; and while any wait, every
  ``drain_after`` releases the oldest is dropped, so the latency a loss added returns to zero
  within about a second instead of staying;
- late packets (already skipped) are dropped; a sequence jump beyond ``capacity`` or back beyond
  ``MAX_MISORDER`` (a sender that restarted) starts over at the new packet.

Sans-I/O: no clock, no socket. The transceiver's receiver (``transceiver.call.inbound``) pushes
into it; ``transceiver.call.seam.install_jitter_buffer`` puts it, in aiortc's interface, into a
stock aiortc receiver instead (the benchmarks' aiortc callers).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MAX_MISORDER = 100  # as aiortc: a packet this far behind means the sender restarted

EVENTS = ("lost", "late", "trimmed", "resync")


def _distance(seq: int, origin: int) -> int:
    """Signed distance from ``origin`` to ``seq`` on the 16-bit sequence circle."""
    d = (seq - origin) & 0xFFFF
    return d - 0x10000 if d >= 0x8000 else d


class AudioJitterBuffer:
    """One frame per RTP packet, released as soon as it is next in sequence."""

    def __init__(
        self,
        hole_wait: int = 2,
        max_backlog: int = 2,
        drain_after: int = 50,
        capacity: int = 64,
        on_event: Callable[[str, int], None] | None = None,
    ) -> None:
        if not 1 <= hole_wait <= capacity or not 0 <= max_backlog < capacity:
            raise ValueError("need 1 <= hole_wait <= capacity and 0 <= max_backlog < capacity")
        self.hole_wait = hole_wait
        self.max_backlog = max_backlog
        self.drain_after = drain_after
        self.capacity = capacity
        self._on_event = on_event
        self._next: int | None = None
        self._waiting: dict[int, Any] = {}  # sequence number -> packet
        self._behind = 0  # releases in a row that left frames waiting
        self.counts = dict.fromkeys(EVENTS, 0)

    def _count(self, event: str, n: int = 1) -> None:
        if n:
            self.counts[event] += n
            if self._on_event is not None:
                self._on_event(event, n)

    def _resync(self, seq: int) -> None:
        self._waiting.clear()
        self._next = seq
        self._behind = 0
        self._count("resync")

    def _skip_to_oldest(self) -> None:
        """Give up on the missing packet(s) before the oldest waiting one."""
        assert self._next is not None
        oldest = min(self._waiting, key=lambda s: _distance(s, self._next))  # type: ignore[arg-type]
        self._count("lost", _distance(oldest, self._next))
        self._next = oldest

    def push(self, packet: Any) -> Any | None:
        """Take a packet (``sequence_number`` read); return the packet due for playout, if any."""
        seq = packet.sequence_number
        if self._next is None:
            self._next = seq
        d = _distance(seq, self._next)
        if d < 0:
            if d >= -MAX_MISORDER:
                self._count("late")
                return None
            self._resync(seq)
        elif d >= self.capacity:
            self._resync(seq)
        self._waiting[seq] = packet
        if self._next not in self._waiting:
            if len(self._waiting) < self.hole_wait:
                return None
            self._skip_to_oldest()
        released = self._waiting.pop(self._next)
        self._next = (self._next + 1) & 0xFFFF
        self._trim()
        return released

    def _trim(self) -> None:
        """Bound what waits after a release, and let a lasting backlog drain one frame at a time."""
        if not self._waiting:
            self._behind = 0
            return
        self._behind += 1
        excess = len(self._waiting) - self.max_backlog
        if self._behind >= self.drain_after:
            excess = max(excess, 1)
            self._behind = 0
        while excess > 0:
            if self._next not in self._waiting:
                self._skip_to_oldest()
            del self._waiting[self._next]
            self._next = (self._next + 1) & 0xFFFF
            self._count("trimmed")
            excess -= 1
