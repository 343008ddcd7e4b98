"""The ``echo`` backend: the caller hears itself and gets its events back. Embedded, the default.

It needs nothing outside the process, so a transceiver can be tried (and tested end to end)
without any inference service. It runs in either audio format (``audio_format``, from
``transceiver serve --audio-format``): ``pcm16`` echoes decoded frames (the transceiver decodes
and re-encodes), ``opus`` echoes the caller's Opus packets as they are (no codec work at all).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from transceiver.backend import (
    AUDIO_FORMATS,
    AUDIO_SAMPLE_RATE,
    OPUS,
    PCM16,
    SAMPLE_RATES,
    Backend,
    BackendSession,
    OpusFrame,
    SessionInfo,
    frame_bytes,
)
from transceiver.call.opus import packet_samples

__all__ = ["EchoBackend", "EchoSession", "PlayoutEstimate"]

FRAME_S = 0.020
FRAME_SAMPLES = 960  # 20 ms at 48 kHz
MAX_LAG_FRAMES = 5  # 100 ms
# A queue standing above this many frames for TRIM_AFTER_S loses one frame (and again each
# TRIM_AFTER_S while it stands): the lag a burst left drains within seconds, at a cost of at
# most one frame in 200 (0.5 %) of the echo. Read before each frame is added: in real time the
# one before it has been sent by then (depth 0), so a frame still waiting is one standing in
# the queue, 20 ms added to the echo for as long as it stands. A caller's packet that arrives
# just after its tick leaves one (the track sends silence in its slot, and the packet then
# waits a whole frame); with 1.5 here, one standing frame was kept for good.
TRIM_ABOVE_FRAMES = 0.5
TRIM_AFTER_S = 4.0


class PlayoutEstimate:
    """How many frames a sink that plays one every 20 ms still holds, from when each was given.

    What the echo uses when the transceiver gave it no count of its queue
    (``BackendSession.attach_playout``): the track drains in real time, so the depth follows
    from the hand-over times, except that it cannot see the sink's phase: a frame that just
    missed its tick stands in the real queue while this estimate says none does.
    """

    def __init__(self, frame_s: float = FRAME_S) -> None:
        self.frame_s = frame_s
        self.queued = 0.0
        self._at: float | None = None

    def depth(self, now: float) -> float:
        if self._at is not None:
            self.queued = max(0.0, self.queued - (now - self._at) / self.frame_s)
        self._at = now
        return self.queued

    def add(self, frames: float = 1.0) -> None:
        self.queued += frames


class EchoSession(BackendSession):
    """Audio back as it comes, each event wrapped as ``{"type": "echo", "event": ...}``.

    A live echo keeps its delay short: when incoming audio arrives in a burst (packets that
    waited in a queue during a fail-over, a stalled event loop), frames that would put more
    than ``max_lag_frames`` ahead of playback are dropped (``frames_dropped``) instead of
    delaying everything the caller hears afterwards; and a queue that stands above
    ``TRIM_ABOVE_FRAMES`` for ``TRIM_AFTER_S`` loses one frame, so that what a burst left
    behind drains within seconds instead of delaying the rest of the call (the way our jitter
    buffer sheds latency, ``transceiver.call.jitter``).
    """

    def __init__(
        self,
        info: SessionInfo,
        emit_audio: Callable[[bytes], None],
        emit_event: Callable[[dict], None],
        max_lag_frames: int = MAX_LAG_FRAMES,
        clock: Callable[[], float] = time.monotonic,
        audio_format: str = PCM16,
        sample_rate: int = AUDIO_SAMPLE_RATE,
    ) -> None:
        if audio_format not in AUDIO_FORMATS:
            raise ValueError(f"unknown audio format {audio_format!r} ({', '.join(AUDIO_FORMATS)})")
        if sample_rate not in SAMPLE_RATES:
            raise ValueError(f"sample_rate must be one of {SAMPLE_RATES}, got {sample_rate!r}")
        self.audio_format = audio_format
        self.sample_rate = sample_rate
        self._frame_bytes = frame_bytes(sample_rate)
        self.info = info
        self.closed = False
        self.close_reason: str | None = None
        self.frames_in = 0  # frames given to audio_in
        self.frames_out = 0  # frames passed to emit_audio
        self.frames_dropped = 0  # frames that would have made the echo lag
        self.protocol_errors = 0
        self.max_lag_frames = max_lag_frames
        self._playout = PlayoutEstimate()
        self._queued: Callable[[], int] | None = None  # the track's real count, when attached
        self._standing_since: float | None = None  # the queue above TRIM_ABOVE_FRAMES since
        self._clock = clock
        self._emit_audio = emit_audio
        self._emit_event = emit_event

    def audio_in(self, pcm: bytes) -> None:
        if len(pcm) != self._frame_bytes:
            raise ValueError(
                f"audio_in takes one {self._frame_bytes}-byte frame, got {len(pcm)} bytes"
            )
        self._echo(bytes(pcm), 1.0)

    def opus_in(self, frame: OpusFrame) -> None:
        if self.audio_format != OPUS:
            super().opus_in(frame)
        self._echo(frame.payload, packet_samples(frame.payload) / FRAME_SAMPLES)

    def _echo(self, data: bytes, frames: float) -> None:
        """Back to the caller, unless that would put it more than max_lag_frames behind."""
        if self.closed:
            return
        self.frames_in += 1
        now = self._clock()
        depth = self._playout.depth(now) if self._queued is None else self._queued()
        if depth >= self.max_lag_frames or self._trim(depth, now):
            self.frames_dropped += 1
            return
        if self._queued is None:
            self._playout.add(frames)
        self._emit_audio(data)
        self.frames_out += 1

    def attach_playout(self, queued: Callable[[], int]) -> None:
        """The track's own count of frames not yet sent: exact where the estimate guesses."""
        self._queued = queued

    def _trim(self, depth: float, now: float) -> bool:
        """Drop this frame to shorten a queue that stood too long (see the class doc)?"""
        if depth <= TRIM_ABOVE_FRAMES:
            self._standing_since = None
            return False
        if self._standing_since is None:
            self._standing_since = now
            return False
        if now - self._standing_since < TRIM_AFTER_S:
            return False
        self._standing_since = now
        return True

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
    """Every session in ``audio_format`` (``pcm16`` or ``opus``), pcm16 at ``sample_rate``."""

    name = "echo"

    def __init__(self, audio_format: str = PCM16, sample_rate: int = AUDIO_SAMPLE_RATE) -> None:
        if audio_format not in AUDIO_FORMATS:
            raise ValueError(f"unknown audio format {audio_format!r} ({', '.join(AUDIO_FORMATS)})")
        if sample_rate not in SAMPLE_RATES:
            raise ValueError(f"sample_rate must be one of {SAMPLE_RATES}, got {sample_rate!r}")
        self.audio_format = audio_format
        self.sample_rate = sample_rate

    async def open_session(
        self,
        info: SessionInfo,
        emit_audio: Callable[[bytes], None],
        emit_event: Callable[[dict], None],
        on_failure: Callable[[str], None],
    ) -> EchoSession:
        session = EchoSession(
            info,
            emit_audio,
            emit_event,
            audio_format=self.audio_format,
            sample_rate=self.sample_rate,
        )
        emit_event(
            {"type": "session.started", "session_id": info.session_id, "resumed": info.resumed}
        )
        return session
