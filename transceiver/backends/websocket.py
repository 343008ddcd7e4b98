"""The ``websocket`` backend: each call bridged to an external service over its own WebSocket.

Binary messages are audio, both ways: PCM16 LE mono 48 kHz in whole 20 ms frames, or, when the
backend picks the ``rtcedge.opus`` WebSocket subprotocol at the upgrade, Opus packets (toward
the backend each behind a 6-byte header: RTP sequence number and timestamp). Text messages are
JSON objects, both ways. The transceiver speaks first (``session.start``) and last
(``session.end``). The operator's key goes as ``Authorization: Bearer`` on the upgrade, and a
``wss://`` backend is checked against the system's CAs or a CA file of the operator's. Full wire
protocol: docs/backend-protocol.md.

Toward the backend nothing ever waits on the network in the caller's path: ``audio_in`` and
``event_in`` append to a bounded outbox that one sender task drains, so a slow or stalled backend
costs dropped (counted) frames, never a stalled media loop. A receiver task hands what the
backend sends straight to the transceiver's sinks, which pace it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import ssl
import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import aiohttp
from yarl import URL

from transceiver.backend import (
    AUDIO_CHANNELS,
    AUDIO_SAMPLE_RATE,
    FRAME_MS,
    OPUS,
    PCM16,
    SAMPLE_RATES,
    Backend,
    BackendError,
    BackendSession,
    OpusFrame,
    SessionInfo,
    frame_bytes,
)
from transceiver.backends.endpoint import check_ws_url, ws_ssl_context
from transceiver.call.opus import OpusError, packet_samples

__all__ = ["WebSocketBackend", "WebSocketBackendConfig", "WebSocketSession"]

log = logging.getLogger(__name__)

# The audio format of a call is negotiated at the WebSocket upgrade: the transceiver offers both
# subprotocols, the backend's 101 names the one it takes; none named: pcm16 (older backends).
# pcm16 at 48 kHz is "rtcedge.pcm16"; at another rate "rtcedge.pcm16.<rate>" (8000, 16000, 24000).
SUBPROTOCOLS: dict[str, tuple[str, int]] = {
    "rtcedge.pcm16": (PCM16, AUDIO_SAMPLE_RATE),
    **{
        f"rtcedge.pcm16.{rate}": (PCM16, rate) for rate in SAMPLE_RATES if rate != AUDIO_SAMPLE_RATE
    },
    "rtcedge.opus": (OPUS, AUDIO_SAMPLE_RATE),
}

OPUS_HEADER = struct.Struct("!HI")  # caller -> backend, before each packet: sequence, timestamp


def audio_description(audio_format: str, sample_rate: int) -> dict[str, Any]:
    """The ``audio`` of ``session.start``: what the binary messages carry, both ways."""
    if audio_format == OPUS:
        return {
            "encoding": "opus",
            "sample_rate": AUDIO_SAMPLE_RATE,
            "channels": AUDIO_CHANNELS,
            "header": "sequence:u16be timestamp:u32be",
        }
    return {
        "encoding": "pcm16le",
        "sample_rate": sample_rate,
        "channels": AUDIO_CHANNELS,
        "frame_ms": FRAME_MS,
    }


@dataclass(frozen=True)
class WebSocketBackendConfig:
    """Everything the websocket backend needs; validated once, at start."""

    url: str  # ws:// or wss://; the session id is added as the query parameter ``session_id``
    bearer: str | None = field(default=None, repr=False)  # sent as Authorization: Bearer
    ca_file: str | None = None  # wss: the CA bundle that signs the backend (default: the system's)
    connect_timeout_s: float = 5.0  # TCP + TLS + HTTP upgrade + sending session.start
    max_queued_frames: int = 50  # caller audio waiting for the socket (50 = 1 s); oldest dropped
    max_queued_events: int = 256  # caller events waiting for the socket; oldest dropped
    heartbeat_s: float | None = 15.0  # WebSocket ping interval; a missing pong fails the call
    close_timeout_s: float = 2.0  # bound on session.end + the closing handshake
    max_message_bytes: int = 4 * 1024 * 1024  # largest message accepted from the backend

    def __post_init__(self) -> None:
        self._check_url()
        for name in ("connect_timeout_s", "close_timeout_s", "heartbeat_s"):
            value = getattr(self, name)
            if value is None and name == "heartbeat_s":
                continue
            if not _is_number(value) or not value > 0 or not math.isfinite(value):
                raise ValueError(f"backend option {name} must be a number > 0, got {value!r}")
        for name in ("max_queued_frames", "max_queued_events", "max_message_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"backend option {name} must be an integer >= 1, got {value!r}")

    def _check_url(self) -> None:
        check_ws_url(self.url, self.ca_file)

    def ssl_context(self) -> ssl.SSLContext | None:
        return ws_ssl_context(self.url, self.ca_file)

    def headers(self) -> dict[str, str]:
        """The upgrade request's own headers: the bearer, when there is one."""
        return {"Authorization": f"Bearer {self.bearer}"} if self.bearer else {}

    @classmethod
    def from_options(cls, url: str, options: dict[str, Any]) -> WebSocketBackendConfig:
        known = {f.name for f in fields(cls)} - {"url"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(
                f"unknown option(s) for the websocket backend: {', '.join(unknown)} "
                f"(known: {', '.join(sorted(known))})"
            )
        return cls(url=url, **options)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class WebSocketSession(BackendSession):
    """One call over one WebSocket.

    States: ``open`` -> ``failed`` (the socket broke; ``on_failure`` was called) -> ``closing``
    -> ``closed``, or ``open`` -> ``closing`` -> ``closed``. ``close_reason`` records why.

    Counters (read them for metrics and logs):
    ``frames_in`` caller frames given to ``audio_in``; ``frames_sent`` of those written to the
    socket; ``frames_dropped`` of those dropped because the outbox was full (oldest first);
    ``frames_out`` 20 ms frames received from the backend and passed to ``emit_audio``;
    ``events_in``/``events_sent``/``events_dropped`` the same for caller events; ``events_out``
    backend events passed to ``emit_event``; ``protocol_errors`` backend messages dropped as
    malformed (binary not a whole number of frames, text not a JSON object).
    """

    def __init__(
        self,
        info: SessionInfo,
        ws: aiohttp.ClientWebSocketResponse,
        config: WebSocketBackendConfig,
        emit_audio: Callable[[bytes], None],
        emit_event: Callable[[dict], None],
        on_failure: Callable[[str], None],
        on_closed: Callable[[WebSocketSession], None],
        audio_format: str = PCM16,
        sample_rate: int = AUDIO_SAMPLE_RATE,
    ) -> None:
        self.info = info
        self.audio_format = audio_format
        self.sample_rate = sample_rate
        self._frame_bytes = frame_bytes(sample_rate)
        self.state = "open"
        self.close_reason: str | None = None
        self.frames_in = 0
        self.frames_sent = 0
        self.frames_dropped = 0
        self.frames_out = 0
        self.events_in = 0
        self.events_sent = 0
        self.events_dropped = 0
        self.events_out = 0
        self.protocol_errors = 0
        self._ws = ws
        self._transport = websocket_transport(ws)  # to reset a peer that stopped reading
        self._config = config
        self._emit_audio = emit_audio
        self._emit_event = emit_event
        self._on_failure = on_failure
        self._on_closed = on_closed
        # One outbox keeps audio and events in the order the caller produced them. Audio items
        # are bytes, events are already-serialized str.
        self._outbox: deque[bytes | str] = deque()
        self._queued_frames = 0
        self._queued_events = 0
        self._outbox_ready = asyncio.Event()
        self._closing: asyncio.Future[None] | None = None
        tag = info.session_id[:8]
        self._sender = asyncio.create_task(self._send_loop(), name=f"backend-ws-send-{tag}")
        self._receiver = asyncio.create_task(self._receive_loop(), name=f"backend-ws-recv-{tag}")

    # -- toward the backend (called by the transceiver; never blocks) --

    def audio_in(self, pcm: bytes) -> None:
        if len(pcm) != self._frame_bytes:
            raise ValueError(
                f"audio_in takes one {self._frame_bytes}-byte frame, got {len(pcm)} bytes"
            )
        if self.state != "open":
            return
        # bytes(x) is x itself for bytes; a caller's reusable buffer gets copied.
        self._queue_audio(bytes(pcm))

    def opus_in(self, frame: OpusFrame) -> None:
        if self.audio_format != OPUS:
            super().opus_in(frame)
        if self.state != "open":
            return
        self._queue_audio(OPUS_HEADER.pack(frame.sequence, frame.timestamp) + frame.payload)

    def _queue_audio(self, message: bytes) -> None:
        self.frames_in += 1
        if self._queued_frames >= self._config.max_queued_frames:
            self._drop_oldest(bytes)
            self._queued_frames -= 1
            self.frames_dropped += 1
        self._outbox.append(message)
        self._queued_frames += 1
        self._outbox_ready.set()

    def event_in(self, event: dict) -> None:
        if not isinstance(event, dict):
            raise TypeError(f"event_in takes a dict, got {type(event).__name__}")
        if self.state != "open":
            return
        text = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
        self.events_in += 1
        if self._queued_events >= self._config.max_queued_events:
            self._drop_oldest(str)
            self._queued_events -= 1
            self.events_dropped += 1
        self._outbox.append(text)
        self._queued_events += 1
        self._outbox_ready.set()

    def _drop_oldest(self, kind: type) -> None:
        # The oldest item of that kind is almost always at the front: events are rare.
        for i, item in enumerate(self._outbox):
            if type(item) is kind:
                del self._outbox[i]
                return

    async def _send_loop(self) -> None:
        ws = self._ws
        outbox = self._outbox
        try:
            while True:
                if not outbox:
                    self._outbox_ready.clear()
                    await self._outbox_ready.wait()
                    continue
                item = outbox.popleft()
                if type(item) is bytes:
                    self._queued_frames -= 1
                    await ws.send_bytes(item)
                    self.frames_sent += 1
                else:
                    self._queued_events -= 1
                    await ws.send_str(item)
                    self.events_sent += 1
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # A write can fail first when the backend closed: name it by what happened.
            self._fail("backend_closed" if ws.closed else "backend_error", repr(exc))

    # -- toward the caller --

    async def _receive_loop(self) -> None:
        ws = self._ws
        try:
            while True:
                msg = await ws.receive()
                kind = msg.type
                if kind is aiohttp.WSMsgType.BINARY:
                    self._on_audio(msg.data)
                elif kind is aiohttp.WSMsgType.TEXT:
                    self._on_text(msg.data)
                elif kind is aiohttp.WSMsgType.ERROR:
                    self._fail("backend_error", f"websocket error: {msg.data!r}")
                    return
                elif kind in (
                    aiohttp.WSMsgType.CLOSE,
                    aiohttp.WSMsgType.CLOSING,
                    aiohttp.WSMsgType.CLOSED,
                ):
                    self._fail("backend_closed", f"closed by the backend (code {ws.close_code})")
                    return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fail("backend_error", repr(exc))

    def _on_audio(self, data: bytes) -> None:
        size = len(data)
        if self.audio_format == OPUS:
            try:
                packet_samples(data)
            except OpusError as exc:
                self._protocol_error(f"binary message is not one Opus packet: {exc}")
                return
            self.frames_out += 1
            try:
                self._emit_audio(data)
            except Exception:
                log.exception("session %s: emit_audio failed", self.info.session_id)
            return
        if size == 0 or size % self._frame_bytes:
            self._protocol_error(f"binary message of {size} bytes is not whole 20 ms frames")
            return
        self.frames_out += size // self._frame_bytes
        try:
            self._emit_audio(data)
        except Exception:
            log.exception("session %s: emit_audio failed", self.info.session_id)

    def _on_text(self, data: str) -> None:
        try:
            event = json.loads(data)
        except ValueError:
            self._protocol_error(f"text message is not JSON ({len(data)} chars)")
            return
        if not isinstance(event, dict):
            self._protocol_error(f"text message is JSON {type(event).__name__}, not an object")
            return
        self.events_out += 1
        try:
            self._emit_event(event)
        except Exception:
            log.exception("session %s: emit_event failed", self.info.session_id)

    def _protocol_error(self, what: str) -> None:
        self.protocol_errors += 1
        # The first one per session is worth a warning; a backend that keeps doing it is not
        # worth a log line per message.
        level = logging.WARNING if self.protocol_errors == 1 else logging.DEBUG
        log.log(
            level, "session %s: backend protocol error, dropped: %s", self.info.session_id, what
        )

    def _fail(self, reason: str, detail: str) -> None:
        """Report the first failure of an open session to the transceiver; stop moving data."""
        if self.state != "open":
            return
        self.state = "failed"
        self.close_reason = reason
        log.warning("session %s: %s (%s)", self.info.session_id, reason, detail)
        current = asyncio.current_task()
        for task in (self._sender, self._receiver):
            if task is not current:
                task.cancel()
        self._outbox.clear()
        self._queued_frames = self._queued_events = 0
        try:
            self._on_failure(reason)
        except Exception:
            log.exception("session %s: on_failure failed", self.info.session_id)

    # -- end of the call --

    async def close(self, reason: str) -> None:
        # Shielded: a caller cancelled mid-close must not leave the socket or the tasks behind.
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close(reason))
        await asyncio.shield(self._closing)

    async def _close(self, reason: str) -> None:
        was_open = self.state == "open"
        if was_open:
            self.close_reason = reason
        self.state = "closing"
        tasks = (self._sender, self._receiver)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # Queued caller audio is dropped: the call is over, nobody would hear an answer to it.
        self._outbox.clear()
        self._queued_frames = self._queued_events = 0
        end = {"type": "session.end", "reason": reason}
        farewell = json.dumps(end, separators=(",", ":")) if was_open else None
        try:
            unclean = await close_websocket(
                self._ws, self._transport, farewell, self._config.close_timeout_s
            )
            if unclean is not None:
                log.debug("session %s: unclean close: %r", self.info.session_id, unclean)
        finally:
            self.state = "closed"
            self._on_closed(self)
            log.info(
                "session %s: backend closed (%s): frames in %d sent %d dropped %d out %d, "
                "protocol errors %d",
                self.info.session_id,
                self.close_reason,
                self.frames_in,
                self.frames_sent,
                self.frames_dropped,
                self.frames_out,
                self.protocol_errors,
            )


