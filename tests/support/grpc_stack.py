"""The gRPC backend tests' parts: the example server (examples/grpc_backend/server.py) as an
importable module, its servicer served in the test's own event loop on a port the transceiver
processes were told at start, and an aiortc caller that sends events and tells the tones it
hears apart."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType

from aiortc import RTCConfiguration, RTCPeerConnection
from aiortc.mediastreams import MediaStreamTrack

from testbed.callers import ToneTrack, goertzel_power, heard_frames, whip_call
from transceiver.call import seam

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "grpc_backend" / "server.py"


def example() -> ModuleType:
    """examples/grpc_backend/server.py, imported (it is a script, not a package)."""
    spec = importlib.util.spec_from_file_location("grpc_backend_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.asynccontextmanager
async def serving(servicer: object, port: int) -> AsyncIterator[None]:
    """``servicer`` on 127.0.0.1:``port`` (the example's server options) for the block."""
    server, bound = example().make_server(servicer, f"127.0.0.1:{port}")
    assert bound == port, f"port {port} is taken"
    await server.start()
    try:
        yield
    finally:
        await server.stop(grace=None)


class Caller:
    """One aiortc call with an ``events`` data channel: it says ``hz`` (amplitude 0 for
    silence), and labels every frame it hears with the loudest of ``tones`` (or '-')."""

    def __init__(self, hz: float, tones: tuple[float, ...]) -> None:
        self.voice = ToneTrack(hz)
        self.tones = tones
        self.heard: list[str] = []
        self.events: list[dict] = []
        self.location = ""
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.pc.addTrack(self.voice)
        seam.install_jitter_buffer(self.pc)  # a browser's latency, not aiortc's stock buffer's
        self.channel = self.pc.createDataChannel("events")
        self.channel.on("message", lambda message: self.events.append(json.loads(message)))
        self._tasks: list[asyncio.Task] = []
        self.pc.on(
            "track", lambda track: self._tasks.append(asyncio.ensure_future(self._ear(track)))
        )

    def _on_track(self, track: MediaStreamTrack) -> None:
        self._tasks.append(asyncio.ensure_future(self._ear(track)))

    async def connect(self, url: str) -> None:
        self.location = await whip_call(self.pc, url)

    def send(self, event: dict) -> None:
        self.channel.send(json.dumps(event))

    def count(self, hz: float) -> int:
        return self.heard.count(str(hz))

    async def _ear(self, track: MediaStreamTrack) -> None:
        async for samples in heard_frames(track):
            total = sum(x * x for x in samples) * len(samples) / 2 + 1.0
            label = "-"
            if total > 1e9:
                power, hz = max((goertzel_power(samples, hz), hz) for hz in self.tones)
                label = str(hz) if power > 0.2 * total else "-"
            self.heard.append(label)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await self.pc.close()
