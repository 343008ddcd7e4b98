"""The media-streams backend's protocol core, sans-I/O: Twilio's messages as Twilio documents
them, the bot's audio framed for the caller, marks echoed exactly when the playout has sent the
audio before them, clears, and the bounds on what a bot may make a call hold."""

from __future__ import annotations

import base64
import json
import math
import struct

import pytest

from transceiver.backends.media_streams.g711 import pcm16_to_ulaw, ulaw_to_pcm16
from transceiver.backends.media_streams.protocol import (
    ACCOUNT_SID,
    FRAME_BYTES,
    MediaStream,
    Problem,
    StreamLimits,
    ToBot,
    call_sid,
)
from transceiver.backends.realtime.conversation import AudioOut, Clear, End

SID = "MZ" + "ab" * 16
CALL = call_sid("0123456789abcdef" * 2)


class Playout:
    """The transceiver's outbound queue as the core sees it: a count, FIFO, 20 ms a frame."""

    def __init__(self, stream: MediaStream) -> None:
        self.stream = stream
        self.queued = 0
        self.marks: list[str] = []  # echoed, in order
        self.cleared = 0

    def bot(self, message: dict | str) -> list:
        text = message if isinstance(message, str) else json.dumps(message)
        return self.apply(self.stream.bot_message(text, self.queued))

    def apply(self, actions: list) -> list:
        for action in actions:
            if isinstance(action, AudioOut):
                assert len(action.pcm) % FRAME_BYTES == 0
                self.queued += len(action.pcm) // FRAME_BYTES
            elif isinstance(action, Clear):
                self.cleared += 1
                self.queued = 0
            elif isinstance(action, ToBot):
                echo = json.loads(action.text)
                assert echo["event"] == "mark" and echo["streamSid"] == SID
                self.marks.append(echo["mark"]["name"])
        return actions

    def play(self, frames: int = 1) -> None:
        """``frames`` leave toward the caller, then the clock looks at the marks."""
        for _ in range(frames):
            assert self.queued > 0
            self.queued -= 1
            self.apply(self.stream.due(self.queued))


def media(ulaw: bytes, sid: str = SID) -> dict:
    return {
        "event": "media",
        "streamSid": sid,
        "media": {"payload": base64.b64encode(ulaw).decode()},
    }


def mark(name: str) -> dict:
    return {"event": "mark", "streamSid": SID, "mark": {"name": name}}


def tone(frames: int, hz: float = 440.0) -> bytes:
    n = 160 * frames
    pcm = struct.pack(
        f"<{n}h", *(int(8000 * math.sin(2 * math.pi * hz * i / 8000)) for i in range(n))
    )
    return pcm16_to_ulaw(pcm)


def stream(**limits) -> tuple[MediaStream, Playout]:
    s = MediaStream(SID, CALL, {"user_agent": "test"}, now=100.0, limits=StreamLimits(**limits))
    return s, Playout(s)


def test_the_stream_opens_as_twilio_opens_it():
    s, _ = stream()
    connected, start = (json.loads(m) for m in s.opening())
    assert connected == {"event": "connected", "protocol": "Call", "version": "1.0.0"}
    assert start == {
        "event": "start",
        "sequenceNumber": "1",
        "start": {
            "accountSid": ACCOUNT_SID,
            "streamSid": SID,
            "callSid": CALL,
            "tracks": ["inbound"],
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
            "customParameters": {"user_agent": "test"},
        },
        "streamSid": SID,
    }
    assert CALL.startswith("CA") and len(CALL) == 34 and ACCOUNT_SID.startswith("AC")


def test_the_callers_audio_goes_as_media_every_frame_and_the_stream_stops():
    s, _ = stream()
    s.opening()
    pcm = ulaw_to_pcm16(tone(1))
    first = json.loads(s.caller_audio(pcm, now=100.25))
    second = json.loads(s.caller_audio(pcm, now=100.27))
    assert first["event"] == "media" and first["streamSid"] == SID
    assert first["sequenceNumber"] == "2" and second["sequenceNumber"] == "3"
    assert first["media"]["track"] == "inbound"
    assert (first["media"]["chunk"], second["media"]["chunk"]) == ("1", "2")
    assert (first["media"]["timestamp"], second["media"]["timestamp"]) == ("250", "270")
    payload = base64.b64decode(first["media"]["payload"])
    assert len(payload) == 160 and payload == pcm16_to_ulaw(pcm)
    stop = json.loads(s.closing())
    assert stop == {
        "event": "stop",
        "sequenceNumber": "4",
        "stop": {"accountSid": ACCOUNT_SID, "callSid": CALL},
        "streamSid": SID,
    }
    assert s.counts.media_out == 2


def test_the_bots_audio_is_played_in_whole_frames_the_rest_kept_for_the_next():
    s, line = stream()
    audio = tone(3)
    (out,) = line.bot(media(audio[:250]))  # one frame and 90 bytes
    assert out == AudioOut(ulaw_to_pcm16(audio[:160]))
    (out,) = line.bot(media(audio[250:]))
    assert out == AudioOut(ulaw_to_pcm16(audio[160:]))
    assert line.queued == 3 and s.counts.media_frames_in == 3
    assert line.bot(media(b"")) == []


