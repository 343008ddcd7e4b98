"""A Realtime-compatible voice agent that runs offline: the server side of OpenAI's Realtime API
over WebSocket, answering each spoken turn with "you said ..." in speech.

    python3 examples/voice_agent/agent.py --listen 127.0.0.1:8765 [--key-file F] \
        [--stand-in tone|beep] [--log-events FILE]

Clients connect to ``ws://HOST:PORT/v1/realtime?model=...`` (with ``Authorization: Bearer KEY``
when ``--key-file`` is given). This file is the I/O around ``conversation.Conversation``: the
WebSocket, the clock that paces the answer's audio, the worker threads where espeak-ng runs and
the process where pocketsphinx does. It prints ``ready ws://...`` once it accepts calls; SIGTERM
or Ctrl-C closes every call (WebSocket close 1001) and exits. See README.md beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import contextlib
import dataclasses
import hmac
import json
import logging
import secrets
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pcm
import realtime_events as rt
from aiohttp import WSCloseCode, WSMsgType, web
from conversation import STAND_INS, AgentConfig, Conversation, Recognize, SpeechEnd, Synthesize
from speech import OUTPUT_HZ, RecognitionProcess, Synthesizer, Timed, timed, transcribe
from turns import VoiceActivity

log = logging.getLogger("voice_agent")

PATH = "/v1/realtime"
MAX_MESSAGE_BYTES = 24 * 1024 * 1024  # a 15 MiB append is 20 MiB of base64: refused in-band
AUDIO_FIELDS = ("delta", "audio")  # base64 audio: logged as its size and its peak
# The ``--log-events`` lines of a turn's moments inside the agent (``dir`` ``turn``), in order;
# the first ``response.output_audio.delta`` line out of the response follows them.
TURN_MARKS = (
    "turn.speech_stopped",  # the voice activity detector declared the end of the turn
    "turn.recognition_started",  # pocketsphinx began on the turn's audio (its process)
    "turn.recognition_done",  # ... and returned its transcript
    "turn.synthesis_started",  # espeak-ng began on the answer (its thread)
    "turn.synthesis_audio",  # ... and gave its first audio (espeak-ng: all of it at once)
)


def summary(event: dict[str, Any]) -> dict[str, Any]:
    """What ``--log-events`` keeps of an event: its scalar fields, audio as a byte count and its
    largest sample (``_peak``: where a sound starts after silence, for the benchmarks), and the
    parts of nested objects the tests read (a response's status and metadata...)."""
    out: dict[str, Any] = {}
    for key, value in event.items():
        if key in AUDIO_FIELDS and isinstance(value, str):
            out[f"{key}_bytes"] = len(value) * 3 // 4 - value[-2:].count("=")
            with contextlib.suppress(binascii.Error, ValueError):
                out[f"{key}_peak"] = pcm.peak(base64.b64decode(value, validate=True))
        elif value is None or isinstance(value, str | int | float | bool):
            out[key] = value
        elif key == "response" and isinstance(value, dict):
            out[key] = {k: value.get(k) for k in ("id", "status", "status_details", "metadata")}
        elif key == "item" and isinstance(value, dict):
            out[key] = {k: value.get(k) for k in ("id", "role", "status")}
        elif key == "error":
            out[key] = value
    return out


class EventLog:
    """``--log-events``: one JSON line per event received or sent, with its wall-clock time
    (``t``): when the WebSocket handed the message over, or just before it was sent; and one
    per moment of a turn inside the agent (``dir`` ``turn``, ``TURN_MARKS``), which no event
    shows: where ``rtcedge bench turn`` splits the latency of a turn."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("a", buffering=1)

    def received(self, call: str, text: str, t: float) -> None:
        """``t``: ``time.time()`` when the message was read, before it was parsed."""
        try:
            event = json.loads(text)
        except ValueError:
            event = {"type": None, "invalid_json": True}
        self._write(call, "in", summary(event) if isinstance(event, dict) else {"type": None}, t)

    def sent(self, call: str, event: dict[str, Any], core: Conversation) -> None:
        t = time.time()
        line = summary(event)
        if event["type"] == "conversation.item.truncated":  # the transcript as cut
            line["transcript"] = core.transcript_of(event["item_id"])
        self._write(call, "out", line, t)

    def turn(self, call: str, mark: str, t: float, **fields: Any) -> None:
        """A moment of a turn (one of ``TURN_MARKS``) at wall time ``t``."""
        self._write(call, "turn", {"type": mark, **fields}, t)

    def speech_end(self, call: str, end: SpeechEnd) -> None:
        """The detector's decision; its times moved from the monotonic clock to the wall's."""
        offset = time.time() - time.monotonic()
        self.turn(
            call,
            "turn.speech_stopped",
            end.at + offset,
            item_id=end.item_id,
            speech_end_ms=end.speech_end_ms,
            detected_ms=end.detected_ms,
            last_voiced_t=end.last_voiced_at + offset,
        )

    def _write(self, call: str, direction: str, fields: dict[str, Any], t: float) -> None:
        line = {"t": t, "call": call, "dir": direction, **fields}
        self._file.write(json.dumps(line) + "\n")

    def close(self) -> None:
        self._file.close()


@dataclasses.dataclass
class Agent:
    """What every call shares: the answer's settings, the models, their threads and process."""

    config: AgentConfig
    key: str | None
    events: EventLog | None
    recognizer: RecognitionProcess | None  # one decoder, one utterance at a time
    synthesizer: Synthesizer | None
    tts_pool: ThreadPoolExecutor = dataclasses.field(
        default_factory=lambda: ThreadPoolExecutor(2, "tts")
    )
    calls: set[web.WebSocketResponse] = dataclasses.field(default_factory=set)


AGENT = web.AppKey("agent", Agent)


class Call:
    """One WebSocket: feeds its ``Conversation``, sends what it produces, runs its jobs."""

    def __init__(self, agent: Agent, ws: web.WebSocketResponse, model: str | None) -> None:
        self.agent = agent
        self.ws = ws
        self.tag = secrets.token_hex(4)
        config = dataclasses.replace(agent.config, model=model) if model else agent.config
        self.core = Conversation(config, self.tag, VoiceActivity())
        self._wake = asyncio.Event()  # the timer may have moved
        self._send_lock = asyncio.Lock()  # one writer at a time, events in order
        self._tasks: set[asyncio.Task] = set()

    async def run(self) -> None:
        self.core.start(time.monotonic())
        await self.flush()
        clock = asyncio.create_task(self._clock())
        try:
            async for message in self.ws:
                now, wall = time.monotonic(), time.time()
                if message.type is WSMsgType.TEXT:
                    if self.agent.events:
                        self.agent.events.received(self.tag, message.data, wall)
                    self.core.receive(message.data, now)
                elif message.type is WSMsgType.BINARY:
                    self.core.receive_binary(now)
                else:
                    break
                await self.flush()
        finally:
            clock.cancel()
            for task in self._tasks:
                task.cancel()

    async def flush(self, wake: bool = True) -> None:
        """Send the conversation's events and start the jobs it asked for."""
        events = self.core.events_to_send()
        for end in self.core.speech_ends_to_log():
            if self.agent.events:
                self.agent.events.speech_end(self.tag, end)
        for job in self.core.jobs_to_run():
            task = asyncio.create_task(self._run_job(job))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if events:
            async with self._send_lock:
                for event in events:
                    data = rt.wire(event)
                    if self.agent.events:
                        self.agent.events.sent(self.tag, data, self.core)
                    with contextlib.suppress(ConnectionError):  # closing: the reader ends
                        await self.ws.send_str(json.dumps(data))
        if wake:
            self._wake.set()

    async def _clock(self) -> None:
        """Sends the answer's audio when ``get_timer`` says, paced ahead of real time."""
        while True:
            deadline = self.core.get_timer()
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
            self._wake.clear()
            self.core.handle_timer(time.monotonic())
            await self.flush(wake=False)

    async def _run_job(self, job: Recognize | Synthesize) -> None:
        if isinstance(job, Recognize):
            done = await self._work(job, "recognition", item_id=job.item_id)
            transcript = done.result if done is not None else ""
            if done is not None and self.agent.events:
                self.agent.events.turn(
                    self.tag, "turn.recognition_done", done.ended_t, item_id=job.item_id,
                    transcript=transcript,
                )  # fmt: skip
            ms = done.ms if done is not None else 0.0
            self.core.recognized(job.item_id, transcript, ms, time.monotonic())
        else:
            done = await self._work(
                job, "synthesis", response_id=job.response_id, item_id=job.item_id
            )
            audio = done.result if done is not None else b""
            if done is not None and self.agent.events:
                self.agent.events.turn(
                    self.tag, "turn.synthesis_audio", done.ended_t, response_id=job.response_id,
                    item_id=job.item_id, audio_ms=pcm.duration_ms(audio, OUTPUT_HZ),
                )  # fmt: skip
            ms = done.ms if done is not None else 0.0
            self.core.synthesized(job.response_id, audio, ms, time.monotonic())
        await self.flush()

    async def _work(self, job: Recognize | Synthesize, stage: str, **ids: Any) -> Timed | None:
        """The job in its pool's thread, its start logged (``turn.<stage>_started``, the time
        the thread took it up); None if it failed (logged)."""
        agent = self.agent
        if isinstance(job, Recognize):
            assert agent.recognizer is not None
            pool, work, argument = agent.recognizer, transcribe, job.audio
        else:
            assert agent.synthesizer is not None
            pool, work, argument = agent.tts_pool, agent.synthesizer.speak, job.text
        try:
            done = await asyncio.get_running_loop().run_in_executor(pool, timed, work, argument)
        except Exception:
            log.exception("call %s: %s failed", self.tag, stage)
            return None
        if agent.events:
            agent.events.turn(self.tag, f"turn.{stage}_started", done.started_t, **ids)
        return done


def authorized(header: str, key: str) -> bool:
    """``Authorization: Bearer KEY``, compared in constant time."""
    return hmac.compare_digest(header.encode(), f"Bearer {key}".encode())


async def realtime(request: web.Request) -> web.StreamResponse:
    """``GET /v1/realtime?model=...``: one call, for as long as the WebSocket lives."""
    agent = request.app[AGENT]
    if agent.key is not None and not authorized(
        request.headers.get("Authorization", ""), agent.key
    ):
        error = {"type": "invalid_request_error", "code": "invalid_api_key"}
        error["message"] = "Missing or wrong bearer key."
        return web.json_response({"error": error}, status=401)
    ws = web.WebSocketResponse(max_msg_size=MAX_MESSAGE_BYTES, protocols=("realtime",))
    await ws.prepare(request)
    call = Call(agent, ws, request.query.get("model"))
    agent.calls.add(ws)
    log.info("call %s: connected from %s", call.tag, request.remote)
    try:
        await call.run()
    finally:
        agent.calls.discard(ws)
        log.info("call %s: closed", call.tag)
    return ws


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[IPv6]:PORT``; port 0 picks a free one (the ready line names it)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"--listen wants HOST:PORT, not {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def read_key(path: Path) -> str:
    key = path.read_text().strip()
    if not key:
        raise SystemExit(f"--key-file {path}: empty")
    return key


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--listen",
        type=parse_listen,
        default="127.0.0.1:8765",
        metavar="HOST:PORT",
        help="where to accept WebSockets (default %(default)s)",
    )
    parser.add_argument(
        "--key-file",
        type=Path,
        help="a file holding the bearer key clients must send (not the key)",
    )
    parser.add_argument(
        "--stand-in",
        choices=STAND_INS,
        help="no ASR/TTS: tone answers every turn at once with 1 s of 440 Hz; beep answers "
        "every second from the caller's first audio on, turns or not, with 100 ms of 440 Hz "
        "then 800 ms of silence (transport benchmarks)",
    )
    parser.add_argument(
        "--log-events",
        type=Path,
        metavar="FILE",
        help="append every event received and sent as JSON lines",
    )
    parser.add_argument(
        "--chunk-ms",
        type=int,
        default=AgentConfig.chunk_ms,
        help="audio per response.output_audio.delta (default %(default)s)",
    )
    parser.add_argument(
        "--speed",
        type=float,
        default=AgentConfig.speed,
        help="answer audio sent per second, in seconds (default %(default)s)",
    )
    args = parser.parse_args(argv)
    if not 10 <= args.chunk_ms <= 1000 or args.chunk_ms % 10:
        parser.error("--chunk-ms: a multiple of 10 between 10 and 1000")
    if args.speed <= 0:
        parser.error("--speed must be positive")
    return args


async def serve(args: argparse.Namespace) -> None:
    stand_in = args.stand_in is not None
    agent = Agent(
        config=AgentConfig(stand_in=args.stand_in, chunk_ms=args.chunk_ms, speed=args.speed),
        key=read_key(args.key_file) if args.key_file else None,
        events=EventLog(args.log_events) if args.log_events else None,
        recognizer=None if stand_in else RecognitionProcess(),  # loaded before "ready"
        synthesizer=None if stand_in else Synthesizer(),
    )
    app = web.Application()
    app[AGENT] = agent
    app.router.add_get(PATH, realtime)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    host, port = args.listen
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound_port = runner.addresses[0][1]
    shown = f"[{host}]" if ":" in host else host
    print(f"ready ws://{shown}:{bound_port}{PATH}", flush=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    for ws in list(agent.calls):
        await ws.close(code=WSCloseCode.GOING_AWAY, message=b"agent stopping")
    await runner.cleanup()
    if agent.recognizer is not None:
        agent.recognizer.shutdown(wait=False, cancel_futures=True)
    agent.tts_pool.shutdown(wait=False, cancel_futures=True)
    if agent.events:
        agent.events.close()


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
    asyncio.run(serve(arguments(argv)))


if __name__ == "__main__":
    main()
