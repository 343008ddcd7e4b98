"""The ``media-streams`` backend: each call is one WebSocket to a telephony bot, Twilio's protocol.

The decisions are ``protocol.MediaStream``'s; this module only moves bytes, with aiohttp (as the
``websocket`` backend). Nothing here waits on the bot in the caller's path: ``audio_in`` appends
a ``media`` message to a bounded outbox (oldest dropped, counted) that one sender task drains,
our own messages (mark echoes) going first; one receiver task hands the bot's messages to the
stream and carries out what it says. A timer wakes when the oldest pending mark may be due.

What a bot can do wrong is bounded per call: a message over ``max_message_bytes`` or a
WebSocket that breaks or stops answering pings ends the call; malformed messages and unknown
events are dropped and counted (the stream ends the call past ``max_protocol_errors``); audio
sent too far ahead is dropped past ``max_playout_frames``; more than ``message_burst`` messages
at once, then ``messages_per_s``, and the receiver waits (the socket then pushes back on the
bot). A bot that sends nothing is a bot that listens: the call goes on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import secrets
import ssl
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import aiohttp

from transceiver.backend import PCM16, Backend, BackendError, BackendSession, SessionInfo
from transceiver.backends.endpoint import check_ws_url, ws_ssl_context
from transceiver.backends.failure import FailsOnce, cancel_others
from transceiver.backends.media_streams.protocol import (
    FRAME_BYTES,
    SAMPLE_RATE,
    MediaStream,
    Problem,
    StreamLimits,
    ToBot,
    call_sid,
)
from transceiver.backends.realtime.backend import CLEAR_AUDIO
from transceiver.backends.realtime.conversation import AudioOut, Clear, End
from transceiver.backends.realtime.policy import CallerEventBudget
from transceiver.backends.tally import SessionTally
from transceiver.backends.websocket import (
    abort_websocket,
    calls_client,
    close_websocket,
    connect_failure,
    websocket_transport,
)

__all__ = ["MediaStreamsBackend", "MediaStreamsBackendConfig", "MediaStreamsSession"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MediaStreamsBackendConfig:
    """Everything the media-streams backend needs; validated once, at start."""

    url: str  # ws(s)://: the bot's Media Streams endpoint, as a TwiML <Stream url=...> names it
    bearer: str | None = field(default=None, repr=False)  # sent as Authorization: Bearer
    ca_file: str | None = None  # wss: the CA bundle that signs the bot (default: the system's)
    connect_timeout_s: float = 5.0  # TCP + TLS + upgrade + connected and start
    heartbeat_s: float = 15.0  # WebSocket ping interval; no pong within it ends the call
    close_timeout_s: float = 2.0  # bound on stop + the closing handshake
    max_message_bytes: int = 1024 * 1024  # largest bot message; bigger ends the call (1009)
    max_queued_frames: int = 50  # caller media waiting for the socket (1 s); oldest dropped
    messages_per_s: float = 250.0  # bot messages read per second past the burst
    message_burst: int = 500
    limits: StreamLimits = field(default_factory=StreamLimits)

    def __post_init__(self) -> None:
        check_ws_url(self.url, self.ca_file)
        for name in ("connect_timeout_s", "heartbeat_s", "close_timeout_s", "messages_per_s"):
            value = getattr(self, name)
            if not value > 0 or not math.isfinite(value):
                raise ValueError(f"backend option {name} must be a number > 0, got {value!r}")
        for name in ("max_message_bytes", "max_queued_frames", "message_burst"):
            if not getattr(self, name) >= 1:
                raise ValueError(f"backend option {name} must be >= 1")

    def ssl_context(self) -> ssl.SSLContext | None:
        return ws_ssl_context(self.url, self.ca_file)


class MediaStreamsSession(FailsOnce, BackendSession):
    """One call over one Media Streams WebSocket.

    Counters (``counters``, logged at the end): the stream's (``protocol.StreamCounts``), and
    ``media_dropped`` caller frames the outbox dropped because the bot did not read,
    ``caller_events_ignored`` data-channel events (the protocol has no place for them),
    ``messages_paced`` times the receiver waited for the bot's message budget.
    """

    backend_label = "media-streams"

    audio_format = PCM16
    sample_rate = SAMPLE_RATE  # libopus decodes the caller to 8 kHz and encodes from it

    def __init__(
        self,
        info: SessionInfo,
        ws: aiohttp.ClientWebSocketResponse,
        stream: MediaStream,
        config: MediaStreamsBackendConfig,
        emit_audio: Callable[[bytes], None],
        emit_event: Callable[[dict], None],
        on_failure: Callable[[str], None],
        on_closed: Callable[[MediaStreamsSession], None],
    ) -> None:
        self.info = info
        self.stream = stream
        self.state = "open"
        self.close_reason: str | None = None
        self.media_dropped = 0
        self.caller_events_ignored = 0
        self.messages_paced = 0
        self._ws = ws
        self._transport = websocket_transport(ws)
        self._config = config
        self._emit_audio = emit_audio
        self._emit_event = emit_event
        self._on_failure = on_failure
        self._on_closed = on_closed
        self._queued: Callable[[], int] = _nothing_queued
        self._media: deque[str] = deque(maxlen=config.max_queued_frames)
        self._control: deque[str] = deque()  # mark echoes: bounded by the pending marks
        self._ready = asyncio.Event()
        self._budget = CallerEventBudget(config.messages_per_s, config.message_burst)
        self._timer: asyncio.TimerHandle | None = None
        self._problems = 0
        self._closing: asyncio.Future[None] | None = None
        tag = info.session_id[:8]
        self._sender = asyncio.create_task(self._send_loop(), name=f"media-streams-send-{tag}")
        self._receiver = asyncio.create_task(self._receive_loop(), name=f"media-streams-recv-{tag}")

    def counters(self) -> dict[str, int]:
        """What this call did so far: its stream's counts and the outbox's drops."""
        return {
            **dataclasses.asdict(self.stream.counts),
            "media_dropped": self.media_dropped,
            "caller_events_ignored": self.caller_events_ignored,
            "messages_paced": self.messages_paced,
        }

    # -- toward the bot (the transceiver calls these; they never block) -----------------------
    def attach_playout(self, queued: Callable[[], int]) -> None:
        self._queued = queued

    def audio_in(self, pcm: bytes) -> None:
        if len(pcm) != FRAME_BYTES:
            raise ValueError(f"audio_in takes one {FRAME_BYTES}-byte frame, got {len(pcm)} bytes")
        if self.state != "open":
            return
        if len(self._media) == self._media.maxlen:
            self.media_dropped += 1
        self._media.append(self.stream.caller_audio(pcm, time.monotonic()))
        self._ready.set()

    def event_in(self, event: dict) -> None:
        """Media Streams carry no caller events (Twilio's DTMF comes from a phone's keypad)."""
        self.caller_events_ignored += 1

    async def _send_loop(self) -> None:
        ws, media, control = self._ws, self._media, self._control
        try:
            while True:
                if control:
                    await ws.send_str(control.popleft())
                elif media:
                    await ws.send_str(media.popleft())
                else:
                    self._ready.clear()
                    await self._ready.wait()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fail(f"bot connection: {exc!r}")

    # -- from the bot ---------------------------------------------------------------------------
    async def _receive_loop(self) -> None:
        ws = self._ws
        try:
            while self.state == "open":
                msg = await ws.receive()
                if msg.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
                    await self._paced()
                if msg.type is aiohttp.WSMsgType.TEXT:
                    self._carry_out(self.stream.bot_message(msg.data, self._queued()))
                elif msg.type is aiohttp.WSMsgType.BINARY:
                    self._carry_out(self.stream.bot_binary(len(msg.data)))
                elif msg.type is aiohttp.WSMsgType.ERROR:
                    self._fail(f"bot connection: {_error_text(msg.data)}")
                else:  # CLOSE, CLOSING, CLOSED
                    self._fail(f"closed by the bot (code {ws.close_code})")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fail(f"bot connection: {exc!r}")

    async def _paced(self) -> None:
        """Wait for the bot's message budget: a flood is read at ``messages_per_s``."""
        if self._budget.allow(time.monotonic()):
            return
        self.messages_paced += 1
        while not self._budget.allow(time.monotonic()):
            await asyncio.sleep(1.0 / self._config.messages_per_s)

    def _carry_out(self, actions: list) -> None:
        for action in actions:
            if isinstance(action, AudioOut):
                self._emit_audio(action.pcm)
            elif isinstance(action, Clear):
                self._emit_event(dict(CLEAR_AUDIO))
            elif isinstance(action, ToBot):
                self._control.append(action.text)
                self._ready.set()
            elif isinstance(action, Problem):
                self._problem(action.what)
            elif isinstance(action, End):
                self._fail(action.reason)
                return
        self._arm_timer()

    def _problem(self, what: str) -> None:
        # The first one per call is worth a warning; a bot that keeps doing it is not worth a
        # log line per message.
        self._problems += 1
        level = logging.WARNING if self._problems == 1 else logging.DEBUG
        log.log(level, "session %s: bot message dropped: %s", self.info.session_id, what)

    # -- the playout clock: marks -----------------------------------------------------------------
    def _arm_timer(self) -> None:
        """Wake when the oldest pending mark may be due (none armed twice)."""
        if self._timer is not None or self.state != "open":
            return
        delay = self.stream.wake_in(self._queued())
        if delay is not None:
            self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self.state == "open":
            self._carry_out(self.stream.due(self._queued()))

    def _stop_work(self) -> None:
        cancel_others(self._sender, self._receiver)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._media.clear()
        self._control.clear()

    # -- end of the call ------------------------------------------------------------------------
    async def close(self, reason: str) -> None:
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close(reason))
        await asyncio.shield(self._closing)

    async def _close(self, reason: str) -> None:
        was_open = self.state == "open"
        if was_open:
            self.close_reason = reason
        self.state = "closing"
        self._stop_work()
        tasks = (self._sender, self._receiver)
        await asyncio.gather(*tasks, return_exceptions=True)
        farewell = self.stream.closing() if was_open else None
        try:
            unclean = await close_websocket(
                self._ws, self._transport, farewell, self._config.close_timeout_s
            )
            if unclean is not None:
                log.debug("session %s: unclean close: %r", self.info.session_id, unclean)
        finally:
            self.state = "closed"
            self._on_closed(self)
            counts = self.stream.counts
            log.info(
                "session %s: media stream closed (%s): media out %d (dropped %d), bot frames "
                "%d (dropped %d), marks %d echoed %d, clears %d, bad messages %d, unknown %d",
                self.info.session_id,
                self.close_reason,
                counts.media_out,
                self.media_dropped,
                counts.media_frames_in,
                counts.media_frames_dropped,
                counts.marks_received,
                counts.marks_echoed,
                counts.clears,
                counts.protocol_errors,
                counts.unknown_events,
            )


