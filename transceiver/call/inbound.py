"""Inbound audio on the event loop: RTP -> jitter buffer -> mono PCM or Opus passthrough -> backend.

Stock aiortc hands every received audio frame to a decoder thread per receiver, which decodes to
stereo and hands each frame back to the event loop (``run_coroutine_threadsafe``), where a task
of ours read it from the track's queue and resampled it to mono. Measured on main (issue 12),
that hand-off cost more CPU than decoding, the downmix ~8 % more, and past its core the threads
starved each other. Here the packet goes straight from the SRTP/RTP parsing, on the event loop,
through our jitter buffer to libopus decoding to mono (``transceiver.call.opus``, ~18 us per
20 ms) or, for a backend that takes Opus, to the backend as it is: no thread, no queue, no task
per packet.

A caller's audio packet, once the call is connected (each step a plain call, none through the
session):

1. ``transceiver.socket.media`` (the socket's callback) -> ``transceiver.socket.classify`` and
   ``demux``: the call it belongs to;
2. ``SharedSocketConnection.datagram_received`` (``transceiver.call.ice``): RTP to its
   ``rtp_sink``, the direct path below, instead of aiortc's queue;
3. ``direct_rtp``'s sink: the SSRC latch, SRTP unprotect, the header read
   (``transceiver.call.rtpview``);
4. ``InlineAudioReceiver.handle_rtp`` (``transceiver.call.seam``): aiortc's receiver statistics
   (its RTCP receiver reports), the codec check;
5. ``InboundAudio.push``: the jitter buffer (its depth adapts to the measured jitter: zero on a
   clean path, ``transceiver.call.jitter``), then libopus decoding (``pcm16``) or the TOC check
   (``opus``);
6. ``BackendInlet.frame``: counted, the call marked as heard, then the backend session's
   ``audio_in`` or ``opus_in``.

The session wires it once: ``InboundAudio`` and its ``BackendInlet`` when the backend has
chosen its format (``Session.answer``, before the answer: aiortc's own path may deliver the
first packets), the direct path when DTLS connects (``rtp_sink``, with the SRTP session that
exists only then). Only what is rare goes back to the session: a backend that raised, the first
frame (the connect report), the jitter buffer's events.

The aiortc side (``InlineAudioReceiver``, ``latch_srtp``) is in ``transceiver.call.seam``, with
the private state it uses, checked at start. Every inbound SRTP and SRTCP packet of a call
passes the call's SSRC latch (``transceiver.call.ssrc``) before libsrtp sees it: ``latch_srtp``
puts the call's receive session behind it once DTLS is up (so aiortc's own path, which still
unprotects RTCP, goes through it too), and ``direct_rtp`` reads the SSRC in clear before it
unprotects. What is left out: RTX (aiortc negotiates none for audio), the RFC 6464 audio level
(unused), ``getSynchronizationSources`` (nobody asks), the ``track`` (it stays, never fed: do
not read it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pylibsrtp

from transceiver.backend import (
    AUDIO_SAMPLE_RATE,
    OPUS,
    PCM16,
    BackendSession,
    OpusFrame,
    frame_bytes,
)
from transceiver.call.jitter import AudioJitterBuffer
from transceiver.call.libopus import LibopusDecoder, LibopusError
from transceiver.call.opus import Decoder, OpusError, packet_samples
from transceiver.call.rtpview import parse as parse_rtp
from transceiver.call.ssrc import SsrcLatch

if TYPE_CHECKING:
    from transceiver.call.seam import InlineAudioReceiver

log = logging.getLogger("rtcedge.transceiver")

OPUS_MIME = "audio/opus"
# Events counted beside the jitter buffer's (transceiver.call.jitter.EVENTS).
UNDECODABLE = "undecodable"  # libopus refused the packet, or its TOC is not Opus
FOREIGN = "foreign"  # a payload type negotiated for another codec than Opus
UNPROTECT_FAILED = "srtp_failed"  # SRTP authentication or replay check failed (direct path)
MALFORMED = "malformed"  # not a parsable RTP packet once unprotected (direct path)


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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clock``: each packet's arrival, from which the jitter buffer measures the path's
        jitter and sizes its depth (``AudioJitterBuffer(adaptive=True)``)."""
        if audio_format not in (PCM16, OPUS):
            raise ValueError(f"unknown audio format {audio_format!r}")
        if (on_pcm if audio_format == PCM16 else on_opus) is None:
            raise ValueError(f"audio format {audio_format} needs its callback")
        self.audio_format = audio_format
        self._on_pcm = on_pcm
        self._on_opus = on_opus
        self._on_event = on_event
        self._clock = clock
        self.jitter = AudioJitterBuffer(on_event=on_event, adaptive=True)
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
        due = self.jitter.push(packet, self._clock())
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


