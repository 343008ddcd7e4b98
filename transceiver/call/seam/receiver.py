"""aiortc's audio receiver and DTLS transport, where the transceiver reaches inside them.

``InlineAudioReceiver`` is aiortc's ``RTCRtpReceiver`` without its decoder thread: its packets
go to an ``Inbound`` (``transceiver.call.inbound.InboundAudio``); ``latch_srtp`` puts the call's
receive SRTP session behind its SSRC latch; ``StockReceiverBuffer`` is the low-latency jitter
buffer in a stock receiver (the benchmarks' callers). What each touches, and why: the table of
``transceiver.call.seam``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from aiortc.jitterbuffer import JitterBuffer, JitterFrame
from aiortc.rtcrtpreceiver import RTCRtpReceiver, StreamStatistics

from transceiver.call.inbound import FOREIGN, OPUS_MIME, LatchedSrtp
from transceiver.call.jitter import AudioJitterBuffer
from transceiver.call.seam.guard import check_instance, unsupported
from transceiver.call.ssrc import SsrcLatch

# aiortc 1.x's RTCRtpReceiver state that InlineAudioReceiver reads or sets, with the type each
# has before the receiver starts (None: must be None, not started).
PRIVATE: dict[str, type | None] = {
    "_RTCRtpReceiver__codecs": dict,
    "_RTCRtpReceiver__remote_streams": dict,
    "_RTCRtpReceiver__started": bool,
    "_RTCRtpReceiver__decoder_thread": None,
    "_RTCRtpReceiver__rtcp_task": None,
    "_RTCRtpReceiver__rtcp_started": asyncio.Event,
    "_RTCRtpReceiver__rtcp_exited": asyncio.Event,
    "_RTCRtpReceiver__transport": object,
}
# aiortc 1.x's RTCDtlsTransport state the direct paths use (here and in ``sender``): the call's
# SRTP sessions (None until DTLS is up) and its state; all set by its constructor.
DTLS_PRIVATE = ("_rx_srtp", "_tx_srtp", "_state")
# The stock receiver's jitter buffer, which ``install_jitter_buffer`` replaces.
JITTER_BUFFER = "_RTCRtpReceiver__jitter_buffer"
RECEIVER_METHODS = ("receive", "stop", "_handle_rtp_packet", "_run_rtcp")


class Inbound(Protocol):
    """Where an ``InlineAudioReceiver`` hands its packets (``InboundAudio``)."""

    def push(self, packet: Any) -> None: ...

    def drop(self, event: str) -> None: ...


class InlineAudioReceiver(RTCRtpReceiver):
    """aiortc's audio receiver without its decoder thread: packets go to ``inbound``.

    Never constructed: ``install_receiver`` turns aiortc's own receiver into one
    (``__class__``), so everything aiortc set up (transport, RTCP, statistics) stays as it was.
    """

    inbound: Inbound
    _opus_types: frozenset[int]

    async def receive(self, parameters: Any) -> None:
        """aiortc's ``receive`` (1.9-1.16), minus starting the decoder thread."""
        if self._RTCRtpReceiver__started:  # type: ignore[attr-defined]
            return
        codecs = self._RTCRtpReceiver__codecs  # type: ignore[attr-defined]
        for codec in parameters.codecs:
            codecs[codec.payloadType] = codec
        self._opus_types = frozenset(
            pt for pt, codec in codecs.items() if codec.mimeType.lower() == OPUS_MIME
        )
        self._RTCRtpReceiver__transport._register_rtp_receiver(self, parameters)  # type: ignore[attr-defined]
        self._RTCRtpReceiver__rtcp_task = asyncio.ensure_future(self._run_rtcp())
        self._RTCRtpReceiver__started = True

    async def stop(self) -> None:
        """aiortc's ``stop``, which never waits on an RTCP task that already ended.

        aiortc's waits for the task to say it started and then that it exited, and only a task
        that ran and was cancelled says so: one that died (aiortc 1.16's receiver report packs
        one block per SSRC and raises ``struct.error`` past 255) left ``stop`` waiting for ever,
        so ``RTCPeerConnection.close`` never reached the DTLS transport, the caller was never
        sent its close_notify, and our teardown waited out its 5 s step timeouts (DELETE
        answered after 10 s; issue 21).
        """
        task = self._RTCRtpReceiver__rtcp_task  # type: ignore[attr-defined]
        if task is not None and task.done():
            self._RTCRtpReceiver__rtcp_started.set()  # type: ignore[attr-defined]
            self._RTCRtpReceiver__rtcp_exited.set()  # type: ignore[attr-defined]
        await super().stop()

    async def _handle_rtp_packet(self, packet: Any, arrival_time_ms: int) -> None:
        """aiortc's entry (its DTLS transport's queue), until the direct path takes over
        (``transceiver.call.inbound.direct_rtp``)."""
        self.handle_rtp(packet)

    def handle_rtp(self, packet: Any) -> None:
        """Hot path, once per inbound packet: RTCP statistics, then ``inbound``."""
        if not self._enabled:
            return
        codec = self._RTCRtpReceiver__codecs.get(packet.payload_type)  # type: ignore[attr-defined]
        if codec is None:
            return
        streams = self._RTCRtpReceiver__remote_streams  # type: ignore[attr-defined]
        stats = streams.get(packet.ssrc)
        if stats is None:
            stats = streams[packet.ssrc] = StreamStatistics(codec.clockRate)
        stats.add(packet)  # receiver reports: loss, jitter, and the caller's RTT from LSR/DLSR
        if packet.payload_type not in self._opus_types:
            self.inbound.drop(FOREIGN)
            return
        if packet.payload:
            self.inbound.push(packet)


