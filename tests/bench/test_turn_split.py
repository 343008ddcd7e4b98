"""The turn benchmark's split with numbers: a turn's moments found in the agent's log lines and
the caller's times, its stages chained from the caller's speech end to its first audio heard,
and a turn with a moment missing named by that moment, never guessed."""

from __future__ import annotations

import math
from typing import Any

import pytest

from bench.turn_split import PARTS, STAGES, agent_sessions, call_turns, summarize, turn

T0 = 1_000.0  # the caller sends the last packet of its speech (wall time, s)
TAG = "abcd1234"


def turn_lines(t0: float, n: int = 1, silence_s: float = 0.5) -> list[dict[str, Any]]:
    """One turn of the agent's ``--log-events`` lines as agent.py writes them, its speech
    ending at ``t0`` (the caller's mark): the last loud append read then, ``silence_s`` of
    silence read before the detector decides."""
    item, response = f"item_{TAG}_{n}", f"resp_{TAG}_{n}"

    def line(t: float, direction: str, kind: str, **fields: Any) -> dict[str, Any]:
        return {"t": t0 + t, "call": TAG, "dir": direction, "type": kind, **fields}

    appends = [
        line((20 * k - 40) / 1000, "in", "input_audio_buffer.append", audio_peak=peak)
        for k, peak in enumerate((9000, 8000, 7000, 3, 1))  # the third, read at t0: the last loud
    ]
    return [
        *appends,
        line(
            0.6,
            "turn",
            "turn.speech_stopped",
            item_id=item,
            speech_end_ms=1640,
            detected_ms=2140,
            last_voiced_t=t0 + 0.1 - silence_s + 0.5,
        ),
        line(0.6, "out", "input_audio_buffer.speech_stopped", item_id=item),
        line(1.2, "turn", "turn.recognition_started", item_id=item),
        line(1.4, "turn", "turn.recognition_done", item_id=item, transcript="hello"),
        line(1.45, "turn", "turn.synthesis_started", item_id=item, response_id=response),
        line(1.50, "turn", "turn.synthesis_audio", item_id=item, response_id=response),
        line(1.501, "out", "response.output_audio.delta", response_id=response, delta_peak=5),
        line(1.530, "out", "response.output_audio.delta", response_id=response, delta_peak=9000),
    ]


def test_a_turn_is_split_into_stages_that_follow_one_another_and_add_up() -> None:
    (session,) = agent_sessions(turn_lines(T0)).values()
    split = turn(T0, session, onsets=[T0 - 2.0, T0 + 1.504, T0 + 1.6])
    assert "missing" not in split, split
    stages = split["stages_ms"]
    assert list(stages) == [name for name, _, _ in STAGES]
    expected = {
        "uplink": 0.0,  # the last loud append read at t0 (it left at t0: the same instant here)
        "vad_wait": 600.0,
        "recognition_queue": 600.0,
        "recognition": 200.0,
        "to_synthesis": 50.0,
        "synthesis": 50.0,
        "to_first_delta": 1.0,  # the first delta of the response, quiet or not
        "downlink": 3.0,  # -> the first onset after it
    }
    assert stages == pytest.approx(expected, abs=1e-6)
    assert split["total_ms"] == pytest.approx(1504.0)
    assert split["residual_ms"] == pytest.approx(0.0, abs=1e-6)
    assert sum(split["parts_ms"].values()) == pytest.approx(split["total_ms"])
    assert split["parts_ms"]["transport"] == pytest.approx(3.0)
    assert set(split["parts_ms"]) == set(PARTS)
    assert split["transcript"] == "hello" and split["response_id"] == f"resp_{TAG}_1"


def test_the_detectors_view_of_the_turn_and_a_silence_that_came_in_a_burst() -> None:
    (session,) = agent_sessions(turn_lines(T0)).values()
    vad = turn(T0, session, [T0 + 1.6])["vad"]
    assert vad["silence_ms"] == 500.0
    assert vad["judged_end_after_sound_ms"] == pytest.approx(100.0)
    assert vad["burst"] is False, "500 ms of silence read over 500 ms"
    (session,) = agent_sessions(turn_lines(T0, silence_s=0.1)).values()
    vad = turn(T0, session, [T0 + 1.6])["vad"]
    assert vad["burst"] is True, "its 500 ms of silence read within 100 ms: a sender that stalled"


@pytest.mark.parametrize(
    ("drop", "missing"),
    [
        ("input_audio_buffer.append", "agent_heard"),
        ("turn.speech_stopped", "decided"),
        ("turn.recognition_started", "recognition_started"),
        ("turn.recognition_done", "recognition_done"),
        ("turn.synthesis_started", "synthesis_started"),
        ("turn.synthesis_audio", "synthesis_audio"),
        ("response.output_audio.delta", "first_delta"),
    ],
)
def test_a_turn_missing_a_moment_is_named_by_the_first_one_missing(drop: str, missing: str):
    lines = [e for e in turn_lines(T0) if e["type"] != drop]
    session = agent_sessions(lines).get(TAG)
    assert session is not None
    split = turn(T0, session, [T0 + 1.6])
    assert split["missing"] == missing and "total_ms" not in split


def test_no_moment_after_the_next_turns_end_of_speech_belongs_to_this_one() -> None:
    lines = turn_lines(T0) + turn_lines(T0 + 7.0, n=2)
    (session,) = agent_sessions(lines).values()
    assert turn(T0, session, [T0 + 7.0 + 1.6], until=T0 + 7.0)["missing"] == "caller_heard"
    assert turn(T0, session, [], until=T0 + 7.0)["missing"] == "caller_heard"
    late_answer = [e for e in turn_lines(T0) if not e["type"].startswith("turn.")]
    (session,) = agent_sessions(late_answer).values()
    assert turn(T0, session, [T0 + 1.6])["missing"] == "decided"


def test_a_calls_turns_and_their_summary() -> None:
    lines = turn_lines(T0) + turn_lines(T0 + 7.0, n=2)
    sessions = agent_sessions(lines)
    timings = {
        "marks": [[T0 + 7.0, 400, 0.0], [T0, 50, 0.0], [T0 + 14.0, 750, 0.0]],
        "onsets": [[T0 + 8.504, 9, None], [T0 + 1.504, 2, None]],
    }
    turns = call_turns(timings, sessions[TAG], turns=2)
    assert [t["moments"]["caller_sent"] for t in turns] == [T0, T0 + 7.0], "the first two"
    assert all("total_ms" in t for t in turns)
    summary = summarize([*turns, {"moments": {}, "missing": "decided"}])
    assert (summary["turns"], summary["matched"], summary["bursts"]) == (3, 2, 0)
    assert summary["unmatched"] == {"decided": 1}
    assert summary["total_ms"]["n"] == 2 and summary["total_ms"]["p50"] == pytest.approx(1504)
    assert set(summary["parts_ms"]) == set(PARTS)
    assert summary["residual_ms"]["p95"] == pytest.approx(0.0, abs=1e-6)
    unpaired = call_turns(timings, None, turns=2)
    assert [t["missing"] for t in unpaired] == ["agent_session"] * 2
    empty = summarize([])
    assert empty["matched"] == 0 and math.isnan(empty["total_ms"]["p50"])
