"""The voice agent's sans-I/O core with bytes and numbers: turns found on the audio clock, the
answer paced by the time passed in, barge-in, truncation and refused events. The voice activity
detector is a stand-in (a frame is voiced when it is loud) so the turns are exact."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import pydantic
import pytest
from openai.types.realtime import RealtimeServerEvent

from tests.support.voice_agent import agent_module

conversation = agent_module("conversation")
turns = agent_module("turns")
pcm = agent_module("pcm")

BYTES_PER_MS = 48
SERVER_EVENT = pydantic.TypeAdapter(RealtimeServerEvent)


class LoudIsSpeech:
    """Voiced when the frame is loud; records the thresholds the session sets."""

    def __init__(self) -> None:
        self.thresholds: list[float] = []

    def __call__(self, frame: bytes) -> bool:
        return float(np.abs(pcm.samples(frame).astype(np.int32)).mean()) > 1000

    def set_threshold(self, threshold: float) -> None:
        self.thresholds.append(threshold)


def loud(ms: int) -> bytes:
    return pcm.tone(440, ms / 1000, 24_000)


def quiet(ms: int) -> bytes:
    return b"\x00" * (ms * BYTES_PER_MS)


class Driver:
    """A Conversation and the events it produced, as dicts (validated on the way)."""

    def __init__(self, **config: Any) -> None:
        self.vad = LoudIsSpeech()
        self.core = conversation.Conversation(conversation.AgentConfig(**config), "t", self.vad)
        self.events: list[dict[str, Any]] = []
        self.core.start(0.0)
        self.drain()

    def drain(self) -> list[dict[str, Any]]:
        new = [agent_module("realtime_events").wire(e) for e in self.core.events_to_send()]
        for event in new:
            assert SERVER_EVENT.validate_python(event).type == event["type"]
        self.events += new
        return new

    def send(self, now: float = 0.0, **event: Any) -> list[dict[str, Any]]:
        self.core.receive(json.dumps(event), now)
        return self.drain()

    def append(self, audio: bytes, now: float = 0.0, chunk: int = 960) -> list[dict[str, Any]]:
        out = []
        for offset in range(0, len(audio), chunk):
            piece = base64.b64encode(audio[offset : offset + chunk]).decode()
            out += self.send(now, type="input_audio_buffer.append", audio=piece)
        return out

    def turn(self, now: float = 0.0) -> tuple[str, list[dict[str, Any]]]:
        """One spoken turn (1 s loud after 200 ms quiet, then 600 ms quiet) -> its user item."""
        events = self.append(quiet(200) + loud(1000) + quiet(600), now)
        (job,) = self.core.jobs_to_run()
        assert isinstance(job, conversation.Recognize)
        return job.item_id, events

    def answer(self, item_id: str, audio_ms: int, now: float) -> str:
        """The turn recognized and its answer synthesized at ``now``: the response id."""
        self.core.recognized(item_id, "hello there", 700.0, now)
        (job,) = self.core.jobs_to_run()
        assert isinstance(job, conversation.Synthesize) and job.text == "you said hello there"
        self.core.synthesized(job.response_id, loud(audio_ms), 30.0, now)
        self.drain()
        return job.response_id

    def all_audio(self, response_id: str) -> bytes:
        """The audio of every delta of ``response_id`` sent so far."""
        deltas = [
            e
            for e in self.events
            if e["type"] == "response.output_audio.delta" and e["response_id"] == response_id
        ]
        return b"".join(base64.b64decode(e["delta"]) for e in deltas)


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def test_turn_detector_needs_60_ms_of_voice_to_start_and_the_silence_to_stop() -> None:
    detector = turns.TurnDetector(silence_ms=100)
    verdicts = [True, False, True, True, True, True, False, False, True, False, False, False,
                False, False]  # fmt: skip
    changes = [detector.push(v, n * 20) for n, v in enumerate(verdicts)]
    found = [(n, c) for n, c in enumerate(changes) if c]
    assert found == [
        (4, turns.SpeechStarted(first_voiced_ms=40)),  # the lone voiced frame at 0 is not speech
        (
            13,
            turns.SpeechStopped(last_voiced_end_ms=180, detected_ms=280),
        ),  # the pause at 120..160 is not the end
    ]


def test_a_turn_longer_than_the_limit_is_cut() -> None:
    detector = turns.TurnDetector(silence_ms=500, max_turn_ms=200)
    changes = [detector.push(True, n * 20) for n in range(12)]
    assert changes[2] == turns.SpeechStarted(0)
    assert changes[9] == turns.SpeechStopped(200, 200)


def test_words_heard_are_whole_words_by_their_share_of_the_audio() -> None:
    text = "you said hello there"  # 20 characters over 2000 ms
    assert conversation.words_heard(text, 0, 2000) == ""
    assert conversation.words_heard(text, 850, 2000) == "you said"
    assert conversation.words_heard(text, 1999, 2000) == "you said hello"
    assert conversation.words_heard(text, 2000, 2000) == text
    assert conversation.words_heard(text, 100, 0) == ""


def test_resample_keeps_a_tone_and_the_duration() -> None:
    tone = pcm.tone(440, 1.0, 22_050)
    out = pcm.resample(tone, 22_050, 24_000)
    assert len(out) == 24_000 * 2
    spectrum = np.abs(np.fft.rfft(pcm.samples(out)))
    assert abs(int(np.argmax(spectrum)) - 440) <= 1
    assert len(pcm.resample(pcm.tone(440, 0.02, 24_000), 24_000, 16_000)) == 320 * 2


def test_turns_on_the_audio_clock_whatever_the_append_sizes() -> None:
    for chunk in (960, 7, 12_345, 200_000):  # the last: both turns in one append
        d = Driver()
        events = d.append(
            quiet(500) + loud(1000) + quiet(600) + loud(1000) + quiet(600), chunk=chunk
        )
        started = [e for e in events if e["type"] == "input_audio_buffer.speech_started"]
        stopped = [e for e in events if e["type"] == "input_audio_buffer.speech_stopped"]
        # Speech at 500 ms with 300 ms of prefix padding; its end at 1500 ms plus 500 ms of
        # silence. The second, 2100..3100 ms, has only the 100 ms since the first as padding.
        assert [e["audio_start_ms"] for e in started] == [200, 2000]
        assert [e["audio_end_ms"] for e in stopped] == [2000, 3600]
        assert types(events[2:5]) == [
            "input_audio_buffer.committed",
            "conversation.item.added",
            "conversation.item.done",
        ]
        jobs = d.core.jobs_to_run()
        assert [job.item_id for job in jobs] == [e["item_id"] for e in stopped]
        assert [pcm.duration_ms(job.audio, 24_000) for job in jobs] == [1800, 1600]


def test_each_turn_end_is_kept_for_the_log_with_the_speech_end_it_judged() -> None:
    d = Driver()
    d.append(quiet(500) + loud(1000), now=1.0)  # the last voiced frame arrives at 1.0 s
    d.append(quiet(600), now=1.7)
    (end,) = d.core.speech_ends_to_log()
    (stopped,) = [e for e in d.events if e["type"] == "input_audio_buffer.speech_stopped"]
    assert end.item_id == stopped["item_id"]
    assert (end.speech_end_ms, end.detected_ms) == (1500, 2000), "voice to 1.5 s, 500 ms silence"
    assert (end.last_voiced_at, end.at) == (1.0, 1.7)
    assert d.core.speech_ends_to_log() == [], "each one once"
    (job,) = d.core.jobs_to_run()
    d.core.recognized(job.item_id, "hello", 300.0, 2.0)
    (synthesize,) = d.core.jobs_to_run()
    assert synthesize.item_id == job.item_id, "the answer names the turn it answers"


def test_session_update_sets_the_silence_and_keeps_the_rest() -> None:
    d = Driver()
    session = {"type": "realtime", "audio": {"input": {"turn_detection": {
        "type": "server_vad", "silence_duration_ms": 200, "threshold": 0.8}}}}  # fmt: skip
    (updated,) = d.send(type="session.update", session=session)
    detection = updated["session"]["audio"]["input"]["turn_detection"]
    assert (detection["silence_duration_ms"], detection["prefix_padding_ms"]) == (200, 300)
    assert updated["session"]["audio"]["output"]["format"] == {"type": "audio/pcm", "rate": 24000}
    assert d.vad.thresholds == [0.8]
    events = d.append(loud(1000) + quiet(300))
    assert events[1]["audio_end_ms"] == 1200


def test_the_answer_is_paced_by_the_clock_and_done_with_the_timings() -> None:
    d = Driver(chunk_ms=100, speed=4.0)
    item_id, _ = d.turn(now=10.0)
    response_id = d.answer(item_id, audio_ms=1000, now=11.0)
    assert types(d.events[-6:]) == [
        "conversation.item.input_audio_transcription.completed",
        "response.created",
        "response.output_item.added",
        "conversation.item.added",
        "response.content_part.added",
        "response.output_audio.delta",  # the first, at once
    ]
    assert d.core.get_timer() == pytest.approx(11.025), "100 ms of audio every 25 ms"
    d.core.handle_timer(11.1)
    deltas = [e for e in d.drain() if e["type"] == "response.output_audio.delta"]
    assert len(deltas) == 4, "the ones due by 11.1 s, not more"
    d.core.handle_timer(20.0)
    rest = d.drain()
    assert len([e for e in rest if e["type"] == "response.output_audio.delta"]) == 5
    done = rest[-1]["response"]
    assert (done["id"], done["status"]) == (response_id, "completed")
    assert done["metadata"] == {
        "vad_wait_ms": "0",  # every frame arrived at 10.0 s
        "vad_wait_audio_ms": "500",
        "asr_ms": "700",
        "tts_ms": "30",
        "first_audio_ms": "1000",
    }
    assert d.core.get_timer() is None


def test_speech_over_the_answer_cancels_it_and_truncate_cuts_its_transcript() -> None:
    d = Driver(chunk_ms=100, speed=1.0)
    item_id, _ = d.turn()
    response_id = d.answer(item_id, audio_ms=2000, now=0.0)
    d.core.handle_timer(0.95)  # 1000 ms of audio sent
    d.drain()
    events = d.append(loud(100), now=1.0)
    assert types(events)[:2] == ["input_audio_buffer.speech_started", "response.output_audio.done"]
    done = events[-1]
    assert done["response"]["status_details"] == {"type": "cancelled", "reason": "turn_detected"}
    assert done["response"]["output"][0]["content"][0]["transcript"] == "you said"
    d.core.handle_timer(5.0)
    assert not d.drain(), "no delta after the cancel"
    answer_item = done["response"]["output"][0]["id"]
    (truncated,) = d.send(
        type="conversation.item.truncate", item_id=answer_item, content_index=0, audio_end_ms=500
    )
    assert truncated == {**truncated, "type": "conversation.item.truncated", "audio_end_ms": 500}
    assert d.core.transcript_of(answer_item) == "you"
    (late,) = d.send(
        type="conversation.item.truncate", item_id=answer_item, content_index=0, audio_end_ms=1200
    )
    assert late["error"]["param"] == "audio_end_ms"
    assert response_id == done["response"]["id"]


@pytest.mark.parametrize(
    ("event", "code", "param"),
    [
        ({"type": "nope"}, "invalid_value", "type"),
        ({"type": "input_audio_buffer.append"}, "missing_required_parameter", "audio"),
        ({"type": "input_audio_buffer.append", "audio": "%%"}, "invalid_value", "audio"),
        ({"type": "response.cancel"}, "response_cancel_not_active", None),
        ({"type": "input_audio_buffer.commit"}, "input_audio_buffer_commit_empty", None),
        ({"type": "conversation.item.delete", "item_id": "x"}, "unsupported_event", "type"),
        (
            {"type": "session.update", "session": {"type": "realtime", "model": "gpt-realtime"}},
            "invalid_value",
            "session.model",
        ),
        (
            {
                "type": "session.update",
                "session": {
                    "type": "realtime",
                    "audio": {"output": {"format": {"type": "audio/pcma"}}},
                },
            },
            "invalid_value",
            "session.audio.output.format",
        ),
    ],
)
def test_a_refused_event_gets_an_error_naming_it(event: dict, code: str, param: str | None):
    d = Driver()
    (error,) = d.send(event_id="ev_1", **event)
    assert error["type"] == "error"
    assert error["error"] == {
        **error["error"],
        "type": "invalid_request_error",
        "code": code,
        "param": param,
        "event_id": "ev_1",
    }


def test_an_append_over_15_mib_and_bad_json_get_errors() -> None:
    d = Driver()
    big = base64.b64encode(b"\x00" * (15 * 1024 * 1024 + 3)).decode()
    (error,) = d.send(type="input_audio_buffer.append", event_id="big", audio=big)
    assert (error["error"]["event_id"], error["error"]["param"]) == ("big", "audio")
    d.core.receive("[1, 2", 0.0)
    (bad,) = d.drain()
    assert bad["error"]["code"] == "invalid_json" and bad["error"]["event_id"] is None


def test_without_turn_detection_the_client_commits_and_asks_for_the_response() -> None:
    d = Driver()
    d.send(type="session.update", session={"type": "realtime", "audio": {"input": {
        "turn_detection": None}}})  # fmt: skip
    assert d.events[-1]["session"]["audio"]["input"]["turn_detection"] is None
    assert d.append(loud(1000) + quiet(1000)) == [], "no VAD events"
    committed = d.send(type="input_audio_buffer.commit")
    assert types(committed)[0] == "input_audio_buffer.committed"
    (job,) = d.core.jobs_to_run()
    assert pcm.duration_ms(job.audio, 24_000) == 2000
    d.core.recognized(job.item_id, "", 5.0, 0.0)
    assert d.core.jobs_to_run()[0].text == "I did not catch that"


def test_the_tone_stand_in_answers_at_the_commit() -> None:
    d = Driver(stand_in="tone")
    events = d.append(loud(1000) + quiet(600), now=3.0)
    assert d.core.jobs_to_run() == [], "no recognition, no synthesis"
    assert "response.created" in types(events)
    d.core.handle_timer(100.0)
    rest = d.drain()
    audio = b"".join(
        base64.b64decode(e["delta"]) for e in d.events if e["type"] == "response.output_audio.delta"
    )
    assert pcm.duration_ms(audio, 24_000) == 1000
    assert rest[-1]["response"]["metadata"]["stand_in"] == "tone"


def test_the_beep_stand_in_answers_every_second_from_the_first_audio_on_the_grid() -> None:
    d = Driver(stand_in="beep")
    assert d.core.get_timer() is None, "nothing before the caller is heard"
    d.append(loud(1000) + quiet(600), now=10.0)
    assert not d.core.jobs_to_run() and "input_audio_buffer.speech_started" not in types(d.events)
    for now in (10.05, 10.3, 10.9, 11.0, 11.47, 12.0):  # timers on time and late
        d.core.handle_timer(now)
        d.drain()
    responses = [e for e in d.events if e["type"] == "response.created"]
    assert len(responses) == 3, "at 10.0, 11.0 and 12.0"
    first = d.all_audio(responses[0]["response"]["id"])
    assert pcm.duration_ms(first, 24_000) == conversation.BEEP_ANSWER_MS
    beep_bytes = conversation.BEEP_MS * BYTES_PER_MS
    assert pcm.peak(first[:beep_bytes]) > 5000 and pcm.peak(first[beep_bytes:]) == 0
    assert d.core.get_timer() == 12.0 + 100 / 1000 / 4, "the next delta, on 12.0's grid"


def test_a_beep_more_than_a_period_late_is_skipped_not_caught_up() -> None:
    d = Driver(stand_in="beep")
    d.append(quiet(20), now=0.0)
    d.core.handle_timer(3.5)
    d.drain()
    created = [e for e in d.events if e["type"] == "response.created"]
    assert len(created) == 2, "the beeps of 0.0 and 3.0; 1.0 and 2.0 skipped"
    late = d.all_audio(created[1]["response"]["id"])
    assert pcm.duration_ms(late, 24_000) == conversation.BEEP_ANSWER_MS, "due by 3.5: all sent"
    assert d.core.get_timer() == 4.0
