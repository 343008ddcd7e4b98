"""The agent's ears and voice, both offline: pocketsphinx (its wheel ships a US English model)
and espeak-ng (Debian's ``espeak-ng``, run as a process). Blocking calls, never on the server's
event loop: synthesis in worker threads, recognition in a process of its own
(``RecognitionProcess``), since pocketsphinx holds the GIL while it decodes.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

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


@dataclass(frozen=True)
class Timed:
    """A job's result and its times, taken in the thread (or process) that ran it."""

    result: Any
    ms: float  # how long it took (the monotonic clock)
    started_t: float  # wall clock (``time.time()``, one clock for every process), for the log
    ended_t: float


def timed(work: Any, argument: Any) -> Timed:
    """``work(argument)``, timed where it runs."""
    started_t, started = time.time(), time.monotonic()
    result = work(argument)
    ms = (time.monotonic() - started) * 1000
    return Timed(result, ms, started_t, time.time())


_recognizer: Recognizer | None = None  # the recognition process's own


def _start_recognizer(parent_pid: int) -> None:
    """The recognition process's start: it ends with the agent (Linux: SIGTERM when its
    parent dies, ``prctl(PR_SET_PDEATHSIG)``; elsewhere when the agent shuts its pool down),
    and loads its decoder."""
    global _recognizer
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
        if os.getppid() != parent_pid:  # the agent died before the line above
            os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the agent's to handle
    _recognizer = Recognizer()


def transcribe(audio_24k: bytes) -> str:
    """``Recognizer.transcribe`` in the recognition process."""
    assert _recognizer is not None, "run by RecognitionProcess only"
    return _recognizer.transcribe(audio_24k)


class RecognitionProcess(ProcessPoolExecutor):
    """pocketsphinx in a process of its own, one decoder, one utterance at a time: it holds the
    GIL for most of a decode (hundreds of ms; in a thread, the server's event loop stood still
    as long, and so did every other call's audio, turns and answers: ``rtcedge bench turn``
    with three calls). Jobs: ``timed(transcribe, audio)``; the model is loaded before the
    constructor returns (the agent is ready when it is)."""

    def __init__(self) -> None:
        super().__init__(
            1,
            mp_context=multiprocessing.get_context("spawn"),  # no fork of a threaded server
            initializer=_start_recognizer,
            initargs=(os.getpid(),),
        )
        self.submit(transcribe, bytes(OUTPUT_HZ // 10 * pcm.SAMPLE_BYTES)).result()  # 100 ms
