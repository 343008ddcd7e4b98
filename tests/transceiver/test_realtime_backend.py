"""The realtime backend against scripted Realtime servers on 127.0.0.1 (real WebSockets, the
``openai`` package's client): what it sends validates against the package's typed client events,
audio deltas become frames, a barge-in sends the exact truncate, and a misbehaving server ends
only its own call, with a reason."""

from __future__ import annotations

import asyncio
import base64
import secrets
from collections.abc import Awaitable

import pytest
from aiohttp import web
from openai.types.realtime import RealtimeClientEvent, RealtimeServerEvent
from pydantic import TypeAdapter

from tests.support.realtime_server import Server
from tests.support.waits import wait_until
from transceiver.backend import BackendError, SessionInfo
from transceiver.backends.realtime import RealtimeBackend, RealtimeBackendConfig

CLIENT = TypeAdapter(RealtimeClientEvent)
SERVER = TypeAdapter(RealtimeServerEvent)
FRAME = 960  # 20 ms PCM16 at 24 kHz


def run(coro: Awaitable[None], timeout_s: float = 8.0) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(timeout_s):
            await coro

    asyncio.run(bounded())


def info() -> SessionInfo:
    return SessionInfo(session_id=secrets.token_hex(16), transceiver_id=1, remote="")


class Sinks:
    def __init__(self) -> None:
        self.audio: list[bytes] = []
        self.events: list[dict] = []
        self.failures: list[str] = []

    def args(self) -> tuple:
        return self.audio.append, self.events.append, self.failures.append


def created() -> dict:
    return {
        "type": "session.created",
        "event_id": "e0",
        "session": {"type": "realtime", "instructions": "secret"},
    }


def delta(item: str, pcm: bytes) -> dict:
    return {
        "type": "response.output_audio.delta",
        "event_id": "e1",
        "response_id": "r1",
        "item_id": item,
        "output_index": 0,
        "content_index": 0,
        "delta": base64.b64encode(pcm).decode(),
    }


def backend(url: str, **kw) -> RealtimeBackend:
    return RealtimeBackend(RealtimeBackendConfig(url=url, api_key="sk-test", **kw))


def test_a_call_appends_audio_plays_deltas_and_cuts_exactly() -> None:
    """The whole walk of a call, every event both ways validated against the pinned ``openai``
    package's types: session.update, appends, a response, a barge-in with truncate, an error."""
    sent_by_server: list[dict] = []

    async def send(ws: web.WebSocketResponse, event: dict) -> None:
        sent_by_server.append(event)
        await ws.send_json(event)

    async def handler(ws: web.WebSocketResponse, received: list) -> None:
        await send(ws, created())
        await wait_until(
            lambda: sum(e["type"] == "input_audio_buffer.append" for e in received) >= 3
        )
        await send(ws, delta("item_a", b"\x01\x00" * 480 * 50))  # 1 s of answer at once
        await wait_until(lambda: any(e["type"] == "response.create" for e in received))
        await send(
            ws,
            {
                "type": "input_audio_buffer.speech_started",
                "event_id": "e5",
                "audio_start_ms": 60,
                "item_id": "u1",
            },
        )
        await wait_until(lambda: any(e["type"] == "conversation.item.truncate" for e in received))
        await send(
            ws,
            {
                "type": "error",
                "event_id": "e6",
                "error": {"type": "invalid_request_error", "message": "no such item"},
            },
        )

    async def body() -> None:
        async with Server(handler) as server:
            rt = backend(
                server.url,
                session={"instructions": "be brief", "audio": {"output": {"voice": "marin"}}},
            )
            sinks = Sinks()
            session = await rt.open_session(info(), *sinks.args())
            queued = [0]
            session.attach_playout(lambda: queued[0])
            for _ in range(3):
                session.audio_in(b"\x02\x00" * 480)
            await wait_until(lambda: len(sinks.audio) == 1)
            assert len(sinks.audio[0]) == FRAME * 50
            queued[0] = 50 - 7  # the transceiver has sent 7 frames (140 ms) of it
            session.event_in({"type": "response.create"})
            await wait_until(lambda: {"type": "audio.clear"} in sinks.events)
            await wait_until(
                lambda: any(e["type"] == "conversation.item.truncate" for e in server.received[0])
            )
            await wait_until(lambda: any(e["type"] == "error" for e in sinks.events))
            await session.close("hangup")
            await rt.close()
        sent = server.received[0]
        for event in sent:
            CLIENT.validate_python(event)
        assert sent[0]["type"] == "session.update"
        fmt = {"type": "audio/pcm", "rate": 24000}
        assert sent[0]["session"]["audio"]["input"]["format"] == fmt
        assert sent[0]["session"]["audio"]["output"] == {"voice": "marin", "format": fmt}
        assert sent[0]["session"]["instructions"] == "be brief"
        appends = [e for e in sent if e["type"] == "input_audio_buffer.append"]
        assert [base64.b64decode(e["audio"]) for e in appends] == [b"\x02\x00" * 480] * 3
        truncate = next(e for e in sent if e["type"] == "conversation.item.truncate")
        assert (truncate["item_id"], truncate["audio_end_ms"]) == ("item_a", 140)
        assert server.headers[0]["Authorization"] == "Bearer sk-test"
        assert server.queries[0] == {"model": "test-model"}
        kinds = [e["type"] for e in sinks.events]
        assert kinds[0] == "session.created" and "instructions" not in sinks.events[0]["session"]
        assert (
            "output_audio_buffer.cleared" in kinds and "input_audio_buffer.speech_started" in kinds
        )
        assert "response.output_audio.delta" not in kinds  # audio goes by RTP, not the channel
        assert sinks.failures == [], "an invalid_request_error is the caller's, not the end"
        for event in sent_by_server:
            SERVER.validate_python(event)
        assert "error" in kinds

    run(body())


