"""Opus helpers both audio directions share: packet durations from the TOC, mono decode/encode."""

from __future__ import annotations

import array

import av
import pytest

from testbed.callers import goertzel_power, opus_tone_packets
from transceiver.call.opus import (
    MAX_PACKET_BYTES,
    SILENCE_FRAME,
    Decoder,
    Encoder,
    OpusError,
    packet_samples,
    silence_frame,
)


def toc(config: int, code: int) -> int:
    return config << 3 | code


@pytest.mark.parametrize(
    ("first", "samples"),
    [
        (bytes([toc(1, 0)]), 960),  # SILK 20 ms
        (bytes([toc(3, 0)]), 2880),  # SILK 60 ms
        (bytes([toc(13, 0)]), 960),  # hybrid 20 ms
        (bytes([toc(16, 0)]), 120),  # CELT 2.5 ms
        (bytes([toc(31, 0)]), 960),  # CELT 20 ms
        (bytes([toc(1, 1)]), 1920),  # two equal frames
        (bytes([toc(1, 2)]), 1920),  # two frames of different sizes
        (bytes([toc(31, 3), 6]), 5760),  # code 3: six 20 ms frames, 120 ms
    ],
)
def test_packet_samples_reads_the_toc(first, samples):
    assert packet_samples(first + bytes(10)) == samples


@pytest.mark.parametrize(
    "packet",
    [
        b"",  # no TOC
        bytes(MAX_PACKET_BYTES + 1),  # longer than any Opus packet
        bytes([toc(31, 3)]),  # code 3 without its frame count
        bytes([toc(31, 3), 0]),  # zero frames
        bytes([toc(31, 3), 7]),  # 140 ms > 120 ms
    ],
)
def test_what_is_not_an_opus_packet_is_refused(packet):
    with pytest.raises(OpusError):
        packet_samples(packet)


def test_a_tone_decodes_to_mono_20_ms_frames():
    decoder = Decoder()
    pcm = [decoder.decode(p) for p in opus_tone_packets(440)]
    assert {len(p) for p in pcm} == {1920}
    samples = array.array("h", pcm[-1])
    total = sum(x * x for x in samples) * len(samples) / 2
    assert goertzel_power(samples, 440) > 0.5 * total


def test_a_stereo_stream_is_downmixed_by_libopus():
    enc = av.CodecContext.create("libopus", "w")
    enc.format, enc.layout, enc.sample_rate, enc.bit_rate = "s16", "stereo", 48000, 64000
    decoder = Decoder()
    out = []
    for k in range(5):
        frame = av.AudioFrame(format="s16", layout="stereo", samples=960)
        frame.planes[0].update(array.array("h", [1000, -1000] * 960).tobytes())
        frame.sample_rate, frame.pts = 48000, k * 960
        out += [decoder.decode(bytes(p)) for p in enc.encode(frame)]
    assert out and {len(p) for p in out} == {1920}


def test_undecodable_packet_raises_opus_error():
    with pytest.raises(OpusError):
        Decoder().decode(bytes([toc(31, 3)]))


def test_encoder_gives_20_ms_packets():
    encoder = Encoder()
    packets = [p for _ in range(3) for p in encoder.encode(bytes(1920))]
    assert packets and all(packet_samples(bytes(p)) == 960 for p in packets)


@pytest.mark.parametrize("layout", ["mono", "stereo"])
def test_the_silence_frame_is_what_libopus_codes_for_silence_in_celt_mode(layout):
    enc = av.CodecContext.create("libopus", "w")
    enc.format, enc.layout, enc.sample_rate, enc.bit_rate = "s16", layout, 48000, 64000
    enc.options = {"application": "lowdelay"}  # CELT only
    channels = 2 if layout == "stereo" else 1
    packets = []
    for k in range(3):
        frame = av.AudioFrame(format="s16", layout=layout, samples=960)
        frame.planes[0].update(bytes(960 * 2 * channels))
        frame.sample_rate, frame.pts = 48000, k * 960
        packets += [bytes(p) for p in enc.encode(frame)]
    assert packets and set(packets) == {silence_frame(packets[0][0])}
    assert silence_frame(0xFC) == b"\xfc\xff\xfe" and silence_frame(0x78) == SILENCE_FRAME
    assert packet_samples(SILENCE_FRAME) == 960


@pytest.mark.parametrize("rate", [8000, 16000, 48000])
def test_the_silence_frame_silences_a_decoder_in_any_state(rate):
    """After loud audio of any mode (8 kHz: SILK; 16 kHz: CELT wide band; 48 kHz noise:
    hybrid), the silence frame fades out what was playing within its own 20 ms, and the next
    is digital silence: it fits any stream, whichever encoder made it."""
    import random

    rnd = random.Random(rate)
    encoder, decoder = Encoder(rate), Decoder()
    loud = 0
    for _ in range(20):
        pcm = array.array("h", (rnd.randint(-12000, 12000) for _ in range(rate // 50)))
        for packet in encoder.encode(pcm.tobytes()):
            loud = max(loud, max(map(abs, array.array("h", decoder.decode(packet)))))
    fade = array.array("h", decoder.decode(SILENCE_FRAME))
    after = array.array("h", decoder.decode(SILENCE_FRAME))
    assert len(fade) == len(after) == 960
    assert max(map(abs, fade)) <= loud and max(map(abs, fade[480:])) == 0
    assert max(map(abs, after)) == 0