def test_a_mark_comes_back_exactly_when_the_audio_before_it_has_been_sent():
    s, line = stream()
    line.bot(media(tone(5)))
    line.bot(mark("a"))
    line.bot(media(tone(3)))
    line.bot(mark("b"))
    assert line.marks == [] and s.pending_marks == 2
    assert s.wake_in(line.queued) == pytest.approx(4 * 0.020 + 0.005)
    line.play(4)
    assert line.marks == [], "a frame before 'a' is still queued"
    assert s.wake_in(line.queued) == pytest.approx(0.005)
    line.play(1)
    assert line.marks == ["a"], "the fifth frame left: the caller has been sent all before 'a'"
    line.play(2)
    assert line.marks == ["a"]
    line.play(1)
    assert line.marks == ["a", "b"] and s.wake_in(line.queued) is None
    assert s.counts.marks_received == s.counts.marks_echoed == 2


def test_a_mark_after_audio_already_played_comes_back_at_once():
    _, line = stream()
    line.bot(mark("nothing-before"))
    assert line.marks == ["nothing-before"]
    line.bot(media(tone(2)))
    line.play(2)
    line.bot(mark("played"))
    assert line.marks == ["nothing-before", "played"]


def test_marks_with_no_audio_between_them_come_back_together_in_order():
    _, line = stream()
    line.bot(media(tone(2)))
    for name in ("x", "y", "z"):
        line.bot(mark(name))
    line.play(1)
    assert line.marks == []
    line.play(1)
    assert line.marks == ["x", "y", "z"]


def test_audio_that_ends_mid_frame_before_a_mark_is_padded_and_played_first():
    _, line = stream()
    line.bot(media(tone(1)[:100]))
    assert line.queued == 0
    actions = line.bot(mark("end"))
    (padded,) = actions
    assert isinstance(padded, AudioOut) and len(padded.pcm) == FRAME_BYTES
    assert padded.pcm[:200] == ulaw_to_pcm16(tone(1)[:100]) and set(padded.pcm[200:]) == {0}
    assert line.marks == [] and line.queued == 1
    line.play(1)
    assert line.marks == ["end"]


def test_clear_empties_the_playout_and_sends_back_every_pending_mark():
    s, line = stream()
    line.bot(media(tone(10)))
    line.bot(mark("first"))
    line.bot(media(tone(10)))
    line.bot(mark("second"))
    line.bot(media(tone(1)[:50]))  # a partial frame, dropped too
    line.play(3)
    actions = line.bot({"event": "clear", "streamSid": SID})
    assert isinstance(actions[0], Clear), "the playout is emptied before the marks go back"
    assert line.marks == ["first", "second"] and line.queued == 0
    assert s.counts.clears == 1 and s.counts.frames_cleared == 17
    # After a clear, new audio and marks are as exact as before.
    line.bot(media(tone(2)))
    line.bot(mark("after"))
    line.play(1)
    assert line.marks == ["first", "second"]
    line.play(1)
    assert line.marks == ["first", "second", "after"]


def test_audio_faster_than_real_time_is_bounded_and_the_marks_stay_exact():
    s, line = stream(max_playout_frames=50)
    for _ in range(3):  # 3 s of audio at once
        line.bot(media(tone(50)))
    assert line.queued == 50 and s.counts.media_frames_dropped == 100
    line.bot(mark("m"))
    line.play(49)
    assert line.marks == []
    line.play(1)
    assert line.marks == ["m"]
    problems = [a for a in line.bot(media(tone(60))) if isinstance(a, Problem)]
    assert line.queued == 50 and problems and "ahead" in problems[0].what


def test_too_many_pending_marks_are_dropped_not_echoed():
    s, line = stream(max_pending_marks=3)
    line.bot(media(tone(1)))
    for i in range(5):
        line.bot(mark(f"m{i}"))
    assert s.counts.marks_dropped == 2 and s.pending_marks == 3
    line.play(1)
    assert line.marks == ["m0", "m1", "m2"]


@pytest.mark.parametrize(
    ("message", "says"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "not a message object"),
        (media(b"\xff" * 160, sid="MZ" + "0" * 32), "streamSid"),
        ({"event": "media", "streamSid": SID}, "without a payload"),
        ({"event": "media", "streamSid": SID, "media": {"payload": "%%%"}}, "not base64"),
        ({"event": "mark", "streamSid": SID, "mark": {}}, "name"),
        (mark("x" * 2000), "name"),
    ],
)
def test_a_malformed_message_is_dropped_and_counted(message, says):
    s, line = stream()
    (problem,) = line.bot(message)
    assert isinstance(problem, Problem) and says in problem.what
    assert s.counts.protocol_errors == 1 and line.queued == 0 and line.marks == []


def test_a_bot_that_keeps_sending_garbage_ends_its_call_one_that_sends_unknown_events_does_not():
    s, line = stream(max_protocol_errors=3)
    for _ in range(5):
        line.bot({"event": "dtmf", "streamSid": SID, "dtmf": {"digit": "1"}})
    assert s.counts.unknown_events == 5 and s.counts.protocol_errors == 0
    results = [line.bot("garbage") for _ in range(4)]
    assert all(isinstance(r[0], Problem) for r in results[:3])
    assert isinstance(results[3][0], End) and "bad messages" in results[3][0].reason
    assert isinstance(s.bot_binary(10)[0], End)
