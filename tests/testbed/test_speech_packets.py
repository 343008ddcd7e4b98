"""A caller's speech as Opus packets (``testbed.callers.speech_packets``): the period filled with
silence, and the packet that ends the speech found as the far end will find it, by the sound of
what it decodes to."""

from __future__ import annotations

import array
import math

import av
import pytest

from testbed.callers import AUDIBLE_PEAK, RATE, SAMPLES, peak, speech_packets


def tone_pcm(hz: float, seconds: float) -> bytes:
    """A sine at a third of full scale, PCM16 mono at 48 kHz."""
    w = 2 * math.pi * hz / RATE
    return array.array(
        "h", (int(10000 * math.sin(w * i)) for i in range(int(seconds * RATE)))
    ).tobytes()


def decoded_peaks(packets: list[bytes]) -> list[int]:
    dec = av.CodecContext.create("libopus", "r")
    dec.format, dec.layout, dec.sample_rate = "s16", "mono", RATE
    return [max((peak(f) for f in dec.decode(av.Packet(p))), default=0) for p in packets]


def test_the_speech_ends_with_the_last_packet_that_decodes_to_sound() -> None:
    quiet = bytes(SAMPLES * 2 * 10)  # 200 ms
    loud = tone_pcm(440, 0.5)  # 500 ms: frames 10..34
    packets, end = speech_packets(quiet + loud, period_s=2.0)
    assert len(packets) == 100, "the period in 20 ms packets, silence after the speech"
    peaks = decoded_peaks(packets)
    assert peaks[end] >= AUDIBLE_PEAK and all(p < AUDIBLE_PEAK for p in peaks[end + 1 :])
    assert 34 <= end <= 35, "the tone's last frame (or the next: the codec's look-ahead)"
    assert all(p < AUDIBLE_PEAK for p in peaks[:9])


def test_speech_longer_than_the_period_or_without_sound_is_refused() -> None:
    with pytest.raises(ValueError, match="over the period"):
        speech_packets(tone_pcm(440, 2.0), period_s=2.0)
    with pytest.raises(ValueError, match="no frame with sound"):
        speech_packets(bytes(SAMPLES * 2 * 5), period_s=1.0)
