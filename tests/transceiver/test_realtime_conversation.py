"""The Realtime conversation core: frames, barge-in with the exact truncate, the caller's policy.

Every event the core sends toward the model server and every error it gives the caller is
validated against the typed events of the pinned ``openai`` package.
"""

from __future__ import annotations

import base64
import json

import pytest
from openai.types.realtime import (
    InputAudioBufferAppendEvent,
    RealtimeClientEvent,
    RealtimeServerEvent,
)
from pydantic import TypeAdapter

from transceiver.backends.realtime.conversation import (
    CLEAR,
    AudioOut,
    End,
    RealtimeConversation,
    ToCaller,
    ToServer,
)
from transceiver.backends.realtime.policy import ClientEventPolicy, load_policy

CLIENT = TypeAdapter(RealtimeClientEvent)
SERVER = TypeAdapter(RealtimeServerEvent)
RATE = 24000
FRAME = 960  # bytes of 20 ms PCM16 at 24 kHz


def delta(item: str, nbytes: int, kind: str = "response.output_audio.delta") -> dict:
    return {
        "type": kind,
        "event_id": "e1",
        "response_id": "resp_1",
        "item_id": item,
        "output_index": 0,
        "content_index": 0,
        "delta": base64.b64encode(b"\x01\x00" * (nbytes // 2)).decode(),
    }


def client_json(action: ToServer) -> dict:
    event = action.event
    if isinstance(event, str):  # the hot path's append, as JSON
        data = json.loads(event)
    else:
        data = event if isinstance(event, dict) else event.model_dump(exclude_unset=True)
    CLIENT.validate_python(data)
    return data


def test_caller_audio_is_one_typed_append_per_frame() -> None:
    conv = RealtimeConversation(RATE)
    action = conv.caller_audio(b"\x02\x00" * 480)
    data = client_json(action)
    assert data["type"] == "input_audio_buffer.append"
    assert base64.b64decode(data["audio"]) == b"\x02\x00" * 480
    typed = InputAudioBufferAppendEvent(type="input_audio_buffer.append", audio=data["audio"])
    assert data == json.loads(typed.to_json(use_api_names=True, exclude_unset=True))


def test_deltas_become_whole_frames_and_the_tail_is_padded_at_done() -> None:
    conv = RealtimeConversation(RATE)
    SERVER.validate_python(delta("item_a", 1000))
    out = conv.server_event(delta("item_a", 1000), queued=0)
    assert [type(a) for a in out] == [AudioOut] and len(out[0].pcm) == FRAME
    out = conv.server_event(delta("item_a", 1000), queued=1)
    assert len(out[0].pcm) == FRAME  # 40 + 1000 = 1040: one frame, 80 bytes wait
    done = {
        "type": "response.output_audio.done",
        "event_id": "e2",
        "response_id": "resp_1",
        "item_id": "item_a",
        "output_index": 0,
        "content_index": 0,
    }
    SERVER.validate_python(done)
    out = conv.server_event(done, queued=2)
    assert isinstance(out[0], AudioOut) and len(out[0].pcm) == FRAME
    assert out[0].pcm[:80] == b"\x01\x00" * 40 and out[0].pcm[80:] == b"\0" * (FRAME - 80)
    assert out[1] == ToCaller(done)  # the done event goes to the caller; deltas never do


def test_beta_delta_name_is_audio_too() -> None:
    conv = RealtimeConversation(RATE)
    out = conv.server_event(delta("item_a", FRAME, "response.audio.delta"), queued=0)
    assert isinstance(out[0], AudioOut)


def speech_started() -> dict:
    event = {
        "type": "input_audio_buffer.speech_started",
        "event_id": "e9",
        "audio_start_ms": 1000,
        "item_id": "item_user",
    }
    SERVER.validate_python(event)
    return event


def test_barge_in_clears_and_truncates_at_what_the_caller_was_sent() -> None:
    conv = RealtimeConversation(RATE)
    conv.server_event(delta("item_a", FRAME * 50), queued=0)  # 1 s queued
    # 12 frames have left toward the caller: 38 still queued.
    out = conv.server_event(speech_started(), queued=38)
    assert CLEAR in out
    truncate = client_json(next(a for a in out if isinstance(a, ToServer)))
    assert truncate == {
        "type": "conversation.item.truncate",
        "item_id": "item_a",
        "content_index": 0,
        "audio_end_ms": 240,
    }
    cleared = next(
        a.event
        for a in out
        if isinstance(a, ToCaller) and a.event["type"] != "input_audio_buffer.speech_started"
    )
    SERVER.validate_python(cleared)
    assert cleared["type"] == "output_audio_buffer.cleared"
    assert out[-1].event["type"] == "input_audio_buffer.speech_started"  # the caller sees it too
    # The cut item's late deltas are dropped; a new item plays.
    assert conv.server_event(delta("item_a", FRAME), queued=0) == []
    assert conv.counts.late_deltas_dropped == 1
    assert isinstance(conv.server_event(delta("item_b", FRAME), queued=0)[0], AudioOut)


def test_truncate_lands_in_the_item_playing_not_the_first() -> None:
    conv = RealtimeConversation(RATE)
    conv.server_event(delta("item_a", FRAME * 10), queued=0)
    conv.server_event(delta("item_b", FRAME * 10 + 480), queued=10)  # 10 frames + half a frame
    conv.server_event({"type": "response.output_audio.done", "item_id": "item_b"}, queued=10)
    # 21 frames queued in all; 15 sent: item_a whole, 5 frames of item_b.
    out = conv.server_event(speech_started(), queued=6)
    truncate = client_json(next(a for a in out if isinstance(a, ToServer)))
    assert (truncate["item_id"], truncate["audio_end_ms"]) == ("item_b", 100)
    # Sent all but the padded last frame's silence: the end is the item's true length.
    conv2 = RealtimeConversation(RATE)
    conv2.server_event(delta("item_c", FRAME + 480), queued=0)
    conv2.server_event({"type": "response.output_audio.done", "item_id": "item_c"}, queued=1)
    assert conv2.playout.playing(queued=1).audio_end_ms == 20  # 1 of 2 frames sent
    assert conv2.playout.playing(queued=0) is None  # all sent: nothing to cut


def test_speech_with_nothing_playing_cuts_nothing() -> None:
    conv = RealtimeConversation(RATE)
    out = conv.server_event(speech_started(), queued=0)
    assert out == [ToCaller(speech_started())]
    assert conv.counts.barge_ins == 0


def test_caller_clear_cancels_the_response_and_truncates() -> None:
    conv = RealtimeConversation(RATE)
    created = {
        "type": "response.created",
        "event_id": "e3",
        "response": {"id": "resp_1", "object": "realtime.response", "status": "in_progress"},
    }
    SERVER.validate_python(created)
    conv.server_event(created, queued=0)
    conv.server_event(delta("item_a", FRAME * 5), queued=0)
    out = conv.caller_event({"type": "output_audio_buffer.clear"}, queued=5, now=0.0)
    sent = [client_json(a)["type"] for a in out if isinstance(a, ToServer)]
    assert sent == ["response.cancel", "conversation.item.truncate"]
    assert CLEAR in out


@pytest.mark.parametrize(
    "event, why",
    [
        (
            {"type": "session.update", "session": {"type": "realtime", "model": "other"}},
            "session.model",
        ),
        ({"type": "session.update", "session": {"type": "realtime", "tools": []}}, "session.tools"),
        (
            {"type": "session.update", "session": {"type": "realtime", "instructions": "x"}},
            "instructions",
        ),
        (
            {
                "type": "session.update",
                "session": {
                    "type": "realtime",
                    "audio": {"input": {"format": {"type": "audio/pcmu"}}},
                },
            },
            "session.audio.input.format",
        ),
        ({"type": "response.create", "response": {"tools": []}}, "response.tools"),
        ({"type": "input_audio_buffer.append", "audio": ""}, "not allowed"),
        (
            {
                "type": "conversation.item.create",
                "item": {"type": "message", "role": "system", "content": []},
            },
            "user message",
        ),
        (
            {
                "type": "conversation.item.create",
                "item": {"type": "function_call_output", "call_id": "c1", "output": "{}"},
            },
            "item.call_id",  # not by default: an operator opts in
        ),
        ({"type": "no.such.event"}, "not allowed"),
    ],
)
def test_disallowed_caller_events_get_an_error_and_never_reach_the_server(event, why) -> None:
    conv = RealtimeConversation(RATE)
    out = conv.caller_event({**event, "event_id": "evt_c1"}, queued=0, now=0.0)
    assert len(out) == 1 and isinstance(out[0], ToCaller)
    error = out[0].event
    SERVER.validate_python(error)
    assert error["error"]["code"] == "event_not_allowed" and why in error["error"]["message"]
    assert error["error"]["event_id"] == "evt_c1"


def test_allowed_caller_events_pass_as_sent() -> None:
    conv = RealtimeConversation(RATE)
    voice = {
        "type": "session.update",
        "session": {"type": "realtime", "audio": {"output": {"voice": "marin"}}},
    }
    item = {
        "type": "conversation.item.create",
        "item": {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "hi"}],
        },
    }
    for event in (voice, item, {"type": "response.create"}, {"type": "input_audio_buffer.commit"}):
        out = conv.caller_event(event, queued=0, now=0.0)
        assert out == [ToServer(event)]
        client_json(out[0])


