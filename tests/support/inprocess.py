"""A transceiver in-process on real loopback sockets, reached directly (no relay): its config,
the server with its HTTP app running, and what its metrics say."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import replace

from aiohttp import web

from common.hint import Keyring
from testbed.ports import free_port
from transceiver.backend import Backend
from transceiver.config import TransceiverConfig
from transceiver.server import TransceiverServer
from transceiver.signaling.app import make_app


def direct_config(**overrides) -> TransceiverConfig:
    """Clients talk to the media socket directly: it advertises itself.

    Every client of a test is 127.0.0.1: no per-client rate limit unless a test sets one.
    No admission by load either: in-process clients share the server's event loop, so its lag
    and CPU are the test's own (tests/transceiver/test_admission.py runs a real process).
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
        admit_max_cpu_pct=0.0,
        admit_max_loop_lag_ms=0.0,
    )
    return replace(base, **overrides)


@contextlib.asynccontextmanager
async def running(
    config: TransceiverConfig, backend: Backend | None = None
) -> AsyncIterator[tuple[TransceiverServer, str]]:
    """The server and its WHIP app on ``config.http``: (server, base URL); closed on exit."""
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


def ended(server: TransceiverServer, reason: str) -> float:
    """Sessions of ``server`` that ended for ``reason`` (its counter, read in-process)."""
    return server.metrics.sessions_ended.labels(reason)._value.get()
