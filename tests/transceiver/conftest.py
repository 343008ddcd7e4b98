"""An in-process transceiver on real loopback sockets, reached directly (no relay)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import replace

from aiohttp import web

from bench.peers import free_port
from bench.webrtc_client import loopback_only
from common.hint import Keyring
from transceiver.backend import Backend
from transceiver.config import TransceiverConfig
from transceiver.http import make_app
from transceiver.server import TransceiverServer

loopback_only()


def direct_config(**overrides) -> TransceiverConfig:
    """Clients talk to the media socket directly: it advertises itself.

    Every client of a test is 127.0.0.1: no per-client rate limit unless a test sets one.
    """
    media = free_port()
    base = TransceiverConfig(
        transceiver_id=3,
        cluster=0,
        media=("127.0.0.1", media),
        advertise=("127.0.0.1", media),
        http=("127.0.0.1", free_port(kind=socket.SOCK_STREAM)),
        keyring_json=Keyring.generate(0).to_json(),
        client_rate_per_s=0.0,
    )
    return replace(base, **overrides)


@contextlib.asynccontextmanager
async def running(
    config: TransceiverConfig, backend: Backend | None = None
) -> AsyncIterator[tuple[TransceiverServer, str]]:
    server = TransceiverServer(config, backend=backend)
    await server.start()
    runner = web.AppRunner(make_app(server), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, *config.http).start()
    try:
        yield server, f"http://{config.http[0]}:{config.http[1]}"
    finally:
        await server.close()
        await runner.cleanup()


def run(coro, timeout_s: float = 60):  # type: ignore[no-untyped-def]
    return asyncio.run(asyncio.wait_for(coro, timeout_s))
