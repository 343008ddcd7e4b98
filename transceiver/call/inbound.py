"""Inbound audio on the event loop: RTP -> jitter buffer -> mono PCM or Opus passthrough -> backend.

Stock aiortc hands every received audio frame to a decoder thread per receiver, which decodes to
stereo and hands each frame back to the event loop (``run_coroutine_threadsafe``), where a task
of ours read it from the track's queue and resampled it to mono. Measured on main (issue 12),
that hand-off cost more CPU than decoding, the downmix ~8 % more, and past its core the threads
starved each other. Here the packet goes straight from aiortc's SRTP/RTP parsing, on the event
loop, through our jitter buffer to libopus decoding to mono (``transceiver.call.opus``, ~18 us per
20 ms) or, for a backend that takes Opus, to the backend as it is: no thread, no queue, no task
per packet.

``InboundAudio`` is that path (sans-I/O: packets in, callbacks out). ``install`` puts it under a
peer connection's audio receiver by turning that one receiver into an ``InlineAudioReceiver``,
a subclass of aiortc's that replaces exactly two methods: ``receive`` (registration and the
RTCP task as aiortc does them, minus the decoder thread) and ``_handle_rtp_packet`` (statistics
for RTCP receiver reports as aiortc keeps them, then ``InboundAudio``). Nothing of aiortc
changes for other receivers. The private attributes used are checked before the swap
(``PRIVATE``); on an aiortc that moved them ``install`` refuses, as ``transceiver.call.ice`` does.
Every inbound SRTP and SRTCP packet of a call passes the call's SSRC latch
(``transceiver.call.ssrc``) before libsrtp sees it: ``latch_srtp`` puts the call's receive session
behind it once DTLS is up (so aiortc's own path, which still unprotects RTCP, goes through it
too), and ``direct_rtp`` reads the SSRC in clear before it unprotects. ``stop`` never waits on
an RTCP task that already died. What is left out: RTX (aiortc negotiates none for audio), the
RFC 6464 audio level (unused), ``getSynchronizationSources`` (nobody asks), the ``track`` (it
stays, never fed: do not read it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pylibsrtp
from aiortc.rtcrtpreceiver import RTCRtpReceiver, StreamStatistics

from transceiver.backend import AUDIO_SAMPLE_RATE, OPUS, PCM16, OpusFrame, frame_bytes
from transceiver.call.jitter import AudioJitterBuffer
from transceiver.call.libopus import LibopusDecoder, LibopusError
from transceiver.call.opus import Decoder, OpusError, packet_samples
from transceiver.call.rtpview import parse as parse_rtp
from transceiver.call.ssrc import SsrcLatch

OPUS_MIME = "audio/opus"
# Events counted beside the jitter buffer's (transceiver.call.jitter.EVENTS).
UNDECODABLE = "undecodable"  # libopus refused the packet, or its TOC is not Opus
FOREIGN = "foreign"  # a payload type negotiated for another codec than Opus
UNPROTECT_FAILED = "srtp_failed"  # SRTP authentication or replay check failed (direct path)
MALFORMED = "malformed"  # not a parsable RTP packet once unprotected (direct path)

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
# aiortc 1.x's RTCDtlsTransport state the direct paths use (here and transceiver.call.outbound): the
# call's SRTP sessions (None until DTLS is up) and its state; all set by its constructor.
DTLS_PRIVATE = ("_rx_srtp", "_tx_srtp", "_state")


class InboundAudio:
    """One call's inbound audio: ``push(packet)`` per RTP packet, in arrival order.

    ``pcm16``: each packet due for playout is decoded to mono PCM and cut into 20 ms frames for
    ``on_pcm`` (a caller's 20 ms packet is exactly one frame; others are re-framed).
    ``opus``: each packet due is checked (its TOC) and given to ``on_opus`` untouched.
    ``on_event(event, n)`` counts what was dropped (the jitter buffer's events, ``undecodable``,
    ``foreign``).
    """

    def __init__(
        self,
        audio_format: str,
        on_pcm: Callable[[bytes], None] | None = None,
        on_opus: Callable[[OpusFrame], None] | None = None,
        on_event: Callable[[str, int], None] | None = None,
        sample_rate: int = AUDIO_SAMPLE_RATE,
    ) -> None:
        if audio_format not in (PCM16, OPUS):
            raise ValueError(f"unknown audio format {audio_format!r}")
        if (on_pcm if audio_format == PCM16 else on_opus) is None:
            raise ValueError(f"audio format {audio_format} needs its callback")
        self.audio_format = audio_format
        self._on_pcm = on_pcm
        self._on_opus = on_opus
        self._on_event = on_event
        self.jitter = AudioJitterBuffer(on_event=on_event)
        # pcm16 at 48 kHz: PyAV's libopus decoder (aiortc's); at any other rate libopus itself,
        # which decodes to that rate natively (PyAV's wrapper only asks it for 48 kHz).
        self._decoder: Decoder | LibopusDecoder | None = None
        if audio_format == PCM16:
            self._decoder = (
                Decoder() if sample_rate == AUDIO_SAMPLE_RATE else LibopusDecoder(sample_rate)
            )
        self._frame_bytes = frame_bytes(sample_rate)
        self._pending = b""  # decoded PCM short of a whole 20 ms frame
        self.packets = 0
        self.dropped = dict.fromkeys((UNDECODABLE, FOREIGN, UNPROTECT_FAILED, MALFORMED), 0)

    def drop(self, event: str) -> None:
        self.dropped[event] += 1
        if self._on_event is not None:
            self._on_event(event, 1)

    def push(self, packet: Any) -> None:
        """An RTP packet (``sequence_number``, ``timestamp``, ``payload``) of the Opus stream."""
        self.packets += 1
        due = self.jitter.push(packet)
        if due is None:
            return
        payload = due.payload
        if self._decoder is None:
            try:
                packet_samples(payload)
            except OpusError:
                self.drop(UNDECODABLE)
                return
            self._on_opus(OpusFrame(payload, due.sequence_number, due.timestamp))  # type: ignore[misc]
            return
        try:
            pcm = self._decoder.decode(payload)
        except (OpusError, LibopusError):
            self.drop(UNDECODABLE)
            return
        size = self._frame_bytes
        if len(pcm) == size and not self._pending:  # a 20 ms packet: the usual case
            self._on_pcm(pcm)  # type: ignore[misc]
            return
        data = self._pending + pcm
        whole = len(data) - len(data) % size
        for i in range(0, whole, size):
            self._on_pcm(data[i : i + size])  # type: ignore[misc]
        self._pending = data[whole:]


class InlineAudioReceiver(RTCRtpReceiver):
    """aiortc's audio receiver without its decoder thread: packets go to ``_inbound``.

    Never constructed: ``install`` turns aiortc's own receiver into one (``__class__``), so
    everything aiortc set up (transport, RTCP, statistics) stays as it was.
    """

    _inbound: InboundAudio
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
        """aiortc's entry (its DTLS transport's queue), until ``direct_rtp`` takes over."""
        self.handle_rtp(packet)

    def handle_rtp(self, packet: Any) -> None:
        """Hot path, once per inbound packet: RTCP statistics, then ``InboundAudio``."""
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
            self._inbound.drop(FOREIGN)
            return
        if packet.payload:
            self._inbound.push(packet)


class ForeignSsrc(pylibsrtp.Error):
    """A packet of an SSRC the call's latch refused: never unprotected. A ``pylibsrtp.Error``,
    so that aiortc's receive loop drops it as it drops any packet SRTP refuses."""


