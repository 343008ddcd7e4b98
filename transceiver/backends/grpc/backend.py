"""The ``grpc`` backend: each call is one bidirectional gRPC stream to the backend's server.

The decisions are ``protocol.BackendCall``'s; this module only moves bytes, with grpcio's
asyncio API (imported here, and this module only when ``--backend grpc`` is built: no other
backend needs grpc). The stream carries raw bytes (no (de)serializer): the protocol parses
what the backend sends, so a malformed message is dropped and counted, not a broken stream.

One channel (one HTTP/2 connection, its own subchannel) per call, as one WebSocket per call:
a Kubernetes Service in front of the backends spreads calls over its pods, and a connection
that breaks ends one call. Nothing here waits on the backend in the caller's path:
``audio_in`` and ``event_in`` append to a bounded outbox (oldest dropped, counted) that one
sender task drains into the stream, HTTP/2 flow control pushing back on it; one receiver task
hands what the backend sends to the protocol, paced (``messages_per_s`` past a burst: past it the
receiver waits and HTTP/2 pushes back on the backend), and carries out what it says.

What a backend can do wrong is bounded per call: a message over ``max_message_bytes``, an
ended stream or a connection that stops answering keepalive PINGs ends the call; malformed
messages, audio in the codec the call did not accept and unknown messages are dropped and
counted (the protocol ends the call past ``max_protocol_errors``); audio sent too far ahead is
dropped past ``max_playout_frames``. A backend that sends nothing is a backend that listens.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Mapping

# grpc-core logs each connection's GOAWAY at INFO on stderr, around our own logging: errors
# only, unless the operator sets GRPC_VERBOSITY (read once, when grpc is first imported).
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

import grpc
import grpc.aio

from transceiver.backend import OPUS, Backend, BackendError, BackendSession, OpusFrame, SessionInfo
from transceiver.backends.failure import FailsOnce, cancel_others
from transceiver.backends.grpc.config import GrpcBackendConfig
from transceiver.backends.grpc.protocol import (
    METHOD,
    BackendCall,
    Hangup,
    OpusOut,
    Problem,
    ProtocolError,
    accepted_format,
    start_message,
)
from transceiver.backends.realtime.backend import CLEAR_AUDIO
from transceiver.backends.realtime.conversation import AudioOut, Clear, End, ToCaller
from transceiver.backends.realtime.policy import CallerEventBudget
from transceiver.backends.tally import SessionTally

__all__ = ["GrpcBackend", "GrpcSession", "channel_options"]

log = logging.getLogger(__name__)

SESSION_ID_HEADER = "rtcedge-session-id"  # request metadata: a proxy may route a call on it
HANGUP = {"type": "session.hangup"}  # the transceiver's control event (transceiver.call.session)


def channel_options(config: GrpcBackendConfig) -> list[tuple[str, int]]:
    """The channel's arguments (grpc-core's names): keepalives, the message bound, no sharing."""
    return [
        # HTTP/2 PINGs while the call is up; an unanswered one ends the connection (the call).
        ("grpc.keepalive_time_ms", round(config.keepalive_s * 1000)),
        ("grpc.keepalive_timeout_ms", round(config.keepalive_timeout_s * 1000)),
        # What grpc-core 1.8x times an unanswered PING by (it did not apply the keepalive
        # timeout to a connection that went silent: measured, tests/transceiver/test_grpc_backend).
        ("grpc.http2.ping_timeout_ms", round(config.keepalive_timeout_s * 1000)),
        ("grpc.keepalive_permit_without_calls", 0),
        ("grpc.http2.max_pings_without_data", 0),  # a listening backend sends no data: ping on
        ("grpc.max_receive_message_length", config.max_message_bytes),
        # A channel of its own per call: grpc would otherwise share one connection between
        # every channel of the same target and arguments (its global subchannel pool).
        ("grpc.use_local_subchannel_pool", 1),
        ("grpc.enable_retries", 0),  # a call is not retried: its audio went by
    ]


class GrpcSession(FailsOnce, BackendSession):
    """One call over one gRPC stream.

    States: ``open`` -> ``failed`` (``on_failure`` was called) -> ``closing`` -> ``closed``, or
    ``open`` -> ``closing`` -> ``closed``; ``close_reason`` records why.

    Counters (``counters``, logged at the end): the call's (``protocol.CallCounts``), and
    ``frames_in``/``frames_sent``/``frames_dropped`` caller audio given, written to the stream,
    and dropped by the outbox because the backend did not read (oldest first);
    ``events_in``/``events_sent``/``events_dropped`` the same for caller events;
    ``messages_paced`` times the receiver waited for the backend's message budget.
    """

    backend_label = "grpc"

    def __init__(
        self,
        info: SessionInfo,
        channel: grpc.aio.Channel,
        stream: grpc.aio.StreamStreamCall,
        call: BackendCall,
        config: GrpcBackendConfig,
        emit_audio: Callable[[bytes], None],
        emit_event: Callable[[dict], None],
        on_failure: Callable[[str], None],
        on_closed: Callable[[GrpcSession], None],
    ) -> None:
        self.info = info
        self.call = call
        self.audio_format = call.audio_format
        self.sample_rate = call.sample_rate
        self.state = "open"
        self.close_reason: str | None = None
        self.frames_in = self.frames_sent = self.frames_dropped = 0
        self.events_in = self.events_sent = self.events_dropped = 0
        self.messages_paced = 0
        self._channel = channel
        self._stream = stream
        self._config = config
        self._emit_audio = emit_audio
        self._emit_event = emit_event
        self._on_failure = on_failure
        self._on_closed = on_closed
        self._queued: Callable[[], int] = _nothing_queued
        # One outbox keeps audio and events in the order the caller produced them: (is audio,
        # the serialized message); each kind has its own bound.
        self._outbox: deque[tuple[bool, bytes]] = deque()
        self._queued_frames = self._queued_events = 0
        self._ready = asyncio.Event()
        self._budget = CallerEventBudget(config.messages_per_s, config.message_burst)
        self._problems = 0
        self._closing: asyncio.Future[None] | None = None
        tag = info.session_id[:8]
        self._sender = asyncio.create_task(self._send_loop(), name=f"grpc-send-{tag}")
        self._receiver = asyncio.create_task(self._receive_loop(), name=f"grpc-recv-{tag}")

    def counters(self) -> dict[str, int]:
        """What this call did so far: its protocol's counts and the outbox's."""
        return {
            **dataclasses.asdict(self.call.counts),
            "frames_in": self.frames_in,
            "frames_sent": self.frames_sent,
            "frames_dropped": self.frames_dropped,
            "events_in": self.events_in,
            "events_sent": self.events_sent,
            "events_dropped": self.events_dropped,
            "messages_paced": self.messages_paced,
        }

    # -- toward the backend (the transceiver calls these; they never block) -------------------
    def attach_playout(self, queued: Callable[[], int]) -> None:
        self._queued = queued

    def audio_in(self, pcm: bytes) -> None:
        if len(pcm) != self.call.frame_bytes:
            raise ValueError(
                f"audio_in takes one {self.call.frame_bytes}-byte frame, got {len(pcm)} bytes"
            )
        if self.state == "open":
            self._queue(True, self.call.caller_pcm(pcm))

    def opus_in(self, frame: OpusFrame) -> None:
        if self.audio_format != OPUS:
            super().opus_in(frame)
        if self.state == "open":
            self._queue(True, self.call.caller_opus(frame))

    def event_in(self, event: dict) -> None:
        if not isinstance(event, dict):
            raise TypeError(f"event_in takes a dict, got {type(event).__name__}")
        if self.state == "open":
            self._queue(False, self.call.caller_event(event))

    def _queue(self, audio: bool, message: bytes) -> None:
        if audio:
            self.frames_in += 1
            if self._queued_frames >= self._config.max_queued_frames:
                self._drop_oldest(True)
                self.frames_dropped += 1
            else:
                self._queued_frames += 1
        else:
            self.events_in += 1
            if self._queued_events >= self._config.max_queued_events:
                self._drop_oldest(False)
                self.events_dropped += 1
            else:
                self._queued_events += 1
        self._outbox.append((audio, message))
        self._ready.set()

    def _drop_oldest(self, audio: bool) -> None:
        # The oldest of that kind is almost always at the front: events are rare.
        for i, (kind, _) in enumerate(self._outbox):
            if kind is audio:
                del self._outbox[i]
                return

    async def _send_loop(self) -> None:
        """Drain the outbox into the stream; once the call is closing, half-close it and end.
        (Never cancelled while the stream should live: grpc cancels a call whose write or
        read is cancelled.)"""
        outbox, write = self._outbox, self._stream.write
        try:
            while True:
                if not outbox:
                    if self.state == "closing":
                        await self._stream.done_writing()
                        return
                    self._ready.clear()
                    await self._ready.wait()
                    continue
                audio, message = outbox.popleft()
                if audio:
                    self._queued_frames -= 1
                    await write(message)
                    self.frames_sent += 1
                else:
                    self._queued_events -= 1
                    await write(message)
                    self.events_sent += 1
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fail(f"backend stream: {_error_text(exc)}")

    # -- from the backend -----------------------------------------------------------------------
    async def _receive_loop(self) -> None:
        """Hand the backend's messages to the protocol until its side ends; once the call is
        closing, read on (dropping them) until the backend ends its side."""
        stream = self._stream
        try:
            while True:
                data = await stream.read()
                if data is grpc.aio.EOF:
                    code = await stream.code()
                    details = await stream.details()
                    self._fail(f"the backend ended the stream ({code.name}: {details})")
                    return
                if self.state != "open":
                    continue
                await self._paced()
                self._carry_out(self.call.backend_message(data, self._queued()))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fail(f"backend stream: {_error_text(exc)}")

    async def _paced(self) -> None:
        """Wait for the backend's message budget: a flood is read at ``messages_per_s``."""
        if self._budget.allow(time.monotonic()):
            return
        self.messages_paced += 1
        while not self._budget.allow(time.monotonic()):
            await asyncio.sleep(1.0 / self._config.messages_per_s)

    def _carry_out(self, actions: list) -> None:
        for action in actions:
            try:
                if isinstance(action, AudioOut):
                    self._emit_audio(action.pcm)
                elif isinstance(action, OpusOut):
                    self._emit_audio(action.packet)
                elif isinstance(action, ToCaller):
                    self._emit_event(dict(action.event))
                elif isinstance(action, Clear):
                    self._emit_event(dict(CLEAR_AUDIO))
                elif isinstance(action, Hangup):
                    log.info("session %s: backend hung up: %r", self.info.session_id, action.reason)
                    self._emit_event(dict(HANGUP))
                elif isinstance(action, Problem):
                    self._problem(action.what)
                elif isinstance(action, End):
                    self._fail(action.reason)
                    return
            except Exception:
                log.exception("session %s: a sink failed on %r", self.info.session_id, action)

    def _problem(self, what: str) -> None:
        # The first one per call is worth a warning; a backend that keeps doing it is not
        # worth a log line per message.
        self._problems += 1
        level = logging.WARNING if self._problems == 1 else logging.DEBUG
        log.log(level, "session %s: backend message dropped: %s", self.info.session_id, what)

    def _stop_work(self) -> None:
        cancel_others(self._sender, self._receiver)
        self._outbox.clear()
        self._queued_frames = self._queued_events = 0

    # -- end of the call ------------------------------------------------------------------------
    async def close(self, reason: str) -> None:
        # Shielded: a caller cancelled mid-close must not leave the channel or the tasks behind.
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close(reason))
        await asyncio.shield(self._closing)

    async def _close(self, reason: str) -> None:
        """SessionEnd, the half-close, and the backend's end of its side, within
        ``close_timeout_s``; past it (or after a failure) the stream is cancelled."""
        was_open = self.state == "open"
        self.state = "closing"
        tasks = (self._sender, self._receiver)
        if was_open:
            self.close_reason = reason
            # Queued caller audio is dropped: the call is over, nobody would hear an answer.
            self._outbox.clear()
            self._outbox.append((False, self.call.end(reason)))
            self._queued_frames, self._queued_events = 0, 1
            self._ready.set()
            try:
                async with asyncio.timeout(self._config.close_timeout_s):
                    await asyncio.gather(*tasks)
            except Exception as exc:  # includes TimeoutError
                log.debug("session %s: unclean end: %s", self.info.session_id, _error_text(exc))
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        try:
            self._stream.cancel()
            await self._channel.close(grace=None)
        finally:
            self.state = "closed"
            self._on_closed(self)
            counts = self.counters()
            log.info(
                "session %s: grpc call closed (%s): frames in %d sent %d dropped %d out %d "
                "(ahead dropped %d), events in %d out %d, clears %d, protocol errors %d, "
                "wrong codec %d, unknown %d",
                self.info.session_id,
                self.close_reason,
                *(
                    counts[name]
                    for name in (
                        "frames_in",
                        "frames_sent",
                        "frames_dropped",
                        "frames_out",
                        "frames_ahead_dropped",
                        "events_in",
                        "events_out",
                        "clears",
                        "protocol_errors",
                        "wrong_codec",
                        "unknown_messages",
                    )
                ),
            )