class WebSocketBackend(Backend):
    """Opens one WebSocket per call; the HTTP client (and its connection pool) is shared."""

    name = "websocket"

    def __init__(self, config: WebSocketBackendConfig) -> None:
        self.config = config
        self._ssl = config.ssl_context()  # once: loading a CA bundle is not free
        self._http: aiohttp.ClientSession | None = None
        self._sessions: set[WebSocketSession] = set()
        self._closed = False

    async def open_session(
        self,
        info: SessionInfo,
        emit_audio: Callable[[bytes], None],
        emit_event: Callable[[dict], None],
        on_failure: Callable[[str], None],
    ) -> WebSocketSession:
        if self._closed:
            raise BackendError("the websocket backend is closed")
        if self._http is None:
            self._http = calls_client()
        cfg = self.config
        url = URL(cfg.url).update_query(session_id=info.session_id)
        start = {
            "type": "session.start",
            "session_id": info.session_id,
            "transceiver_id": info.transceiver_id,
            "remote": info.remote,
            "metadata": dict(info.metadata),
            "resumed": info.resumed,
        }
        ws: aiohttp.ClientWebSocketResponse | None = None
        audio_format, sample_rate = PCM16, AUDIO_SAMPLE_RATE
        try:
            async with asyncio.timeout(cfg.connect_timeout_s):
                ws = await self._http.ws_connect(
                    url,
                    protocols=tuple(SUBPROTOCOLS),
                    headers=cfg.headers(),
                    autoping=True,
                    heartbeat=cfg.heartbeat_s,
                    max_msg_size=cfg.max_message_bytes,
                    ssl=self._ssl if self._ssl is not None else True,
                )
                audio_format, sample_rate = SUBPROTOCOLS.get(
                    ws.protocol or "", (PCM16, AUDIO_SAMPLE_RATE)
                )
                start["audio"] = audio_description(audio_format, sample_rate)
                await ws.send_str(json.dumps(start, separators=(",", ":"), ensure_ascii=False))
        except BaseException as exc:
            if ws is not None:
                await abort_websocket(ws)
            failure = connect_failure(exc, cfg.url, cfg.connect_timeout_s)
            if failure is exc:
                raise
            raise failure from exc
        session = WebSocketSession(
            info,
            ws,
            cfg,
            emit_audio,
            emit_event,
            on_failure,
            self._sessions.discard,
            audio_format,
            sample_rate,
        )
        self._sessions.add(session)
        return session

    async def close(self) -> None:
        self._closed = True
        sessions = list(self._sessions)
        await asyncio.gather(*(s.close("shutdown") for s in sessions), return_exceptions=True)
        if self._http is not None:
            await self._http.close()
            self._http = None


