"""The outbound encoder's settings (the ``--opus-*`` options) are what libopus runs with: read
back with its own CTLs, and seen in the packets (size, TOC, FEC, DTX frames); the defaults make
byte for byte the packets FFmpeg's wrapper made before the options existed; a call's outbound
track encodes with its transceiver's settings, and DTX sends nothing in silence."""

from __future__ import annotations

import ctypes
import fractions
import statistics

import av
import numpy as np
import pytest

from transceiver.call import libopus
from transceiver.call.libopus import DEFAULTS, EncoderSettings, LibopusEncoder, LibopusError
from transceiver.call.opus import DTX_MAX_BYTES, Encoder, packet_samples
from transceiver.call.outbound_track import SLOT_GRACE_S, BackendAudioTrack

FRAME = 960  # 20 ms at 48 kHz


def tone(seconds: float, hz: float = 440.0, rate: int = 48000) -> list[bytes]:
    """A tone whose level changes every 200 ms, as 20 ms PCM16 frames at ``rate``."""
    n = int(rate * seconds)
    t = np.arange(n)
    level = 6000 * (1 + (t // (rate // 5)) % 2)
    pcm = (np.sin(t * 2 * np.pi * hz / rate) * level).astype("<i2")
    size = rate // 50
    return [pcm[i : i + size].tobytes() for i in range(0, n, size)]


SILENCE = bytes(FRAME * 2)


def encode(settings: EncoderSettings, frames: list[bytes]) -> list[bytes]:
    encoder = LibopusEncoder(48000, settings)
    return [encoder.encode(f) for f in frames]


def uses_pyavs_libopus() -> bool:
    return "av.libs" in str(libopus.load()._name)


@pytest.mark.skipif(not uses_pyavs_libopus(), reason="another libopus than FFmpeg's")
def test_the_defaults_make_the_packets_ffmpegs_wrapper_made():
    """Today's behaviour kept: PyAV's libopus encoder as the transceiver configured it."""
    codec = av.CodecContext.create("libopus", "w")
    codec.bit_rate, codec.format, codec.layout, codec.sample_rate = 32000, "s16", "mono", 48000
    codec.time_base = fractions.Fraction(1, 48000)
    codec.options = {"application": "voip"}
    frames = tone(2.0) + [SILENCE] * 10
    theirs = []
    for k, pcm in enumerate(frames):
        frame = av.AudioFrame(format="s16", layout="mono", samples=FRAME)
        frame.planes[0].update(pcm)
        frame.sample_rate, frame.time_base, frame.pts = 48000, codec.time_base, k * FRAME
        theirs += [bytes(p) for p in codec.encode(frame)]
    assert encode(DEFAULTS, frames) == theirs


SETTINGS = [
    DEFAULTS,
    EncoderSettings(application="audio", bitrate_bps=64000, complexity=5),
    EncoderSettings(application="restricted-lowdelay", bitrate_bps=16000, complexity=0),
    EncoderSettings(fec=True, packet_loss_pct=10, complexity=1),
    EncoderSettings(dtx=True, packet_loss_pct=30),
]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: s.describe())
def test_each_setting_is_what_libopus_runs_with(settings: EncoderSettings):
    encoder = LibopusEncoder(48000, settings)
    assert encoder.get(libopus.GET_APPLICATION) == libopus.APPLICATIONS[settings.application]
    assert encoder.get(libopus.GET_BITRATE) == settings.bitrate_bps
    assert encoder.get(libopus.GET_COMPLEXITY) == settings.complexity
    assert encoder.get(libopus.GET_INBAND_FEC) == int(settings.fec)
    assert encoder.get(libopus.GET_PACKET_LOSS_PERC) == settings.packet_loss_pct
    assert encoder.get(libopus.GET_DTX) == int(settings.dtx)
    assert (encoder.get(libopus.GET_VBR), encoder.get(libopus.GET_VBR_CONSTRAINT)) == (1, 0)
    # Through what the outbound track uses, at a backend's rate.
    assert Encoder(16000, settings).get(libopus.GET_COMPLEXITY) == settings.complexity


def test_the_bitrate_shows_in_the_packet_sizes():
    frames = tone(2.0)
    sizes = {
        bps: statistics.mean(map(len, encode(EncoderSettings(bitrate_bps=bps), frames)[10:]))
        for bps in (8000, 32000, 64000)
    }
    assert sizes[8000] < sizes[32000] < sizes[64000], sizes
    # VBR: about the target at a low one; a tone whose level jumps gets more above it.
    assert 0.6 * 8000 / 400 < sizes[8000] < 1.3 * 8000 / 400, sizes
    assert sizes[64000] > 5 * sizes[8000], sizes


def test_restricted_lowdelay_is_celt_only_and_voip_is_not():
    def configs(application: str) -> set[int]:
        packets = encode(EncoderSettings(application=application), tone(1.0))
        return {p[0] >> 3 for p in packets}  # RFC 6716 3.1: 16-31 are CELT

    assert min(configs("restricted-lowdelay")) >= 16
    assert min(configs("voip")) < 16  # SILK or hybrid at 32 kbit/s


def test_fec_puts_the_previous_frame_in_each_packet():
    lib = libopus.load()
    if not hasattr(lib, "opus_packet_has_lbrr"):  # libopus >= 1.5
        pytest.skip(f"{libopus.version()} cannot say whether a packet carries LBRR")
    lib.opus_packet_has_lbrr.argtypes = [ctypes.c_char_p, ctypes.c_int32]

    def with_lbrr(settings: EncoderSettings) -> int:
        packets = encode(settings, tone(1.0))[5:]
        return sum(lib.opus_packet_has_lbrr(p, len(p)) == 1 for p in packets)

    assert with_lbrr(EncoderSettings(fec=True, packet_loss_pct=10)) > 45 / 2  # most of them
    assert with_lbrr(DEFAULTS) == 0
    assert with_lbrr(EncoderSettings(packet_loss_pct=10)) == 0  # the loss alone adds none


def test_dtx_sends_the_first_dtx_frame_of_a_silence_and_then_only_refreshes():
    frames = tone(0.4) + [SILENCE] * 60
    plain = Encoder(48000, DEFAULTS)
    assert [len(plain.encode(f)) for f in frames] == [1] * len(frames), "no DTX: every frame"
    encoder = Encoder(48000, EncoderSettings(dtx=True))
    sent = [encoder.encode(f) for f in frames]
    sizes = [len(packets[0]) if packets else 0 for packets in sent]
    first = sizes.index(1)
    assert 20 + 9 <= first <= 20 + 12, "DTX after ~200 ms of silence"
    assert all(sizes[:first]), "a packet for every frame until then"
    # Then nothing, but libopus's refresh of the comfort noise every ~400 ms (a real frame)
    # and the DTX frame after it, which says that silence goes on.
    after = sizes[first + 1 :]
    assert after.count(0) > 0.8 * len(after)
    refreshes = [i for i, size in enumerate(after) if size > DTX_MAX_BYTES]
    assert 1 <= len(refreshes) <= 3
    assert all(after[i + 1] == 1 for i in refreshes if i + 1 < len(after))
    assert sum(1 for size in after if size) <= 2 * len(refreshes)
    assert encoder.encode(tone(0.02)[0]) and not encoder.in_dtx  # speech again


def test_bad_input_is_refused_naming_what():
    with pytest.raises(ValueError, match="44100"):
        LibopusEncoder(44100)
    with pytest.raises(ValueError, match="application"):
        LibopusEncoder(48000, EncoderSettings(application="music"))
    with pytest.raises(LibopusError, match="opus_encoder_ctl"):
        LibopusEncoder(48000, EncoderSettings(complexity=11))
    encoder = LibopusEncoder(24000)
    with pytest.raises(ValueError, match="960 bytes"):
        encoder.encode(SILENCE)  # a 48 kHz frame to a 24 kHz encoder
    encoder.close()
    with pytest.raises(LibopusError, match="closed"):
        encoder.encode(bytes(960))


def take_all(track: BackendAudioTrack, slots: int, start: float = 100.0) -> list[tuple[bytes, int]]:
    """What the track sends over ``slots`` 20 ms slots from ``start`` (each held open its grace)."""
    due: list[tuple[bytes, int]] = []
    for i in range(slots):
        due += track.take_due(start + 0.02 * i + SLOT_GRACE_S)
    return due


def test_a_calls_track_encodes_with_its_transceivers_settings():
    settings = EncoderSettings(application="restricted-lowdelay", bitrate_bps=12000, complexity=3)
    track = BackendAudioTrack(encoder_settings=settings)
    track.set_format("pcm16", 24000)
    for frame in tone(0.5, rate=24000):
        track.push(frame)
    due = take_all(track, 25)
    assert track._encoder is not None
    assert track._encoder.get(libopus.GET_COMPLEXITY) == 3
    assert track._encoder.get(libopus.GET_BITRATE) == 12000
    assert len(due) == 25 and all(p[0] >> 3 >= 16 for p, _ in due)  # CELT only
    assert statistics.mean(len(p) for p, _ in due[5:]) < 12000 / 400 * 1.3


def test_with_dtx_a_quiet_backend_costs_no_packets_and_the_clock_goes_on():
    track = BackendAudioTrack(encoder_settings=EncoderSettings(dtx=True))
    for frame in tone(0.2):
        track.push(frame)
    due = take_all(track, 60)  # 10 frames of tone, then the backend falls quiet
    sizes = [len(p) for p, _ in due]
    assert sizes[:10] and min(sizes[:10]) > DTX_MAX_BYTES
    assert sizes.count(1) == 1 and sizes[-1] == 1, "one DTX frame, then nothing at all"
    assert len(due) < 30
    track.push(tone(0.02)[0])  # the backend speaks again
    again = take_all(track, 1, start=100.0 + 0.02 * 60)
    assert len(again) == 1 and len(again[0][0]) > DTX_MAX_BYTES
    assert again[0][1] == 60 * FRAME, "its timestamp on the track's clock, after the gap"
    assert all(packet_samples(p) == FRAME for p, _ in due + again)


def test_without_dtx_a_quiet_backend_still_sends_a_packet_per_slot():
    track = BackendAudioTrack()
    for frame in tone(0.2):
        track.push(frame)
    due = take_all(track, 60)
    assert [pts for _, pts in due] == [FRAME * i for i in range(60)]
    assert min(len(p) for p, _ in due) > DTX_MAX_BYTES
