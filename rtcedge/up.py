"""``rtcedge up``: the whole path on one machine, for trying it out and for browser tests.

A relay (2 pinned workers) on one UDP port, one transceiver (echo backend by default) behind it,
and the page served by the transceiver, all on loopback with a fresh keyring. It prints a line
with ``ready`` once a call can be made; Ctrl-C, SIGTERM or SIGHUP (a closed terminal) stops
everything it started. If ``up`` itself dies without cleaning up (SIGKILL), its children get the
kernel's parent-death signal (common/lifetime.py): a relay left behind would keep the UDP port and
silently share it with the next ``up``. The processes are bench/'s peers, the ones the benchmarks
and tests run.
"""

from __future__ import annotations

import signal
import sys
import threading

import click

from bench.peers import RelayProcess, TransceiverProcess
from relay.addresspolicy import LOOPBACK_NETWORKS, PRIVATE_NETWORKS


def run_local(
    http: tuple[str, int],
    relay_address: tuple[str, int],
    workers: int,
    backend: str,
    backend_url: str | None,
    token_secret_file: str | None,
) -> None:
    """Start relay + transceiver, report ``ready``, stop both on a signal or when one exits."""
    http_host, http_port = http
    relay_host, relay_port = relay_address
    # Local mode: loopback and LAN clients pass the relay's denied ranges (a deployed relay
    # refuses them: relay/addresspolicy.py).
    relay = RelayProcess(
        {},
        workers=workers,
        host=relay_host,
        quiet=False,
        allow_networks=LOOPBACK_NETWORKS + PRIVATE_NETWORKS,
        die_with_parent=True,  # started from this (main) thread, which lives as long as `up`
    )
    relay.port = relay_port
    # Only the relay's internal sockets (on relay_host) may send encapsulated datagrams.
    extra = ["--backend", backend, "--drain-grace", "2", "--relay-network", relay_host]
    if backend_url:
        extra += ["--backend-url", backend_url]
    if token_secret_file:
        extra += ["--token-secret-file", token_secret_file]
    trx = TransceiverProcess(
        relay, host=http_host, extra_args=extra, quiet=False, die_with_parent=True
    )
    trx.http_port = http_port
    relay.transceivers = {trx.tid: trx.media_address}
    stop = threading.Event()
    # SIGHUP too: by default it would end `up` at once, without stopping its children.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
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
