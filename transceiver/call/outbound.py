"""The outbound sender without a task per call: one clock paces every call's RTP in the process.

aiortc runs a coroutine per sender that sleeps until its track's next frame is due, builds an
``RtpPacket`` object, serializes it and awaits the DTLS transport, which awaits the ICE
connection, to protect and send it: per call and per 20 ms a timer, a task wake-up and a chain
of awaits (measured on main: ~20 % of the transceiver's CPU with 30 echo calls, more than
encoding). Here one ``AudioClock`` ticks every 20 ms for the whole process and every call's
``DirectSender`` sends what its track has due: the RTP header is a template serialized once by
aiortc's own code (with the call's negotiated extensions: its MID), of which only the sequence
number and the timestamp change; SRTP protect and the shared socket's send are plain calls.

aiortc keeps everything else of its sender: ``install`` turns it into an ``InlineAudioSender``,
whose ``_run_rtp`` registers with the clock instead of looping, and whose packet and octet
counts, last RTP timestamp and NTP time (what its RTCP Sender Reports carry) the direct sender
keeps up to date. The private attributes used are checked before the swap (``PRIVATE``), as
``transceiver.call.inbound`` does for the receiver. Left out: the RTP history for NACK
retransmissions (aiortc negotiates no NACK for audio) and the DTLS transport's byte counters
for ``getStats`` (nobody asks).
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import time
from collections.abc import Callable
from typing import Any, Protocol

from aiortc.rtcdtlstransport import State
from aiortc.rtcrtpsender import RTCRtpSender
from aiortc.rtp import RtpPacket

log = logging.getLogger("rtcedge.transceiver")

PERIOD_S = 0.02  # one tick per 20 ms audio frame
_SEQ_TS = struct.Struct("!HI")
NTP_UNIX_OFFSET_S = 2_208_988_800  # 1900-01-01 (NTP's epoch) to 1970-01-01, in seconds

# aiortc 1.x's RTCRtpSender state that InlineAudioSender reads or sets.
PRIVATE = (
    "_RTCRtpSender__rtp_started",
    "_RTCRtpSender__rtp_exited",
    "_RTCRtpSender__mid",
    "_RTCRtpSender__rtp_header_extensions_map",
    "_RTCRtpSender__packet_count",
    "_RTCRtpSender__octet_count",
    "_RTCRtpSender__rtp_timestamp",
    "_RTCRtpSender__ntp_timestamp",
)


def ntp_now(wall: Callable[[], float] = time.time) -> int:
    """The wall clock as a 64-bit NTP timestamp (32.32 fixed point), what RTCP Sender Reports
    carry. aiortc's ``clock.current_ntp_time`` builds two datetimes for it: with 80 calls
    sending between ticks (``send_now``, once per packet) that was 2-3 % of the transceiver's
    CPU, and 16 % of the benchmark callers'. A float keeps ~0.5 us of precision here."""
    return int((wall() + NTP_UNIX_OFFSET_S) * 4294967296.0)


class Track(Protocol):
    """What a direct sender takes from a track
    (``transceiver.call.outbound_track.BackendAudioTrack``)."""

    on_due: Callable[[], None] | None  # set here: audio came for a slot held open

    def take_due(self, now: float) -> list[tuple[bytes, int]]: ...

    def stop(self) -> None: ...


