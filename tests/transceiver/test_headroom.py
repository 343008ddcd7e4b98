"""Admission by load (transceiver.headroom): samples in, admit or a refusal out; time passed in."""

from __future__ import annotations

from transceiver.headroom import (
    MAX_UNSETTLED,
    RESUME_FRACTION,
    SESSION_CPU_PCT,
    TICK_S,
    WINDOW_S,
    Headroom,
    LoadLimits,
)

LIMITS = LoadLimits(max_cpu_pct=80.0, max_loop_lag_ms=20.0, retry_after_s=5)


def feed(h: Headroom, start: float, seconds: float, cpu_pct: float, lag_ms: float, cpu_s=0.0):
    """Ticks every TICK_S for ``seconds``: the process burns ``cpu_pct`` of a core and each
    tick fires ``lag_ms`` late. Returns (time, CPU seconds) at the end."""
    now = start
    for _ in range(round(seconds / TICK_S)):
        now += TICK_S
        cpu_s += TICK_S * cpu_pct / 100
        h.sample(now, lag_ms / 1000, cpu_s)
    return now, cpu_s


def test_an_idle_transceiver_admits():
    h = Headroom(LIMITS)
    feed(h, 0.0, WINDOW_S, cpu_pct=1.0, lag_ms=0.5)
    assert round(h.cpu_pct) == 1 and round(h.loop_lag_ms, 1) == 0.5
    assert h.refusal(sessions=0, unsettled=0) is None


def test_cpu_over_its_limit_refuses_until_it_is_back_under_the_resume_fraction():
    h = Headroom(LIMITS)
    now, cpu = feed(h, 0.0, WINDOW_S, cpu_pct=90.0, lag_ms=1.0)
    refusal = h.refusal(sessions=30, unsettled=0)
    assert refusal is not None and refusal.reason == "cpu" and refusal.retry_after_s == 5
    assert "CPU 90%" in refusal.text
    # Back to 70 %: under the limit but over 80 % of it (64 %): still overloaded (hysteresis).
    now, cpu = feed(h, now, WINDOW_S, cpu_pct=70.0, lag_ms=1.0, cpu_s=cpu)
    assert h.overloaded and h.refusal(sessions=30, unsettled=0).reason == "cpu"
    # Under 64 %: admitted again (one more session's cost still fits under 80 %).
    feed(h, now, WINDOW_S, cpu_pct=0.9 * RESUME_FRACTION * 80.0, lag_ms=1.0, cpu_s=cpu)
    assert not h.overloaded
    assert h.refusal(sessions=30, unsettled=0) is None


def test_a_late_event_loop_refuses_even_with_little_cpu_and_recovers():
    """A neighbour taking the core: our CPU share stays low, only the loop's lag tells."""
    h = Headroom(LIMITS)
    now, cpu = feed(h, 0.0, WINDOW_S, cpu_pct=30.0, lag_ms=45.0)
    refusal = h.refusal(sessions=10, unsettled=0)
    assert refusal is not None and refusal.reason == "loop_lag" and "45 ms late" in refusal.text
    now, cpu = feed(h, now, WINDOW_S, cpu_pct=30.0, lag_ms=18.0, cpu_s=cpu)  # < 20, > 16
    assert h.refusal(sessions=10, unsettled=0).reason == "loop_lag"
    feed(h, now, WINDOW_S, cpu_pct=30.0, lag_ms=10.0, cpu_s=cpu)
    assert h.refusal(sessions=10, unsettled=0) is None


def test_one_stall_is_averaged_over_the_window_not_taken_alone():
    h = Headroom(LIMITS)
    now, cpu = feed(h, 0.0, WINDOW_S, cpu_pct=20.0, lag_ms=1.0)
    h.sample(now + TICK_S, 0.150, cpu + 0.02)  # one 150 ms stall (a GC pause, a handshake)
    assert h.loop_lag_ms < LIMITS.max_loop_lag_ms
    assert h.refusal(sessions=5, unsettled=0) is None


def test_connecting_sessions_count_ahead_so_a_burst_cannot_overshoot():
    """At 61 % with 30 settled sessions (2.03 % each), 80 % leaves room for 9 more: the 10th
    offer is refused although the measured CPU has not moved (they are still connecting)."""
    h = Headroom(LIMITS)
    feed(h, 0.0, WINDOW_S, cpu_pct=61.0, lag_ms=1.0)
    sessions = 30
    admitted = 0
    while h.refusal(sessions=sessions + admitted, unsettled=admitted) is None:
        admitted += 1
        assert admitted < 100
    assert admitted == 9
    refusal = h.refusal(sessions=sessions + admitted, unsettled=admitted)
    assert refusal.reason == "headroom" and "9 connecting" in refusal.text
    assert refusal.retry_after_s == WINDOW_S, "they settle within a window: retry then"


def test_a_burst_is_let_in_by_tens_whatever_the_cpu_says():
    """A neighbour taking the core shows in the loop's lag only a window later."""
    h = Headroom(LIMITS)
    feed(h, 0.0, WINDOW_S, cpu_pct=1.0, lag_ms=0.5)
    assert h.refusal(sessions=MAX_UNSETTLED - 1, unsettled=MAX_UNSETTLED - 1) is None
    refusal = h.refusal(sessions=MAX_UNSETTLED, unsettled=MAX_UNSETTLED)
    assert refusal.reason == "headroom" and refusal.retry_after_s == WINDOW_S


def test_a_full_settled_transceiver_refuses_with_the_longer_retry():
    h = Headroom(LIMITS)
    feed(h, 0.0, WINDOW_S, cpu_pct=79.0, lag_ms=1.0)
    refusal = h.refusal(sessions=40, unsettled=0)
    assert refusal.reason == "headroom" and refusal.retry_after_s == 5


def test_a_sessions_cost_is_the_prior_until_enough_sessions_measure_it():
    h = Headroom(LIMITS)
    feed(h, 0.0, WINDOW_S, cpu_pct=40.0, lag_ms=1.0)
    assert h.session_cpu_pct(settled=2) == SESSION_CPU_PCT
    assert h.session_cpu_pct(settled=10) == 4.0  # 40 % over 10 sessions
    assert h.projected_cpu_pct(sessions=12, unsettled=2) == 40.0 + 3 * 4.0


def test_a_limit_of_zero_turns_that_input_off():
    h = Headroom(LoadLimits(max_cpu_pct=0.0, max_loop_lag_ms=0.0))
    feed(h, 0.0, WINDOW_S, cpu_pct=100.0, lag_ms=500.0)
    assert not h.overloaded
    assert h.refusal(sessions=200, unsettled=200) is None