class GrpcBackend(Backend):
    """Opens one channel and one ``Call`` stream per call."""

    name = "grpc"

    def __init__(self, config: GrpcBackendConfig) -> None:
        self.config = config
        self._credentials: grpc.ChannelCredentials | None = None
        if config.tls:
            root = None
            if config.ca_file is not None:
                with open(config.ca_file, "rb") as file:
                    root = file.read()
            self._credentials = grpc.ssl_channel_credentials(root_certificates=root)
        self._options = channel_options(config)
        self._sessions: SessionTally[GrpcSession] = SessionTally()
        self._closed = False

    def _channel(self) -> grpc.aio.Channel:
        target = self.config.target
        if self._credentials is None:
            return grpc.aio.insecure_channel(target, options=self._options)
        return grpc.aio.secure_channel(target, self._credentials, options=self._options)

    async def open_session(
        self,
        info: SessionInfo,
        emit_audio: Callable[[bytes], None],
        emit_event: Callable[[dict], None],
        on_failure: Callable[[str], None],
    ) -> GrpcSession:
        if self._closed:
            raise BackendError("the grpc backend is closed")
        cfg = self.config
        metadata = [(SESSION_ID_HEADER, info.session_id)]
        if cfg.bearer:
            metadata.append(("authorization", f"Bearer {cfg.bearer}"))
        channel = self._channel()
        stream = channel.stream_stream(METHOD)(metadata=metadata, wait_for_ready=False)
        try:
            async with asyncio.timeout(cfg.connect_timeout_s):
                await stream.write(start_message(info))
                first = await stream.read()
                if first is grpc.aio.EOF:
                    code, details = await stream.code(), await stream.details()
                    raise BackendError(f"backend {cfg.url} ended the call ({code.name}: {details})")
                call = BackendCall(accepted_format(first), cfg.limits)
        except BaseException as exc:
            stream.cancel()
            await channel.close(grace=None)
            raise _open_failure(exc, cfg) from None
        session = GrpcSession(
            info,
            channel,
            stream,
            call,
            cfg,
            emit_audio,
            emit_event,
            on_failure,
            self._sessions.ended,
        )
        self._sessions.add(session)
        return session

    def counters(self) -> Mapping[str, int]:
        """The calls' counts (frames dropped, clears, bad messages...): the ended calls' totals
        and the live calls' so far."""
        return self._sessions.totals()

    async def close(self) -> None:
        self._closed = True
        sessions = list(self._sessions.live)
        await asyncio.gather(*(s.close("shutdown") for s in sessions), return_exceptions=True)


