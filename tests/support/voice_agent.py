"""The example voice agent (examples/voice_agent/) as tests run it: a real process on loopback,
speech to send it (espeak-ng, at the Realtime API's 24 kHz), and its modules for tests that
drive its sans-I/O core directly (those two from testbed/voice_agent.py, where the benchmarks
find them too)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from testbed.voice_agent import AGENT_DIR, agent_module, spoken
from tests.support.example_server import RunningServer, running_server

__all__ = ["AGENT_DIR", "agent_module", "running_agent", "spoken"]


@contextlib.contextmanager
def running_agent(*args: str) -> Iterator[RunningServer]:
    """The agent on a free loopback port until the block ends (``running_server``)."""
    with running_server(AGENT_DIR / "agent.py", *args) as running:
        yield running