class LatchedSrtp:
    """A call's inbound SRTP session behind its SSRC latch (``transceiver.call.ssrc``).

    ``latch_srtp`` makes it the DTLS transport's ``_rx_srtp``, so that every unprotect of the
    call goes through it: the direct path's (``direct_rtp``) and aiortc's own receive loop's
    (RTCP, and whatever reaches the call before the direct path takes it). The SSRC is read in
    clear, RTP bytes 8..12 and RTCP's sender SSRC bytes 4..8 (RFC 3711 3.1, 3.4: both headers
    are authenticated, not encrypted); one refused is counted (``on_foreign``) and raised as
    ``ForeignSsrc`` before libsrtp is asked, so it can neither add a stream nor cost a scan.
    """

    __slots__ = ("_on_foreign", "latch", "session")

    def __init__(
        self, session: pylibsrtp.Session, latch: SsrcLatch, on_foreign: Callable[[], None]
    ) -> None:
        self.session = session
        self.latch = latch
        self._on_foreign = on_foreign

    def admits(self, ssrc: int) -> bool:
        """The latch's decision; a refusal counted."""
        if self.latch.admits(ssrc):
            return True
        self._on_foreign()
        return False

    def unprotect(self, data: bytes) -> bytes:
        ssrc = int.from_bytes(data[8:12], "big")
        if not self.admits(ssrc):
            raise ForeignSsrc(f"SSRC {ssrc} is not the caller's")
        plain = self.session.unprotect(data)
        self.latch.authenticated(ssrc)
        return plain

    def unprotect_rtcp(self, data: bytes) -> bytes:
        ssrc = int.from_bytes(data[4:8], "big")
        if not self.admits(ssrc):
            raise ForeignSsrc(f"SSRC {ssrc} is not the caller's")
        plain = self.session.unprotect_rtcp(data)
        self.latch.authenticated(ssrc)
        return plain


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


