"""The example voice agent (examples/voice_agent/) as tests run it: a real process on loopback,
speech to send it (espeak-ng, at the Realtime API's 24 kHz), and its modules for tests that
drive its sans-I/O core directly."""

from __future__ import annotations

import contextlib
import importlib
import subprocess
import sys
from collections.abc import Iterator
from types import ModuleType

from tests.support.example_server import ROOT, RunningServer, running_server

AGENT_DIR = ROOT / "examples" / "voice_agent"


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


@contextlib.contextmanager
def running_agent(*args: str) -> Iterator[RunningServer]:
    """The agent on a free loopback port until the block ends (``running_server``)."""
    with running_server(AGENT_DIR / "agent.py", *args) as running:
        yield running