def test_an_operator_may_let_the_app_answer_tool_calls_but_never_add_a_system_message() -> None:
    policy = load_policy(
        json.dumps({"allow": {"conversation.item.create": [
            "item.type", "item.role", "item.content", "item.call_id", "item.output"]}}),
        "--realtime-policy-file",
    )  # fmt: skip
    conv = RealtimeConversation(RATE, policy)
    output = {
        "type": "conversation.item.create",
        "item": {"type": "function_call_output", "call_id": "call_1", "output": '{"ok": 1}'},
    }
    assert conv.caller_event(output, queued=0, now=0.0) == [ToServer(output)]
    client_json(ToServer(output))
    system = {"type": "conversation.item.create", "item": {"type": "message", "role": "system"}}
    (refused,) = conv.caller_event(system, queued=0, now=0.0)
    assert "user message or a function_call_output" in refused.event["error"]["message"]


def test_caller_events_are_rate_limited() -> None:
    conv = RealtimeConversation(RATE, ClientEventPolicy(rate_per_s=1.0, burst=3.0))
    outs = [conv.caller_event({"type": "response.create"}, 0, now=0.0) for _ in range(5)]
    assert [isinstance(o[0], ToServer) for o in outs] == [True, True, True, False, False]
    assert outs[3][0].event["error"]["code"] == "rate_limited"
    assert isinstance(conv.caller_event({"type": "response.create"}, 0, now=1.0)[0], ToServer)