class MediaStreamsBackend(Backend):
    """Opens one Media Streams WebSocket per call; the HTTP client (its pool) is shared."""

    name = "media-streams"

    def __init__(self, config: MediaStreamsBackendConfig) -> None:
        self.config = config
        self._ssl = config.ssl_context()
        self._http: aiohttp.ClientSession | None = None
        self._sessions: SessionTally[MediaStreamsSession] = SessionTally()
        self._closed = False

    async def open_session(
        self,
        info: SessionInfo,
        emit_audio: Callable[[bytes], None],
        emit_event: Callable[[dict], None],
        on_failure: Callable[[str], None],
    ) -> MediaStreamsSession:
        if self._closed:
            raise BackendError("the media-streams backend is closed")
        if self._http is None:
            self._http = calls_client()
        cfg = self.config
        headers = {"Authorization": f"Bearer {cfg.bearer}"} if cfg.bearer else {}
        stream = MediaStream(
            "MZ" + secrets.token_hex(16),
            call_sid(info.session_id),
            info.metadata,
            time.monotonic(),
            cfg.limits,
        )
        ws: aiohttp.ClientWebSocketResponse | None = None
        try:
            async with asyncio.timeout(cfg.connect_timeout_s):
                ws = await self._http.ws_connect(
                    cfg.url,
                    headers=headers,
                    autoping=True,
                    heartbeat=cfg.heartbeat_s,
                    max_msg_size=cfg.max_message_bytes,
                    compress=0,  # Twilio does not deflate: a bot's CPU, and ours, per message
                    ssl=self._ssl if self._ssl is not None else True,
                )
                for text in stream.opening():
                    await ws.send_str(text)
        except BaseException as exc:
            if ws is not None:
                await abort_websocket(ws)
            failure = connect_failure(exc, cfg.url, cfg.connect_timeout_s)
            if failure is exc:
                raise
            raise failure from exc
        session = MediaStreamsSession(
            info, ws, stream, cfg, emit_audio, emit_event, on_failure, self._sessions.ended
        )
        self._sessions.add(session)
        return session

    def counters(self) -> Mapping[str, int]:
        """The calls' counts (marks, clears, frames dropped, bad messages...): the ended calls'
        totals and the live calls' so far."""
        return self._sessions.totals()

    async def close(self) -> None:
        self._closed = True
        sessions = list(self._sessions.live)
        await asyncio.gather(*(s.close("shutdown") for s in sessions), return_exceptions=True)
        if self._http is not None:
            await self._http.close()
            self._http = None


def _error_text(error: object) -> str:
    """An aiohttp WebSocket error as a reason: a message over the limit is close code 1009."""
    code = getattr(error, "code", None)
    if code == aiohttp.WSCloseCode.MESSAGE_TOO_BIG:
        return f"a message over the size limit (close 1009): {error}"
    return repr(error)


def _nothing_queued() -> int:
    return 0