# -- what every backend that dials a WebSocket with aiohttp shares (media_streams too) ---------


def calls_client() -> aiohttp.ClientSession:
    """The HTTP client a backend opens its calls' WebSockets with. limit=0: every call holds one
    connection for its whole life; aiohttp's default pool limit (100) would make call 101 wait
    for a free slot until its timeout."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=None)
    )


# What an upgrade refused with these statuses most likely means, for the log line of the call.
REFUSED_HINTS = {
    401: " (a missing or wrong key: --backend-key-file or RTCEDGE_BACKEND_KEY)",
    403: " (the key is not allowed: --backend-key-file or RTCEDGE_BACKEND_KEY)",
}


def connect_failure(exc: BaseException, url: str, timeout_s: float) -> BaseException:
    """What to raise when a backend's WebSocket did not open: a BackendError saying why, or
    ``exc`` itself when it is not about the connection (a cancellation, a bug)."""
    if isinstance(exc, TimeoutError):
        return BackendError(f"backend {url} did not accept the call within {timeout_s} s")
    if isinstance(exc, aiohttp.WSServerHandshakeError):
        hint = REFUSED_HINTS.get(exc.status, "")
        return BackendError(f"backend {url} refused the WebSocket upgrade: HTTP {exc.status}{hint}")
    if isinstance(exc, aiohttp.ClientError | OSError):
        return BackendError(f"cannot reach backend {url}: {exc}")
    return exc


def websocket_transport(ws: aiohttp.ClientWebSocketResponse) -> asyncio.Transport | None:
    """The transport under a client WebSocket (aiohttp does not expose it; its writer holds it),
    for ``close_websocket`` to reset a connection whose peer stopped reading."""
    return getattr(getattr(ws, "_writer", None), "transport", None)


async def close_websocket(
    ws: aiohttp.ClientWebSocketResponse,
    transport: asyncio.Transport | None,
    farewell: str | None,
    timeout_s: float,
) -> Exception | None:
    """Send ``farewell`` (if the socket is still open), close, and wait for the bytes to leave,
    all within ``timeout_s``; returns what made the close unclean, if anything.

    A peer that stopped reading leaves unsent bytes in the transport, and asyncio keeps a closed
    transport's socket open until they are written: that could be forever. Past the budget the
    connection is reset instead."""
    unclean: Exception | None = None
    try:
        async with asyncio.timeout(timeout_s):
            if farewell is not None and not ws.closed:
                await ws.send_str(farewell)
            await ws.close()
            while transport is not None and transport.get_write_buffer_size():
                await asyncio.sleep(0.01)
    except Exception as exc:  # includes TimeoutError
        unclean = exc
    finally:
        if transport is not None and transport.get_write_buffer_size():
            transport.abort()
    return unclean


async def abort_websocket(ws: aiohttp.ClientWebSocketResponse) -> None:
    """Close a socket that never became a session, without letting that fail or hang."""
    try:
        async with asyncio.timeout(1.0):
            await ws.close()
    except Exception:
        pass
