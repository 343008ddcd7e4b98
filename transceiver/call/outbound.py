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
import time
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger("rtcedge.transceiver")

PERIOD_S = 0.02  # one tick per 20 ms audio frame
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

    def take_due(self, now: float) -> list[tuple[bytes, int]]: ...

    def stop(self) -> None: ...


class Clocked(Protocol):
    """What the clock ticks: a call's direct sender (``transceiver.call.seam.DirectSender``)."""

    def send_due(self, now: float, ntp: int) -> int: ...


class AudioClock:
    """The process's 20 ms tick: every registered direct sender sends what is due.

    The timer runs only while some call sends; ticks are scheduled on a fixed grid (no drift),
    and a late tick is not repeated: the senders catch up from their tracks' own clocks. One
    sender that raises is dropped (and logged once), never the tick of the others.
    """

    def __init__(self, period_s: float = PERIOD_S) -> None:
        self.period_s = period_s
        self._senders: set[Clocked] = set()
        self._handle: asyncio.TimerHandle | None = None
        self._next_at = 0.0
        self.ticks = 0
        self.sender_errors = 0

    def __len__(self) -> int:
        return len(self._senders)

    def add(self, sender: Clocked) -> None:
        self._senders.add(sender)
        if self._handle is None:
            loop = asyncio.get_running_loop()
            self._next_at = loop.time()
            self._handle = loop.call_soon(self._tick)

    def discard(self, sender: Clocked) -> None:
        self._senders.discard(sender)

    def close(self) -> None:
        self._senders.clear()
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _tick(self) -> None:
        self._handle = None
        if not self._senders:
            return
        self.ticks += 1
        now, ntp = time.monotonic(), ntp_now()
        for sender in list(self._senders):
            try:
                sender.send_due(now, ntp)
            except Exception:  # one call's failure must not silence the others
                self._senders.discard(sender)
                self.sender_errors += 1
                if self.sender_errors <= 10:
                    log.exception("outbound audio of a call failed; its sender stops")
        loop = asyncio.get_running_loop()
        self._next_at += self.period_s
        if self._next_at < loop.time():  # the loop stalled: resume on the grid from now
            self._next_at = loop.time() + self.period_s
        self._handle = loop.call_at(self._next_at, self._tick)
