"""The media-streams backend over a real WebSocket: a scripted aiohttp bot on loopback, the
transceiver's real outbound track as the playout (paced by the clock, as in a call), and what a
bot may do wrong, each bounded to its own call: malformed JSON, an unknown event, a 10 MB
message, audio far faster than real time, a flood of messages, silence forever, no pongs."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import math
import secrets
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp
import pytest
from aiohttp import web

from tests.support.waits import run, wait_until
from transceiver.backend import BackendError, SessionInfo
from transceiver.backends import create_backend
from transceiver.backends.media_streams import MediaStreamsBackend, MediaStreamsSession
from transceiver.backends.media_streams.g711 import pcm16_to_ulaw
from transceiver.call.outbound_track import BackendAudioTrack
from transceiver.call.session import CLEAR_AUDIO

Script = Callable[["Bot"], Awaitable[None]]


def tone_ulaw(seconds: float, hz: float = 440.0) -> bytes:
    n = int(8000 * seconds)
    samples = (int(8000 * math.sin(2 * math.pi * hz * i / 8000)) for i in range(n))
    return pcm16_to_ulaw(struct.pack(f"<{n}h", *samples))


@dataclass
class Bot:
    """One call as the scripted bot sees it: what arrived, and how to answer."""

    ws: web.WebSocketResponse
    headers: dict
    received: list[dict] = field(default_factory=list)

    @property
    def stream_sid(self) -> str:
        return next(m["streamSid"] for m in self.received if m["event"] == "start")

    def events(self, kind: str) -> list[dict]:
        return [m for m in self.received if m["event"] == kind]

    async def started(self) -> None:
        assert await wait_until(lambda: bool(self.events("start")), 5)

    async def media(self, ulaw: bytes) -> None:
        payload = base64.b64encode(ulaw).decode()
        await self.ws.send_json(
            {"event": "media", "streamSid": self.stream_sid, "media": {"payload": payload}}
        )

    async def mark(self, name: str) -> None:
        await self.ws.send_json(
            {"event": "mark", "streamSid": self.stream_sid, "mark": {"name": name}}
        )

    async def clear(self) -> None:
        await self.ws.send_json({"event": "clear", "streamSid": self.stream_sid})

    def marks(self) -> list[str]:
        return [m["mark"]["name"] for m in self.events("mark")]


@contextlib.asynccontextmanager
async def bot_server(script: Script, read: bool = True) -> AsyncIterator[tuple[str, list[Bot]]]:
    """A bot on 127.0.0.1 running ``script`` per call; ``read=False``: it never reads (nor
    answers pings)."""
    bots: list[Bot] = []

    async def call(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        bot = Bot(ws, dict(request.headers))
        bots.append(bot)

        async def reader() -> None:
            async for msg in ws:
                if msg.type is aiohttp.WSMsgType.TEXT:
                    bot.received.append(json.loads(msg.data))

        task = asyncio.ensure_future(reader()) if read else None
        try:
            with contextlib.suppress(ConnectionError):  # a call that ended its bot's socket
                await script(bot)
            await wait_until(lambda: ws.closed, 30)
        finally:
            if task is not None:
                task.cancel()
        return ws

    app = web.Application()
    app.router.add_get("/twilio", call)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"ws://127.0.0.1:{runner.addresses[0][1]}/twilio", bots
    finally:
        await runner.cleanup()


@dataclass
class Call:
    """One call's transceiver side: the backend session and the real outbound track it feeds,
    paced by a clock task as ``transceiver.call.outbound`` paces it."""

    session: MediaStreamsSession
    track: BackendAudioTrack
    failures: list[str]
    events: list[dict]
    clock: asyncio.Task

    def speak(self, frames: int) -> None:
        """``frames`` of the caller's audio (8 kHz PCM16, 20 ms each) to the bot."""
        for _ in range(frames):
            self.session.audio_in(bytes(320))


async def open_call(backend: MediaStreamsBackend, metadata: dict | None = None) -> Call:
    track = BackendAudioTrack()
    track.set_format("pcm16", 8000)
    failures: list[str] = []
    events: list[dict] = []

    def emit_event(event: dict) -> None:
        events.append(event)
        if event["type"] == CLEAR_AUDIO:
            track.clear()

    info = SessionInfo(secrets.token_hex(16), 1, "127.0.0.1:5000", metadata or {"user_agent": "t"})
    session = await backend.open_session(info, track.push, emit_event, failures.append)
    session.attach_playout(track.queued_frames)

    async def clock() -> None:
        while True:
            track.take_due(time.monotonic())
            await asyncio.sleep(0.005)

    return Call(session, track, failures, events, asyncio.ensure_future(clock()))


