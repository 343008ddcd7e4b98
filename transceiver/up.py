"""``rtcedge up``: the whole path on one machine, for trying it out and for browser tests.

A relay (2 pinned workers) on one UDP port, one transceiver (echo backend by default) behind it,
and the page served by the transceiver, all on loopback with a fresh keyring. It prints a line
with ``ready`` once a call can be made; Ctrl-C or SIGTERM stops everything it started.
"""

from __future__ import annotations

import signal
import sys
import threading

import click

from bench.peers import RelayProcess, TransceiverProcess
from common.config import ConfigError, parse_host_port
from relay.addresspolicy import LOOPBACK_NETWORKS, PRIVATE_NETWORKS


@click.command()
@click.option(
    "--http",
    default="127.0.0.1:8080",
    show_default=True,
    help="Where the page and WHIP are served.",
)
@click.option(
    "--relay",
    "relay_addr",
    default="127.0.0.1:3478",
    show_default=True,
    help="The relay's public UDP address (the only one a browser sends media to).",
)
@click.option("--workers", type=int, default=2, show_default=True, help="Relay workers.")
@click.option(
    "--backend", type=click.Choice(["echo", "websocket"]), default="echo", show_default=True
)
@click.option("--backend-url", default=None, help="ws:// URL for --backend websocket.")
@click.option(
    "--token-secret-file",
    default=None,
    help="Require signed tokens (see `transceiver token`); open the page with ?token=...",
)
def up(
    http: str,
    relay_addr: str,
    workers: int,
    backend: str,
    backend_url: str | None,
    token_secret_file: str | None,
) -> None:
    """Run relay + transceiver + page locally; open the printed URL and press Talk."""
    try:
        http_host, http_port = parse_host_port("--http", http)
        relay_host, relay_port = parse_host_port("--relay", relay_addr)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    # Local mode: loopback and LAN clients pass the relay's denied ranges (a deployed relay
    # refuses them: relay/addresspolicy.py).
    relay = RelayProcess(
        {},
        workers=workers,
        host=relay_host,
        quiet=False,
        allow_networks=LOOPBACK_NETWORKS + PRIVATE_NETWORKS,
    )
    relay.port = relay_port
    # Only the relay's internal sockets (on relay_host) may send encapsulated datagrams.
    extra = ["--backend", backend, "--drain-grace", "2", "--relay-network", relay_host]
    if backend_url:
        extra += ["--backend-url", backend_url]
    if token_secret_file:
        extra += ["--token-secret-file", token_secret_file]
    trx = TransceiverProcess(relay, host=http_host, extra_args=extra, quiet=False)
    trx.http_port = http_port
    relay.transceivers = {trx.tid: trx.media_address}
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        relay.start()
        trx.start()
        click.echo(
            f"rtcedge up: ready - open {trx.url}/ and press Talk "
            f"(relay udp {relay_host}:{relay_port}, transceiver media udp "
            f"{trx.media_address[0]}:{trx.media_address[1]}); Ctrl-C stops",
        )
        sys.stdout.flush()
        while not stop.wait(0.5):
            for name, proc in (("relay", relay.proc), ("transceiver", trx.proc)):
                if proc is not None and proc.poll() is not None:
                    raise click.ClickException(f"{name} exited with status {proc.returncode}")
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        trx.stop(timeout_s=10)
        relay.stop()
        click.echo("rtcedge up: stopped")
