"""The bot's one frame processor: it answers each thing the caller says with the caller's own
audio, and stops when the caller speaks over it.

- A turn ends after ``turn_end_ms`` of silence; the answer is that turn's audio, played back
  through Pipecat's output (which paces it in real time), then a Twilio ``mark`` named
  ``answer-N``. While that mark has not come back, the caller has not heard the whole answer:
  the bot is speaking.
- The caller speaking over it (two loud frames in a row) is an interruption, and the processor
  sends audio then a clear: a cue (``cue_ms`` of a tone at ``cue_hz``) at once, ahead of real
  time as a streaming speech synthesizer sends speech, as urgent transport messages with a mark
  ``cue-N`` after its first ``cue_mark_ms`` and a mark ``cue-N-end`` after the rest. When
  ``cue-N`` comes back (the caller has been sent the cue's start), Pipecat's interruption drops
  what Pipecat still holds of the answer and makes its ``TwilioFrameSerializer`` send
  ``clear``. So the caller hears the cue's start and, if marks are exact and the clear works
  within a frame, at most a frame more; and ``cue-N-end`` comes back at the clear, Twilio's
  rule for pending marks. (Pipecat paces its own audio in real time, so the edge's playout
  holds a frame or two of an answer at most; the cue, sent ahead, is what fills it.)

Marks come back as Twilio sends them; Pipecat's serializer drops them, so ``bot.py``'s
serializer turns them into ``InputTransportMessageFrame`` for this processor.
"""

from __future__ import annotations

import base64
import math
from dataclasses import asdict, dataclass, field

import numpy as np
from pipecat.audio.utils import create_stream_resampler, pcm_to_ulaw
from pipecat.frames.frames import (
    Frame,
    InputAudioRawFrame,
    InputTransportMessageFrame,
    OutputAudioRawFrame,
    OutputTransportMessageFrame,
    OutputTransportMessageUrgentFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

RATE = 8000  # Twilio's, and the pipeline's: no resampling anywhere
LOUD_RMS = 500.0  # of 32767: a frame louder than this is speech (the tests' tones are ~8000)
BARGE_IN_FRAMES = 2


@dataclass
class CallRecord:
    """What the bot saw of one call (``GET /calls``)."""

    stream_id: str
    call_id: str
    custom_parameters: dict
    frames_in: int = 0  # the caller's audio frames Pipecat delivered
    samples_in: int = 0
    answers: list[dict] = field(default_factory=list)  # {"name", "ms"}
    marks_back: list[str] = field(default_factory=list)
    interruptions: int = 0
    ended: bool = False

    def as_dict(self) -> dict:
        return asdict(self)


def tone(ms: int, hz: float, amplitude: float = 8000.0) -> bytes:
    """PCM16 at 8 kHz: the cue."""
    t = np.arange(RATE * ms // 1000) / RATE
    return (amplitude * np.sin(2 * math.pi * hz * t)).astype("<i2").tobytes()


def loud(pcm: bytes) -> bool:
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
    return bool(samples.size) and float(np.sqrt(np.mean(samples * samples))) > LOUD_RMS


class Parrot(FrameProcessor):
    """Answers each turn with its own audio; an interruption: a cue, then a clear."""

    def __init__(
        self,
        record: CallRecord,
        turn_end_ms: int = 200,
        cue_ms: int = 300,
        cue_mark_ms: int = 100,
        cue_hz: float = 1500,
    ) -> None:
        super().__init__()
        self.record = record
        self._turn_end_samples = RATE * turn_end_ms // 1000
        cue = tone(cue_ms, cue_hz)
        split = 2 * RATE * cue_mark_ms // 1000
        self._cue = (cue[:split], cue[split:])
        self._resampler = create_stream_resampler()
        self._turn: list[bytes] = []
        self._quiet_samples = 0
        self._loud_run = 0
        self._speaking: str | None = None  # the answer whose mark has not come back
        self._clear_at: str | None = None  # the cue's mark: when it is back, clear

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, InputAudioRawFrame):
            await self._caller(frame.audio)
        elif isinstance(frame, InputTransportMessageFrame):
            await self._message(frame.message)
        else:
            await self.push_frame(frame, direction)

    async def _caller(self, pcm: bytes) -> None:
        self.record.frames_in += 1
        self.record.samples_in += len(pcm) // 2
        if loud(pcm):
            self._loud_run += 1
            self._quiet_samples = 0
            self._turn.append(pcm)
            if self._speaking is not None and self._loud_run >= BARGE_IN_FRAMES:
                await self._interrupted()
            return
        self._loud_run = 0
        if self._turn:
            self._quiet_samples += len(pcm) // 2
            if self._quiet_samples >= self._turn_end_samples:
                await self._answer()

    async def _answer(self) -> None:
        audio, self._turn = b"".join(self._turn), []
        name = f"answer-{len(self.record.answers) + 1}"
        self.record.answers.append({"name": name, "ms": len(audio) * 1000 // (2 * RATE)})
        await self.push_frame(OutputAudioRawFrame(audio=audio, sample_rate=RATE, num_channels=1))
        # After the audio in Pipecat's output queue: sent once the answer's last chunk was.
        await self.push_frame(OutputTransportMessageFrame(message=self._mark(name)))
        self._speaking = name

    async def _interrupted(self) -> None:
        """Audio then a clear: the cue ahead of real time with its marks; the clear once the
        caller has been sent the cue's start."""
        self.record.interruptions += 1
        self._speaking = None
        name = f"cue-{self.record.interruptions}"
        head, rest = self._cue
        await self._urgent(await self._media(head))
        await self._urgent(self._mark(name))
        await self._urgent(await self._media(rest))
        await self._urgent(self._mark(f"{name}-end"))
        self._clear_at = name

    async def _media(self, pcm: bytes) -> dict:
        ulaw = await pcm_to_ulaw(pcm, RATE, RATE, self._resampler)
        payload = base64.b64encode(ulaw).decode("ascii")
        return {"event": "media", "streamSid": self.record.stream_id, "media": {"payload": payload}}

    async def _urgent(self, message: dict) -> None:
        await self.push_frame(OutputTransportMessageUrgentFrame(message=message))

    async def _message(self, message: dict) -> None:
        if message.get("event") != "mark":
            return
        name = (message.get("mark") or {}).get("name")
        self.record.marks_back.append(name)
        if name == self._speaking:
            self._speaking = None  # the caller has been sent the whole answer
        if name == self._clear_at:
            self._clear_at = None
            await self.broadcast_interruption()  # -> TwilioFrameSerializer: {"event": "clear"}

    def _mark(self, name: str) -> dict:
        return {"event": "mark", "streamSid": self.record.stream_id, "mark": {"name": name}}