def install_receiver(pc: Any, inbound: Inbound) -> int:
    """Give the audio receiver(s) of ``pc`` to ``inbound``; returns how many (one, per offer.py).

    Call after ``setRemoteDescription`` (receivers exist) and before the connection starts them.
    """
    installed = 0
    for transceiver in pc.getTransceivers():
        if transceiver.kind != "audio" or transceiver.direction == "inactive":
            continue
        receiver = transceiver.receiver
        _check_receiver(receiver)
        receiver.__class__ = InlineAudioReceiver
        receiver.inbound = inbound
        receiver._opus_types = frozenset()
        installed += 1
    return installed


def _check_receiver(receiver: Any) -> None:
    check_instance(receiver, RTCRtpReceiver, ())
    missing = _missing_private(receiver)
    if missing:
        raise unsupported("RTCRtpReceiver", [missing])
    dtls = receiver._RTCRtpReceiver__transport
    missing_dtls = [name for name in DTLS_PRIVATE if not hasattr(dtls, name)]
    if missing_dtls:
        raise unsupported("RTCDtlsTransport", missing_dtls)


def _missing_private(receiver: Any) -> str | None:
    """The first of ``PRIVATE`` the receiver lacks (or has otherwise than before it starts)."""
    for name, kind in PRIVATE.items():
        if not hasattr(receiver, name):
            return name
        if kind is None and getattr(receiver, name) is not None:
            return f"{name} (already set: the receiver started)"
        if kind is not None and not isinstance(getattr(receiver, name), kind):
            return f"{name} (not a {kind.__name__})"
    return None


def latch_srtp(dtls: Any, latch: SsrcLatch, on_foreign: Callable[[], None]) -> LatchedSrtp | None:
    """Put the call's receive SRTP session (``dtls._rx_srtp``) behind ``latch``; idempotent.

    Call when DTLS connects: aiortc sets ``_rx_srtp`` and then announces the state in the same
    synchronous chain (``RTCDtlsTransport._set_state``), before its receive loop starts, so
    no packet is unprotected before the latch is in front. None while SRTP is not up."""
    srtp = dtls._rx_srtp
    if srtp is None or isinstance(srtp, LatchedSrtp):
        return srtp
    dtls._rx_srtp = latched = LatchedSrtp(srtp, latch, on_foreign)
    return latched


class StockReceiverBuffer(AudioJitterBuffer):
    """An ``AudioJitterBuffer`` in aiortc's ``JitterBuffer`` interface, for a stock receiver."""

    def add(self, packet: Any) -> tuple[bool, JitterFrame | None]:
        """aiortc's ``add``: ``(no picture loss, a frame of the released packet's _data)``
        (``_data``: the payload aiortc's receiver depayloaded)."""
        released = self.push(packet)
        if released is None:
            return False, None
        return False, JitterFrame(data=released._data, timestamp=released.timestamp)


def install_jitter_buffer(pc: Any, on_event: Callable[[str, int], None] | None = None) -> int:
    """Give every audio receiver of a stock aiortc ``pc`` an ``AudioJitterBuffer``
    (``StockReceiverBuffer``); returns how many. Call after ``setRemoteDescription``
    (receivers exist) and before media flows.
    """
    installed = 0
    for transceiver in pc.getTransceivers():
        if transceiver.kind != "audio":
            continue
        receiver = transceiver.receiver
        if not isinstance(getattr(receiver, JITTER_BUFFER, None), JitterBuffer):
            raise unsupported("RTCRtpReceiver", [f"{JITTER_BUFFER} (a JitterBuffer)"])
        setattr(receiver, JITTER_BUFFER, StockReceiverBuffer(on_event=on_event))
        installed += 1
    return installed


def check_receiver(dtls: Any) -> list[str]:
    """What aiortc's receiver lacks of what this module uses, read from a throwaway one over
    ``dtls`` (empty: all there)."""
    missing = [
        f"RTCRtpReceiver.{m}"
        for m in RECEIVER_METHODS
        if not callable(getattr(RTCRtpReceiver, m, None))
    ]
    receiver = RTCRtpReceiver("audio", dtls)
    first = _missing_private(receiver)
    if first is not None:
        missing.append(f"RTCRtpReceiver.{first}")
    if not isinstance(getattr(receiver, JITTER_BUFFER, None), JitterBuffer):
        missing.append(f"RTCRtpReceiver.{JITTER_BUFFER}")
    if not hasattr(receiver, "_enabled"):
        missing.append("RTCRtpReceiver._enabled")
    return missing
