"""Session lifecycle: legal transitions only, a reason on every end, deadlines from ``now``."""

from __future__ import annotations

import pytest

from transceiver.call.lifecycle import Lifecycle, LifecycleError, Limits, State

LIMITS = Limits(ice_timeout_s=10, idle_timeout_s=30, max_duration_s=100)


def test_happy_path_records_every_transition():
    lc = Lifecycle(0.0, LIMITS)
    lc.start_connecting(0.01)
    assert lc.ice_connected(0.05) == pytest.approx(0.05)
    assert lc.ice_connected(0.06) is None, "measured once"
    assert lc.dtls_connected(0.08) == pytest.approx(0.08)
    assert lc.close(5.0, "deleted")
    assert not lc.close(5.1, "idle"), "the first reason wins"
    lc.closed(5.2)
    assert [s for s, _, _ in lc.history] == [
        State.CONNECTING,
        State.CONNECTED,
        State.CLOSING,
        State.CLOSED,
    ]
    assert lc.end_reason == "deleted"


def test_illegal_transitions_and_reasons_raise():
    lc = Lifecycle(0.0, LIMITS)
    with pytest.raises(LifecycleError):
        lc.closed(1.0)
    with pytest.raises(LifecycleError):
        lc.close(1.0, "because")
    lc.close(1.0, "error")
    with pytest.raises(LifecycleError):
        lc.start_connecting(1.0)


def test_deadlines():
    lc = Lifecycle(0.0, LIMITS)
    lc.start_connecting(0.0)
    lc.check_received(0.5)
    assert lc.due(9.9) is None
    assert lc.due(10.0) == "ice_timeout"
    lc.dtls_connected(2.0)
    assert lc.due(31.9) is None
    assert lc.due(32.0) == "idle"
    lc.audio_received(31.0)
    assert lc.due(60.0) is None
    assert lc.due(100.0) == "max_duration"
    lc.close(100.0, "max_duration")
    assert lc.due(1000.0) is None


def test_an_answer_never_followed_by_a_check_ends_early():
    limits = Limits(
        ice_timeout_s=10, idle_timeout_s=30, max_duration_s=100, first_check_timeout_s=3
    )
    lc = Lifecycle(0.0, limits)
    lc.start_connecting(1.0)  # a slow backend: the answer left 1 s after the offer
    assert lc.due(3.9) is None, "counted from the answer, not the offer"
    assert lc.due(4.0) == "first_check_timeout"
    lc.close(4.0, "first_check_timeout")
    assert lc.end_reason == "first_check_timeout"


def test_one_check_lifts_the_first_check_deadline_only():
    limits = Limits(
        ice_timeout_s=10, idle_timeout_s=30, max_duration_s=100, first_check_timeout_s=3
    )
    lc = Lifecycle(0.0, limits)
    assert lc.due(5.0) is None, "no answer yet: only --ice-timeout applies"
    lc.start_connecting(0.1)
    lc.check_received(2.9)
    lc.check_received(3.5)
    assert lc.first_check_at == 2.9, "the first one counts"
    assert lc.due(9.9) is None
    assert lc.due(10.0) == "ice_timeout", "ICE must still connect in time"


def test_the_connect_breakdown_has_the_steps_that_happened_each_from_the_one_before():
    lc = Lifecycle(1.000, LIMITS, offer_at=0.998)
    lc.start_connecting(1.004)
    assert lc.connect_phases() == pytest.approx({"offer": 0.002, "answer": 0.004})
    lc.check_received(1.010)
    lc.check_received(1.011)  # the first one counts
    lc.ice_connected(1.012)
    lc.dtls_connected(1.020)
    lc.audio_sent(1.045)
    lc.audio_received(1.030)
    lc.audio_received(1.050)
    lc.audio_sent(1.060)
    assert lc.connect_phases() == pytest.approx(
        {
            "offer": 0.002,
            "answer": 0.004,
            "first_check": 0.006,
            "ice": 0.002,
            "dtls": 0.008,
            "audio_in": 0.010,
            "audio_out": 0.025,
        }
    )
    assert "offer" not in Lifecycle(1.0, LIMITS).connect_phases(), "POST time unknown"
