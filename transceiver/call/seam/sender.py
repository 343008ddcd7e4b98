"""aiortc's audio sender, where the transceiver reaches inside it: RTP from the process's clock.

``InlineAudioSender`` is aiortc's ``RTCRtpSender`` whose RTP loop is a registration with the
process's ``AudioClock`` (``transceiver.call.outbound``); ``DirectSender`` sends one call's due
packets as aiortc's loop would have, keeping the sender's counts for its RTCP Sender Reports.
What each touches, and why: the table of ``transceiver.call.seam``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import time
from collections.abc import Callable
from typing import Any

from aiortc.rtcdtlstransport import State
from aiortc.rtcrtpsender import RTCRtpSender
from aiortc.rtp import RtpPacket

from transceiver.call.outbound import AudioClock, Track, ntp_now
from transceiver.call.seam.guard import check_instance

log = logging.getLogger("rtcedge.transceiver")

_SEQ_TS = struct.Struct("!HI")

# aiortc 1.x's RTCRtpSender state that InlineAudioSender and DirectSender read or set.
PRIVATE = (
    "_ssrc",
    "_RTCRtpSender__rtp_started",
    "_RTCRtpSender__rtp_exited",
    "_RTCRtpSender__mid",
    "_RTCRtpSender__rtp_header_extensions_map",
    "_RTCRtpSender__packet_count",
    "_RTCRtpSender__octet_count",
    "_RTCRtpSender__rtp_timestamp",
    "_RTCRtpSender__ntp_timestamp",
)
SENDER_METHODS = ("_run_rtp", "_run_rtcp", "send", "stop")


class DirectSender:
    """One call's outbound RTP: header template, sequence, timestamp origin; ``send_due`` per
    tick, and ``send_now`` when the track's audio comes for a slot it held open (between
    ticks). ``protect`` is the call's SRTP (None until DTLS is up), ``send`` the shared socket.

    The RTP header is a template serialized once by aiortc's own code (with the call's
    negotiated extensions: its MID), of which only the sequence number and the timestamp
    change; the sender's packet and octet counts, last RTP timestamp and NTP time (what its
    RTCP Sender Reports carry) are kept up to date as aiortc's loop keeps them.
    """

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

    def send_due(self, now: float, ntp: int, grid_at: float | None = None) -> int:
        """Send every packet the track has due by ``now``; returns how many. ``grid_at``: the
        tick's place on the clock's grid (``AudioClock``), where the track starts its own."""
        protect = self._protect()
        if protect is None:  # DTLS not up, or closed: nothing leaves in clear
            return 0
        due = self._track.take_due(now, grid_at)
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


class InlineAudioSender(RTCRtpSender):
    """aiortc's sender whose RTP loop is a registration with the process's ``AudioClock``.

    Never constructed: ``install_sender`` turns aiortc's own sender into one (``__class__``).
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


def install_sender(
    pc: Any, track: Track, audio_clock: AudioClock, send: Callable[[bytes], None]
) -> int:
    """Make the sender of ``track`` in ``pc`` an ``InlineAudioSender`` on ``audio_clock``;
    returns how many senders were swapped (one). Call after ``addTrack`` and before the
    connection starts its senders."""
    installed = 0
    for sender in pc.getSenders():
        if sender.track is not track:
            continue
        check_instance(sender, RTCRtpSender, PRIVATE)
        sender.__class__ = InlineAudioSender
        sender._clock = audio_clock
        sender._direct_track = track
        sender._direct_send = send
        sender.direct = None
        installed += 1
    return installed


def check_sender(dtls: Any) -> list[str]:
    """What aiortc's sender lacks of what this module uses, read from a throwaway one over
    ``dtls`` (empty: all there). Inside a running event loop (aiortc's constructor asks it)."""
    missing = [
        f"RTCRtpSender.{m}" for m in SENDER_METHODS if not callable(getattr(RTCRtpSender, m, None))
    ]
    sender = RTCRtpSender("audio", dtls)
    missing += [f"RTCRtpSender.{name}" for name in PRIVATE if not hasattr(sender, name)]
    if not hasattr(State, "CONNECTED"):
        missing.append("aiortc.rtcdtlstransport.State.CONNECTED")
    return missing
