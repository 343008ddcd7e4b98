"""The playout decision: live audio leaves when it comes, audio ahead of real time is paced,
silence fills an empty slot after a hold that follows the jitter; one clock of timestamps."""

from __future__ import annotations

import itertools

import pytest

from transceiver.call.playout import (
    FILL,
    LEAD_S,
    MAX_HOLD_S,
    MIN_HOLD_S,
    SEND,
    SLOT_S,
    WAIT,
    Playout,
)

FRAME = 960  # samples of a 20 ms frame on the 48 kHz clock


def send(p: Playout, now: float, ahead: bool = False, more: bool = False) -> int:
    p.pushed(now, FRAME)
    assert p.decide(now, True, ahead) == SEND, now
    return p.advance(now, FRAME, True, ahead, more)


def test_nothing_is_due_before_the_first_tick_starts_the_grid() -> None:
    p = Playout()
    assert p.decide(100.0, True, False) == WAIT
    p.start(100.003, grid_at=100.0)
    assert p.slot_at == 100.0 and p.decide(100.003, True, False) == SEND


def test_live_audio_leaves_on_arrival_at_any_phase_with_continuous_timestamps() -> None:
    """An echo 13 ms out of phase with the grid, with 2 ms of jitter: every packet is due the
    moment it comes (no wait for a tick), and the timestamps advance a frame per packet."""
    p = Playout()
    p.start(100.0, grid_at=100.0)
    jitter = (0.0, 0.002, -0.002, 0.001, -0.001)
    stamps = [send(p, 100.013 + 0.02 * i + jitter[i % 5]) for i in range(200)]
    assert stamps == [FRAME * i for i in range(200)]


def test_an_empty_live_slot_is_held_then_filled_and_the_next_audio_goes_at_once() -> None:
    p = Playout()
    p.start(100.0, grid_at=100.0)
    for i in range(50):  # a clean source: the hold is the floor
        send(p, 100.0 + 0.02 * i)
    assert p.hold_s == MIN_HOLD_S
    slot = p.slot_at
    assert p.decide(slot + MIN_HOLD_S / 2, False, False) == WAIT  # held open
    assert p.decide(slot + MIN_HOLD_S, False, False) == FILL
    assert p.advance(slot + MIN_HOLD_S, FRAME, False, False, False) == 50 * FRAME
    # the source's packet, 6 ms late, takes the next slot at once (14 ms before it)
    assert send(p, slot + 0.006) == 51 * FRAME


def test_the_hold_follows_the_backends_jitter_within_its_bounds() -> None:
    p = Playout()
    p.start(100.0, grid_at=100.0)
    for i in range(200):  # pushes 0 or 6 ms late, alternately: ~6 ms of jitter
        p.pushed(100.0 + 0.02 * i + 0.006 * (i % 2), FRAME)
    assert MIN_HOLD_S < p.hold_s <= MAX_HOLD_S
    assert p.hold_s == pytest.approx(min(MAX_HOLD_S, 3 * p.jitter.jitter_s))
    assert 0.004 < p.jitter.jitter_s < 0.007
    q = Playout()
    for i in range(10):  # a pause of the backend is not jitter
        q.pushed(100.0 + 0.02 * i + (1.0 if i >= 5 else 0.0), FRAME)
    assert q.jitter.jitter_s == 0.0 and q.hold_s == MIN_HOLD_S


def test_a_backend_ahead_of_real_time_is_paced_on_the_grid() -> None:
    """A burst of ten frames: the first at once after silence, the rest each on its slot; an
    empty slot of such a backend is silence at once (no hold)."""
    p = Playout()
    p.start(100.0, grid_at=100.0)
    assert p.decide(100.0, False, True) == FILL
    p.advance(100.0, FRAME, False, True, False)
    sent_at = []
    now = 100.005
    for i in range(10):
        while p.decide(now, True, True) != SEND:
            now += 0.001
        sent_at.append(now)
        p.advance(now, FRAME, True, True, i < 9)
    assert sent_at[0] == 100.005  # a slot early, after the silence
    assert all(b - a >= SLOT_S - 0.0011 for a, b in itertools.pairwise(sent_at[1:]))
    assert p.decide(p.slot_at, False, True) == FILL


def test_live_audio_faster_than_real_time_gets_at_most_the_lead_and_the_creep_ahead() -> None:
    p = Playout()
    p.start(100.0, grid_at=100.0)
    now, sent = 100.0, 0
    while now < 102.0:  # pushes every 10 ms for 2 s: a source at 2 x real time
        if p.decide(now, True, False) == SEND:
            p.advance(now, FRAME, True, False, False)
            sent += 1
        now += 0.010
    assert sent * SLOT_S <= 2.0 * 1.025 + LEAD_S + SLOT_S


def test_a_backlog_after_silence_leaves_at_once_and_the_grid_steps_back() -> None:
    """The source stalled 80 ms (four slots filled), then its four held packets come at once:
    they leave at once, and the packets after them, in the source's rhythm, too."""
    p = Playout()
    p.start(100.0, grid_at=100.0)
    for i in range(10):
        send(p, 100.0 + 0.02 * i)
    for _ in range(4):
        at = p.slot_at + p.hold_s
        assert p.decide(at, False, False) == FILL
        p.advance(at, FRAME, False, False, False)
    burst_at = 100.0 + 0.02 * 14
    stamps = [send(p, burst_at) for _ in range(4)]
    assert stamps == [FRAME * i for i in range(14, 18)]
    for i in range(18, 30):  # then on the source's rhythm: never held
        send(p, 100.0 + 0.02 * (i - 3))


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError):
        Playout(min_hold_s=0.03, max_hold_s=0.02)
    with pytest.raises(ValueError):
        Playout(creep=1.0)