async def hang_up(*calls: Call) -> None:
    for call in calls:
        call.clock.cancel()
        await call.session.close("deleted")


def backend_for(url: str, **options) -> MediaStreamsBackend:
    backend = create_backend("media-streams", url, **options)
    assert isinstance(backend, MediaStreamsBackend)
    return backend


def test_a_call_is_connected_start_media_every_frame_and_stop_with_the_bearer():
    async def listen(bot: Bot) -> None:
        await bot.started()

    async def go() -> None:
        async with bot_server(listen) as (url, bots):
            backend = backend_for(url, bearer="sk-bot")
            call = await open_call(backend, {"user_agent": "ua", "subject": "user-1"})
            call.speak(10)
            bot = bots[0]
            assert await wait_until(lambda: len(bot.events("media")) == 10, 5)
            await hang_up(call)
            assert await wait_until(lambda: bool(bot.events("stop")), 5)
            await backend.close()
            kinds = [m["event"] for m in bot.received]
            assert kinds == ["connected", "start", *["media"] * 10, "stop"]
            start = bot.events("start")[0]["start"]
            assert start["callSid"] == "CA" + call.session.info.session_id
            assert start["customParameters"] == {"user_agent": "ua", "subject": "user-1"}
            assert start["mediaFormat"] == {
                "encoding": "audio/x-mulaw",
                "sampleRate": 8000,
                "channels": 1,
            }
            assert bot.headers["Authorization"] == "Bearer sk-bot"
            chunks = [int(m["media"]["chunk"]) for m in bot.events("media")]
            assert chunks == list(range(1, 11))
            assert call.failures == []

    run(go(), 30)


def test_a_mark_comes_back_once_the_playout_sent_the_audio_before_it_and_clear_empties_it():
    playout: dict[str, int] = {}

    async def speak(bot: Bot) -> None:
        await bot.started()
        await bot.media(tone_ulaw(0.5))  # 25 frames, at once: ahead of real time
        await bot.mark("after-25")
        await bot.media(tone_ulaw(1.0))  # 50 more
        assert await wait_until(lambda: "after-25" in bot.marks(), 10)
        playout["sent_at_mark"] = calls[0].track.frames_out
        await bot.media(tone_ulaw(0.2))
        await bot.mark("cleared")
        await bot.clear()
        assert await wait_until(lambda: "cleared" in bot.marks(), 5)
        playout["sent_at_clear"] = calls[0].track.frames_out
        playout["queued_at_clear"] = calls[0].track.queued_frames()

    calls: list[Call] = []

    async def go() -> None:
        async with bot_server(speak) as (url, _bots):
            backend = backend_for(url)
            calls.append(await open_call(backend))
            call = calls[0]
            assert await wait_until(lambda: "queued_at_clear" in playout, 15)
            sent = call.track.frames_out
            await asyncio.sleep(0.2)
            assert call.track.frames_out == sent, "nothing of the bot's plays after the clear"
            counters = backend.counters()
            await hang_up(call)
            await backend.close()
        # The echo left once the 25th frame had, and long before the 50 after it had.
        assert 25 <= playout["sent_at_mark"] < 75, playout
        assert playout["sent_at_clear"] < 85 and playout["queued_at_clear"] == 0, playout
        assert counters["marks_echoed"] == 2 and counters["clears"] == 1
        assert counters["frames_cleared"] > 10

    run(go(), 30)


