"""The example voice agent (examples/voice_agent/) as tests run it: a real process on loopback,
speech to send it (espeak-ng, at the Realtime API's 24 kHz), and its modules for tests that
drive its sans-I/O core directly."""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
AGENT_DIR = ROOT / "examples" / "voice_agent"
READY_TIMEOUT_S = 60.0  # imports (openai's types) and pocketsphinx's model, on a busy machine


def agent_module(name: str) -> ModuleType:
    """One of the agent's modules (``conversation``, ``pcm``...): they import each other as
    siblings, so their folder goes on ``sys.path``."""
    if str(AGENT_DIR) not in sys.path:
        sys.path.insert(0, str(AGENT_DIR))
    return importlib.import_module(name)


def spoken(text: str) -> bytes:
    """``text`` said by espeak-ng, as PCM16 mono at 24 kHz."""
    pcm = agent_module("pcm")
    wav = subprocess.run(
        ["espeak-ng", "-v", "en-us", "--stdout"], input=text.encode(), capture_output=True,
        check=True, timeout=10,
    ).stdout  # fmt: skip
    rate_hz, audio = pcm.wav_pcm(wav)
    return pcm.resample(audio, rate_hz, 24_000)


@dataclass
class RunningAgent:
    url: str  # ws://127.0.0.1:PORT/v1/realtime
    process: subprocess.Popen
    stderr: list[str]


@contextlib.contextmanager
def running_agent(*args: str) -> Iterator[RunningAgent]:
    """The agent on a free loopback port until the block ends; stopped by its PID (SIGTERM,
    then SIGKILL) whatever the outcome."""
    process = subprocess.Popen(
        [sys.executable, str(AGENT_DIR / "agent.py"), "--listen", "127.0.0.1:0", *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    stderr: list[str] = []
    assert process.stderr is not None and process.stdout is not None
    threading.Thread(target=lambda: stderr.extend(process.stderr), daemon=True).start()
    try:
        url = _ready_url(process, stderr)
        yield RunningAgent(url, process, stderr)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=5)


def _ready_url(process: subprocess.Popen, stderr: list[str]) -> str:
    """The URL of the agent's ``ready ws://...`` line, read with a deadline."""
    found: list[str] = []
    reader = threading.Thread(target=lambda: found.append(process.stdout.readline()), daemon=True)
    reader.start()
    reader.join(READY_TIMEOUT_S)
    line = found[0] if found else ""
    if not line.startswith("ready "):
        time.sleep(0.2)  # let stderr's reader catch the traceback, for the message below
        tail = "".join(stderr[-20:])
        raise AssertionError(f"agent not ready: {line!r}, exit {process.poll()}\n{tail}")
    return line.split()[1]
