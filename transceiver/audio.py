"""Audio between aiortc and a backend: 20 ms PCM16 mono frames at 48 kHz both ways.

Inbound, the caller's decoded frames (stereo s16 from aiortc's Opus decoder) become mono PCM.
Outbound, ``BackendAudioTrack`` paces the backend's PCM in real time and encodes it to Opus
itself, returning encoded packets to aiortc's sender: the sender then only packetizes them. That
removes two per-frame costs of stock aiortc (docs/design.md) without patching it: the pure-Python
``compute_audio_level_dbov`` over every frame, and a thread-pool round trip
(``run_in_executor``) for every encode. The price: no RFC 6464 audio-level header extension on
outbound packets, which a 1:1 voice session does not need.
"""

from __future__ import annotations

import asyncio
import fractions
import time
from collections import deque
from collections.abc import Callable

import av
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from transceiver.backend import AUDIO_SAMPLE_RATE, FRAME_BYTES

SAMPLES_PER_FRAME = AUDIO_SAMPLE_RATE // 50
FRAME_S = SAMPLES_PER_FRAME / AUDIO_SAMPLE_RATE
TIME_BASE = fractions.Fraction(1, AUDIO_SAMPLE_RATE)
SILENCE = bytes(FRAME_BYTES)
OPUS_BITRATE = 32000  # voice, mono


class InboundConverter:
    """aiortc AudioFrame (any layout/rate) -> whole 20 ms PCM16 mono frames."""

    def __init__(self) -> None:
        self._resampler = av.AudioResampler(
            format="s16", layout="mono", rate=AUDIO_SAMPLE_RATE, frame_size=SAMPLES_PER_FRAME
        )

    def convert(self, frame: av.AudioFrame) -> list[bytes]:
        out = []
        for f in self._resampler.resample(frame):
            out.append(bytes(f.planes[0])[: f.samples * 2])
        return out


class BackendAudioTrack(MediaStreamTrack):
    """An outbound audio track fed by ``push(pcm)``; yields Opus packets paced at 20 ms."""

    kind = "audio"

    def __init__(
        self,
        max_buffered_frames: int = 1500,
        on_frame_out: Callable[[], None] | None = None,
    ) -> None:
        super().__init__()
        self._on_frame_out = on_frame_out
        self._frames: deque[bytes] = deque(maxlen=max_buffered_frames)
        self._pending = b""
        self._codec = av.CodecContext.create("libopus", "w")
        self._codec.bit_rate = OPUS_BITRATE
        self._codec.format = "s16"
        self._codec.layout = "mono"
        self._codec.sample_rate = AUDIO_SAMPLE_RATE
        self._codec.time_base = TIME_BASE
        self._codec.options = {"application": "voip"}
        self._pts = 0
        self._start: float | None = None
        self._encoded: deque[av.Packet] = deque()
        self.frames_out = 0
        self.frames_dropped = 0

    def push(self, pcm: bytes) -> None:
        """Queue PCM from the backend (any length; split into whole frames, rest kept)."""
        data = self._pending + pcm
        whole = len(data) - len(data) % FRAME_BYTES
        for i in range(0, whole, FRAME_BYTES):
            if len(self._frames) == self._frames.maxlen:
                self.frames_dropped += 1
            self._frames.append(data[i : i + FRAME_BYTES])
        self._pending = data[whole:]

    def clear(self) -> int:
        """Forget audio not yet played (barge-in); returns how many frames were dropped."""
        dropped = len(self._frames)
        self._frames.clear()
        self._pending = b""
        return dropped

    def _encode(self, pcm: bytes) -> list[av.Packet]:
        frame = av.AudioFrame(format="s16", layout="mono", samples=SAMPLES_PER_FRAME)
        frame.planes[0].update(pcm)
        frame.sample_rate = AUDIO_SAMPLE_RATE
        frame.time_base = TIME_BASE
        frame.pts = self._pts
        self._pts += SAMPLES_PER_FRAME
        return list(self._codec.encode(frame))

    async def recv(self) -> av.Packet:  # type: ignore[override]
        if self.readyState != "live":
            raise MediaStreamError
        while not self._encoded:
            # Pace like a sound card: one frame every 20 ms from the first call.
            if self._start is None:
                self._start = time.monotonic()
            wait = self._start + self._pts / AUDIO_SAMPLE_RATE - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            pcm = self._frames.popleft() if self._frames else SILENCE
            if pcm is not SILENCE:
                self.frames_out += 1
                if self._on_frame_out is not None:
                    self._on_frame_out()
            for packet in self._encode(pcm):
                packet.time_base = TIME_BASE
                self._encoded.append(packet)
        return self._encoded.popleft()
