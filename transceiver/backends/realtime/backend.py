"""The ``realtime`` backend: each call is one WebSocket to an OpenAI-Realtime-compatible server.

The connection is the official ``openai`` package's Realtime client (its WebSocket, its typed
client events); the decisions are ``conversation.RealtimeConversation``'s, and this module only
moves bytes. Nothing here waits on the model server in the caller's path: ``audio_in`` and
``event_in`` append to a bounded outbox (oldest dropped, counted) that one sender task drains;
one receiver task hands what the server sends to the conversation and carries out its actions.

A dropped WebSocket, a malformed or oversized message, a ``server_error`` or a server that sends
nothing within ``connect_timeout_s`` of the upgrade ends that call (``on_failure``) with the reason
logged; no retry: a conversation's state lives in the server's session, which a new WebSocket
would not have (docs/realtime.md).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import ssl
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from yarl import URL

from transceiver.backend import PCM16, Backend, BackendError, BackendSession, SessionInfo
from transceiver.backends.endpoint import check_ws_url, ws_ssl_context
from transceiver.backends.failure import FailsOnce, cancel_others
from transceiver.backends.realtime.conversation import (
    AudioOut,
    Clear,
    End,
    RealtimeConversation,
    ToCaller,
    ToServer,
)
from transceiver.backends.realtime.policy import ClientEventPolicy
from transceiver.backends.tally import SessionTally

__all__ = [
    "APP_SESSION_KEY",
    "RealtimeBackend",
    "RealtimeBackendConfig",
    "RealtimeSession",
    "app_session",
    "app_session_metadata",
]

log = logging.getLogger(__name__)

CLEAR_AUDIO = {"type": "audio.clear"}  # the transceiver's control event (transceiver.call.session)
SAMPLE_RATES = (8000, 16000, 24000, 48000)
# The per-call counts in the line logged at a call's end, in its order.
LOGGED_COUNTS = (
    "appends",
    "appends_dropped",
    "events_dropped",
    "deltas",
    "barge_ins",
    "truncates",
    "late_deltas_dropped",
    "caller_events_refused",
    "caller_events_limited",
    "server_errors",
)
# The metadata key of the session an app set for its call (its client secret's, its calls form's),
# as compact JSON: metadata travels with a call that moves to another transceiver.
APP_SESSION_KEY = "realtime_session"


def app_session_metadata(session: Mapping[str, Any] | None) -> dict[str, str]:
    """The metadata entry that carries an app's session to the backend (none for no session)."""
    if not session:
        return {}
    return {APP_SESSION_KEY: json.dumps(session, separators=(",", ":"))}


def app_session(metadata: Mapping[str, str]) -> dict[str, Any]:
    """The app's session a call's metadata carries ({} for none, or for one that is not JSON:
    the signaling wrote it, so that is a bug, logged, not the caller's fault)."""
    text = metadata.get(APP_SESSION_KEY)
    if not text:
        return {}
    try:
        session = json.loads(text)
    except ValueError:
        log.error("a call's %s is not JSON; the operator's session alone is used", APP_SESSION_KEY)
        return {}
    return session if isinstance(session, dict) else {}


def merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``over``'s fields over it, objects merged field by field (lists replaced)."""
    out = dict(base)
    for key, value in over.items():
        below = out.get(key)
        if isinstance(value, Mapping) and isinstance(below, Mapping):
            out[key] = merged(below, value)
        else:
            out[key] = value
    return out