def test_session_events_hide_the_operators_instructions() -> None:
    conv = RealtimeConversation(RATE)
    created = {
        "type": "session.created",
        "event_id": "e0",
        "session": {"type": "realtime", "instructions": "secret", "tools": [], "model": "m"},
    }
    (out,) = conv.server_event(created, queued=0)
    assert out.event["session"] == {"type": "realtime", "model": "m"}


def test_bad_server_events_end_the_call_with_a_reason() -> None:
    conv = RealtimeConversation(RATE)
    bad = {**delta("item_a", 10), "delta": "not base64!"}
    assert conv.server_event(bad, 0) == [End("model server sent an audio delta that is not base64")]
    assert isinstance(conv.server_event({"no": "type"}, 0)[0], End)
    fatal = {"type": "error", "event_id": "e", "error": {"type": "server_error", "message": "boom"}}
    assert conv.server_event(fatal, 0)[-1] == End("model server error: boom")
    soft = {
        "type": "error",
        "event_id": "e",
        "error": {"type": "invalid_request_error", "message": "x"},
    }
    assert conv.server_event(soft, 0) == [ToCaller(soft)]


def test_policy_file_is_checked_and_names_the_option() -> None:
    policy = load_policy(
        '{"allow": {"response.create": []}, "rate_per_s": 2}', "--realtime-policy-file"
    )
    assert policy.allowed == {"response.create": ()} and policy.rate_per_s == 2.0
    for text in (
        "[",
        '{"allow": {"x": "y"}}',
        '{"allow": {"input_audio_buffer.append": []}}',
        '{"burst": 0}',
        '{"other": 1}',
    ):
        with pytest.raises(ValueError, match="--realtime-policy-file"):
            load_policy(text, "--realtime-policy-file")
