"""The bench callers' echo check: a caller's own tone passes, another's is caught, and the frame
after a gap (an onset, whose spectrum the encoder spreads) is not judged."""

from __future__ import annotations

import array
import asyncio
import math
import random
from dataclasses import dataclass

import pytest

from testbed.callers import (
    DELAY_LEVELS,
    EchoCounter,
    OpusToneTrack,
    beep_packets,
    opus_tone_packets,
)
from transceiver.call.opus import Encoder


@dataclass
class Packet:
    sequence_number: int
    timestamp: int
    payload: bytes


def feed(counter: EchoCounter, payloads: list[bytes], first_seq: int) -> None:
    async def run() -> None:
        for i, payload in enumerate(payloads):
            seq = (first_seq + i) & 0xFFFF
            await counter._handle_rtp_packet(Packet(seq, seq * 960, payload), i * 20)

    asyncio.run(run())


def test_own_tone_passes_every_check():
    counter = EchoCounter(440, check_every=1)
    feed(counter, opus_tone_packets(440)[:40], first_seq=65500)  # across the wrap
    assert counter.first_echo_at is not None
    assert counter.tone_checks > 20
    assert counter.tone_checks_own == counter.tone_checks


def test_another_callers_tone_is_caught():
    counter = EchoCounter(440, check_every=1)
    feed(counter, opus_tone_packets(440)[:20], first_seq=100)
    checks = counter.tone_checks
    feed(counter, opus_tone_packets(1500)[:20], first_seq=120)
    assert counter.tone_checks > checks
    assert counter.tone_checks_own < counter.tone_checks


def test_the_frame_after_a_gap_is_not_judged():
    counter = EchoCounter(440, check_every=1)
    feed(counter, opus_tone_packets(440)[:20], first_seq=100)
    checks = counter.tone_checks
    # One foreign frame right after a lost packet: not steady, so not judged ...
    feed(counter, opus_tone_packets(1500)[10:11], first_seq=121)
    assert counter.tone_checks == checks
    # ... but the next consecutive one is.
    feed(counter, opus_tone_packets(1500)[11:12], first_seq=122)
    assert counter.tone_checks == checks + 1
    assert counter.tone_checks_own == checks


def test_a_passed_through_echo_is_recognised_byte_for_byte():
    own = opus_tone_packets(440)
    counter = EchoCounter(440, check_every=1, own_packets=own)
    counter._decoder = None  # decoding would fail: the own packets must not need it
    feed(counter, own[:30], first_seq=7)
    assert counter.first_echo_at is not None
    assert counter.audio_frames == 30
    assert counter.tone_checks == counter.tone_checks_own == 30


def test_a_passed_through_foreign_packet_is_still_caught():
    counter = EchoCounter(440, check_every=1, own_packets=opus_tone_packets(440))
    feed(counter, opus_tone_packets(440)[:20], first_seq=100)
    feed(counter, opus_tone_packets(1500)[:20], first_seq=120)
    assert counter.tone_checks_own < counter.tone_checks


def test_a_frame_of_no_tone_is_unclear_not_foreign():
    """A frame the codec smeared (noise, no tone) proves neither our audio nor cross-talk."""
    rng = random.Random(5)
    encoder = Encoder()
    noise = [
        bytes(p)
        for _ in range(30)
        for p in encoder.encode(
            array.array("h", (rng.randint(-8000, 8000) for _ in range(960))).tobytes()
        )
    ]
    counter = EchoCounter(440, check_every=1)
    feed(counter, opus_tone_packets(440)[:20], first_seq=100)
    checks = counter.tone_checks
    feed(counter, noise[-10:], first_seq=120)
    assert counter.tone_checks_unclear > 0
    assert counter.tone_checks_own == counter.tone_checks == checks


class SentClock:
    """The caller's tone track, started at 1000.0 s, and the time: frame ``at`` is being sent."""

    def __init__(self) -> None:
        self.at = 0

    def __call__(self) -> tuple[float, int]:
        return 1000.0, self.at + 1

    def now(self) -> float:
        return 1000.0 + self.at * 0.020


def feed_late(counter: EchoCounter, clock: SentClock, loop: list[bytes], late: int) -> None:
    """Frames 100..199 of the loop heard back ``late`` frames after they were sent."""

    async def run() -> None:
        for k in range(100, 200):
            clock.at = k + late
            await counter._handle_rtp_packet(Packet(k, k * 960, loop[k % 50]), k * 20)

    asyncio.run(run())


def test_the_delay_of_a_passed_through_echo_is_read_from_its_bytes():
    loop = opus_tone_packets(440, levels=DELAY_LEVELS)
    clock = SentClock()
    counter = EchoCounter(440, own_packets=loop, sent_clock=clock, clock=clock.now)
    feed_late(counter, clock, loop, late=3)
    assert counter.echo_delay_ms() == pytest.approx(60, abs=5)


def test_the_delay_of_a_re_encoded_echo_is_read_from_the_level_pattern():
    loop = opus_tone_packets(440, levels=DELAY_LEVELS)
    clock = SentClock()
    counter = EchoCounter(
        440, sent_clock=clock, clock=clock.now
    )  # not its own bytes: decoded, levels read
    feed_late(counter, clock, loop, late=7)
    assert counter.echo_delay_ms() == pytest.approx(140, abs=5)
    assert counter.tone_checks_own == counter.tone_checks > 0, "both levels are its own tone"


def test_an_echo_without_the_level_pattern_has_no_delay_rather_than_a_wrong_one():
    loop = opus_tone_packets(440)  # one level: no lag explains 80 % of what is heard
    clock = SentClock()
    counter = EchoCounter(440, sent_clock=clock, clock=clock.now)
    feed_late(counter, clock, loop, late=2)
    assert counter.echo_delay_ms() is None


def test_a_frame_of_our_tone_broken_mid_way_is_never_taken_for_cross_talk():
    """A frame lost or trimmed upstream leaves a phase jump in the echo: its power spreads
    over the neighbours' frequencies (60 Hz away), but no other tone dominates it."""
    hz, rate = 440, 48000
    encoder = Encoder()
    packets: list[bytes] = []
    t = 0
    for k in range(40):
        samples = []
        for n in range(960):
            jump = math.pi if k % 7 == 3 and n >= 480 else 0.0  # a jump in every 7th frame
            samples.append(int(9830 * math.sin(2 * math.pi * hz * (t + n) / rate + jump)))
        t += 960 if k % 7 != 3 else 480  # and the second half restarts the phase: a splice
        packets += [bytes(p) for p in encoder.encode(array.array("h", samples).tobytes())]
    counter = EchoCounter(hz, check_every=1)
    feed(counter, packets, first_seq=1)
    assert counter.tone_checks > 20
    assert counter.tone_checks_own == counter.tone_checks


def test_each_beep_is_one_onset_at_its_first_packet_and_its_sending_is_marked():
    beeps = beep_packets(440)
    counter = EchoCounter(440)
    feed(counter, beeps * 3, first_seq=65480)  # across the wrap
    assert [seq for _, seq, _ in counter.onsets] == [
        65480,
        (65480 + 50) & 0xFFFF,
        65480 + 100 - 65536,
    ]
    assert all(arrived <= next_at for arrived, _, next_at in counter.onsets)
    track = OpusToneTrack(beeps, mark_at=0)
    track.take_due(100.0)
    track.take_due(100.0 + 2.0, limit=100)  # a late tick: the 100 packets due at once
    assert [(count, round(late, 2)) for _, count, late in track.marks] == [
        (0, 0.0),
        (50, 1.0),
        (100, 0.0),
    ]
