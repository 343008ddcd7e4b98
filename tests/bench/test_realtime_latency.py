"""The realtime benchmark's pairing of markers, with numbers: onsets found in the agent's log,
each start paired with the first end within the window and never twice, timer lateness against
the earliest, the downlink's onsets that left on a tick told apart."""

from __future__ import annotations

from bench.realtime_latency import (
    C2R,
    R2C,
    R2T,
    T2R,
    Wire,
    agent_calls,
    downlink_split,
    downlink_stages,
    grid_lateness,
    pair,
    realtime_call,
    session_tag,
)

LOUD, QUIET = 9000, 3


def log(t: float, kind: str, peak: int, call: str = "abcd1234") -> dict:
    if kind == "in":
        return {"t": t, "call": call, "dir": "in", "type": "input_audio_buffer.append",
                "audio_peak": peak}  # fmt: skip
    return {"t": t, "call": call, "dir": "out", "type": "response.output_audio.delta",
            "delta_peak": peak}  # fmt: skip


def test_onsets_are_sound_after_silence_in_each_direction_per_session() -> None:
    lines = [
        log(0.00, "in", LOUD),  # the call's first append: not an onset (nothing before it)
        log(0.02, "in", QUIET),
        log(1.00, "in", LOUD),
        log(1.02, "in", LOUD),
        log(1.04, "in", QUIET),
        log(0.50, "out", LOUD),  # a session's first delta with sound is an onset
        log(0.52, "out", QUIET),
        log(1.50, "out", LOUD),
        log(1.00, "in", LOUD, call="other"),
    ]
    calls = agent_calls(lines)
    assert calls["abcd1234"].heard == [1.00] and calls["abcd1234"].said == [0.50, 1.50]
    assert calls["abcd1234"].appends == 5 and calls["abcd1234"].deltas == 3
    assert calls["other"].heard == []


def test_each_start_takes_the_first_end_within_half_a_second_once() -> None:
    pairs, missed = pair([1.0, 2.0, 3.0, 4.0], [1.001, 1.002, 3.6, 4.0005])
    assert pairs == [(1.0, 1.001), (4.0, 4.0005)] and missed == 2


def test_session_tags_and_timer_lateness() -> None:
    assert session_tag("event_abcd1234_1") == "abcd1234"
    assert session_tag(None) is None and session_tag("evt-1") is None
    late = grid_lateness([10.003, 11.001, 12.011, 13.001])
    assert [round(x * 1000) for x in late] == [2, 0, 10, 0]


def test_a_realtime_call_pairs_its_markers_and_tells_ticked_onsets_apart() -> None:
    agent = agent_calls(
        [log(t, "in", p) for t, p in ((9.0, QUIET), (10.0011, LOUD), (11.0012, LOUD))]
        + [log(t, "out", p) for t, p in ((10.5, LOUD), (10.6, QUIET), (11.5, LOUD))]
    )["abcd1234"]
    timings = {
        "id": 7,
        "first_event_id": "event_abcd1234_1",
        "marks": [[10.0, 0, 0.0], [11.0, 50, 0.0], [30.0, 100, 0.0]],  # the last: out of window
        "onsets": [[10.5015, 1, 10.5095], [11.5030, 51, 11.5230]],  # 8 ms, then 20 ms after
    }
    call = realtime_call(timings, agent, (9.5, 12.0))
    assert call["session"] == "abcd1234"
    assert [round(x, 1) for x in call["uplink_ms"]] == [1.1]  # 11.0's append was no onset
    assert call["unmatched"] == {"uplink": 1, "downlink": 0}
    assert [round(x, 1) for x in call["downlink_ms"]] == [1.5, 3.0]
    assert call["downlink_on_tick"] == [False, True]
    split = downlink_split([call])["end_to_end"]
    assert split["at_once"]["n"] == 1 and split["on_tick"]["n"] == 1
    assert "error" in realtime_call(timings, None, (9.5, 12.0))


def test_with_the_capture_each_direction_is_split_hop_by_hop() -> None:
    agent = agent_calls(
        [log(t, "in", p) for t, p in ((9.0, QUIET), (10.0040, LOUD))]
        + [log(t, "out", p) for t, p in ((10.5, LOUD),)]
    )["abcd1234"]
    timings = {
        "id": 1,
        "first_event_id": "event_abcd1234_1",
        "marks": [[10.0, 50, 0.0]],
        "onsets": [[10.5100, 700, 10.5180]],
        "ssrc": 111,
        "first_seq": 65530,  # + 50: sequence number 44, across the wrap
        "far_ssrc": 222,
    }
    rtp = {
        (C2R, 111, 44): 10.0001,
        (R2T, 111, 44): 10.0005,
        (T2R, 222, 698): 10.4801,
        (T2R, 222, 699): 10.5001,  # the tick just before the delta came: nothing ahead of it
        (T2R, 222, 700): 10.5090,
        (R2C, 222, 700): 10.5095,
    }
    wire = Wire(rtp, {"abcd1234": ([10.0030], [10.5002])})
    call = realtime_call(timings, agent, (9.5, 11.0), wire)
    up = {k: [round(x, 1) for x in v] for k, v in call["uplink_stages_ms"].items()}
    assert up == {"caller": [0.1], "relay": [0.4], "transceiver": [2.5], "agent": [1.0]}
    down = {k: [round(x, 1) for x in v] for k, v in call["downlink_stages_ms"].items()}
    assert down == {"agent": [0.2], "transceiver": [8.8], "relay": [0.5], "caller": [0.5]}
    assert call["frames_ahead"] == [0] and call["downlink_wire_on_tick"] == [False]
    split = downlink_split([call])["transceiver"]
    assert split["at_once"]["n"] == 1 and split["after_a_tick"]["n"] == 0


def test_a_beep_after_packets_of_its_call_and_the_ticks_spans() -> None:
    sent = {(T2R, 222, 700 + i): 10.48 + 0.02 * i for i in range(6)}  # a tick's packet each
    wire = Wire({**sent, (R2C, 222, 705): 10.5811}, {"abcd1234": ([], [10.485])})
    timings = {"far_ssrc": 222}
    out = downlink_stages(timings, [(10.484, 10.5812)], {10.5812: [10.5812, 705, None]}, wire,
                          "abcd1234")  # fmt: skip
    assert out["frames_ahead"] == [4], "packets 701-704 left between the delta and its audio"
    times = ((1, 1, 0.0), (2, 1, 0.0002), (3, 1, 0.0004), (1, 2, 0.02))  # (ssrc, seq, t)
    ticks = Wire({(T2R, ssrc, seq): t for ssrc, seq, t in times}, {})
    assert [round(x, 1) for x in ticks.tick_spans_ms(min_packets=2)] == [0.4]
