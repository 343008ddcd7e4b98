"""``transceiver serve``: one process = one transceiver id = one UDP socket."""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any

import click
from aiohttp import web

from common.options import env_option, setup_logging
from transceiver.config import ConfigError, TransceiverConfig, parse_host_port

EXAMPLES = """
\b
Examples:
  # behind a local relay listening on 127.0.0.1:3478
  transceiver serve --id 0 --keyring keyring.json --media 127.0.0.1:5000 \\
      --advertise 127.0.0.1:3478 --http 127.0.0.1:8080
\b
  # bridge every call to an external service over WebSocket
  transceiver serve ... --backend websocket --backend-url ws://inference:8765/call
\b
Every option can also be set by the environment variable shown in brackets.
SIGTERM drains: /readyz turns 503, no new sessions, live ones get --drain-grace seconds.
"""


@click.group()
def main() -> None:
    """rtcedge transceiver: owns the WebRTC sessions behind the relay."""


@main.command(epilog=EXAMPLES)
@env_option(
    "--id",
    "transceiver_id",
    env="TRANSCEIVER_ID",
    type=int,
    required=True,
    help="This transceiver's id (the relay's allowlist maps it to --media).",
)
@env_option("--cluster", env="CLUSTER", type=int, default=0, show_default=True, help="Cluster id.")
@env_option("--keyring", env="KEYRING", default=None, help="Hint keyring JSON file.")
@env_option("--keyring-json", env="KEYRING_JSON", default=None, help="Hint keyring JSON, inline.")
@env_option(
    "--media",
    env="MEDIA",
    default="127.0.0.1:5000",
    show_default=True,
    help="HOST:PORT of the one UDP socket for every session.",
)
@env_option(
    "--advertise",
    env="ADVERTISE",
    required=True,
    help="The relay's public HOST:PORT: the only ICE candidate in answers.",
)
@env_option(
    "--http",
    env="HTTP",
    default="127.0.0.1:8080",
    show_default=True,
    help="HOST:PORT for WHIP, /healthz, /readyz, /metrics and the page.",
)
@env_option(
    "--backend",
    env="BACKEND",
    default="echo",
    show_default=True,
    type=click.Choice(["echo", "websocket"]),
    help="Where callers' audio and events go.",
)
@env_option(
    "--backend-url", env="BACKEND_URL", default=None, help="ws:// URL for --backend websocket."
)
@env_option(
    "--max-sessions",
    env="MAX_SESSIONS",
    type=int,
    default=20,
    show_default=True,
    help="Sessions this process takes (one process ~ one core; see docs/benchmarks.md).",
)
@env_option(
    "--ice-timeout",
    env="ICE_TIMEOUT",
    type=float,
    default=10.0,
    show_default=True,
    help="Seconds from the offer to a connected session.",
)
@env_option(
    "--idle-timeout",
    env="IDLE_TIMEOUT",
    type=float,
    default=60.0,
    show_default=True,
    help="Seconds without audio from the caller before the session ends.",
)
@env_option("--max-duration", env="MAX_DURATION", type=float, default=4 * 3600.0, show_default=True)
@env_option(
    "--address-ttl",
    env="ADDRESS_TTL",
    type=float,
    default=30.0,
    show_default=True,
    help="Seconds a client address the session moved away from (NAT rebinding, another relay) "
    "stays routable once silent.",
)
@env_option(
    "--drain-grace",
    env="DRAIN_GRACE",
    type=float,
    default=30.0,
    show_default=True,
    help="Seconds live sessions get after SIGTERM.",
)
@env_option(
    "--auth-token", env="AUTH_TOKEN", default=None, help="Require 'Authorization: Bearer T'."
)
@env_option("--cors-origin", env="CORS_ORIGIN", default="*", show_default=True)
@env_option(
    "--body-timeout",
    env="BODY_TIMEOUT",
    type=float,
    default=10.0,
    show_default=True,
    help="Seconds a client has to send its whole offer (slow clients get 408).",
)
@env_option(
    "--relay-network",
    "relay_networks",
    env="RELAY_NETWORKS",
    multiple=True,
    help="CIDR that encapsulated datagrams may come from (repeatable; default: any). Set it "
    "to the relays' network: an encapsulated datagram names the client it speaks for.",
)
@env_option(
    "--log-level",
    env="LOG_LEVEL",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
def serve(**opts: Any) -> None:
    """Run a transceiver: WHIP over HTTP, every session's media on one UDP socket."""
    setup_logging(str(opts["log_level"]))
    try:
        config = build_config(opts)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        asyncio.run(run(config))
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None


def build_config(opts: dict[str, Any]) -> TransceiverConfig:
    return TransceiverConfig(
        transceiver_id=opts["transceiver_id"],
        cluster=opts["cluster"],
        media=parse_host_port("--media", opts["media"]),
        advertise=parse_host_port("--advertise", opts["advertise"]),
        http=parse_host_port("--http", opts["http"]),
        keyring_path=opts["keyring"],
        keyring_json=opts["keyring_json"],
        backend=opts["backend"],
        backend_url=opts["backend_url"],
        max_sessions=opts["max_sessions"],
        ice_timeout_s=opts["ice_timeout"],
        idle_timeout_s=opts["idle_timeout"],
        max_duration_s=opts["max_duration"],
        drain_grace_s=opts["drain_grace"],
        auth_token=opts["auth_token"],
        cors_origin=opts["cors_origin"],
        body_timeout_s=opts["body_timeout"],
        relay_networks=tuple(n for spec in opts["relay_networks"] for n in spec.split()),
        address_ttl_s=opts["address_ttl"],
    ).validate()


async def run(config: TransceiverConfig, ready: asyncio.Event | None = None) -> None:
    """Serve until SIGTERM/SIGINT, then drain."""
    from transceiver.http import make_app
    from transceiver.server import TransceiverServer

    server = TransceiverServer(config)
    await server.start()
    runner = web.AppRunner(make_app(server), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, config.http[0], config.http[1])
    try:
        await site.start()
    except OSError as exc:
        await server.close()
        raise ConfigError("--http", f"cannot listen on {config.http}: {exc.strerror}") from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    logging.getLogger("rtcedge.transceiver").info(
        "transceiver %d: media %s, advertising %s, http %s",
        config.transceiver_id,
        server.media_address,
        config.advertise,
        config.http,
    )
    if ready is not None:
        ready.set()
    await stop.wait()
    await server.drain()
    await runner.cleanup()
