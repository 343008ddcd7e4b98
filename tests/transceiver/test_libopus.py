"""libopus's decoder called directly: every rate natively, the same samples as PyAV's at 48 kHz."""

from __future__ import annotations

import numpy as np
import pytest

from transceiver.call import opus
from transceiver.call.libopus import RATES, LibopusDecoder, LibopusError


def tone_packets(seconds: float = 1.0, hz: float = 440.0) -> list[bytes]:
    encoder = opus.Encoder()
    n = int(48000 * seconds)
    signal = (np.sin(np.arange(n) * 2 * np.pi * hz / 48000) * 8000).astype("<i2")
    return [p for i in range(0, n, 960) for p in encoder.encode(signal[i : i + 960].tobytes())]


def dominant_hz(pcm: bytes, rate: int) -> float:
    x = np.frombuffer(pcm, "<i2").astype(float)[len(pcm) // 4 :]
    return float(np.argmax(np.abs(np.fft.rfft(x))) * rate / len(x))


@pytest.mark.parametrize("rate", RATES)
def test_each_rate_decodes_natively_with_the_tone_intact(rate: int) -> None:
    packets = tone_packets()
    decoder = LibopusDecoder(rate)
    chunks = [decoder.decode(p) for p in packets]
    assert {len(c) for c in chunks} == {rate // 50 * 2}  # 20 ms at the asked rate, every packet
    assert abs(dominant_hz(b"".join(chunks), rate) - 440) < 3
    decoder.close()


def test_at_48_khz_it_decodes_as_the_decoder_pyav_wraps() -> None:
    """Within one LSB: the system's libopus and PyAV's copy may differ in version."""
    packets = tone_packets(0.5)
    ours, theirs = LibopusDecoder(48000), opus.Decoder()
    for packet in packets:
        a = np.frombuffer(ours.decode(packet), "<i2").astype(int)
        b = np.frombuffer(theirs.decode(packet), "<i2").astype(int)
        assert len(a) == len(b) == 960 and np.abs(a - b).max() <= 2


def test_bad_packets_are_refused_and_loss_is_concealed() -> None:
    decoder = LibopusDecoder(24000)
    with pytest.raises(LibopusError, match="refused"):
        decoder.decode(b"\xff\xff\xff")
    decoder.decode(tone_packets(0.1)[0])
    assert len(decoder.conceal(480)) == 960
    decoder.close()
    with pytest.raises(LibopusError, match="closed"):
        decoder.decode(b"\xf8\xff\xfe")


def test_a_rate_libopus_lacks_is_refused() -> None:
    with pytest.raises(ValueError, match="44100"):
        LibopusDecoder(44100)