def _open_failure(exc: BaseException, cfg: GrpcBackendConfig) -> BaseException:
    """What to raise when a call's stream did not open: a BackendError saying why, or ``exc``
    itself when it is not about the backend (a cancellation, a bug)."""
    if isinstance(exc, BackendError):
        return exc
    if isinstance(exc, TimeoutError):
        return BackendError(f"backend {cfg.url} did not accept the call within "
                            f"{cfg.connect_timeout_s} s")  # fmt: skip
    if isinstance(exc, ProtocolError):
        return BackendError(f"backend {cfg.url} did not accept the call: {exc}")
    if isinstance(exc, grpc.aio.AioRpcError | grpc.aio.UsageError | OSError):
        return BackendError(f"cannot open a call at backend {cfg.url}: {_error_text(exc)}")
    return exc


def _error_text(exc: BaseException) -> str:
    """A gRPC error as a reason: its status code and details (a message over the limit is
    RESOURCE_EXHAUSTED)."""
    if isinstance(exc, grpc.aio.AioRpcError):
        if _status_lost(exc):
            return (
                "it ended the call while our message was on its way and gRPC lost its status "
                "(grpc/grpc#36066); a refused key or an unknown method are the usual causes"
            )
        return f"{exc.code().name}: {exc.details()}"
    return repr(exc)


def _status_lost(exc: grpc.aio.AioRpcError) -> bool:
    """Whether grpcio's asyncio client replaced the server's status with its own INTERNAL
    (a write that failed because the server had just ended the call: grpc/grpc#36066)."""
    return exc.code() is grpc.StatusCode.INTERNAL and "SendMessageOperation" in (
        exc.debug_error_string() or ""
    )


def _nothing_queued() -> int:
    return 0
