"""PCM16 helpers of the voice agent: resampling between the rates its parts speak, a test tone,
and the samples of a WAV that espeak-ng writes to a pipe.

The Realtime API carries 24 kHz; pocketsphinx and webrtcvad want 16 kHz; espeak-ng speaks at
22,050 Hz. These resamplers belong to the example (numpy, no ``audioop``, which Python 3.13
removed); the transceiver never resamples.
"""

from __future__ import annotations

import struct

import numpy as np

SAMPLE_BYTES = 2  # PCM16, mono


def samples(pcm: bytes) -> np.ndarray:
    """Little-endian PCM16 bytes as int16 samples (an odd trailing byte is ignored)."""
    return np.frombuffer(pcm[: len(pcm) - len(pcm) % SAMPLE_BYTES], dtype="<i2")


def resample(pcm: bytes, from_hz: int, to_hz: int) -> bytes:
    """``pcm`` at ``to_hz``, band-limited by cutting or padding its spectrum.

    One FFT over the whole signal: exact for the whole utterances and answers the agent
    resamples (both start and end in silence, so the FFT's wrap-around does not show), and it
    low-passes below the new Nyquist frequency when it lowers the rate, so nothing aliases.
    """
    x = samples(pcm).astype(np.float64)
    if from_hz == to_hz or len(x) == 0:
        return pcm[: len(x) * SAMPLE_BYTES]
    n_out = max(1, round(len(x) * to_hz / from_hz))
    spectrum = np.fft.rfft(x)
    kept = np.zeros(n_out // 2 + 1, dtype=np.complex128)
    bins = min(len(spectrum), len(kept))
    kept[:bins] = spectrum[:bins]
    y = np.fft.irfft(kept, n_out) * (n_out / len(x))
    return np.clip(np.rint(y), -32768, 32767).astype("<i2").tobytes()


def tone(frequency_hz: float, seconds: float, rate_hz: int, amplitude: float = 0.3) -> bytes:
    """A sine of ``frequency_hz`` as PCM16 (the stand-in's answer)."""
    t = np.arange(round(seconds * rate_hz)) / rate_hz
    return (np.sin(2 * np.pi * frequency_hz * t) * amplitude * 32767).astype("<i2").tobytes()


def peak(pcm: bytes) -> int:
    """The largest absolute sample of ``pcm`` (0 for none): what the event log says of audio."""
    return int(np.abs(samples(pcm).astype(np.int32)).max(initial=0))


def duration_ms(pcm: bytes, rate_hz: int) -> float:
    """How long ``pcm`` plays."""
    return len(pcm) // SAMPLE_BYTES * 1000 / rate_hz


class WavError(ValueError):
    """Not a PCM16 mono WAV."""


def wav_pcm(wav: bytes) -> tuple[int, bytes]:
    """(sample rate, PCM16 bytes) of a mono PCM16 WAV.

    espeak-ng ``--stdout`` writes to a pipe, so its RIFF and data sizes are placeholders
    (0x7ffff000...): the data chunk is taken as everything after its header.
    """
    if len(wav) < 12 or wav[:4] != b"RIFF" or wav[8:12] != b"WAVE":
        raise WavError("not a RIFF/WAVE file")
    offset, rate = 12, None
    while offset + 8 <= len(wav):
        chunk, size = wav[offset : offset + 4], struct.unpack_from("<I", wav, offset + 4)[0]
        body = offset + 8
        if chunk == b"fmt ":
            fmt, channels, rate, _, _, bits = struct.unpack_from("<HHIIHH", wav, body)
            if (fmt, channels, bits) != (1, 1, 16):
                raise WavError(f"format {fmt}, {channels} channels, {bits} bits: want PCM16 mono")
        elif chunk == b"data":
            if rate is None:
                raise WavError("data before fmt")
            return rate, wav[body:][: min(size, len(wav) - body)]
        offset = body + size + size % 2
    raise WavError("no data chunk")
