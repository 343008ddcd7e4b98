"""The outbound sender without a task per call: one clock paces every call's RTP in the process.

aiortc runs a coroutine per sender that sleeps until its track's next frame is due, builds an
``RtpPacket`` object, serializes it and awaits the DTLS transport, which awaits the ICE
connection, to protect and send it: per call and per 20 ms a timer, a task wake-up and a chain
of awaits (measured on main: ~20 % of the transceiver's CPU with 30 echo calls, more than
encoding). Here one ``AudioClock`` ticks every 20 ms for the whole process and every call's
direct sender (``transceiver.call.seam.DirectSender``) sends what its track has due: the RTP
header is a template serialized once by aiortc's own code (with the call's negotiated
extensions: its MID), of which only the sequence number and the timestamp change; SRTP protect
and the shared socket's send are plain calls.

aiortc keeps everything else of its sender: ``transceiver.call.seam.install_sender`` turns it
into an ``InlineAudioSender``, whose ``_run_rtp`` registers with the clock instead of looping,
and whose packet and octet counts, last RTP timestamp and NTP time (what its RTCP Sender
Reports carry) the direct sender keeps up to date (the aiortc state this takes: the table of
``transceiver.call.seam``). Left out: the RTP history for NACK retransmissions (aiortc
negotiates no NACK for audio) and the DTLS transport's byte counters for ``getStats`` (nobody
asks).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger("rtcedge.transceiver")

PERIOD_S = 0.02  # one tick per 20 ms audio frame, for each call
PHASES = 5  # the period's steps the calls are spread over (PhasedSenders): a tick every 4 ms
NTP_UNIX_OFFSET_S = 2_208_988_800  # 1900-01-01 (NTP's epoch) to 1970-01-01, in seconds


def ntp_now(wall: Callable[[], float] = time.time) -> int:
    """The wall clock as a 64-bit NTP timestamp (32.32 fixed point), what RTCP Sender Reports
    carry. aiortc's ``clock.current_ntp_time`` builds two datetimes for it: with 80 calls
    sending between ticks (``send_now``, once per packet) that was 2-3 % of the transceiver's
    CPU, and 16 % of the benchmark callers'. A float keeps ~0.5 us of precision here."""
    return int((wall() + NTP_UNIX_OFFSET_S) * 4294967296.0)


class Track(Protocol):
    """What a direct sender takes from a track
    (``transceiver.call.outbound_track.BackendAudioTrack``)."""

    on_due: Callable[[], None] | None  # set by the direct sender: audio came for a slot held open

    def take_due(self, now: float, grid_at: float | None = None) -> list[tuple[bytes, int]]: ...

    def stop(self) -> None: ...


class Clocked(Protocol):
    """What the clock ticks: a call's direct sender (``transceiver.call.seam.DirectSender``)."""

    def send_due(self, now: float, ntp: int, grid_at: float | None = None) -> int: ...


class PhasedSenders:
    """Which senders a tick serves: the period cut into ``phases`` equal steps, each sender in
    the least-filled one (sans I/O: ``AudioClock`` runs it).

    Why: encoding and sending a frame is ~0.1 ms of a call's CPU, and one event loop does it
    for every call. All of them on one tick held the loop 2-4.5 ms at 20 calls (the realtime
    benchmark of 2026-12-03), and a caller's packet or a model server's message that arrived
    meanwhile waited for it. Spread over the period, a tick holds it for ``N / phases`` calls;
    each call still gets one tick per period, on a grid of its own phase.
    """

    def __init__(self, phases: int) -> None:
        if phases < 1:
            raise ValueError(f"phases must be >= 1, got {phases}")
        self.phases = phases
        self._groups: list[set[Clocked]] = [set() for _ in range(phases)]
        self._phase_of: dict[Clocked, int] = {}

    def __len__(self) -> int:
        return len(self._phase_of)

    def add(self, sender: Clocked) -> int:
        """Put ``sender`` in the least-filled phase (the lowest of equals); returns it."""
        if sender in self._phase_of:
            return self._phase_of[sender]
        phase = min(range(self.phases), key=lambda p: len(self._groups[p]))
        self._groups[phase].add(sender)
        self._phase_of[sender] = phase
        return phase

    def discard(self, sender: Clocked) -> None:
        phase = self._phase_of.pop(sender, None)
        if phase is not None:
            self._groups[phase].discard(sender)

    def clear(self) -> None:
        for group in self._groups:
            group.clear()
        self._phase_of.clear()

    def at(self, step: int) -> list[Clocked]:
        """The senders of grid step ``step`` (its phase's), as a list: a tick may drop some."""
        return list(self._groups[step % self.phases])

    def next_step(self, after: int, earliest: int) -> int | None:
        """The first grid step > ``after`` and >= ``earliest`` whose phase has a sender (None:
        no sender at all). ``earliest`` skips the steps a stalled loop already missed: they are
        not repeated, the tracks catch up from their own clocks."""
        if not self._phase_of:
            return None
        step = max(after + 1, earliest)
        while not self._groups[step % self.phases]:
            step += 1
        return step


class AudioClock:
    """The process's 20 ms clock: every registered direct sender sends what is due, once per
    period, in the phase ``PhasedSenders`` gave it.

    The timer runs only while some call sends; ticks are scheduled on a fixed grid (no drift:
    a stalled loop skips the steps it missed and keeps the grid), and each tick passes its
    place on the grid, on which a track starts its own clock, so that its slots fall due on
    its ticks rather than just after them. One sender that raises is dropped (and logged once),
    never the tick of the others.
    """

    def __init__(self, period_s: float = PERIOD_S, phases: int = PHASES) -> None:
        self.period_s = period_s
        self.step_s = period_s / phases
        self._senders = PhasedSenders(phases)
        self._handle: asyncio.TimerHandle | None = None
        self._origin: float | None = None  # loop time of grid step 0: the first tick's
        self._step = 0  # the grid step of the tick scheduled (or running)
        self.ticks = 0
        self.sender_errors = 0

    def __len__(self) -> int:
        return len(self._senders)

    def add(self, sender: Clocked) -> None:
        self._senders.add(sender)
        if self._handle is None:
            loop = asyncio.get_running_loop()
            now = loop.time()
            if self._origin is None:
                self._origin, self._step = now, -1
            self._schedule(loop, self._step, now)

    def discard(self, sender: Clocked) -> None:
        self._senders.discard(sender)

    def close(self) -> None:
        self._senders.clear()
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _schedule(self, loop: asyncio.AbstractEventLoop, after: int, now: float) -> None:
        """The next tick: the first step after ``after`` with senders, not before ``now``."""
        assert self._origin is not None
        earliest = math.ceil((now - self._origin) / self.step_s - 1e-9)
        step = self._senders.next_step(after, earliest)
        if step is None:
            self._handle = None
            return
        self._step = step
        self._handle = loop.call_at(self._origin + step * self.step_s, self._tick)

    def _tick(self) -> None:
        self._handle = None
        step, origin = self._step, self._origin
        assert origin is not None
        senders = self._senders.at(step)
        if senders:
            self.ticks += 1
            grid_at = origin + step * self.step_s
            now, ntp = time.monotonic(), ntp_now()
            for sender in senders:
                try:
                    sender.send_due(now, ntp, grid_at)
                except Exception:  # one call's failure must not silence the others
                    self._senders.discard(sender)
                    self.sender_errors += 1
                    if self.sender_errors <= 10:
                        log.exception("outbound audio of a call failed; its sender stops")
        loop = asyncio.get_running_loop()
        self._schedule(loop, step, loop.time())
