"""Where a caller's turn begins and ends: webrtcvad's verdict per 20 ms frame, and the small
state machine (silent -> speaking -> silent) that turns those verdicts into speech started at
X ms / stopped at Y ms, on the audio clock (milliseconds of audio appended so far).

No clock and no socket: the conversation feeds it frames and reads its answers.
"""

from __future__ import annotations

from dataclasses import dataclass

import pcm

FRAME_MS = 20  # webrtcvad takes 10, 20 or 30 ms frames; the agent uses 20 ms throughout
INPUT_HZ = 24_000  # the Realtime API's PCM16 rate
VAD_HZ = 16_000
FRAME_BYTES = INPUT_HZ * FRAME_MS // 1000 * pcm.SAMPLE_BYTES  # 960: one input frame


class VoiceActivity:
    """webrtcvad over 24 kHz input frames, each resampled to 16 kHz first.

    webrtcvad's aggressiveness runs from 0 (keeps most as speech) to 3; the Realtime API's
    ``turn_detection.threshold`` (0..1) maps onto it (``set_threshold``).
    """

    def __init__(self, mode: int = 2) -> None:
        import webrtcvad  # webrtcvad-wheels: the same module, with binary wheels

        self._vad = webrtcvad.Vad(mode)

    def set_threshold(self, threshold: float) -> None:
        """The Realtime ``turn_detection.threshold`` (0..1): 0.5, the API's default, -> mode 2."""
        self._vad.set_mode(max(0, min(3, int(threshold * 4))))

    def __call__(self, frame_24k: bytes) -> bool:
        return self._vad.is_speech(pcm.resample(frame_24k, INPUT_HZ, VAD_HZ), VAD_HZ)


@dataclass(frozen=True)
class SpeechStarted:
    first_voiced_ms: int  # start of the first voiced frame of the run that started the turn


@dataclass(frozen=True)
class SpeechStopped:
    last_voiced_end_ms: int  # end of the turn's last voiced frame
    detected_ms: int  # end of the frame that completed the silence


class TurnDetector:
    """Turn boundaries from per-frame verdicts.

    A turn starts after ``start_ms`` of consecutive voiced frames (one voiced frame of a click
    is not speech) and stops after ``silence_ms`` of consecutive unvoiced ones (a pause between
    words is shorter), or when it has lasted ``max_turn_ms`` (the buffer stays bounded).
    """

    def __init__(self, silence_ms: int = 500, start_ms: int = 60, max_turn_ms: int = 30_000):
        self.silence_ms = silence_ms
        self.start_ms = start_ms
        self.max_turn_ms = max_turn_ms
        self.speaking = False
        self._run_start_ms: int | None = None  # first frame of the current voiced run
        self._last_voiced_end_ms = 0
        self._turn_start_ms = 0

    def reset(self) -> None:
        """Forget a turn in progress (the client cleared or committed the buffer)."""
        self.speaking = False
        self._run_start_ms = None

    def push(self, voiced: bool, frame_start_ms: int) -> SpeechStarted | SpeechStopped | None:
        """The verdict on the frame that starts at ``frame_start_ms``; a boundary, if it is one."""
        frame_end_ms = frame_start_ms + FRAME_MS
        if not self.speaking:
            if not voiced:
                self._run_start_ms = None
                return None
            if self._run_start_ms is None:
                self._run_start_ms = frame_start_ms
            if frame_end_ms - self._run_start_ms < self.start_ms:
                return None
            self.speaking = True
            self._turn_start_ms = self._run_start_ms
            self._last_voiced_end_ms = frame_end_ms
            return SpeechStarted(self._run_start_ms)
        if voiced:
            self._last_voiced_end_ms = frame_end_ms
        silent_for = frame_end_ms - self._last_voiced_end_ms
        if silent_for >= self.silence_ms or frame_end_ms - self._turn_start_ms >= self.max_turn_ms:
            self.reset()
            return SpeechStopped(self._last_voiced_end_ms, frame_end_ms)
        return None
