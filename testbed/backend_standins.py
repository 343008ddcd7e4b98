"""Stand-in backend servers for the backends benchmark: a beep a second, in each protocol.

The example voice agent's ``--stand-in beep`` is the Realtime one (``testbed.voice_agent``);
these are the same answer in the transceiver's other network protocols, so that a benchmark
times the transceiver, not a model:

- ``websocket``: our native protocol (docs/backend-protocol.md): PCM16 frames as binary
  messages, at the rate its subprotocol names (``rtcedge.pcm16.24000`` by default).
- ``media-streams``: Twilio's Media Streams (docs/media-streams.md): base64 8 kHz mu-law in
  JSON ``media`` messages, for the ``streamSid`` its ``start`` named.

Each answers, from the caller's first audio on, every ``PERIOD_S`` with ``BEEP_MS`` of 440 Hz
then silence, ``ANSWER_MS`` in all, in ``CHUNK_MS`` messages sent ``SPEED`` x ahead of real
time (what the agent's beep stand-in sends: ``BeepAnswers`` is its schedule, sans I/O). With
``--log-events FILE`` each audio message read or about to be written is a JSON line with the
wall-clock time, the call (its session id: the URL's ``session_id``, the ``callSid`` less
``CA``), the direction and the audio's peak, the agent's ``--log-events`` shape
(``bench.realtime_latency.agent_calls`` reads both). A key file makes it check the upgrade's
``Authorization: Bearer``, as a real backend would.

    python -m testbed.backend_standins --protocol websocket --listen 127.0.0.1:0
    (prints ``ready ws://127.0.0.1:PORT/`` once it listens)
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import contextlib
import json
import math
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from aiohttp import WSMsgType, web

from testbed.voice_agent import VoiceAgentProcess
from transceiver.backends.media_streams.g711 import pcm16_to_ulaw, ulaw_to_pcm16

PROTOCOLS = ("websocket", "media-streams")
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
class Call:
    """One call's state on a stand-in: its session, its answers, the task sending them."""

    ws: web.WebSocketResponse
    log: EventLog
    answers: BeepAnswers
    session: str = "?"
    started: asyncio.Event = field(default_factory=asyncio.Event)

    def heard(self, pcm: bytes) -> None:
        """The caller's audio, read (``t``: before decoding it)."""
        t = time.time()
        self.log.audio(self.session, "in", pcm, t)
        self.answers.start(t)
        self.started.set()

    async def serve(self, on_text: Callable[[Call, Any], None], on_binary: bool) -> None:
        """Read until the socket closes; the answers go out meanwhile."""
        task = asyncio.create_task(answer(self.answers, self.started, self._send))
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

    async def _send(self, pcm: bytes) -> None:
        raise NotImplementedError


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
    rate_hz: int = 24000  # websocket's PCM16 rate (media-streams: always 8000)
    key: str | None = None


def subprotocol(rate_hz: int) -> str:
    """The native protocol's subprotocol naming ``rate_hz`` (docs/backend-protocol.md)."""
    return "rtcedge.pcm16" if rate_hz == 48000 else f"rtcedge.pcm16.{rate_hz}"


def make_app(cfg: StandInConfig, log: EventLog) -> web.Application:
    """The stand-in's aiohttp application: every path takes a call."""
    if cfg.protocol not in PROTOCOLS:
        raise ValueError(f"--protocol must be one of {', '.join(PROTOCOLS)}, got {cfg.protocol!r}")
    if cfg.protocol == "websocket" and cfg.rate_hz not in NATIVE_RATES:
        raise ValueError(f"--rate must be one of {NATIVE_RATES}, got {cfg.rate_hz}")

    async def handle(request: web.Request) -> web.StreamResponse:
        if cfg.key is not None and request.headers.get("Authorization") != f"Bearer {cfg.key}":
            raise web.HTTPUnauthorized()
        if cfg.protocol == "websocket":
            ws = web.WebSocketResponse(protocols=(subprotocol(cfg.rate_hz),))
            await ws.prepare(request)
            call: Call = NativeCall(ws, log, BeepAnswers(cfg.rate_hz))
            call.session = request.query.get("session_id", "?")
            await call.serve(native_text, on_binary=True)
        else:
            ws = web.WebSocketResponse()
            await ws.prepare(request)
            call = MediaStreamsCall(ws, log, BeepAnswers(MEDIA_STREAMS_HZ))
            await call.serve(media_streams_text, on_binary=False)
        return ws

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handle)
    return app


async def serve(cfg: StandInConfig, host: str, port: int, log: EventLog) -> None:
    """Listen, print the ready line, serve until SIGTERM or SIGINT."""
    runner = web.AppRunner(make_app(cfg, log), handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = site._server.sockets[0].getsockname()  # type: ignore[union-attr]
    print(f"ready ws://{host}:{bound[1]}/", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", choices=PROTOCOLS, default="websocket")
    parser.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (0: a free port)")
    parser.add_argument("--rate", type=int, default=24000, help="websocket: the PCM16 rate")
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


if __name__ == "__main__":
    main()
