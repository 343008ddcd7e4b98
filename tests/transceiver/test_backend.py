"""Backends: the embedded echo and the WebSocket bridge, against real servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.support.waits import wait_until
from transceiver.backend import FRAME_BYTES, BackendError, BackendSession, OpusFrame, SessionInfo
from transceiver.backends import create_backend
from transceiver.backends.echo import EchoBackend, EchoSession, PlayoutEstimate
from transceiver.backends.websocket import WebSocketBackend, WebSocketSession

TEST_TIMEOUT_S = 5.0
ROOT = Path(__file__).resolve().parents[2]


def run(coro: Awaitable[None], timeout_s: float = TEST_TIMEOUT_S) -> None:
    """Run a test body in a fresh loop, bounded in time, in the main task (for task checks)."""

    async def bounded() -> None:
        async with asyncio.timeout(timeout_s):
            await coro

    asyncio.run(bounded())


def info(**overrides) -> SessionInfo:
    fields = {
        "session_id": secrets.token_hex(16),
        "transceiver_id": 7,
        "remote": "203.0.113.5:50000",
        "metadata": {"user_agent": "test"},
    }
    fields.update(overrides)
    return SessionInfo(**fields)


def frame(n: int) -> bytes:
    """A distinguishable 20 ms frame."""
    return n.to_bytes(4, "little") * (FRAME_BYTES // 4)


class Sinks:
    """The transceiver's side of a session: what the backend emitted, and failures."""

    def __init__(self) -> None:
        self.audio: list[bytes] = []
        self.events: list[dict] = []
        self.failures: list[str] = []

    def args(self) -> tuple:
        return self.audio.append, self.events.append, self.failures.append


def backend_tasks() -> list[asyncio.Task]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("backend-ws-")]


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


class Server:
    """A WebSocket backend on 127.0.0.1 whose per-call behaviour is a test's coroutine."""

    def __init__(
        self,
        handler: Callable[[web.WebSocketResponse, web.Request], Awaitable[None]],
        protocols: tuple[str, ...] = (),
    ):
        self.handler = handler
        self.protocols = protocols
        self.queries: list[dict[str, str]] = []
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> Server:
        async def call(request: web.Request) -> web.WebSocketResponse:
            self.queries.append(dict(request.query))
            ws = web.WebSocketResponse(protocols=self.protocols)
            await ws.prepare(request)
            await self.handler(ws, request)
            return ws

        app = web.Application()
        app.router.add_get("/call", call)
        self.runner = await start(app)
        self.url = f"ws://127.0.0.1:{port_of(self.runner)}/call"
        return self

    async def __aexit__(self, *exc) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


async def start(app: web.Application) -> web.AppRunner:
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner


def port_of(runner: web.AppRunner) -> int:
    return runner.addresses[0][1]


async def record(ws: web.WebSocketResponse, received: list) -> None:
    """Read until the socket closes: text as parsed JSON, binary as bytes."""
    async for msg in ws:
        if msg.type is aiohttp.WSMsgType.TEXT:
            received.append(json.loads(msg.data))
        elif msg.type is aiohttp.WSMsgType.BINARY:
            received.append(msg.data)


