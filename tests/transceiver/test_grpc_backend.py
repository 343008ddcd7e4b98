"""The grpc backend over a real gRPC stream: a scripted grpcio server on loopback (raw bytes, so
it can send what no generated stub would), the transceiver's real outbound track as the playout
(paced by the clock, as in a call), and what a backend may do wrong, each bounded to its own
call: a malformed message, an unknown one, audio in the codec the call did not accept, an
oversized message, audio far faster than real time, a flood of messages, silence forever, a
stream that ends or fails mid-call, a connection that stops answering keepalives."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytest.importorskip("grpc", reason="the grpc extra: pip install -e '.[grpc]'")

import grpc
import grpc.aio

from tests.support.certificates import self_signed
from tests.support.waits import run, wait_until
from transceiver.backend import BackendError, OpusFrame, SessionInfo, frame_bytes
from transceiver.backends import create_backend
from transceiver.backends.grpc import CallLimits
from transceiver.backends.grpc.backend import GrpcBackend, GrpcSession
from transceiver.backends.grpc.v1 import backend_pb2 as pb
from transceiver.call.outbound_track import BackendAudioTrack
from transceiver.call.session import CLEAR_AUDIO, HANGUP

OPUS_20MS = bytes([0xFC, 0xFF, 0xFE])  # TOC: CELT FB 20 ms, mono, one frame; then its bytes
Script = Callable[["Peer"], Awaitable[None]]


def message(**kind) -> bytes:
    return pb.FromBackend(**kind).SerializeToString()


def accept(encoding: int = pb.ENCODING_PCM16, rate: int = 48000) -> bytes:
    return message(
        accept=pb.SessionAccept(audio=pb.AudioFormat(encoding=encoding, sample_rate=rate))
    )


def pcm(frames: int, rate: int = 48000) -> bytes:
    return message(pcm16=pb.Pcm16(pcm=b"\x01\x02" * (frame_bytes(rate) // 2) * frames))


def event(obj: object) -> bytes:
    return message(event=pb.Event(json=json.dumps(obj)))


@dataclass
class Peer:
    """One call as the scripted backend sees it: what arrived, and how to answer."""

    context: grpc.aio.ServicerContext
    metadata: dict[str, str]
    received: list[pb.ToBackend] = field(default_factory=list)

    def kinds(self) -> list[str]:
        return [m.WhichOneof("kind") for m in self.received]

    @property
    def start(self) -> pb.SessionStart:
        return self.received[0].start

    async def send(self, data: bytes) -> None:
        await self.context.write(data)


@contextlib.asynccontextmanager
async def backend_server(
    script: Script, read: bool = True, tls: tuple[bytes, bytes] | None = None
) -> AsyncIterator[tuple[str, list[Peer]]]:
    """A backend on 127.0.0.1 running ``script`` per call once the start arrived (``read``:
    then reading on; otherwise never reading again); yields its URL and its calls."""
    peers: list[Peer] = []

    async def call(_requests: object, context: grpc.aio.ServicerContext) -> None:
        peer = Peer(context, dict(context.invocation_metadata()))
        peers.append(peer)
        peer.received.append(pb.ToBackend.FromString(await context.read()))

        async def reader() -> None:
            while (data := await context.read()) is not grpc.aio.EOF:
                peer.received.append(pb.ToBackend.FromString(data))

        task = asyncio.ensure_future(reader()) if read else None
        try:
            await script(peer)
            if task is not None:
                await task  # until the transceiver half-closes
            else:
                await asyncio.sleep(30)
        finally:
            if task is not None:
                task.cancel()

    server = grpc.aio.server()
    handler = grpc.stream_stream_rpc_method_handler(call)
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler("rtcedge.backend.v1.Backend", {"Call": handler})]
    )
    if tls is None:
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([tls]))
    await server.start()
    try:
        yield f"{'grpcs' if tls else 'grpc'}://127.0.0.1:{port}", peers
    finally:
        await server.stop(grace=None)


@dataclass
class Call:
    """One call's transceiver side: the backend session and the real outbound track it feeds,
    paced by a clock task as ``transceiver.call.outbound`` paces it."""

    session: GrpcSession
    track: BackendAudioTrack
    failures: list[str]
    events: list[dict]
    clock: asyncio.Task

    def speak(self, frames: int) -> None:
        for n in range(frames):
            if self.session.audio_format == "opus":
                self.session.opus_in(OpusFrame(OPUS_20MS, n, n * 960))
            else:
                self.session.audio_in(bytes(frame_bytes(self.session.sample_rate)))


async def open_call(backend: GrpcBackend, metadata: dict | None = None, **info) -> Call:
    track = BackendAudioTrack()
    failures: list[str] = []
    events: list[dict] = []
    hangups: list[str] = []

    def emit_event(event: dict) -> None:
        events.append(event)
        if event["type"] == CLEAR_AUDIO:
            track.clear()
        elif event["type"] == HANGUP:
            hangups.append("backend_hangup")

    def emit_audio(data: bytes) -> None:
        if session.audio_format == "opus":
            track.push_opus(data)
        else:
            track.push(data)

    session_info = SessionInfo(
        info.get("session_id", secrets.token_hex(16)),
        2,
        "127.0.0.1",
        metadata if metadata is not None else {"user_agent": "t"},
        resumed=info.get("resumed", False),
    )
    session = await backend.open_session(session_info, emit_audio, emit_event, failures.append)
    track.set_format(session.audio_format, session.sample_rate)
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


def backend_for(url: str, **options) -> GrpcBackend:
    backend = create_backend("grpc", url, **options)
    assert isinstance(backend, GrpcBackend)
    return backend


async def accepts(peer: Peer) -> None:
    await peer.send(accept())


def test_a_call_is_a_start_offering_every_format_then_audio_and_events_in_order_then_the_end():
    async def go() -> None:
        async with backend_server(accepts) as (url, peers):
            backend = backend_for(url, bearer="sk-backend")
            sid = secrets.token_hex(16)
            call = await open_call(backend, {"user_agent": "ua", "subject": "u1"}, session_id=sid)
            call.speak(3)
            call.session.event_in({"type": "hello", "n": 1})
            call.speak(2)
            peer = peers[0]
            assert await wait_until(lambda: len(peer.received) == 7, 5), peer.kinds()
            await hang_up(call)
            assert await wait_until(lambda: peer.kinds()[-1] == "end", 5), peer.kinds()
            await backend.close()
        assert peer.kinds() == ["start", *["pcm16"] * 3, "event", *["pcm16"] * 2, "end"]
        start = peer.start
        assert (start.session_id, start.transceiver_id, start.resumed) == (sid, 2, False)
        assert dict(start.metadata) == {"user_agent": "ua", "subject": "u1"}
        offered = [(f.encoding, f.sample_rate) for f in start.offered]
        assert offered == [(pb.ENCODING_PCM16, r) for r in (48000, 8000, 16000, 24000)] + [
            (pb.ENCODING_OPUS, 48000)
        ]
        assert json.loads(peer.received[4].event.json) == {"type": "hello", "n": 1}
        assert all(len(m.pcm16.pcm) == 1920 for m in peer.received if m.HasField("pcm16"))
        assert peer.received[-1].end.reason == "deleted"
        assert peer.metadata["rtcedge-session-id"] == sid
        assert peer.metadata["authorization"] == "Bearer sk-backend"
        assert call.failures == [] and call.session.state == "closed"

    run(go(), 30)


@pytest.mark.parametrize(
    ("encoding", "rate"),
    [(pb.ENCODING_PCM16, 8000), (pb.ENCODING_PCM16, 16000), (pb.ENCODING_PCM16, 24000),
     (pb.ENCODING_UNSPECIFIED, 0), (pb.ENCODING_OPUS, 48000)],
)  # fmt: skip
def test_the_backend_picks_the_format_and_audio_goes_both_ways_in_it(encoding, rate):
    opus = encoding == pb.ENCODING_OPUS

    async def answer(peer: Peer) -> None:
        await peer.send(accept(encoding, rate))
        if opus:
            for _ in range(5):
                await peer.send(message(opus=pb.OpusPacket(payload=OPUS_20MS)))
        else:
            await peer.send(pcm(5, rate or 48000))

    async def go() -> None:
        async with backend_server(answer) as (url, peers):
            backend = backend_for(url)
            call = await open_call(backend)
            assert call.session.audio_format == ("opus" if opus else "pcm16")
            assert call.session.sample_rate == (rate or 48000)
            call.speak(4)
            assert await wait_until(lambda: call.track.frames_out >= 5, 5)
            assert await wait_until(lambda: len(peers[0].received) == 5, 5)
            if not opus:
                with pytest.raises(ValueError, match="frame"):
                    call.session.audio_in(bytes(100))
            await hang_up(call)
            await backend.close()
        audio = peers[0].received[1:5]
        if opus:
            assert [(m.opus.payload, m.opus.sequence, m.opus.timestamp) for m in audio] == [
                (OPUS_20MS, n, n * 960) for n in range(4)
            ]
        else:
            assert {len(m.pcm16.pcm) for m in audio} == {frame_bytes(rate or 48000)}
        assert call.session.counters()["frames_out"] == 5

    run(go(), 30)


@pytest.mark.parametrize(
    ("name", "script", "match"),
    [
        ("a format not offered", lambda p: p.send(accept(pb.ENCODING_PCM16, 44100)), "not offered"),
        ("no accept first", lambda p: p.send(event({"type": "hi"})), "not accept"),
        ("garbage first", lambda p: p.send(b"\xff\xff\xff"), "not a FromBackend"),
        ("silence", lambda p: asyncio.sleep(30), "did not accept the call within"),
        ("an error", lambda p: p.context.abort(grpc.StatusCode.UNAUTHENTICATED, "no"),
         "UNAUTHENTICATED"),
    ],
)  # fmt: skip
def test_a_backend_that_does_not_accept_properly_refuses_the_call(name, script, match):
    async def go() -> None:
        async with backend_server(script) as (url, _peers):
            backend = backend_for(url, connect_timeout_s=1.0)
            with pytest.raises(BackendError, match=match):
                await open_call(backend)
            await backend.close()

    run(go(), 30)


def test_a_backend_that_aborts_at_the_headers_refuses_the_call_with_its_reason():
    """A server checking the key before it reads (our example, most interceptors): the reason
    is its status, or, when grpcio lost it to the racing write of our start, a reason that
    names the usual causes instead of grpcio's bare ``INTERNAL: Internal error from Core``."""

    async def go() -> None:
        async def call(_requests: object, context: grpc.aio.ServicerContext) -> None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "a bearer is required")

        server = grpc.aio.server()
        handler = grpc.stream_stream_rpc_method_handler(call)
        server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler("rtcedge.backend.v1.Backend", {"Call": handler})]
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            backend = backend_for(f"grpc://127.0.0.1:{port}", connect_timeout_s=2.0)
            for _ in range(5):
                with pytest.raises(BackendError, match=r"UNAUTHENTICATED|a refused key"):
                    await open_call(backend)
            await backend.close()
        finally:
            await server.stop(grace=None)

    run(go(), 30)


