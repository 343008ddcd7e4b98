"""An rtcedge backend plugin: the caller hears what they said half a second later, and learns
every second how much of it the backend heard. `pip install examples/backend_plugin`, then
`transceiver serve --backend delay ...` (docs/plugins.md)."""

from collections import deque

from transceiver.backend import Backend, BackendSession
from transceiver.backends.plugins import BackendOptions

DELAY_FRAMES = 25  # of 20 ms: half a second


class DelaySession(BackendSession):
    def __init__(self, emit_audio, emit_event, sample_rate: int) -> None:
        self.sample_rate = sample_rate  # audio_format: pcm16, the default
        self.emit_audio, self.emit_event = emit_audio, emit_event
        self.said: deque[bytes] = deque(maxlen=DELAY_FRAMES)
        self.frames = 0

    def audio_in(self, pcm: bytes) -> None:  # one 20 ms frame; must not block
        if len(self.said) == DELAY_FRAMES:
            self.emit_audio(self.said[0])  # the oldest, about to leave the deque
        self.said.append(bytes(pcm))
        self.frames += 1
        if self.frames % 50 == 0:
            self.emit_event({"type": "delay.heard", "frames": self.frames})

    def event_in(self, event: dict) -> None:
        self.emit_event({"type": "delay.event", "event": event})

    async def close(self, reason: str) -> None:
        self.said.clear()


class DelayBackend(Backend):
    name = "delay"

    def __init__(self, sample_rate: int) -> None:
        self.sample_rate = sample_rate

    async def open_session(self, info, emit_audio, emit_event, on_failure) -> DelaySession:
        return DelaySession(emit_audio, emit_event, self.sample_rate)


def make_backend(options: BackendOptions) -> Backend:
    """The factory (pyproject.toml names it): --audio-rate, or 48 kHz; no URL, key or Opus."""
    if options.url or options.key or options.audio_format != "pcm16":
        raise ValueError("the delay backend takes no --backend-url, key or --audio-format opus")
    return DelayBackend(options.sample_rate or 48000)