def load_example_server():
    path = ROOT / "examples" / "ws_backend_server.py"
    spec = importlib.util.spec_from_file_location("ws_backend_server", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- echo --


def test_echo_returns_audio_and_wraps_events() -> None:
    async def body() -> None:
        sinks = Sinks()
        backend = create_backend("echo")
        assert isinstance(backend, EchoBackend) and backend.name == "echo"
        call = info()
        session = await backend.open_session(call, *sinks.args())
        assert sinks.events == [
            {"type": "session.started", "session_id": call.session_id, "resumed": False}
        ]
        session.audio_in(frame(1))
        session.event_in({"type": "hello", "n": 1})
        assert sinks.audio == [frame(1)]
        assert sinks.events[1:] == [{"type": "echo", "event": {"type": "hello", "n": 1}}]
        with pytest.raises(ValueError):
            session.audio_in(b"\x00" * 10)
        await session.close("hangup")
        await session.close("again")
        session.audio_in(frame(2))  # ignored after close
        assert sinks.audio == [frame(1)]
        assert sinks.failures == []
        await backend.close()

    run(body())


def test_echo_drops_what_would_make_it_lag_and_follows_real_time() -> None:
    now = [100.0]
    sinks = Sinks()
    session = EchoSession(info(), *sinks.args()[:2], max_lag_frames=5, clock=lambda: now[0])
    for n in range(12):  # a burst: 12 frames within the same instant
        session.audio_in(frame(n))
    assert sinks.audio == [frame(n) for n in range(5)], "only 100 ms of it is queued"
    assert (session.frames_in, session.frames_out, session.frames_dropped) == (12, 5, 7)
    now[0] += 0.059  # nearly three frames played out: room for three more
    for n in range(12, 16):
        session.audio_in(frame(n))
    assert sinks.audio[5:] == [frame(12), frame(13), frame(14)]
    for n in range(16, 66):  # then real time, one frame per 20 ms: the standing queue ...
        now[0] += 0.020
        session.audio_in(frame(n))
    assert session.frames_dropped == 8 and sinks.audio[-1] == frame(65)  # ... keeps (< 4 s)


def test_echo_trims_a_standing_queue_a_frame_every_4_s_down_to_real_time() -> None:
    now = [100.0]
    sinks = Sinks()
    session = EchoSession(info(), *sinks.args()[:2], max_lag_frames=5, clock=lambda: now[0])
    for n in range(4):  # a burst leaves four frames queued ...
        session.audio_in(frame(n))
    depths = []
    for n in range(4, 4 + 50 * 16):  # ... then sixteen seconds of real time
        now[0] += 0.020
        depths.append(session._playout.depth(now[0]))
        session.audio_in(frame(n))
    assert session.frames_dropped == 3, "one every 4 s until none stands"
    assert max(depths[-100:]) <= 0.5, "then the echo runs in real time, no frame standing"
    for n in range(900, 1200):  # in real time nothing more is dropped
        now[0] += 0.020
        session.audio_in(frame(n))
    assert session.frames_dropped == 3


def test_echo_keeps_jitter_that_leaves_no_frame_standing() -> None:
    """Packets late or early by up to half a frame never cost a frame."""
    now = [100.0]
    sinks = Sinks()
    session = EchoSession(info(), *sinks.args()[:2], max_lag_frames=5, clock=lambda: now[0])
    for n in range(50 * 20):  # twenty seconds, each packet up to 9 ms off its time
        now[0] = 100.0 + n * 0.020 + (0.009 if n % 3 == 0 else -0.004 if n % 7 == 0 else 0.0)
        session.audio_in(frame(n))
    assert session.frames_dropped == 0


def test_echo_with_the_track_s_count_trims_a_frame_that_stands_and_nothing_else() -> None:
    """Attached to the transceiver's real queue (``attach_playout``), the echo sees a frame
    standing that the estimate cannot (one that missed its tick), and only such frames."""
    now = [100.0]
    sinks = Sinks()
    session = EchoSession(info(), *sinks.args()[:2], max_lag_frames=5, clock=lambda: now[0])
    waiting = [0]
    session.attach_playout(lambda: waiting[0])
    for n in range(50 * 10):  # ten seconds: the previous frame already sent at each arrival
        now[0] += 0.020
        session.audio_in(frame(n))
    assert session.frames_dropped == 0
    waiting[0] = 1  # now one frame stands at every arrival: trimmed every 4 s while it does
    for n in range(500, 500 + 50 * 9):
        now[0] += 0.020
        session.audio_in(frame(n))
    assert session.frames_dropped == 2
    waiting[0] = 5  # a queue of max_lag_frames: every frame dropped at once
    session.audio_in(frame(900))
    assert session.frames_dropped == 3 and sinks.audio[-1] == frame(500 + 50 * 9 - 1)


def test_a_backend_session_ignores_the_playout_count_by_default() -> None:
    class Quiet(BackendSession):
        def audio_in(self, pcm: bytes) -> None: ...
        def event_in(self, event: dict) -> None: ...
        async def close(self, reason: str) -> None: ...

    Quiet().attach_playout(lambda: 3)  # no error, nothing kept


def test_playout_estimate_drains_in_real_time() -> None:
    playout = PlayoutEstimate(frame_s=0.02)
    assert playout.depth(0.0) == 0.0
    for _ in range(4):
        playout.add()
    assert playout.depth(0.0) == 4.0
    assert playout.depth(0.05) == pytest.approx(1.5)
    assert playout.depth(1.0) == 0.0


# -- websocket: the happy path --


def test_websocket_round_trip_with_the_example_server() -> None:
    async def body() -> None:
        runner = await start(load_example_server().make_app())
        backend = create_backend("websocket", f"ws://127.0.0.1:{port_of(runner)}/")
        sinks = Sinks()
        call = info()
        session = await backend.open_session(call, *sinks.args())
        for n in range(5):
            session.audio_in(frame(n))
        session.event_in({"type": "ping", "text": "héllo"})
        assert await wait_until(lambda: len(sinks.audio) == 5 and len(sinks.events) == 2, 2)
        assert sinks.audio == [frame(n) for n in range(5)]
        assert sinks.events == [
            {"type": "session.started", "session_id": call.session_id, "resumed": False},
            {"type": "echo", "event": {"type": "ping", "text": "héllo"}},
        ]
        assert (session.frames_in, session.frames_out, session.frames_dropped) == (5, 5, 0)
        await session.close("hangup")
        await backend.close()
        await runner.cleanup()
        assert sinks.failures == []

    run(body())


def test_server_sees_session_start_audio_events_then_session_end() -> None:
    received: list = []

    async def handler(ws: web.WebSocketResponse, request: web.Request) -> None:
        await ws.send_bytes(frame(100) + frame(101))  # two frames in one message
        await ws.send_str(json.dumps({"type": "response.text", "text": "hi"}))
        await record(ws, received)

    async def body() -> None:
        async with Server(handler) as server:
            backend = create_backend("websocket", server.url)
            sinks = Sinks()
            call = info()
            session = await backend.open_session(call, *sinks.args())
            session.audio_in(frame(1))
            session.event_in({"type": "dtmf", "digit": "5"})
            session.audio_in(frame(2))
            assert await wait_until(lambda: len(received) == 4 and len(sinks.audio) == 1, 2)
            await session.close("hangup")
            assert await wait_until(lambda: len(received) == 5, 2)
            await backend.close()

        assert server.queries == [{"session_id": call.session_id}]
        assert received == [
            {
                "type": "session.start",
                "session_id": call.session_id,
                "transceiver_id": 7,
                "remote": "203.0.113.5:50000",
                "metadata": {"user_agent": "test"},
                "resumed": False,
                "audio": {
                    "encoding": "pcm16le",
                    "sample_rate": 48000,
                    "channels": 1,
                    "frame_ms": 20,
                },
            },
            frame(1),
            {"type": "dtmf", "digit": "5"},  # caller order kept between audio and events
            frame(2),
            {"type": "session.end", "reason": "hangup"},
        ]
        assert sinks.audio == [frame(100) + frame(101)]
        assert sinks.events == [{"type": "response.text", "text": "hi"}]
        assert (session.frames_in, session.frames_sent, session.frames_out) == (2, 2, 2)
        assert (session.events_in, session.events_sent, session.events_out) == (1, 1, 1)
        assert sinks.failures == []

    run(body())


# -- websocket: a backend that is behind or misbehaves --


def test_full_outbox_drops_the_oldest_frames() -> None:
    received: list = []

    async def handler(ws: web.WebSocketResponse, request: web.Request) -> None:
        await record(ws, received)

    async def body() -> None:
        async with Server(handler) as server:
            backend = create_backend("websocket", server.url, max_queued_frames=50)
            session = await backend.open_session(info(), *Sinks().args())
            # No await in between: the sender cannot run, as if the socket were stuck.
            for n in range(60):
                session.audio_in(frame(n))
            assert session.frames_dropped == 10
            assert await wait_until(lambda: session.frames_sent == 50, 2)
            await session.close("hangup")
            assert await wait_until(lambda: len(received) == 52, 2)
            await backend.close()
        assert received[1:-1] == [frame(n) for n in range(10, 60)]

    run(body())


def test_stalled_backend_costs_dropped_frames_never_a_blocked_caller() -> None:
    release = asyncio.Event()

    async def handler(ws: web.WebSocketResponse, request: web.Request) -> None:
        await release.wait()  # never reads: TCP buffers fill, the sender blocks

    async def body() -> None:
        async with Server(handler) as server:
            backend = create_backend(
                "websocket", server.url, max_queued_frames=50, close_timeout_s=0.3
            )
            fds_before = open_fds()
            session = await backend.open_session(info(), *Sinks().args())
            assert isinstance(session, WebSocketSession)
            sent = 0
            while session.frames_dropped == 0 and sent < 50_000:
                for _ in range(50):
                    session.audio_in(frame(sent))
                    sent += 1
                await asyncio.sleep(0)  # let the sender write what it can
            assert session.frames_dropped > 0
            queued = session.frames_in - session.frames_sent - session.frames_dropped
            assert 0 < queued <= 50 + 1  # the outbox, plus the frame being written
            started = time.monotonic()
            await session.close("hangup")  # must not hang on the stuck socket...
            assert time.monotonic() - started < 1.0
            await asyncio.sleep(0)
            # ...nor keep it open: only the server's end of the connection is left.
            assert open_fds() == fds_before + 1
            assert backend_tasks() == []
            release.set()
            await backend.close()

    run(body())


def test_malformed_backend_messages_are_counted_and_dropped() -> None:
    async def handler(ws: web.WebSocketResponse, request: web.Request) -> None:
        await ws.send_bytes(b"\x01" * (FRAME_BYTES + 1))  # not whole frames
        await ws.send_bytes(b"")  # zero frames
        await ws.send_str("not json")
        await ws.send_str("[1, 2]")  # JSON, but not an object
        await ws.send_bytes(frame(9))
        await ws.send_str('{"type": "still.alive"}')
        await record(ws, [])

    async def body() -> None:
        async with Server(handler) as server:
            backend = create_backend("websocket", server.url)
            sinks = Sinks()
            session = await backend.open_session(info(), *sinks.args())
            assert await wait_until(lambda: len(sinks.events) == 1, 2)
            assert sinks.audio == [frame(9)]
            assert sinks.events == [{"type": "still.alive"}]
            assert session.protocol_errors == 4
            assert sinks.failures == []
            assert session.state == "open"
            await session.close("hangup")
            await backend.close()

    run(body())


def test_an_oversized_backend_message_ends_only_its_call() -> None:
    """A message over ``max_message_bytes`` (here 64 KiB) ends that call with the size named;
    the other call on the same backend keeps its audio."""

    async def handler(ws: web.WebSocketResponse, request: web.Request) -> None:
        start = await ws.receive_json()
        if start["metadata"]["user_agent"] == "bad":
            await ws.send_bytes(frame(1) * 40)  # 75 KiB at once
        else:
            await ws.send_bytes(frame(2))
        await record(ws, [])

    async def body() -> None:
        async with Server(handler) as server:
            backend = create_backend("websocket", server.url, max_message_bytes=64 * 1024)
            bad, good = Sinks(), Sinks()
            bad_call = await backend.open_session(info(metadata={"user_agent": "bad"}), *bad.args())
            good_call = await backend.open_session(info(), *good.args())
            assert await wait_until(lambda: bad.failures != [] and good.audio != [], 2)
            assert bad.failures == ["backend_error"] and bad.audio == []  # logged: the size
            assert bad_call.state == "failed"
            good_call.audio_in(frame(3))
            await asyncio.sleep(0.05)
            assert good.failures == [] and good_call.state == "open"
            assert good.audio == [frame(2)]
            await bad_call.close("backend_error")
            await good_call.close("hangup")
            await backend.close()

    run(body())


def test_a_flood_faster_than_real_time_is_bounded_by_the_outbound_queue() -> None:
    """A minute of audio sent at once: the call's outbound queue keeps its newest 30 s
    (``max_buffered_frames``), drops and counts the rest, and the call stays up."""
    from transceiver.call.outbound_track import BackendAudioTrack

    async def handler(ws: web.WebSocketResponse, request: web.Request) -> None:
        await ws.receive()  # session.start
        for n in range(60):  # 60 messages of 50 frames: 3000 frames, 60 s
            await ws.send_bytes(b"".join(frame(50 * n + k) for k in range(50)))
        await ws.send_str('{"type": "flood.done"}')
        await record(ws, [])

    async def body() -> None:
        async with Server(handler) as server:
            backend = create_backend("websocket", server.url)
            track = BackendAudioTrack(max_buffered_frames=1500)
            sinks = Sinks()
            session = await backend.open_session(
                info(), track.push, sinks.events.append, sinks.failures.append
            )
            assert await wait_until(lambda: sinks.events == [{"type": "flood.done"}], 4)
            assert track.queued_frames() == 1500 and track.frames_dropped == 1500
            assert sinks.failures == [] and session.state == "open"
            track.stop()
            await session.close("hangup")
            await backend.close()

    run(body())


@pytest.mark.parametrize("how", ["close", "abort"])
def test_backend_going_away_fails_the_call_once(how: str) -> None:
    async def handler(ws: web.WebSocketResponse, request: web.Request) -> None:
        await ws.receive()  # session.start
        if how == "close":
            await ws.close(code=aiohttp.WSCloseCode.GOING_AWAY)
        else:
            request.transport.abort()  # TCP gone without a closing handshake

    async def body() -> None:
        async with Server(handler) as server:
            backend = create_backend("websocket", server.url)
            sinks = Sinks()
            session = await backend.open_session(info(), *sinks.args())
            assert await wait_until(lambda: sinks.failures != [], 2)
            for n in range(100):  # the transceiver may still push until it reacts
                session.audio_in(frame(n))
            session.event_in({"type": "late"})
            await asyncio.sleep(0.05)
            assert sinks.failures == ["backend_closed"]
            assert session.state == "failed" and session.frames_dropped == 0
            await session.close("backend_error")
            await session.close("backend_error")
            assert session.state == "closed" and session.close_reason == "backend_closed"
            assert sinks.failures == ["backend_closed"]
            await backend.close()

    run(body())


# -- websocket: calls that cannot start --


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_connection_refused_raises_backend_error() -> None:
    async def body() -> None:
        backend = create_backend("websocket", f"ws://127.0.0.1:{free_port()}/")
        with pytest.raises(BackendError, match="cannot reach"):
            await backend.open_session(info(), *Sinks().args())
        await backend.close()

    run(body())


def test_backend_that_never_answers_times_out() -> None:
    writers: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await reader.read()  # accept TCP, never answer the upgrade

    async def body() -> None:
        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        backend = create_backend("websocket", f"ws://127.0.0.1:{port}/", connect_timeout_s=0.2)
        started = time.monotonic()
        with pytest.raises(BackendError, match=r"within 0\.2 s"):
            await backend.open_session(info(), *Sinks().args())
        assert time.monotonic() - started < 1.0
        await backend.close()
        server.close()
        for writer in writers:
            writer.close()
            await writer.wait_closed()
        await server.wait_closed()

    run(body())


def test_refused_upgrade_raises_backend_error() -> None:
    async def handler(ws: web.WebSocketResponse, request: web.Request) -> None:
        await record(ws, [])

    async def body() -> None:
        async with Server(handler) as server:
            backend = create_backend("websocket", server.url.replace("/call", "/nowhere"))
            with pytest.raises(BackendError, match="HTTP 404"):
                await backend.open_session(info(), *Sinks().args())
            await backend.close()

    run(body())


# -- websocket: the end of a call --


def test_close_is_idempotent_and_leaves_no_tasks() -> None:
    ends: list = []

    async def handler(ws: web.WebSocketResponse, request: web.Request) -> None:
        received: list = []
        await record(ws, received)
        ends.extend(m for m in received if isinstance(m, dict) and m["type"] == "session.end")

    async def body() -> None:
        async with Server(handler) as server:
            backend = create_backend("websocket", server.url)
            session = await backend.open_session(info(), *Sinks().args())
            assert len(backend_tasks()) == 2
            session.audio_in(frame(1))
            await asyncio.gather(session.close("hangup"), session.close("other"))
            await session.close("again")
            assert backend_tasks() == []
            assert session.state == "closed" and session.close_reason == "hangup"
            session.audio_in(frame(2))  # ignored, no task revived
            session.event_in({"type": "late"})
            assert backend_tasks() == [] and session.frames_in == 1
            await backend.close()
            await backend.close()
        assert ends == [{"type": "session.end", "reason": "hangup"}]
        assert asyncio.all_tasks() == {asyncio.current_task()}

    run(body())


def test_closing_the_backend_ends_its_open_calls() -> None:
    async def handler(ws: web.WebSocketResponse, request: web.Request) -> None:
        await record(ws, [])

    async def body() -> None:
        async with Server(handler) as server:
            backend = create_backend("websocket", server.url)
            sessions = [await backend.open_session(info(), *Sinks().args()) for _ in range(3)]
            await backend.close()
            assert [s.state for s in sessions] == ["closed"] * 3
            assert {s.close_reason for s in sessions} == {"shutdown"}
            assert backend_tasks() == []
            with pytest.raises(BackendError):
                await backend.open_session(info(), *Sinks().args())

    run(body())


# -- configuration --


@pytest.mark.parametrize(
    ("args", "options", "message"),
    [
        (("nope",), {}, "unknown backend 'nope'"),
        (("echo", "ws://127.0.0.1:1/"), {}, "takes no url"),
        (("echo",), {"connect_timeout_s": 1}, "unknown option"),
        (("websocket",), {}, "needs a url"),
        (("websocket", "http://127.0.0.1:1/"), {}, "ws://"),
        (("websocket", "ws:///path"), {}, "ws://"),
        (("websocket", "ws://127.0.0.1:1/"), {"colour": "red"}, "unknown option.*colour"),
        (("websocket", "ws://127.0.0.1:1/"), {"connect_timeout_s": 0}, "connect_timeout_s"),
        (("websocket", "ws://127.0.0.1:1/"), {"max_queued_frames": 0}, "max_queued_frames"),
        (("websocket", "ws://127.0.0.1:1/"), {"max_queued_frames": 2.5}, "max_queued_frames"),
    ],
)
def test_create_backend_rejects_bad_configuration(args, options, message) -> None:
    with pytest.raises(ValueError, match=message):
        create_backend(*args, **options)


def test_create_backend_builds_the_built_ins() -> None:
    assert isinstance(create_backend(), EchoBackend)
    backend = create_backend("websocket", "wss://backend.example:443/v1", connect_timeout_s=1.5)
    assert isinstance(backend, WebSocketBackend) and backend.name == "websocket"
    assert backend.config.connect_timeout_s == 1.5


@pytest.mark.parametrize(
    "overrides", [{"session_id": "xyz"}, {"session_id": "AB" * 16}, {"transceiver_id": 70000}]
)
def test_session_info_rejects_bad_fields(overrides) -> None:
    with pytest.raises(ValueError):
        info(**overrides)


# -- the opus audio format --


def opus_frame(n: int, samples: int = 960) -> OpusFrame:
    """A distinguishable Opus packet (CELT 20 ms TOC, code 0), with its RTP timing."""
    return OpusFrame(bytes([31 << 3]) + n.to_bytes(4, "big"), n & 0xFFFF, n * samples)


def test_echo_in_opus_passes_packets_through_and_keeps_its_lag_bound() -> None:
    async def body() -> None:
        session = await create_backend("echo", audio_format="opus").open_session(
            info(), *Sinks().args()
        )
        assert session.audio_format == "opus"

    run(body())
    sinks = Sinks()
    session = EchoSession(info(), *sinks.args()[:2], clock=lambda: 100.0, audio_format="opus")
    for n in range(12):  # a burst within the same instant: only 100 ms of it goes back
        session.opus_in(opus_frame(n))
    assert sinks.audio == [opus_frame(n).payload for n in range(5)]
    assert session.frames_dropped == 7
    run(session.close("hangup"))
    session.opus_in(opus_frame(99))
    assert len(sinks.audio) == 5


def test_echo_in_pcm16_takes_no_opus_and_unknown_formats_are_refused() -> None:
    async def body() -> None:
        session = await create_backend("echo").open_session(info(), *Sinks().args())
        assert session.audio_format == "pcm16"
        with pytest.raises(NotImplementedError):
            session.opus_in(opus_frame(1))

    run(body())
    with pytest.raises(ValueError, match="audio format"):
        create_backend("echo", audio_format="mp3")


def test_websocket_backend_that_picks_opus_gets_packets_with_their_timing() -> None:
    async def body() -> None:
        runner = await start(load_example_server().make_app("opus"))
        backend = create_backend("websocket", f"ws://127.0.0.1:{port_of(runner)}/")
        sinks = Sinks()
        session = await backend.open_session(info(), *sinks.args())
        assert session.audio_format == "opus"
        for n in range(5):
            session.opus_in(opus_frame(n))
        assert await wait_until(lambda: len(sinks.audio) == 5, 2)
        assert sinks.audio == [opus_frame(n).payload for n in range(5)]
        assert (session.frames_in, session.frames_out) == (5, 5)
        await session.close("hangup")
        await backend.close()
        await runner.cleanup()

    run(body())


def test_websocket_opus_header_and_start_message_and_malformed_packets() -> None:
    received: list = []

    async def handler(ws: web.WebSocketResponse, request: web.Request) -> None:
        await ws.send_bytes(b"")  # not an Opus packet: dropped, counted
        await ws.send_bytes(bytes([31 << 3 | 3]))  # code 3 without its count: dropped
        await ws.send_bytes(opus_frame(7).payload)
        await record(ws, received)

    async def body() -> None:
        async with Server(handler, protocols=("rtcedge.opus",)) as server:
            backend = create_backend("websocket", server.url)
            sinks = Sinks()
            session = await backend.open_session(info(), *sinks.args())
            session.opus_in(OpusFrame(opus_frame(1).payload, 0xFFFF, 0xFFFFFFFF))
            assert await wait_until(lambda: len(received) == 2 and len(sinks.audio) == 1, 2)
            assert session.protocol_errors == 2
            await session.close("hangup")
            await backend.close()
        assert sinks.audio == [opus_frame(7).payload]
        assert received[0]["audio"]["encoding"] == "opus"
        assert received[1] == b"\xff\xff\xff\xff\xff\xff" + opus_frame(1).payload

    run(body())


def test_websocket_backend_without_a_subprotocol_stays_pcm16() -> None:
    async def body() -> None:
        runner = await start(load_example_server().make_app())
        backend = create_backend("websocket", f"ws://127.0.0.1:{port_of(runner)}/")
        session = await backend.open_session(info(), *Sinks().args())
        assert session.audio_format == "pcm16"
        await session.close("hangup")
        await backend.close()
        await runner.cleanup()

    run(body())


def test_a_resumed_call_says_so_to_both_backends() -> None:
    """A call moved from a draining transceiver keeps its session_id; the backend sees
    resumed=true (echo: in session.started; websocket: in session.start)."""
    received: list = []

    async def handler(ws: web.WebSocketResponse, request: web.Request) -> None:
        await record(ws, received)

    async def body() -> None:
        call = info(resumed=True)
        sinks = Sinks()
        await create_backend("echo").open_session(call, *sinks.args())
        assert sinks.events[0] == {
            "type": "session.started",
            "session_id": call.session_id,
            "resumed": True,
        }
        async with Server(handler) as server:
            backend = create_backend("websocket", server.url)
            session = await backend.open_session(call, *Sinks().args())
            assert await wait_until(lambda: len(received) == 1, 2)
            await session.close("migrated")
            await backend.close()
        assert received[0]["session_id"] == call.session_id and received[0]["resumed"] is True

    run(body())
