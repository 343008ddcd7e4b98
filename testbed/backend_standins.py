"""Stand-in backend servers for the backends benchmark: a beep a second, in each protocol.

The example voice agent's ``--stand-in beep`` is the Realtime one (``testbed.voice_agent``);
these are the same answer in the transceiver's other network protocols, so that a benchmark
times the transceiver, not a model:

- ``websocket``: our native protocol (docs/backend-protocol.md): PCM16 frames as binary
  messages, at the rate its subprotocol names (``rtcedge.pcm16.24000`` by default).
- ``media-streams``: Twilio's Media Streams (docs/media-streams.md): base64 8 kHz mu-law in
  JSON ``media`` messages, for the ``streamSid`` its ``start`` named.
- ``grpc``: our protocol over gRPC (docs/backend-protocol.md, "The gRPC protocol"): one
  ``Call`` stream per call, each accepted in pcm16 at ``--rate`` (24000 by default), ``Pcm16``
  messages both ways (grpcio's asyncio server, raw bytes parsed here as the transceiver does).

Each answers, from the caller's first audio on, every ``PERIOD_S`` with ``BEEP_MS`` of 440 Hz
then silence, ``ANSWER_MS`` in all, in ``CHUNK_MS`` messages sent ``SPEED`` x ahead of real
time (what the agent's beep stand-in sends: ``BeepAnswers`` is its schedule, sans I/O). With
``--log-events FILE`` each audio message read or about to be written is a JSON line with the
wall-clock time, the call (its session id: the URL's ``session_id``, the ``callSid`` less
``CA``, the ``SessionStart``'s ``session_id``), the direction and the audio's peak, the agent's
``--log-events`` shape (``bench.realtime_latency.agent_calls`` reads both). A key file makes it
check the upgrade's ``Authorization: Bearer`` (gRPC: the stream's ``authorization`` metadata,
refused UNAUTHENTICATED), as a real backend would.

    python -m testbed.backend_standins --protocol websocket --listen 127.0.0.1:0
    (prints ``ready ws://127.0.0.1:PORT/`` once it listens; grpc: ``ready grpc://HOST:PORT``)
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import contextlib
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from aiohttp import WSMsgType, web

from testbed.voice_agent import READY_TIMEOUT_S, VoiceAgentProcess
from transceiver.backends.media_streams.g711 import pcm16_to_ulaw, ulaw_to_pcm16

PROTOCOLS = ("websocket", "media-streams", "grpc")
PERIOD_S, BEEP_MS, ANSWER_MS, CHUNK_MS, SPEED = 1.0, 100, 900, 100, 4.0
TONE_HZ, AMPLITUDE = 440.0, 0.3
MEDIA_STREAMS_HZ = 8000
NATIVE_RATES = (8000, 16000, 24000, 48000)


def tone(rate_hz: int, ms: int) -> bytes:
    t = np.arange(rate_hz * ms // 1000) / rate_hz
    return (np.sin(2 * np.pi * TONE_HZ * t) * AMPLITUDE * 32767).astype("<i2").tobytes()


def peak(pcm: bytes) -> int:
    """The largest absolute PCM16 sample (0 for none)."""
    samples = np.frombuffer(pcm[: len(pcm) - len(pcm) % 2], dtype="<i2")
    return int(np.abs(samples.astype(np.int32)).max(initial=0))


@dataclass
class BeepAnswers:
    """When each chunk of the answers is due, from ``start`` (the caller's first audio) on:
    answer j's chunk k at start + j * PERIOD_S + k * CHUNK_MS / SPEED. What is left of an
    answer when the next one's period began is skipped (a stalled timer), as the agent does."""

    rate_hz: int
    started_at: float | None = None
    sent: int = 0  # chunks handed out, all answers counted
    chunks: list[bytes] = field(default_factory=list)

    def __post_init__(self) -> None:
        beep = tone(self.rate_hz, BEEP_MS).ljust(self.rate_hz * ANSWER_MS // 1000 * 2, b"\0")
        size = self.rate_hz * CHUNK_MS // 1000 * 2
        self.chunks = [beep[i : i + size] for i in range(0, len(beep), size)]

    def start(self, now: float) -> None:
        if self.started_at is None:
            self.started_at = now

    def due_at(self) -> float | None:
        if self.started_at is None:
            return None
        answer, chunk = divmod(self.sent, len(self.chunks))
        return self.started_at + answer * PERIOD_S + chunk * CHUNK_MS / 1000 / SPEED

    def take(self, now: float) -> list[bytes]:
        """The chunks due by ``now`` (PCM16), in order."""
        if self.started_at is None:
            return []
        current = math.floor((now - self.started_at) / PERIOD_S)
        if self.sent // len(self.chunks) < current:  # a whole period late: skip to the current
            self.sent = current * len(self.chunks)
        out = []
        while (due := self.due_at()) is not None and due <= now:
            out.append(self.chunks[self.sent % len(self.chunks)])
            self.sent += 1
        return out


class EventLog:
    """``--log-events``: a line per audio message, the agent's shape."""

    def __init__(self, file: TextIO | None) -> None:
        self.file = file

    def audio(self, call: str, direction: str, pcm: bytes, t: float | None = None) -> None:
        if self.file is not None:
            line = {"t": time.time() if t is None else t, "call": call, "dir": direction,
                    "type": "audio", "audio_peak": peak(pcm)}  # fmt: skip
            self.file.write(json.dumps(line) + "\n")


Send = Callable[[bytes], Awaitable[None]]


async def answer(answers: BeepAnswers, started: asyncio.Event, send: Send) -> None:
    """Send the answers' chunks as they fall due, until cancelled (the call's end)."""
    await started.wait()
    while True:
        for pcm in answers.take(time.time()):
            await send(pcm)
        due = answers.due_at()
        await asyncio.sleep(max(0.0, (due or 0.0) - time.time()))


@dataclass
class Answering:
    """One call's state on a stand-in, whatever carries it: its session, its answers."""

    log: EventLog
    answers: BeepAnswers
    session: str = "?"
    started: asyncio.Event = field(default_factory=asyncio.Event)

    def heard(self, pcm: bytes, t: float | None = None) -> None:
        """The caller's audio, read (``t``: before decoding it)."""
        t = time.time() if t is None else t
        self.log.audio(self.session, "in", pcm, t)
        self.answers.start(t)
        self.started.set()

    def answering(self) -> asyncio.Task[None]:
        """The task sending the answers, from the first audio heard until cancelled."""
        return asyncio.create_task(answer(self.answers, self.started, self._send))

    async def _send(self, pcm: bytes) -> None:
        raise NotImplementedError


@dataclass
class Call(Answering):
    """A call on a WebSocket stand-in."""

    ws: web.WebSocketResponse = field(kw_only=True)

    async def serve(self, on_text: Callable[[Call, Any], None], on_binary: bool) -> None:
        """Read until the socket closes; the answers go out meanwhile."""
        task = self.answering()
        try:
            async for msg in self.ws:
                if msg.type is WSMsgType.BINARY and on_binary:
                    self.heard(msg.data)
                elif msg.type is WSMsgType.TEXT:
                    with contextlib.suppress(ValueError):
                        on_text(self, json.loads(msg.data))
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class NativeCall(Call):
    async def _send(self, pcm: bytes) -> None:
        self.log.audio(self.session, "out", pcm)
        await self.ws.send_bytes(pcm)


def native_text(call: Call, event: Any) -> None:
    if isinstance(event, dict) and event.get("type") == "session.start":
        call.session = str(event.get("session_id", call.session))


class MediaStreamsCall(Call):
    stream_sid: str = ""

    async def _send(self, pcm: bytes) -> None:
        payload = base64.b64encode(pcm16_to_ulaw(pcm)).decode()
        self.log.audio(self.session, "out", pcm)
        await self.ws.send_str(
            json.dumps(
                {"event": "media", "streamSid": self.stream_sid, "media": {"payload": payload}}
            )
        )


def media_streams_text(call: Call, event: Any) -> None:
    if not isinstance(event, dict):
        return
    assert isinstance(call, MediaStreamsCall)
    kind = event.get("event")
    if kind == "start":
        call.stream_sid = str(event.get("streamSid", ""))
        call.session = str((event.get("start") or {}).get("callSid", "CA?"))[2:]
    elif kind == "media":
        with contextlib.suppress(binascii.Error, ValueError, TypeError, AttributeError):
            call.heard(ulaw_to_pcm16(base64.b64decode(event["media"]["payload"], validate=True)))


@dataclass(frozen=True)
class StandInConfig:
    protocol: str = "websocket"
    rate_hz: int = 24000  # websocket's and grpc's PCM16 rate (media-streams: always 8000)
    key: str | None = None


def subprotocol(rate_hz: int) -> str:
    """The native protocol's subprotocol naming ``rate_hz`` (docs/backend-protocol.md)."""
    return "rtcedge.pcm16" if rate_hz == 48000 else f"rtcedge.pcm16.{rate_hz}"


def make_app(cfg: StandInConfig, log: EventLog) -> web.Application:
    """The stand-in's aiohttp application: every path takes a call."""
    if cfg.protocol not in PROTOCOLS:
        raise ValueError(f"--protocol must be one of {', '.join(PROTOCOLS)}, got {cfg.protocol!r}")
    if cfg.protocol in ("websocket", "grpc") and cfg.rate_hz not in NATIVE_RATES:
        raise ValueError(f"--rate must be one of {NATIVE_RATES}, got {cfg.rate_hz}")

    async def handle(request: web.Request) -> web.StreamResponse:
        if cfg.key is not None and request.headers.get("Authorization") != f"Bearer {cfg.key}":
            raise web.HTTPUnauthorized()
        if cfg.protocol == "websocket":
            ws = web.WebSocketResponse(protocols=(subprotocol(cfg.rate_hz),))
            await ws.prepare(request)
            call: Call = NativeCall(log, BeepAnswers(cfg.rate_hz), ws=ws)
            call.session = request.query.get("session_id", "?")
            await call.serve(native_text, on_binary=True)
        else:
            ws = web.WebSocketResponse()
            await ws.prepare(request)
            call = MediaStreamsCall(log, BeepAnswers(MEDIA_STREAMS_HZ), ws=ws)
            await call.serve(media_streams_text, on_binary=False)
        return ws

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handle)
    return app


async def serve(cfg: StandInConfig, host: str, port: int, log: EventLog) -> None:
    """Listen, print the ready line, serve until SIGTERM or SIGINT."""
    if cfg.protocol == "grpc":
        await serve_grpc(cfg, host, port, log)
        return
    runner = web.AppRunner(make_app(cfg, log), handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = site._server.sockets[0].getsockname()  # type: ignore[union-attr]
    print(f"ready ws://{host}:{bound[1]}/", flush=True)
    await stopped()
    await runner.cleanup()


async def stopped() -> None:
    """Return at SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


# -- gRPC --------------------------------------------------------------------------------------
# The transceiver PINGs every 20 s while a call is up (docs/backend-protocol.md, "Keepalives");
# grpc-core's server takes one per 5 min by default without data, then GOAWAYs "too many pings"
# (examples/grpc_backend/server.py's options).
GRPC_SERVER_OPTIONS = [
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 0),
]


@dataclass
class GrpcCall(Answering):
    """A call on the gRPC stand-in: one ``Call`` stream, raw bytes both ways (no serializer on
    the method, as the transceiver's: a message is timed before it is parsed)."""

    context: Any = field(kw_only=True)  # grpc.aio.ServicerContext
    pb: Any = field(kw_only=True)  # transceiver.backends.grpc.v1.backend_pb2
    bad_messages: int = 0  # what did not parse as a ToBackend: dropped

    async def serve(self, requests: Any, rate_hz: int) -> None:
        """Accept the start in pcm16 at ``rate_hz``, then read until the stream ends; the
        answers go out meanwhile."""
        import grpc
        from google.protobuf.message import DecodeError

        pb = self.pb
        first = await anext(aiter(requests), None)
        try:
            start = pb.ToBackend.FromString(first or b"")
        except DecodeError:
            start = pb.ToBackend()
        if start.WhichOneof("kind") != "start":
            await self.context.abort(grpc.StatusCode.INVALID_ARGUMENT, "first: a SessionStart")
        wanted = pb.AudioFormat(encoding=pb.ENCODING_PCM16, sample_rate=rate_hz)
        if wanted not in start.start.offered:
            await self.context.abort(
                grpc.StatusCode.FAILED_PRECONDITION, f"pcm16 at {rate_hz} Hz was not offered"
            )
        self.session = start.start.session_id or "?"
        accept = pb.FromBackend(accept=pb.SessionAccept(audio=wanted))
        await self.context.write(accept.SerializeToString())
        task = self.answering()
        try:
            async for data in requests:
                t = time.time()
                try:
                    message = pb.ToBackend.FromString(data)
                except DecodeError:
                    self.bad_messages += 1
                    continue
                kind = message.WhichOneof("kind")
                if kind == "pcm16":
                    self.heard(message.pcm16.pcm, t)
                elif kind == "end":
                    break
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _send(self, pcm: bytes) -> None:
        data = self.pb.FromBackend(pcm16=self.pb.Pcm16(pcm=pcm)).SerializeToString()
        self.log.audio(self.session, "out", pcm)
        await self.context.write(data)


def grpc_handler(cfg: StandInConfig, log: EventLog) -> Any:
    """The ``rtcedge.backend.v1.Backend`` service on raw bytes: each ``Call`` a beep a second,
    the bearer checked first."""
    import grpc

    from transceiver.backends.grpc.v1 import backend_pb2 as pb

    async def call(requests: Any, context: Any) -> None:
        if cfg.key is not None and dict(context.invocation_metadata()).get("authorization") != (
            f"Bearer {cfg.key}"
        ):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "a bearer is required")
        await GrpcCall(log, BeepAnswers(cfg.rate_hz), context=context, pb=pb).serve(
            requests, cfg.rate_hz
        )

    method = grpc.stream_stream_rpc_method_handler(call)  # no (de)serializers: bytes
    return grpc.method_handlers_generic_handler("rtcedge.backend.v1.Backend", {"Call": method})


async def serve_grpc(cfg: StandInConfig, host: str, port: int, log: EventLog) -> None:
    """The gRPC stand-in: cleartext HTTP/2 (``grpc://``), until SIGTERM or SIGINT."""
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # grpc-core's INFO lines on stderr
    import grpc.aio

    server = grpc.aio.server(options=GRPC_SERVER_OPTIONS)
    server.add_generic_rpc_handlers((grpc_handler(cfg, log),))
    bound = server.add_insecure_port(f"{host}:{port}")
    await server.start()
    print(f"ready grpc://{host}:{bound}", flush=True)
    await stopped()
    await server.stop(grace=1.0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", choices=PROTOCOLS, default="websocket")
    parser.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (0: a free port)")
    parser.add_argument("--rate", type=int, default=24000, help="websocket, grpc: the PCM16 rate")
    parser.add_argument("--key-file", type=Path, help="check Authorization: Bearer <its text>")
    parser.add_argument("--log-events", type=Path, help="a JSON line per audio message")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    key = args.key_file.read_text().strip() if args.key_file else None
    cfg = StandInConfig(args.protocol, args.rate, key)
    with contextlib.ExitStack() as stack:
        file = (
            stack.enter_context(args.log_events.open("a", buffering=1)) if args.log_events else None
        )
        try:
            asyncio.run(serve(cfg, host, int(port), EventLog(file)))
        except ValueError as exc:
            sys.exit(f"backend_standins: {exc}")


@dataclass
class StandInProcess(VoiceAgentProcess):
    """This module as a child process (``python -m testbed.backend_standins``), started and
    stopped as the voice agent is: its key in a file, its port in its ready line."""

    protocol: str = "websocket"
    label: str = "the stand-in backend"

    def command(self, key_file: str) -> list[str]:
        return [sys.executable, "-m", "testbed.backend_standins", "--protocol", self.protocol,
                "--listen", f"{self.host}:0", "--key-file", key_file, *self.extra_args]  # fmt: skip

    # VoiceAgentProcess.start takes a ``ready ws://`` line; the gRPC stand-in's URL is
    # ``grpc://``: read as the one, then given back its own scheme.
    def _first_line(self, timeout_s: float, stop: threading.Event) -> str:
        line = super()._first_line(timeout_s, stop)
        return line.replace("ready grpc://", "ready ws://", 1) if self.protocol == "grpc" else line

    def start(
        self, timeout_s: float = READY_TIMEOUT_S, stop: threading.Event | None = None
    ) -> StandInProcess:
        super().start(timeout_s, stop)
        if self.protocol == "grpc":
            self.url = "grpc://" + self.url.removeprefix("ws://")
        return self


if __name__ == "__main__":
    main()