@pytest.mark.parametrize(
    ("name", "script", "outcome"),
    [
        ("malformed JSON", lambda bot: bot.ws.send_str("{nope"), "protocol_errors"),
        (
            "unknown event",
            lambda bot: bot.ws.send_json({"event": "dance", "streamSid": bot.stream_sid}),
            "unknown_events",
        ),
        ("10 MB message", lambda bot: bot.ws.send_str("x" * (10 * 1024 * 1024)), "ended"),
    ],
)
def test_bad_input_from_a_bot_is_bounded_to_its_call(name, script, outcome):
    """Two calls to one bot; the second one's bot misbehaves: only its call degrades (counted)
    or ends (with a reason), the first goes on hearing and being heard."""

    async def bot_script(bot: Bot) -> None:
        await bot.started()
        if bot.events("start")[0]["start"]["customParameters"]["user_agent"] == "bad":
            await script(bot)
        await bot.media(tone_ulaw(0.1))

    async def go() -> None:
        async with bot_server(bot_script) as (url, bots):
            backend = backend_for(url)
            good = await open_call(backend, {"user_agent": "good"})
            bad = await open_call(backend, {"user_agent": "bad"})
            if outcome == "ended":
                assert await wait_until(lambda: bool(bad.failures), 10), name
                assert "size limit" in (bad.session.close_reason or "")
            else:
                assert await wait_until(lambda: bad.track.frames_out >= 5, 10), name
                assert bad.session.counters()[outcome] == 1 and bad.failures == []
            good.speak(5)
            assert await wait_until(lambda: len(bots[0].events("media")) == 5, 5)
            assert await wait_until(lambda: good.track.frames_out >= 5, 5)
            assert good.failures == [] and good.session.state == "open"
            await hang_up(good, bad)
            await backend.close()

    run(go(), 30)


def test_audio_far_faster_than_real_time_is_dropped_past_the_limit_and_counted():
    async def flood(bot: Bot) -> None:
        await bot.started()
        second = tone_ulaw(1.0)
        for _ in range(60):  # a minute of audio in a moment
            await bot.media(second)
        await bot.mark("end")

    async def go() -> None:
        async with bot_server(flood) as (url, _bots):
            backend = backend_for(url)
            call = await open_call(backend)
            counts = call.session.stream.counts
            assert await wait_until(lambda: counts.marks_received == 1, 10)
            assert call.track.queued_frames() <= 1000, "20 s ahead at most"
            assert counts.media_frames_dropped >= 3000 - 1000 - call.track.frames_out
            assert counts.media_frames_in + counts.media_frames_dropped == 3000
            assert call.failures == [] and call.session.state == "open"
            await hang_up(call)
            await backend.close()

    run(go(), 30)


def test_a_flood_of_messages_is_read_at_the_budget_and_the_call_goes_on():
    async def flood(bot: Bot) -> None:
        await bot.started()
        for _ in range(2000):
            await bot.ws.send_json({"event": "noise", "streamSid": bot.stream_sid})
        await bot.mark("after-the-flood")

    async def go() -> None:
        async with bot_server(flood) as (url, bots):
            backend = backend_for(url, messages_per_s=1000.0, message_burst=100)
            call = await open_call(backend)
            assert await wait_until(lambda: "after-the-flood" in bots[0].marks(), 15)
            counters = call.session.counters()
            assert counters["unknown_events"] == 2000 and counters["messages_paced"] >= 1
            assert call.failures == []
            await hang_up(call)
            await backend.close()

    run(go(), 30)


def test_a_bot_that_listens_silently_keeps_its_call_one_that_answers_no_ping_loses_it():
    async def silent(bot: Bot) -> None:
        await asyncio.sleep(30)

    async def go() -> None:
        async with bot_server(silent) as (url, bots):
            backend = backend_for(url, heartbeat_s=0.2)
            call = await open_call(backend)
            call.speak(3)
            assert await wait_until(lambda: len(bots[0].events("media")) == 3, 5)
            await asyncio.sleep(1.0)  # five heartbeats: the bot answered each ping
            assert call.failures == [] and call.session.state == "open"
            await hang_up(call)
            await backend.close()
        async with bot_server(silent, read=False) as (url, bots):
            backend = backend_for(url, heartbeat_s=0.2)
            call = await open_call(backend)
            assert await wait_until(lambda: bool(call.failures), 10)
            assert call.session.state == "failed"
            await hang_up(call)
            await backend.close()

    run(go(), 30)


def test_a_bot_that_is_not_there_refuses_the_call_at_once():
    async def go() -> None:
        backend = backend_for("ws://127.0.0.1:9/twilio", connect_timeout_s=2.0)
        with pytest.raises(BackendError, match="cannot reach"):
            await open_call(backend)
        await backend.close()

    run(go(), 30)