class DirectSender:
    """One call's outbound RTP: header template, sequence, timestamp origin; ``send_due`` per
    tick, and ``send_now`` when the track's audio comes for a slot it held open (between
    ticks). ``protect`` is the call's SRTP (None until DTLS is up), ``send`` the shared socket."""

    def __init__(
        self,
        sender: Any,
        payload_type: int,
        track: Track,
        protect: Callable[[], Callable[[bytes], bytes] | None],
        send: Callable[[bytes], None],
        sequence_number: int,
        timestamp_origin: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sender = sender
        self._clock = clock
        self._track = track
        track.on_due = self.send_now
        self.send_errors = 0
        self._protect = protect
        self._send = send
        self._seq = sequence_number & 0xFFFF
        self._ts_origin = timestamp_origin & 0xFFFFFFFF
        template = RtpPacket(payload_type=payload_type, marker=1, ssrc=sender._ssrc)
        template.extensions.mid = sender._RTCRtpSender__mid
        header = template.serialize(sender._RTCRtpSender__rtp_header_extensions_map)
        self._head = header[:2]  # V, P, X, CC, M, PT
        self._tail = header[8:]  # SSRC, CSRCs, extensions
        self.packets_sent = 0

    def send_now(self) -> None:
        """The track's audio came for a slot already due: send it now, not at the next tick.
        Called from the backend's ``emit_audio``: a failure here is ours, never the backend's
        (logged once; the clock's next tick meets it again and drops this sender)."""
        try:
            self.send_due(self._clock(), ntp_now())
        except Exception:
            self.send_errors += 1
            if self.send_errors == 1:
                log.exception("outbound audio of a call failed between ticks")

    def detach(self) -> None:
        """The call's sending stopped: audio no longer triggers sends."""
        self._track.on_due = None

    def send_due(self, now: float, ntp: int) -> int:
        """Send every packet the track has due by ``now``; returns how many."""
        protect = self._protect()
        if protect is None:  # DTLS not up, or closed: nothing leaves in clear
            return 0
        due = self._track.take_due(now)
        sender = self._sender
        for payload, pts in due:
            ts = (self._ts_origin + pts) & 0xFFFFFFFF
            self._send(protect(self._head + _SEQ_TS.pack(self._seq, ts) + self._tail + payload))
            self._seq = (self._seq + 1) & 0xFFFF
            sender._RTCRtpSender__rtp_timestamp = ts
            sender._RTCRtpSender__octet_count += len(payload)
            sender._RTCRtpSender__packet_count += 1
        if due:
            sender._RTCRtpSender__ntp_timestamp = ntp
            self.packets_sent += len(due)
        return len(due)


class AudioClock:
    """The process's 20 ms tick: every registered ``DirectSender`` sends what is due.

    The timer runs only while some call sends; ticks are scheduled on a fixed grid (no drift),
    and a late tick is not repeated: the senders catch up from their tracks' own clocks. One
    sender that raises is dropped (and logged once), never the tick of the others.
    """

    def __init__(self, period_s: float = PERIOD_S) -> None:
        self.period_s = period_s
        self._senders: set[DirectSender] = set()
        self._handle: asyncio.TimerHandle | None = None
        self._next_at = 0.0
        self.ticks = 0
        self.sender_errors = 0

    def __len__(self) -> int:
        return len(self._senders)

    def add(self, sender: DirectSender) -> None:
        self._senders.add(sender)
        if self._handle is None:
            loop = asyncio.get_running_loop()
            self._next_at = loop.time()
            self._handle = loop.call_soon(self._tick)

    def discard(self, sender: DirectSender) -> None:
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


class InlineAudioSender(RTCRtpSender):
    """aiortc's sender whose RTP loop is a registration with the process's ``AudioClock``.

    Never constructed: ``install`` turns aiortc's own sender into one (``__class__``).
    """

    _clock: AudioClock
    _direct_track: Track
    _direct_send: Callable[[bytes], None]
    direct: DirectSender | None

    async def _run_rtp(self, codec: Any) -> None:
        """aiortc's ``_run_rtp`` (1.9-1.16): started by ``send()`` once DTLS is up, cancelled
        by ``stop()``, which then waits for ``rtp_exited``."""
        self._RTCRtpSender__rtp_started.set()  # type: ignore[attr-defined]
        dtls, connected = self.transport, State.CONNECTED  # an enum lookup once, not per tick
        self.direct = DirectSender(
            self,
            codec.payloadType,
            self._direct_track,
            lambda: dtls._tx_srtp.protect if dtls._state is connected else None,
            self._direct_send,
            sequence_number=int.from_bytes(os.urandom(2)),
            timestamp_origin=int.from_bytes(os.urandom(4)),
        )
        self._clock.add(self.direct)
        try:
            await asyncio.get_running_loop().create_future()  # until stop() cancels
        except asyncio.CancelledError:
            pass
        finally:
            self._clock.discard(self.direct)
            self.direct.detach()
            self._direct_track.stop()
            self._RTCRtpSender__rtp_exited.set()  # type: ignore[attr-defined]


def install(pc: Any, track: Track, audio_clock: AudioClock, send: Callable[[bytes], None]) -> int:
    """Make the sender of ``track`` in ``pc`` an ``InlineAudioSender`` on ``audio_clock``;
    returns how many senders were swapped (one). Call after ``addTrack`` and before the
    connection starts its senders."""
    installed = 0
    for sender in pc.getSenders():
        if sender.track is not track:
            continue
        _check_private(sender)
        sender.__class__ = InlineAudioSender
        sender._clock = audio_clock
        sender._direct_track = track
        sender._direct_send = send
        sender.direct = None
        installed += 1
    return installed


def _check_private(sender: Any) -> None:
    if type(sender) is not RTCRtpSender:
        raise RuntimeError(f"expected aiortc's RTCRtpSender, found {type(sender).__name__}")
    missing = [name for name in PRIVATE if not hasattr(sender, name)]
    if missing:
        raise RuntimeError(
            f"aiortc's RTCRtpSender has no {', '.join(missing)} where transceiver.call.outbound "
            "expects it; this aiortc is not supported"
        )