def test_a_status_grpcio_lost_to_a_racing_write_is_named_as_such():
    from transceiver.backends.grpc.backend import _error_text

    lost = grpc.aio.AioRpcError(
        grpc.StatusCode.INTERNAL,
        grpc.aio.Metadata(),
        grpc.aio.Metadata(),
        "Internal error from Core",
        'Failed "execute_batch": (<grpc._cython.cygrpc.SendMessageOperation object>,)',
    )
    assert "grpc/grpc#36066" in _error_text(lost) and "a refused key" in _error_text(lost)
    other = grpc.aio.AioRpcError(
        grpc.StatusCode.INTERNAL, grpc.aio.Metadata(), grpc.aio.Metadata(), "boom", "elsewhere"
    )
    assert _error_text(other) == "INTERNAL: boom"


def test_a_backend_that_is_not_there_refuses_the_call_at_once():
    async def go() -> None:
        backend = backend_for("grpc://127.0.0.1:9", connect_timeout_s=2.0)
        with pytest.raises(BackendError, match="cannot open a call"):
            await open_call(backend)
        await backend.close()

    run(go(), 30)


BAD = {
    "malformed": (b"\x0a\xff\xff\xff\xff", "protocol_errors"),
    "unknown": (b"\xba\x06\x02hi", "unknown_messages"),  # field 103: a newer peer's
    "empty": (b"", "unknown_messages"),
    "not whole frames": (message(pcm16=pb.Pcm16(pcm=bytes(1000))), "protocol_errors"),
    "wrong codec": (message(opus=pb.OpusPacket(payload=OPUS_20MS)), "wrong_codec"),
    "event not JSON": (message(event=pb.Event(json="{nope")), "protocol_errors"),
    "event not an object": (event([1, 2]), "protocol_errors"),
    "a second accept": (accept(), "protocol_errors"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_from_a_backend_is_dropped_counted_and_bounded_to_its_call(name):
    """Two calls to one backend; the second one's backend misbehaves: only its call counts it,
    and both go on hearing and being heard."""
    bad_message, counter = BAD[name]

    async def script(peer: Peer) -> None:
        await peer.send(accept())
        if peer.start.metadata["user_agent"] == "bad":
            await peer.send(bad_message)
        await peer.send(pcm(5))

    async def go() -> None:
        async with backend_server(script) as (url, peers):
            backend = backend_for(url)
            good = await open_call(backend, {"user_agent": "good"})
            bad = await open_call(backend, {"user_agent": "bad"})
            for call in (good, bad):
                assert await wait_until(lambda c=call: c.track.frames_out >= 5, 10), name
                call.speak(3)
            assert await wait_until(lambda: all(len(p.received) == 4 for p in peers), 5)
            assert bad.session.counters()[counter] == 1 and bad.failures == [], name
            assert good.session.counters()[counter] == 0
            assert good.session.state == bad.session.state == "open"
            assert backend.counters()[counter] == 1
            await hang_up(good, bad)
            await backend.close()
        assert backend.counters()[counter] == 1, "the ended calls' totals stay"

    run(go(), 30)


def test_past_max_protocol_errors_the_call_ends():
    async def script(peer: Peer) -> None:
        await peer.send(accept())
        for _ in range(6):
            await peer.send(b"\x0a\xff")

    async def go() -> None:
        async with backend_server(script) as (url, _peers):
            backend = backend_for(url, limits=CallLimits(max_protocol_errors=5))
            call = await open_call(backend)
            assert await wait_until(lambda: bool(call.failures), 5)
            assert "more than 5 bad messages" in (call.session.close_reason or "")
            await hang_up(call)
            await backend.close()

    run(go(), 30)


def test_an_oversized_message_ends_only_its_call():
    async def script(peer: Peer) -> None:
        await peer.send(accept())
        if peer.start.metadata["user_agent"] == "bad":
            await peer.send(pcm(1000))  # 1.9 MB: over the 1 MiB limit set below
        await peer.send(pcm(5))

    async def go() -> None:
        async with backend_server(script) as (url, _peers):
            backend = backend_for(url, max_message_bytes=1024 * 1024)
            good = await open_call(backend, {"user_agent": "good"})
            bad = await open_call(backend, {"user_agent": "bad"})
            assert await wait_until(lambda: bool(bad.failures), 10)
            assert "RESOURCE_EXHAUSTED" in (bad.session.close_reason or "")
            assert await wait_until(lambda: good.track.frames_out >= 5, 5)
            assert good.failures == [] and good.session.state == "open"
            await hang_up(good, bad)
            await backend.close()

    run(go(), 30)


def test_audio_far_faster_than_real_time_is_dropped_past_the_limit_and_counted():
    async def script(peer: Peer) -> None:
        await peer.send(accept())
        for _ in range(60):  # a minute of audio in a moment
            await peer.send(pcm(50))
        await peer.send(event({"type": "done"}))

    async def go() -> None:
        async with backend_server(script) as (url, _peers):
            backend = backend_for(url)
            call = await open_call(backend)
            assert await wait_until(lambda: bool(call.events), 10)
            counts = call.session.call.counts
            assert call.track.queued_frames() <= 1000, "20 s ahead at most"
            assert counts.frames_out + counts.frames_ahead_dropped == 3000
            assert counts.frames_ahead_dropped >= 3000 - 1000 - call.track.frames_out
            assert call.failures == [] and call.session.state == "open"
            await hang_up(call)
            await backend.close()

    run(go(), 30)


def test_a_flood_of_messages_is_read_at_the_budget_and_the_call_goes_on():
    async def script(peer: Peer) -> None:
        await peer.send(accept())
        for n in range(400):
            await peer.send(event({"type": "noise", "n": n}))

    async def go() -> None:
        async with backend_server(script) as (url, peers):
            backend = backend_for(url, messages_per_s=400.0, message_burst=100)
            call = await open_call(backend)
            call.speak(5)
            assert await wait_until(lambda: len(peers[0].received) == 6, 5), "heard meanwhile"
            assert await wait_until(lambda: len(call.events) == 400, 10)
            assert call.session.counters()["messages_paced"] >= 1
            assert [e["n"] for e in call.events] == list(range(400))
            assert call.failures == []
            await hang_up(call)
            await backend.close()

    run(go(), 30)


def test_clear_empties_the_playout_and_hangup_ends_the_call():
    async def script(peer: Peer) -> None:
        await peer.send(accept())
        await peer.send(pcm(100))  # 2 s at once
        await peer.send(message(clear=pb.AudioClear()))
        await peer.send(message(hangup=pb.Hangup(reason="goodbye")))

    async def go() -> None:
        async with backend_server(script) as (url, _peers):
            backend = backend_for(url)
            call = await open_call(backend)
            assert await wait_until(lambda: len(call.events) == 2, 5)
            assert [e["type"] for e in call.events] == [CLEAR_AUDIO, HANGUP]
            assert call.track.queued_frames() == 0
            counters = call.session.counters()
            assert counters["clears"] == 1 and counters["frames_cleared"] > 80
            await hang_up(call)
            await backend.close()

    run(go(), 30)


def test_a_backend_that_listens_silently_keeps_its_call_one_that_does_not_read_drops_frames():
    async def silent(peer: Peer) -> None:
        await peer.send(accept())

    async def go() -> None:
        async with backend_server(silent) as (url, peers):
            backend = backend_for(url, keepalive_s=0.2, keepalive_timeout_s=1.0)
            call = await open_call(backend)
            for _ in range(10):  # 1 s of the caller, none of the backend
                call.speak(5)
                await asyncio.sleep(0.1)
            assert await wait_until(lambda: len(peers[0].received) == 51, 5)
            assert call.failures == [] and call.session.state == "open"
            await hang_up(call)
            await backend.close()
        async with backend_server(silent, read=False) as (url, _peers):
            backend = backend_for(url)
            call = await open_call(backend)
            # 100 s of audio (9.6 MB) in 2 s: more than the backend's HTTP/2 window takes
            # (grpc-core grows it to about 4 MiB), then the outbox drops the oldest.
            for _ in range(100):
                call.speak(50)
                await asyncio.sleep(0.02)
            counters = call.session.counters()
            assert counters["frames_in"] == 5000 and counters["frames_dropped"] > 0, counters
            assert counters["frames_sent"] * 1920 < 8 * 1024 * 1024, counters
            assert len(call.session._outbox) <= 50
            assert call.failures == [] and call.session.state == "open"
            await hang_up(call)
            await backend.close()

    run(go(), 30)


@pytest.mark.parametrize(
    ("name", "end", "match"),
    [
        ("raises", RuntimeError("the model crashed"), "UNKNOWN"),
        ("aborts", grpc.StatusCode.INTERNAL, "INTERNAL"),
    ],
)
def test_a_backend_that_fails_mid_call_ends_only_that_call(name, end, match):
    async def script(peer: Peer) -> None:
        await peer.send(accept())
        await peer.send(pcm(2))
        if peer.start.metadata["user_agent"] != "bad":
            return
        await asyncio.sleep(0.2)
        if isinstance(end, Exception):
            raise end
        await peer.context.abort(end, "gone")

    async def go() -> None:
        async with backend_server(script) as (url, _peers):
            backend = backend_for(url)
            good = await open_call(backend, {"user_agent": "good"})
            bad = await open_call(backend, {"user_agent": "bad"})
            assert await wait_until(lambda: bool(bad.failures), 5), name
            assert match in (bad.session.close_reason or ""), bad.session.close_reason
            good.speak(2)
            await asyncio.sleep(0.2)
            assert good.failures == [] and good.session.state == "open"
            await hang_up(good, bad)
            await backend.close()

    run(go(), 30)


def test_a_backend_that_returns_mid_call_ends_that_call():
    async def go() -> None:
        server = grpc.aio.server()

        async def call(_requests: object, context: grpc.aio.ServicerContext) -> None:
            await context.read()
            await context.write(accept())  # and return: the stream ends, status OK

        handler = grpc.stream_stream_rpc_method_handler(call)
        server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler("rtcedge.backend.v1.Backend", {"Call": handler})]
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            backend = backend_for(f"grpc://127.0.0.1:{port}")
            bad = await open_call(backend)
            assert await wait_until(lambda: bool(bad.failures), 5)
            assert "ended the stream (OK" in (bad.session.close_reason or "")
            await hang_up(bad)
            await backend.close()
        finally:
            await server.stop(grace=None)

    run(go(), 30)


async def blackhole_proxy(target_port: int, stop_after_s: float) -> tuple[asyncio.Server, int]:
    """A TCP proxy to ``target_port`` that stops forwarding (both ways, the sockets held open)
    ``stop_after_s`` after each connection starts: a backend whose host vanished."""

    async def pipe(reader, writer, until: float) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                if time.monotonic() > until:
                    await asyncio.sleep(30)  # swallow: nothing goes through any more
                writer.write(data)

    async def handle(reader, writer) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target_port)
        until = time.monotonic() + stop_after_s
        with contextlib.suppress(asyncio.CancelledError):  # the test's loop ends: so do we
            await asyncio.gather(pipe(reader, up_writer, until), pipe(up_reader, writer, until))

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def test_a_connection_that_stops_answering_keepalives_ends_the_call():
    async def go() -> None:
        async with backend_server(accepts) as (url, _peers):
            proxy, port = await blackhole_proxy(int(url.rsplit(":", 1)[1]), 0.5)
            backend = backend_for(
                f"grpc://127.0.0.1:{port}", keepalive_s=0.3, keepalive_timeout_s=0.5
            )
            call = await open_call(backend)
            assert await wait_until(lambda: bool(call.failures), 10)
            assert "UNAVAILABLE" in (call.session.close_reason or ""), call.session.close_reason
            await hang_up(call)
            await backend.close()
            proxy.close()

    run(go(), 30)


def self_signed_files(tmp_path: Path) -> tuple[bytes, bytes, Path]:
    """A key and a certificate for 127.0.0.1 (PEM), and the certificate as a CA file."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    cert = self_signed(key, "backend", datetime.timedelta(hours=1), ip="127.0.0.1")
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    ca = tmp_path / "ca.pem"
    ca.write_bytes(cert_pem)
    return key_pem, cert_pem, ca


def test_tls_with_a_ca_file_and_a_bearer(tmp_path):
    key_pem, cert_pem, ca = self_signed_files(tmp_path)

    async def go() -> None:
        async with backend_server(accepts, tls=(key_pem, cert_pem)) as (url, peers):
            assert url.startswith("grpcs://")
            backend = backend_for(url, ca_file=str(ca), bearer="sk-1")
            call = await open_call(backend)
            call.speak(2)
            assert await wait_until(lambda: len(peers[0].received) == 3, 5)
            assert peers[0].metadata["authorization"] == "Bearer sk-1"
            await hang_up(call)
            await backend.close()
            system_cas = backend_for(url, connect_timeout_s=2.0)  # nobody there signs it
            with pytest.raises(BackendError):
                await open_call(system_cas)
            await system_cas.close()

    run(go(), 30)
