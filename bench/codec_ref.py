"""The codec-only reference of the sessions benchmark: what libopus alone costs per call.

The transceiver's floor for a PCM echo call is the codec work: decode the caller's Opus
packets to mono PCM, encode the echo back to Opus. ``measure_codec`` does exactly that work, with
the transceiver's own codec classes (``transceiver.call.opus``) on the caller's own audio (the
benchmark's tone packets), for ``calls`` calls at once (one decoder and one encoder each, used
in turn, as the transceiver's event loop does: their states compete for the caches the same
way), and returns the CPU time it took per call-second of audio, in % of one core. The encoders
run with the settings the benchmark's transceiver runs with (``EncoderSettings``: its
``--opus-*`` options), so that the reference is the same codec work. The benchmark runs it on
the transceiver's pinned core while the transceiver is idle, in the same run as the steps, so
that the ratio "transceiver CPU per call / codec CPU per call" compares two figures of the same
machine at the same moment.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from testbed.callers import opus_tone_packets
from transceiver.call.libopus import DEFAULTS, EncoderSettings
from transceiver.call.opus import RATE, Decoder, Encoder

FRAMES_PER_S = 50  # 20 ms frames


@dataclass(frozen=True)
class CodecCost:
    calls: int
    audio_s: float  # per call
    cpu_s: float  # thread CPU time for all of it
    decode_pct: float  # % of one core per call, decoding alone
    encode_pct: float
    total_pct: float  # decode + encode, % of one core per call: the reference
    encoder: dict[str, object]  # the settings it encoded with (EncoderSettings)


def measure_codec(
    calls: int,
    audio_s: float = 2.0,
    first_hz: int = 300,
    step_hz: int = 60,
    encoder: EncoderSettings = DEFAULTS,
    audio: list[list[bytes]] | None = None,
) -> CodecCost:
    """Decode + encode ``audio_s`` seconds of each of ``calls`` calls' tones (or of ``audio``,
    the Opus packets each call loops: what the benchmark's callers send), frame by frame round
    robin over the calls, encoding with ``encoder``; CPU time of this thread only
    (``time.thread_time``)."""
    tones = audio or [opus_tone_packets(first_hz + step_hz * i) for i in range(calls)]
    if len(tones) != calls:
        raise ValueError(f"audio for {len(tones)} calls, not {calls}")
    decoders = [Decoder() for _ in range(calls)]
    encoders = [Encoder(RATE, encoder) for _ in range(calls)]
    frames = round(audio_s * FRAMES_PER_S)
    decode_s = encode_s = 0.0
    for k in range(frames):
        for tone, decoder, call_encoder in zip(tones, decoders, encoders, strict=True):
            t0 = time.thread_time()
            pcm = decoder.decode(tone[k % len(tone)])
            t1 = time.thread_time()
            call_encoder.encode(pcm)
            t2 = time.thread_time()
            decode_s += t1 - t0
            encode_s += t2 - t1
    call_s = calls * frames / FRAMES_PER_S
    return CodecCost(
        calls=calls,
        audio_s=frames / FRAMES_PER_S,
        cpu_s=decode_s + encode_s,
        decode_pct=100.0 * decode_s / call_s,
        encode_pct=100.0 * encode_s / call_s,
        total_pct=100.0 * (decode_s + encode_s) / call_s,
        encoder=encoder.as_dict(),
    )


def measure_on(
    cpus: set[int],
    calls: int,
    audio_s: float = 2.0,
    encoder: EncoderSettings = DEFAULTS,
    audio: list[list[bytes]] | None = None,
) -> CodecCost:
    """``measure_codec`` with this process pinned to ``cpus`` for the time of it."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        return measure_codec(calls, audio_s, encoder=encoder, audio=audio)
    finally:
        os.sched_setaffinity(0, before)
