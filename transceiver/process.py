"""One transceiver process's life: the server and its HTTP listeners (--http, --metrics) start,
serve until SIGTERM, SIGINT or SIGHUP, then drain. ``transceiver serve`` (transceiver/cli.py) runs
it with the config its options made."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal

from aiohttp import web

from common.config import ConfigError
from transceiver.call.libopus import version
from transceiver.config import TransceiverConfig
from transceiver.signaling.listener import GuardedListener

log = logging.getLogger("rtcedge.transceiver")


async def run(config: TransceiverConfig, ready: asyncio.Event | None = None) -> None:
    """Serve until SIGTERM, SIGINT or SIGHUP, then drain."""
    from transceiver.server import TransceiverServer
    from transceiver.signaling.app import make_app, make_metrics_app

    server = TransceiverServer(config)
    await server.start()
    listeners: list[GuardedListener] = []
    # TLS on --http only (--https-cert): /metrics is for the cluster's eyes, never public.
    apps = [("--http", config.http, make_app(server), config.https_context)]
    if config.metrics is not None:
        apps.append(("--metrics", config.metrics, make_metrics_app(server), None))
    for option, (host, port), app, tls in apps:
        runner = web.AppRunner(app, access_log=None)
        listener = GuardedListener(
            runner,
            config.http_limits,
            option.removeprefix("--"),
            server.metrics.http_connections_closed,
            server.metrics.http_connections,
        )
        app.middlewares.insert(0, listener.middleware())  # before the app freezes (setup)
        await runner.setup()
        listeners.append(listener)
        try:
            await listener.start(host, port, tls)
        except OSError as exc:
            await server.close()
            await stop_listening(listeners)
            raise ConfigError(option, f"cannot listen on {(host, port)}: {exc.strerror}") from None
    # Everything made so far (modules, the server, its warmed-up codecs) lives as long as the
    # process: out of the cyclic collector's sight, a full collection walks only the calls'
    # objects (measured with 20 calls: 33-49 ms pauses of the event loop, every call's audio
    # held up meanwhile). ``gc.freeze`` is the standard's way to say so.
    gc.collect()
    gc.freeze()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # SIGHUP too: a closing terminal sends it to every process of its group (`rtcedge up`),
    # and the default would end the process at once, without ending its sessions.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    log.info(
        "transceiver %d: media %s, advertising %s (regions: %s), %s %s, metrics %s",
        config.transceiver_id,
        server.media_address,
        config.advertise,
        server.regions.describe(),
        "https" if config.https_context else "http",
        config.http,
        config.metrics or "off",
    )
    log.info("opus encoder toward callers: %s (%s)", config.opus_settings().describe(), version())
    if ready is not None:
        ready.set()
    await stop.wait()
    await server.drain()
    await stop_listening(listeners)


async def stop_listening(listeners: list[GuardedListener]) -> None:
    """Stop accepting on every listener, then end their connections and apps."""
    for listener in listeners:
        listener.close()
    for listener in listeners:
        await listener.runner.cleanup()
