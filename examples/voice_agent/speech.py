"""The agent's ears and voice, both offline: pocketsphinx (its wheel ships a US English model)
and espeak-ng (Debian's ``espeak-ng``, run as a process). Blocking calls: the server runs them
in worker threads, never on its event loop.
"""

from __future__ import annotations

import shutil
import subprocess
import threading

import pcm

ASR_HZ = 16_000  # pocketsphinx's model
OUTPUT_HZ = 24_000  # the Realtime API's PCM16
SYNTHESIS_TIMEOUT_S = 10.0


class Recognizer:
    """pocketsphinx's default English model: one decoder, loaded once (about a second), used by
    one thread at a time (a decoder is not thread-safe)."""

    def __init__(self) -> None:
        from pocketsphinx import Decoder

        self._decoder = Decoder(samprate=ASR_HZ, loglevel="FATAL")
        self._lock = threading.Lock()

    def transcribe(self, audio_24k: bytes) -> str:
        """The words in one whole utterance (PCM16, 24 kHz), "" if it heard none."""
        audio = pcm.resample(audio_24k, OUTPUT_HZ, ASR_HZ)
        with self._lock:
            self._decoder.start_utt()
            self._decoder.process_raw(audio, full_utt=True)
            self._decoder.end_utt()
            hypothesis = self._decoder.hyp()
        return hypothesis.hypstr if hypothesis is not None else ""


class Synthesizer:
    """espeak-ng: text on its stdin, a WAV (22,050 Hz) on its stdout, resampled to 24 kHz."""

    def __init__(self, voice: str = "en-us", words_per_minute: int = 160) -> None:
        executable = shutil.which("espeak-ng")
        if executable is None:
            raise RuntimeError("espeak-ng is not installed (Debian: apt-get install espeak-ng)")
        self._command = [executable, "-v", voice, "-s", str(words_per_minute), "--stdout"]

    def speak(self, text: str) -> bytes:
        """``text`` spoken, as PCM16 at 24 kHz."""
        done = subprocess.run(
            self._command,
            input=text.encode(),
            capture_output=True,
            timeout=SYNTHESIS_TIMEOUT_S,
            check=True,
        )
        rate_hz, audio = pcm.wav_pcm(done.stdout)
        return pcm.resample(audio, rate_hz, OUTPUT_HZ)