def test_a_disallowed_caller_event_never_reaches_the_server() -> None:
    async def handler(ws: web.WebSocketResponse, received: list) -> None:
        await ws.send_json(created())
        await wait_until(lambda: any(e["type"] == "input_audio_buffer.commit" for e in received))

    async def body() -> None:
        async with Server(handler) as server:
            rt = backend(server.url)
            sinks = Sinks()
            session = await rt.open_session(info(), *sinks.args())
            session.event_in(
                {
                    "type": "session.update",
                    "event_id": "c1",
                    "session": {"type": "realtime", "model": "gpt-x", "tools": []},
                }
            )
            session.event_in({"type": "input_audio_buffer.commit"})
            await wait_until(
                lambda: any(e["type"] == "input_audio_buffer.commit" for e in server.received[0])
            )
            await session.close("hangup")
            await rt.close()
        assert [e["type"] for e in server.received[0]] == [
            "session.update",
            "input_audio_buffer.commit",
        ]
        assert "model" not in server.received[0][0]["session"]
        error = next(e for e in sinks.events if e["type"] == "error")
        assert error["error"]["code"] == "event_not_allowed" and error["error"]["event_id"] == "c1"

    run(body())


async def send_text(text: str, ws: web.WebSocketResponse) -> None:
    await ws.send_str(text)


@pytest.mark.parametrize(
    "misbehave, reason",
    [
        (lambda ws: send_text("{not json", ws), "not JSON"),
        (lambda ws: ws.send_json(delta("item_a", b"\0" * (10 * 1024 * 1024))), "size limit"),
        (
            lambda ws: ws.send_json(
                {
                    "type": "error",
                    "event_id": "x",
                    "error": {"type": "server_error", "message": "overloaded"},
                }
            ),
            "overloaded",
        ),
        (lambda ws: ws.close(code=1011, message=b"bye"), "code 1011"),
    ],
    ids=["malformed-json", "10MB-delta", "server-error", "dropped"],
)
def test_a_misbehaving_server_ends_only_its_call_with_a_reason(misbehave, reason) -> None:
    calls = [0]

    async def handler(ws: web.WebSocketResponse, received: list) -> None:
        calls[0] += 1
        mine = calls[0]
        await ws.send_json(created())
        await wait_until(lambda: any(e["type"] == "input_audio_buffer.append" for e in received))
        if mine == 1:
            await misbehave(ws)
            await ws.close()
        else:
            await ws.send_json({"type": "some.future.event", "event_id": "f1"})
            await ws.send_json(delta("item_b", b"\x03\x00" * 480))
            await asyncio.sleep(0.5)

    async def body() -> None:
        async with Server(handler) as server:
            rt = backend(server.url)
            bad, good = Sinks(), Sinks()
            bad_session = await rt.open_session(info(), *bad.args())
            good_session = await rt.open_session(info(), *good.args())
            bad_session.audio_in(b"\0" * FRAME)
            good_session.audio_in(b"\0" * FRAME)
            await wait_until(lambda: bad.failures)
            await wait_until(lambda: good.audio)
            assert reason in bad.failures[0] and bad_session.close_reason == bad.failures[0]
            assert good.failures == [] and good.audio == [b"\x03\x00" * 480]
            assert any(e["type"] == "some.future.event" for e in good.events)  # unknown: passed on
            await rt.close()

    run(body())


def test_a_server_that_never_answers_refuses_the_call_in_bounded_time() -> None:
    async def handler(ws: web.WebSocketResponse, received: list) -> None:
        await asyncio.sleep(5)

    async def body() -> None:
        async with Server(handler) as server:
            rt = backend(server.url, connect_timeout_s=0.5)
            with pytest.raises(BackendError, match=r"did not answer within 0\.5 s"):
                await rt.open_session(info(), *Sinks().args())
            await rt.close()

    run(body())


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"url": "http://h/v1/realtime"}, "ws://"),
        ({"url": "ws://h/v1/other"}, "/realtime"),
        ({"url": "ws://h/v1/realtime", "ca_file": "/x"}, "wss"),
        ({"url": "ws://h/v1/realtime", "sample_rate": 44100}, "sample_rate"),
    ],
)
def test_bad_configuration_fails_at_start(kw, match) -> None:
    with pytest.raises(ValueError, match=match):
        RealtimeBackendConfig(**kw)


def test_the_key_is_not_in_the_config_repr() -> None:
    assert "sk-secret" not in repr(
        RealtimeBackendConfig(url="ws://h/v1/realtime", api_key="sk-secret")
    )
