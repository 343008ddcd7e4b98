"""A low-latency audio jitter buffer for inbound RTP audio (``transceiver.call.inbound`` feeds it).

aiortc's audio buffer (``JitterBuffer(capacity=16, prefetch=4)``) holds four frames (80 ms) and,
after a single lost packet, waits until 16 packets stand behind the hole before skipping it: a
~300 ms stall, after which the ~14 frames it then holds stay queued for the rest of the call
(aiortc issue #543). For a voice agent that is 280 ms more latency on every turn after the first
loss, and a relay fail-over that loses one or two packets would cost a third of a second of audio.

``AudioJitterBuffer`` releases at most one packet per packet pushed (``push(packet) -> packet
or None``), with another policy than aiortc's:

- in order: each packet is released as it arrives (no prefetch);
- a hole is declared lost once ``hole_wait`` packets wait behind it; a fixed ``hole_wait`` (2 by
  default: 20 ms of waiting, a packet reordered by one is still played), or, ``adaptive``, one
  that follows the path's measured jitter: ``1 + depth`` where the depth in frames is
  ``JITTER_DEPTH_K`` x the RFC 3550 interarrival jitter (``InterarrivalJitter``) / 20 ms, at most
  ``MAX_DEPTH_FRAMES``. On a clean path (jitter under 10 ms, loopback, a good LAN) the depth is
  zero: a hole is declared lost by the next packet, which leaves at once, and a loss costs no
  wait (a packet reordered there is dropped as late; on such a path none is). The transceiver's
  receiver (``transceiver.call.inbound``) runs it adaptive, with the arrival time passed in;
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
FRAME_S = 0.02  # the frame duration the depth is counted in (a caller's usual packet)
# Adaptive depth: frames waited behind a hole = JITTER_DEPTH_K x jitter / FRAME_S, rounded down,
# at most MAX_DEPTH_FRAMES. RFC 3550's jitter is the mean deviation of the transit time; a
# packet reordered behind its successor was late by more than a frame against it, which a path
# whose mean deviation is under half a frame rarely does.
JITTER_DEPTH_K = 2.0
MAX_DEPTH_FRAMES = 3  # 60 ms: the most a hole may delay what follows it
# A transit change this large is a jump of the sender's clock (a restart, a timestamp
# rewrite) or a pause of the path, not jitter: it is not averaged in.
MAX_TRANSIT_STEP_S = 0.5

EVENTS = ("lost", "late", "trimmed", "resync")


def _distance(seq: int, origin: int) -> int:
    """Signed distance from ``origin`` to ``seq`` on the 16-bit sequence circle."""
    d = (seq - origin) & 0xFFFF
    return d - 0x10000 if d >= 0x8000 else d


class InterarrivalJitter:
    """RFC 3550 6.4.1's interarrival jitter, in seconds: the running mean deviation (gain 1/16)
    of the transit time, arrival - media time, between consecutive packets. Sans I/O: both times
    passed in (``update(arrival_s, media_s)``); a step over ``max_step_s`` is not averaged in."""

    __slots__ = ("_transit", "jitter_s", "max_step_s")

    def __init__(self, max_step_s: float = MAX_TRANSIT_STEP_S) -> None:
        self.jitter_s = 0.0
        self.max_step_s = max_step_s
        self._transit: float | None = None

    def update(self, arrival_s: float, media_s: float) -> float:
        """One packet: when it arrived, and its media time (RTP timestamp / rate, any origin)."""
        transit = arrival_s - media_s
        if self._transit is not None:
            d = abs(transit - self._transit)
            if d <= self.max_step_s:
                self.jitter_s += (d - self.jitter_s) / 16
        self._transit = transit
        return self.jitter_s

    def restart(self) -> None:
        """The media clock restarted (a new stream): the next packet only sets the transit."""
        self._transit = None


def depth_frames(jitter_s: float) -> int:
    """The adaptive depth (frames waited behind a hole) for a path with ``jitter_s``."""
    return min(MAX_DEPTH_FRAMES, int(JITTER_DEPTH_K * jitter_s / FRAME_S))


class AudioJitterBuffer:
    """One frame per RTP packet, released as soon as it is next in sequence."""

    def __init__(
        self,
        hole_wait: int = 2,
        max_backlog: int = 2,
        drain_after: int = 50,
        capacity: int = 64,
        on_event: Callable[[str, int], None] | None = None,
        adaptive: bool = False,
        rate: int = 48000,
    ) -> None:
        """``adaptive``: ``hole_wait`` follows the measured jitter (``push`` given ``now``),
        from 1 on a clean path; ``rate``: the RTP clock (Opus's: 48 kHz)."""
        if not 1 <= hole_wait <= capacity or not 0 <= max_backlog < capacity:
            raise ValueError("need 1 <= hole_wait <= capacity and 0 <= max_backlog < capacity")
        if adaptive and capacity <= MAX_DEPTH_FRAMES:
            raise ValueError("an adaptive buffer needs capacity > MAX_DEPTH_FRAMES")
        self.adaptive = adaptive
        self.hole_wait = 1 if adaptive else hole_wait
        self.jitter = InterarrivalJitter()
        self._rate = rate
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
        self.jitter.restart()
        self._next = seq
        self._behind = 0
        self._count("resync")

    def _skip_to_oldest(self) -> None:
        """Give up on the missing packet(s) before the oldest waiting one."""
        assert self._next is not None
        oldest = min(self._waiting, key=lambda s: _distance(s, self._next))  # type: ignore[arg-type]
        self._count("lost", _distance(oldest, self._next))
        self._next = oldest

    def push(self, packet: Any, now: float | None = None) -> Any | None:
        """Take a packet (``sequence_number`` read; adaptive and given ``now``, its arrival in
        seconds, ``timestamp`` too); return the packet due for playout, if any."""
        seq = packet.sequence_number
        if now is not None and self.adaptive:
            jitter = self.jitter.update(now, packet.timestamp / self._rate)
            self.hole_wait = 1 + depth_frames(jitter)
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