def direct_rtp(receiver: InlineAudioReceiver, srtp: LatchedSrtp) -> Callable[[bytes], bool]:
    """The direct path of a connected call's SRTP, for ``SharedSocketConnection.rtp_sink``.

    aiortc hands every datagram through an asyncio queue to its DTLS transport's receive task,
    which unprotects, parses and awaits the receiver: a task wake-up and a chain of awaits per
    packet. This does the same work as plain calls, from the socket's callback: the SSRC latch
    (``srtp``, see ``latch_srtp``), SRTP unprotect with the call's own session (the DTLS
    transport's, so the replay window is shared), read the header (``transceiver.call.rtpview``:
    header extensions are not decoded, nothing here reads them), ``handle_rtp``. Returns
    False for what it leaves to aiortc (RTCP of an admitted SSRC: aiortc's receiver and sender
    reports keep working as before); an RTCP packet of a refused SSRC is dropped here, before
    it costs a task wake-up.
    """
    session, latch, admits = srtp.session, srtp.latch, srtp.admits
    latched = latch.latched
    inbound = receiver._inbound

    def sink(data: bytes) -> bool:
        if len(data) < 12:  # too short for either: libsrtp refuses it in aiortc's loop
            return False
        if 192 <= data[1] <= 208:  # RTCP (aiortc's is_rtcp): the sender's SSRC, bytes 4..8
            ssrc = int.from_bytes(data[4:8], "big")
            return ssrc not in latched and not admits(ssrc)
        ssrc = int.from_bytes(data[8:12], "big")
        if ssrc not in latched and not admits(ssrc):
            return True
        try:
            plain = session.unprotect(data)
        except pylibsrtp.Error:
            inbound.drop(UNPROTECT_FAILED)
            return True
        if ssrc not in latched:
            latch.authenticated(ssrc)
        try:
            packet = parse_rtp(plain)
        except ValueError:
            inbound.drop(MALFORMED)
            return True
        receiver.handle_rtp(packet)
        return True

    return sink


def install(pc: Any, inbound: InboundAudio) -> int:
    """Give the audio receiver(s) of ``pc`` to ``inbound``; returns how many (one, per offer.py).

    Call after ``setRemoteDescription`` (receivers exist) and before the connection starts them.
    """
    installed = 0
    for transceiver in pc.getTransceivers():
        if transceiver.kind != "audio" or transceiver.direction == "inactive":
            continue
        receiver = transceiver.receiver
        _check_private(receiver)
        receiver.__class__ = InlineAudioReceiver
        receiver._inbound = inbound
        receiver._opus_types = frozenset()
        installed += 1
    return installed


def _check_private(receiver: Any) -> None:
    if type(receiver) is not RTCRtpReceiver:
        raise RuntimeError(f"expected aiortc's RTCRtpReceiver, found {type(receiver).__name__}")
    for name, kind in PRIVATE.items():
        if not hasattr(receiver, name):
            missing = name
        elif kind is None and getattr(receiver, name) is not None:
            missing = f"{name} (already set: the receiver started)"
        elif kind is not None and not isinstance(getattr(receiver, name), kind):
            missing = f"{name} (not a {kind.__name__})"
        else:
            continue
        raise RuntimeError(
            f"aiortc's RTCRtpReceiver has no {missing} where transceiver.call.inbound expects it; "
            "this aiortc is not supported"
        )
    dtls = receiver._RTCRtpReceiver__transport
    missing_dtls = [name for name in DTLS_PRIVATE if not hasattr(dtls, name)]
    if missing_dtls:
        raise RuntimeError(
            f"aiortc's RTCDtlsTransport has no {', '.join(missing_dtls)} where "
            "transceiver.call.inbound expects it; this aiortc is not supported"
        )