@dataclass(frozen=True)
class RealtimeBackendConfig:
    """Everything the realtime backend needs; validated once, at start."""

    url: str  # ws(s)://host[:port]/path/realtime?model=...: the client's base is the path
    api_key: str | None = field(default=None, repr=False)  # from a file or the environment
    ca_file: str | None = None  # wss: the CA bundle that signs the server (default: the system's)
    session: Mapping[str, Any] = field(default_factory=dict)  # the operator's session.update
    policy: ClientEventPolicy = field(default_factory=ClientEventPolicy)
    sample_rate: int = 24000  # OpenAI's audio/pcm is 24 kHz; others for servers that take them
    connect_timeout_s: float = 5.0  # TCP + TLS + upgrade + the server's first event
    max_message_bytes: int = 1024 * 1024  # largest server message; bigger ends the call
    max_queued_events: int = 100  # events (2 s of appends) waiting for the socket; oldest dropped
    heartbeat_s: float = 15.0  # WebSocket ping interval; no pong within it ends the call

    def __post_init__(self) -> None:
        url = check_ws_url(self.url, self.ca_file)
        if not url.path.rstrip("/").endswith("/realtime"):
            raise ValueError(f"backend url path must end in /realtime (got {url.path!r})")
        if self.sample_rate not in SAMPLE_RATES:
            raise ValueError(f"sample_rate must be one of {SAMPLE_RATES}, got {self.sample_rate}")
        for name in ("connect_timeout_s", "heartbeat_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"backend option {name} must be > 0")
        for name in ("max_message_bytes", "max_queued_events"):
            if not getattr(self, name) >= 1:
                raise ValueError(f"backend option {name} must be >= 1")

    def ssl_context(self) -> ssl.SSLContext | None:
        return ws_ssl_context(self.url, self.ca_file)

    def session_update(self, app: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The first client event: the app's session (``app_session``) with the operator's over
        it (an app cannot undo what the operator set), and the audio formats fixed."""
        session = {"type": "realtime", **merged(app or {}, self.session)}
        audio_format = {"type": "audio/pcm", "rate": self.sample_rate}
        audio = dict(session.get("audio") or {})
        audio["input"] = {**(audio.get("input") or {}), "format": audio_format}
        audio["output"] = {**(audio.get("output") or {}), "format": audio_format}
        session["audio"] = audio
        return {"type": "session.update", "session": session}


class RealtimeSession(FailsOnce, BackendSession):
    """One call over one Realtime WebSocket.

    Counters (logged at the end, read by metrics): ``appends_dropped`` caller audio the outbox
    dropped because the server did not read; ``events_dropped`` the same for other events; the
    conversation's ``counts`` (barge-ins, truncates, refused caller events...).
    """

    backend_label = "realtime"

    audio_format = PCM16
    audio_ahead = True  # model servers send an answer's audio as fast as they make it

    def counters(self) -> dict[str, int]:
        """What this call did so far: its conversation's counts and the outbox's drops."""
        counts = dataclasses.asdict(self.conversation.counts)
        return {
            **counts,
            "appends_dropped": self.appends_dropped,
            "events_dropped": self.events_dropped,
        }

    def __init__(
        self,
        info: SessionInfo,
        connection: Any,  # openai's AsyncRealtimeConnection
        config: RealtimeBackendConfig,
        emit_audio: Callable[[bytes], None],
        emit_event: Callable[[dict], None],
        on_failure: Callable[[str], None],
        on_closed: Callable[[RealtimeSession], None],
        first: bytes,
    ) -> None:
        self.info = info
        self.sample_rate = config.sample_rate
        self.conversation = RealtimeConversation(config.sample_rate, config.policy)
        self.state = "open"
        self.close_reason: str | None = None
        self.appends_dropped = 0
        self.events_dropped = 0
        self._conn = connection
        self._config = config
        self._emit_audio = emit_audio
        self._emit_event = emit_event
        self._on_failure = on_failure
        self._on_closed = on_closed
        self._queued: Callable[[], int] = _nothing_queued
        self._outbox: deque[Any] = deque(maxlen=config.max_queued_events)
        self._ready = asyncio.Event()
        self._closing: asyncio.Future[None] | None = None
        tag = info.session_id[:8]
        self._sender = asyncio.create_task(self._send_loop(), name=f"realtime-send-{tag}")
        self._receiver = asyncio.create_task(self._receive_loop(), name=f"realtime-recv-{tag}")
        self._on_server_message(first)

    # -- toward the model server (the transceiver calls these; they never block) --------------
    def attach_playout(self, queued: Callable[[], int]) -> None:
        self._queued = queued

    def audio_in(self, pcm: bytes) -> None:
        if self.state != "open":
            return
        self._send(self.conversation.caller_audio(pcm).event)

    def event_in(self, event: dict) -> None:
        if self.state != "open":
            return
        actions = self.conversation.caller_event(event, self._queued(), time.monotonic())
        self._carry_out(actions)

    def _send(self, event: Any) -> None:
        outbox = self._outbox
        if len(outbox) == outbox.maxlen:
            dropped = outbox[0]
            if _is_append(dropped):
                self.appends_dropped += 1
            else:
                self.events_dropped += 1
        outbox.append(event)
        self._ready.set()

    async def _send_loop(self) -> None:
        outbox = self._outbox
        send, send_raw = self._conn.send, self._conn.send_raw
        try:
            while True:
                if not outbox:
                    self._ready.clear()
                    await self._ready.wait()
                    continue
                event = outbox.popleft()
                await (send_raw(event) if isinstance(event, str) else send(event))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fail(f"model server connection: {exc!r}")

    # -- from the model server ----------------------------------------------------------------
    async def _receive_loop(self) -> None:
        recv = self._conn.recv_bytes
        try:
            while self.state == "open":
                self._on_server_message(await recv())
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fail(f"model server connection: {_closed_reason(exc)}")

    def _on_server_message(self, message: bytes | str) -> None:
        try:
            event = json.loads(message)
        except ValueError:
            self._fail(f"model server sent a message that is not JSON ({len(message)} bytes)")
            return
        if not isinstance(event, dict):
            self._fail(f"model server sent JSON {type(event).__name__}, not an event object")
            return
        self._carry_out(self.conversation.server_event(event, self._queued()))

    def _carry_out(self, actions: list) -> None:
        for action in actions:
            if isinstance(action, AudioOut):
                self._emit_audio(action.pcm)
            elif isinstance(action, ToServer):
                self._send(action.event)
            elif isinstance(action, ToCaller):
                self._emit_event(dict(action.event))
            elif isinstance(action, Clear):
                self._emit_event(dict(CLEAR_AUDIO))
            elif isinstance(action, End):
                self._fail(action.reason)
                return

    def _stop_work(self) -> None:
        cancel_others(self._sender, self._receiver)
        self._outbox.clear()

    # -- end of the call ----------------------------------------------------------------------
    async def close(self, reason: str) -> None:
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close(reason))
        await asyncio.shield(self._closing)

    async def _close(self, reason: str) -> None:
        if self.state == "open":
            self.close_reason = reason
        self.state = "closing"
        tasks = (self._sender, self._receiver)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        try:
            async with asyncio.timeout(2.0):
                await self._conn.close()
        except Exception as exc:  # includes TimeoutError
            log.debug("session %s: unclean close: %r", self.info.session_id, exc)
        self.state = "closed"
        self._on_closed(self)
        counts = self.counters()
        log.info(
            "session %s: realtime closed (%s): appends %d (dropped %d), events dropped %d, "
            "deltas %d, barge-ins %d, truncates %d, late deltas dropped %d, caller events "
            "refused %d limited %d, server errors %d",
            self.info.session_id,
            self.close_reason,
            *(counts[name] for name in LOGGED_COUNTS),
        )


class RealtimeBackend(Backend):
    """Opens one Realtime WebSocket per call through one shared ``openai`` client."""

    name = "realtime"

    def __init__(self, config: RealtimeBackendConfig) -> None:
        from openai import AsyncOpenAI  # imported here: only this backend needs the SDK

        self.config = config
        url = URL(config.url)
        self._model = url.query.get("model")
        self._query = {k: v for k, v in url.query.items() if k != "model"}
        base = url.with_query(None).with_path(url.path.rstrip("/").removesuffix("/realtime"))
        # api_key: the SDK insists on one; a server that needs none ignores the header.
        self._client = AsyncOpenAI(
            api_key=config.api_key or "none",
            base_url=str(base.with_scheme("https" if url.scheme == "wss" else "http")),
            websocket_base_url=str(base),
            max_retries=0,
        )
        self._options: dict[str, Any] = {
            # No permessage-deflate, as the SDK's own default (it turns it off unless max_size
            # is set, as here): base64 audio barely compresses, and deflating every append and
            # inflating every delta was 4-5 % of a realtime call's CPU (bench realtime).
            "compression": None,
            "max_size": config.max_message_bytes,
            "open_timeout": config.connect_timeout_s,
            "ping_interval": config.heartbeat_s,
            "ping_timeout": config.heartbeat_s,
            "close_timeout": 2.0,
        }
        context = config.ssl_context()
        if context is not None:
            self._options["ssl"] = context
        self._sessions: SessionTally[RealtimeSession] = SessionTally()
        self._closed = False

    async def open_session(
        self,
        info: SessionInfo,
        emit_audio: Callable[[bytes], None],
        emit_event: Callable[[dict], None],
        on_failure: Callable[[str], None],
    ) -> RealtimeSession:
        if self._closed:
            raise BackendError("the realtime backend is closed")
        cfg = self.config
        manager = self._client.realtime.connect(
            model=self._model or "",
            extra_query=self._query,
            websocket_connection_options=self._options,  # type: ignore[arg-type]
        )
        connection = None
        try:
            async with asyncio.timeout(cfg.connect_timeout_s):
                connection = await manager.enter()
                await connection.send(cfg.session_update(app_session(info.metadata)))
                first = await connection.recv_bytes()
        except BaseException as exc:
            if connection is not None:
                await _abort(connection)
            if isinstance(exc, TimeoutError):
                raise BackendError(
                    f"model server {cfg.url} did not answer within {cfg.connect_timeout_s} s"
                ) from None
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise BackendError(f"cannot open a realtime session at {cfg.url}: {exc}") from exc
        session = RealtimeSession(
            info, connection, cfg, emit_audio, emit_event, on_failure, self._sessions.ended, first
        )
        self._sessions.add(session)
        return session

    def counters(self) -> Mapping[str, int]:
        """The calls' counts (barge-ins, truncates, refused caller events, appends dropped...):
        the ended calls' totals and the live calls' counts so far."""
        return self._sessions.totals()

    async def close(self) -> None:
        self._closed = True
        sessions = list(self._sessions.live)
        await asyncio.gather(*(s.close("shutdown") for s in sessions), return_exceptions=True)
        await self._client.close()


def _is_append(event: Any) -> bool:
    if isinstance(event, str):  # the JSON of an append (conversation.APPEND_JSON)
        return event.startswith('{"type":"input_audio_buffer.append"')
    return getattr(event, "type", None) == "input_audio_buffer.append"


def _nothing_queued() -> int:
    return 0


def _closed_reason(exc: BaseException) -> str:
    """A dropped WebSocket, said as the close code says it (1009: a message over the limit)."""
    rcvd = getattr(exc, "rcvd", None)
    if rcvd is not None:
        if rcvd.code == 1009:
            return "a message over the size limit (close 1009)"
        return f"closed by the server (code {rcvd.code}{': ' + rcvd.reason if rcvd.reason else ''})"
    sent = getattr(exc, "sent", None)
    if sent is not None and sent.code == 1009:
        return "a message over the size limit (close 1009)"
    return repr(exc)


async def _abort(connection: Any) -> None:
    try:
        async with asyncio.timeout(1.0):
            await connection.close()
    except Exception:
        pass