class BackendInlet:
    """The end of a call's inbound audio: each frame counted, the call marked as heard, and
    handed to the backend session, straight from ``InboundAudio`` (its ``on_pcm`` or
    ``on_opus``). Wired once by the session (``Session.answer``) with what it used to do per
    frame itself; what is rare goes back to it: the first frame (``on_first``: the connect
    report) and a backend that raised (``on_failure``, logged here).
    """

    __slots__ = (
        "_call_id",
        "_clock",
        "_count",
        "_deliver",
        "_heard",
        "_method",
        "_on_failure",
        "_on_first",
        "frames",
    )

    def __init__(
        self,
        call_id: str,
        backend: BackendSession,
        audio_format: str,
        count: Callable[[], None],
        heard: Callable[[float], None],
        on_first: Callable[[], None],
        on_failure: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``count``: the process's frames-in tally; ``heard(now)``: the lifecycle's
        ``audio_received`` (its idle deadline, the connect breakdown)."""
        self._call_id = call_id
        self._method = "opus_in" if audio_format == OPUS else "audio_in"
        self._deliver: Callable[[Any], None] = getattr(backend, self._method)
        self._count = count
        self._heard = heard
        self._on_first = on_first
        self._on_failure = on_failure
        self._clock = clock
        self.frames = 0

    def frame(self, frame: bytes | OpusFrame) -> None:
        """Hot path, per frame: a 20 ms PCM frame (pcm16) or a caller's packet (opus)."""
        self.frames += 1
        self._count()
        self._heard(self._clock())
        if self.frames == 1:
            self._on_first()
        try:
            self._deliver(frame)
        except Exception:  # the media path must go on; a backend that raises is broken
            log.exception("session %s: the backend's %s failed", self._call_id, self._method)
            self._on_failure(f"{self._method} raised")


class ForeignSsrc(pylibsrtp.Error):
    """A packet of an SSRC the call's latch refused: never unprotected. A ``pylibsrtp.Error``,
    so that aiortc's receive loop drops it as it drops any packet SRTP refuses."""


class LatchedSrtp:
    """A call's inbound SRTP session behind its SSRC latch (``transceiver.call.ssrc``).

    ``transceiver.call.seam.latch_srtp`` makes it the DTLS transport's receive session, so that
    every unprotect of the call goes through it: the direct path's (``direct_rtp``) and aiortc's
    own receive loop's (RTCP, and whatever reaches the call before the direct path takes it).
    The SSRC is read in
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


ANY_PAYLOAD_TYPE = frozenset(range(128))


def direct_rtp(
    receiver: InlineAudioReceiver,
    srtp: LatchedSrtp,
    audio_types: frozenset[int] = ANY_PAYLOAD_TYPE,
    on_not_audio: Callable[[], None] | None = None,
) -> Callable[[bytes], bool]:
    """The direct path of a connected call's SRTP, for ``SharedSocketConnection.rtp_sink``.

    aiortc hands every datagram through an asyncio queue to its DTLS transport's receive task,
    which unprotects, parses and awaits the receiver: a task wake-up and a chain of awaits per
    packet. This does the same work as plain calls, from the socket's callback: the payload
    type (byte 1, in clear under SRTP) must be one of ``audio_types``, the answer's audio
    m-line's (else it is RTP for an m-line the call answered inactive, video sent anyway:
    ``on_not_audio``, dropped before it takes a place in the SSRC latch or costs an unprotect;
    ``transceiver.call.bundle``), the SSRC latch (``srtp``, see
    ``transceiver.call.seam.latch_srtp``), SRTP unprotect with the call's own session (the DTLS
    transport's, so the replay window is shared), read the header
    (``transceiver.call.rtpview``: header extensions are not decoded, nothing here reads them),
    ``handle_rtp``. Returns
    False for what it leaves to aiortc (RTCP of an admitted SSRC: aiortc's receiver and sender
    reports keep working as before); an RTCP packet of a refused SSRC is dropped here, before
    it costs a task wake-up.
    """
    session, latch, admits = srtp.session, srtp.latch, srtp.admits
    latched = latch.latched
    inbound = receiver.inbound
    not_audio = on_not_audio or (lambda: None)

    def sink(data: bytes) -> bool:
        if len(data) < 12:  # too short for either: libsrtp refuses it in aiortc's loop
            return False
        if 192 <= data[1] <= 208:  # RTCP (aiortc's is_rtcp): the sender's SSRC, bytes 4..8
            ssrc = int.from_bytes(data[4:8], "big")
            return ssrc not in latched and not admits(ssrc)
        if (data[1] & 0x7F) not in audio_types:
            not_audio()
            return True
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
