"""The interface between the transceiver and whatever answers a call (a "backend").

The transceiver decodes the caller's audio to 20 ms PCM16 mono frames at 48 kHz and relays the
caller's JSON events; a backend answers with PCM and events of its own. Both directions are
push-based and synchronous at the edge (``audio_in``/``event_in`` toward the backend,
``emit_audio``/``emit_event`` toward the caller), so neither side can stall the other's event
loop work: whoever is behind drops and counts, it never blocks.

Built-ins (``transceiver.backends.create_backend``): ``echo``, embedded, the default;
``websocket``, one WebSocket per call to an external service. The wire protocol and how to
write a backend: docs/backend-protocol.md.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = [
    "AUDIO_CHANNELS",
    "AUDIO_SAMPLE_RATE",
    "BACKEND_NAMES",
    "FRAME_BYTES",
    "FRAME_MS",
    "Backend",
    "BackendError",
    "BackendSession",
    "SessionInfo",
]

AUDIO_SAMPLE_RATE = 48000
AUDIO_CHANNELS = 1
FRAME_MS = 20
FRAME_BYTES = AUDIO_SAMPLE_RATE * FRAME_MS // 1000 * AUDIO_CHANNELS * 2  # PCM16 LE: 1920
assert FRAME_BYTES == 1920

BACKEND_NAMES = ("echo", "websocket")

_SESSION_ID = re.compile(r"[0-9a-f]{32}")


class BackendError(Exception):
    """A backend failed: it could not connect, broke the protocol, or went away."""


@dataclass(frozen=True)
class SessionInfo:
    """What a backend learns about a call when it starts."""

    session_id: str  # 32 lowercase hex characters
    transceiver_id: int  # 0..65535, as in the routing hint
    remote: str  # "ip:port" of the client as the transceiver saw it; may be ""
    metadata: dict[str, str] = field(default_factory=dict)  # free-form and small (user agent...)

    def __post_init__(self) -> None:
        if not isinstance(self.session_id, str) or not _SESSION_ID.fullmatch(self.session_id):
            raise ValueError(f"session_id must be 32 lowercase hex chars, got {self.session_id!r}")
        if not 0 <= self.transceiver_id <= 0xFFFF:
            raise ValueError(f"transceiver_id must be 0..65535, got {self.transceiver_id}")


class BackendSession(abc.ABC):
    """One call, as the backend sees it. Push-based both ways, never blocking the caller."""

    @abc.abstractmethod
    def audio_in(self, pcm: bytes) -> None:
        """One 20 ms PCM16 frame from the caller (FRAME_BYTES).

        Must not block; drop (and count) when the backend is behind. A frame of another size is
        the caller's bug: ValueError. Frames after ``close`` or a failure are ignored.
        """

    @abc.abstractmethod
    def event_in(self, event: dict) -> None:
        """A JSON event (an object) from the caller (the 'events' data channel). Must not block."""

    @abc.abstractmethod
    async def close(self, reason: str) -> None:
        """End of the call; idempotent; releases everything."""


class Backend(abc.ABC):
    """A source of sessions; one per transceiver process, shared by every call."""

    name: str

    @abc.abstractmethod
    async def open_session(
        self,
        info: SessionInfo,
        emit_audio: Callable[[bytes], None],
        emit_event: Callable[[dict], None],
        on_failure: Callable[[str], None],
    ) -> BackendSession:
        """Start a call.

        ``emit_audio(pcm)`` and ``emit_event(dict)`` are the transceiver's sinks toward the
        caller (sync, non-blocking; PCM in any whole number of 20 ms frames is accepted).
        ``on_failure(reason)`` tells the transceiver the backend side broke; it is called at most
        once per session and the transceiver then ends the call (reason 'backend_error') and
        calls ``close``. Raise BackendError if the call cannot start.
        """

    async def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release what the backend holds (connections, pools). Sessions still open are closed."""
