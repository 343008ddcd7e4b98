"""Opus, what both audio directions share: packet durations, a mono decoder, a mono encoder.

The decoder is libopus through PyAV's codec context, mono at 48 kHz: a caller's stereo stream is
downmixed by libopus itself while decoding, so no frame ever goes through a resampler (a direct
ctypes binding decodes ~3 us faster per 20 ms frame, 15 against 18 us on the bench machine:
``transceiver.call.libopus`` does, for the other rates). The encoder is libopus called directly
(``libopus.LibopusEncoder``), whose settings (``EncoderSettings``: the ``--opus-*`` options) can
be read back from libopus; ``Encoder`` adds what sending needs on top: DTX's rule of what not
to send.

``packet_samples`` reads a packet's duration from its TOC byte (RFC 6716 section 3.1) without
decoding it; Opus passthrough paces and validates the backend's packets with it.
``SILENCE_FRAME`` is silence that fits any Opus stream.
"""

from __future__ import annotations

import fractions

import av

from transceiver.call.libopus import DEFAULTS, EncoderSettings, LibopusEncoder

RATE = 48000  # Opus's clock, and the backends' PCM rate
TIME_BASE = fractions.Fraction(1, RATE)
# A packet of at most this many bytes is a DTX frame: its TOC alone (or with a frame count
# byte), which the decoder takes as "nothing new" and conceals with comfort noise (libopus's
# opus_encode docs; WebRTC's AudioEncoderOpus uses the same test).
DTX_MAX_BYTES = 2
MAX_PACKET_BYTES = 1275  # RFC 6716 3.4 [R2] for one frame; plenty for a voice packet in one RTP
MAX_PACKET_SAMPLES = RATE * 120 // 1000  # RFC 6716 3.4 [R5]: at most 120 ms per packet

# Frame duration in 48 kHz samples by TOC configuration (RFC 6716 table 2): SILK 10/20/40/60 ms,
# hybrid 10/20 ms, CELT 2.5/5/10/20 ms.
_FRAME_SAMPLES = (480, 960, 1920, 2880) * 3 + (480, 960) * 2 + (120, 240, 480, 960) * 4

# 20 ms of CELT (TOC config 31: CELT, full band, 20 ms; mono; one frame) whose first symbol is
# the silence flag (RFC 6716 4.3, Table 56), which skips every other symbol: what libopus codes
# for digital silence in CELT mode. A decoder in any state decodes it to silence and sets its band
# energies to their floor, so it fits any Opus stream, whichever encoder made the rest. A silent
# packet of another encoder does not: its coded audio is predicted from that encoder's state
# (issue 25: spliced into a call's stream, one decoded to a 40 ms full-scale burst).
SILENCE_FRAME = b"\xf8\xff\xfe"
STEREO_BIT = 0x04  # of the TOC byte (RFC 6716 3.1)


class OpusError(ValueError):
    """Not an Opus packet (bad length or TOC), or one libopus refused."""


def packet_samples(packet: bytes) -> int:
    """Duration of an Opus packet in 48 kHz samples, from its TOC (and frame count) byte."""
    if not 1 <= len(packet) <= MAX_PACKET_BYTES:
        raise OpusError(f"an Opus packet has 1..{MAX_PACKET_BYTES} bytes, not {len(packet)}")
    toc = packet[0]
    code = toc & 3
    if code == 0:
        frames = 1
    elif code < 3:
        frames = 2
    else:
        if len(packet) < 2:
            raise OpusError("an Opus code 3 packet needs its frame count byte")
        frames = packet[1] & 0x3F
    samples = frames * _FRAME_SAMPLES[toc >> 3]
    if not 0 < samples <= MAX_PACKET_SAMPLES:
        raise OpusError(f"an Opus packet lasts 2.5..120 ms, not {samples / 48:g} ms")
    return samples


class Decoder:
    """Opus packets -> PCM16 LE mono 48 kHz bytes (one per call; libopus keeps state)."""

    def __init__(self) -> None:
        codec = av.CodecContext.create("libopus", "r")
        codec.format = "s16"
        codec.layout = "mono"
        codec.sample_rate = RATE
        self._codec = codec

    def decode(self, packet: bytes) -> bytes:
        try:
            frames = self._codec.decode(av.Packet(packet))
        except av.FFmpegError as exc:
            raise OpusError(f"libopus refused the packet: {exc}") from None
        if len(frames) == 1:  # the usual case: one packet, one frame
            f = frames[0]
            return bytes(f.planes[0])[: f.samples * 2]
        return b"".join(bytes(f.planes[0])[: f.samples * 2] for f in frames)


class Encoder:
    """PCM16 LE mono at ``rate``, 20 ms at a time -> the Opus packets to send (a list: none
    while DTX holds, see ``encode``)."""

    def __init__(self, rate: int = RATE, settings: EncoderSettings = DEFAULTS) -> None:
        # libopus encodes from 8, 12, 16, 24 or 48 kHz input natively; the packets are the same
        # Opus whatever the input rate (the RTP clock stays 48 kHz, RFC 7587 4.1).
        self._encoder = LibopusEncoder(rate, settings)
        self.settings = settings
        self.in_dtx = False  # the last packet was a DTX frame (only with settings.dtx)

    def get(self, request: int) -> int:
        """libopus's ``OPUS_GET_*`` (``libopus.GET_COMPLEXITY``...) of this encoder."""
        return self._encoder.get(request)

    def encode(self, pcm: bytes) -> list[bytes]:
        """The packet of one frame; with DTX, in silence, only the first DTX frame of a run:
        it tells the caller's decoder that silence began (RFC 7587 3.1.3), the ones after it
        say nothing new and are not sent (as WebRTC does; libopus still sends a real frame
        every 400 ms of DTX, which refreshes the comfort noise)."""
        packet = self._encoder.encode(pcm)
        if self.settings.dtx and len(packet) <= DTX_MAX_BYTES:
            if self.in_dtx:
                return []
            self.in_dtx = True
        else:
            self.in_dtx = False
        return [packet]


def silence_frame(toc: int = 0) -> bytes:
    """``SILENCE_FRAME`` with the stereo flag of a stream's TOC byte ``toc`` (mono or stereo)."""
    return bytes((SILENCE_FRAME[0] | toc & STEREO_BIT,)) + SILENCE_FRAME[1:]
