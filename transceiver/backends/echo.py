"""The ``echo`` backend: the caller hears itself and gets its events back. Embedded, the default.

It needs nothing outside the process, so a transceiver can be tried (and tested end to end)
without any inference service.
"""

from __future__ import annotations

from collections.abc import Callable

from transceiver.backend import FRAME_BYTES, Backend, BackendSession, SessionInfo

__all__ = ["EchoBackend", "EchoSession"]


class EchoSession(BackendSession):
    """Audio back as it comes, each event wrapped as ``{"type": "echo", "event": ...}``."""

    def __init__(
        self,
        info: SessionInfo,
        emit_audio: Callable[[bytes], None],
        emit_event: Callable[[dict], None],
    ) -> None:
        self.info = info
        self.closed = False
        self.close_reason: str | None = None
        self.frames_in = 0  # frames given to audio_in
        self.frames_out = 0  # frames passed to emit_audio
        self.frames_dropped = 0  # never: the sink is never behind the source here
        self.protocol_errors = 0
        self._emit_audio = emit_audio
        self._emit_event = emit_event

    def audio_in(self, pcm: bytes) -> None:
        if len(pcm) != FRAME_BYTES:
            raise ValueError(f"audio_in takes one {FRAME_BYTES}-byte frame, got {len(pcm)} bytes")
        if self.closed:
            return
        self.frames_in += 1
        self._emit_audio(bytes(pcm))
        self.frames_out += 1

    def event_in(self, event: dict) -> None:
        if not isinstance(event, dict):
            raise TypeError(f"event_in takes a dict, got {type(event).__name__}")
        if not self.closed:
            self._emit_event({"type": "echo", "event": event})

    async def close(self, reason: str) -> None:
        if not self.closed:
            self.closed = True
            self.close_reason = reason


class EchoBackend(Backend):
    name = "echo"

    async def open_session(
        self,
        info: SessionInfo,
        emit_audio: Callable[[bytes], None],
        emit_event: Callable[[dict], None],
        on_failure: Callable[[str], None],
    ) -> EchoSession:
        session = EchoSession(info, emit_audio, emit_event)
        emit_event({"type": "session.started", "session_id": info.session_id})
        return session
