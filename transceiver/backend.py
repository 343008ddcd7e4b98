"""The interface between the transceiver and whatever answers a call (a "backend").

The transceiver relays the caller's audio and JSON events; a backend answers with audio and
events of its own. Audio comes in one of two formats, chosen by the backend for each session
(``BackendSession.audio_format``): ``pcm16``, 20 ms PCM16 mono frames at 48 kHz that the
transceiver decodes and encodes, or ``opus``, the caller's Opus packets as they arrived and Opus
packets back, with no codec work in the transceiver at all. Both directions are
push-based and synchronous at the edge (``audio_in``/``event_in`` toward the backend,
``emit_audio``/``emit_event`` toward the caller), so neither side can stall the other's event
loop work: whoever is behind drops and counts, it never blocks.

Built-ins (``transceiver.backends.create_backend``): ``echo``, embedded, the default;
``websocket``, one WebSocket per call to an external service; ``realtime``, a Realtime-API model
server; ``media-streams``, a telephony bot (Twilio's Media Streams); ``grpc``, our protocol as one
gRPC stream per call. Others come from outside, in-process: plugins
(``transceiver.backends.plugins``, docs/plugins.md). The wire protocols and how to write a
backend: docs/backend-protocol.md.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = [
    "AUDIO_CHANNELS",
    "AUDIO_FORMATS",
    "AUDIO_SAMPLE_RATE",
    "BACKEND_NAMES",
    "FRAME_BYTES",
    "FRAME_MS",
    "OPUS",
    "PCM16",
    "SAMPLE_RATES",
    "Backend",
    "BackendError",
    "BackendSession",
    "OpusFrame",
    "SessionInfo",
    "frame_bytes",
]

AUDIO_SAMPLE_RATE = 48000
AUDIO_CHANNELS = 1
FRAME_MS = 20
FRAME_BYTES = AUDIO_SAMPLE_RATE * FRAME_MS // 1000 * AUDIO_CHANNELS * 2  # PCM16 LE: 1920
assert FRAME_BYTES == 1920

BACKEND_NAMES = ("echo", "websocket", "realtime", "media-streams", "grpc")
# The PCM rates a pcm16 session may take and give (``BackendSession.sample_rate``): libopus
# decodes to and encodes from each natively, so no resampler runs (transceiver.call.libopus).
SAMPLE_RATES = (8000, 16000, 24000, 48000)


def frame_bytes(sample_rate: int) -> int:
    """Bytes of one 20 ms PCM16 mono frame at ``sample_rate``."""
    return sample_rate * FRAME_MS // 1000 * AUDIO_CHANNELS * 2


PCM16 = "pcm16"  # audio_in(pcm) / emit_audio(pcm): 20 ms PCM16 frames, decoded and encoded here
OPUS = "opus"  # opus_in(OpusFrame) / emit_audio(packet): Opus packets passed through untouched
AUDIO_FORMATS = (PCM16, OPUS)

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
    # True when the call moved here from a transceiver that was scaled down: the same
    # session_id goes on (a voice agent keeps its conversation); its old session ends with
    # reason "migrated" (docs/backend-protocol.md, "Resumed calls").
    resumed: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.session_id, str) or not _SESSION_ID.fullmatch(self.session_id):
            raise ValueError(f"session_id must be 32 lowercase hex chars, got {self.session_id!r}")
        if not 0 <= self.transceiver_id <= 0xFFFF:
            raise ValueError(f"transceiver_id must be 0..65535, got {self.transceiver_id}")


class OpusFrame(NamedTuple):
    """One Opus packet from the caller (format ``opus``), with its RTP timing (a named tuple:
    one per packet, made at a third of a frozen dataclass's cost).

    Packets come in sequence order (the transceiver's jitter buffer reorders and drops late
    ones); a gap in ``sequence`` is a packet lost on the way, which the backend's decoder may
    conceal (libopus: decode with no data, or with FEC from the next packet).
    """

    payload: bytes  # the Opus packet (RFC 7587: the whole RTP payload)
    sequence: int  # RTP sequence number, 16 bits, wraps
    timestamp: int  # RTP timestamp, 48 kHz clock, 32 bits, wraps; random origin


class BackendSession(abc.ABC):
    """One call, as the backend sees it. Push-based both ways, never blocking the caller.

    ``audio_format`` is what this session takes and gives, read by the transceiver once
    ``open_session`` returns: ``pcm16`` (``audio_in`` and PCM through ``emit_audio``) or
    ``opus`` (``opus_in`` and one Opus packet per ``emit_audio``).
    """

    audio_format: str = PCM16
    # pcm16: the rate of ``audio_in`` and ``emit_audio`` PCM, one of SAMPLE_RATES, read once
    # with ``audio_format``; frames are 20 ms (``frame_bytes(sample_rate)``) at every rate.
    sample_rate: int = AUDIO_SAMPLE_RATE
    # The session sends its audio ahead of real time (a model server's deltas): the outbound
    # track then holds no slot open for audio about to come, which a live stream (an echo) needs.
    # Read once, with ``audio_format``; the track also learns it from how the audio comes.
    audio_ahead: bool = False

    @abc.abstractmethod
    def audio_in(self, pcm: bytes) -> None:
        """One 20 ms PCM16 frame from the caller (``frame_bytes(sample_rate)``; FRAME_BYTES at
        the default 48 kHz).

        Must not block; drop (and count) when the backend is behind. A frame of another size is
        the caller's bug: ValueError. Frames after ``close`` or a failure are ignored.
        """

    def opus_in(self, frame: OpusFrame) -> None:
        """One Opus packet from the caller, for a session whose ``audio_format`` is ``opus``.

        Must not block, as ``audio_in``; the packet duration is whatever the caller chose
        (20 ms from browsers). Frames after ``close`` or a failure are ignored.
        """
        raise NotImplementedError(f"{type(self).__name__} takes no Opus (audio_format pcm16)")

    @abc.abstractmethod
    def event_in(self, event: dict) -> None:
        """A JSON event (an object) from the caller (the 'events' data channel). Must not block."""

    def attach_playout(self, queued: Callable[[], int]) -> None:
        """The transceiver's count of this call's outbound frames (or packets) given to
        ``emit_audio`` and not yet sent, handed over once the session is open. An in-process
        backend may read it to keep a live stream's latency short (the echo does) or to know
        how much audio a barge-in would cut. Cheap to call; ignored by default."""
        return None

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

        ``emit_audio(data)`` and ``emit_event(dict)`` are the transceiver's sinks toward the
        caller (sync, non-blocking). ``data`` is, by the session's ``audio_format``: PCM in any
        whole number of 20 ms frames (``pcm16``), or exactly one Opus packet of 2.5..120 ms
        (``opus``; ValueError if it is not one), sent to the caller as it is.
        ``on_failure(reason)`` tells the transceiver the backend side broke; it is called at most
        once per session and the transceiver then ends the call (reason 'backend_error') and
        calls ``close``. Raise BackendError if the call cannot start.
        """

    def counters(self) -> Mapping[str, int]:
        """What this backend's calls did so far, by event (``barge_ins``...), each a running
        total: /metrics shows them as ``rtcedge_transceiver_backend_events_total{event}``."""
        return {}

    async def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release what the backend holds (connections, pools). Sessions still open are closed."""
