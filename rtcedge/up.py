"""``rtcedge up``: the whole path on one machine, for trying it out and for browser tests.

A relay (2 pinned workers) on one UDP port, one transceiver (echo backend by default) behind it,
and the page served by the transceiver, all on loopback (IPv4 or IPv6) with a fresh keyring. It
prints a line with ``ready`` once a call can be made, and only then: the HTTP port is checked
free before anything starts, and the readiness probe counts only an answer from its own
transceiver. A relay on a wildcard (``0.0.0.0``, ``::``) is advertised under ``--advertise`` or
the default route's address, which the ready line names. Ctrl-C, SIGTERM or SIGHUP (a closed
terminal) stops everything it started. If ``up`` itself dies without cleaning up (SIGKILL), its
children get the kernel's parent-death signal (common/lifetime.py): a relay left behind would
keep the UDP port and silently share it with the next ``up``. The processes are the testbed's
(testbed/processes.py), the ones the benchmarks and tests run.
"""

from __future__ import annotations

import ipaddress
import signal
import sys
import threading

import click

from common.config import format_host_port
from relay.addresspolicy import LOOPBACK_NETWORKS, PRIVATE_NETWORKS
from rtcedge.checks import UpAddresses, is_wildcard
from testbed.processes import RelayProcess, TransceiverProcess


def run_local(
    addresses: UpAddresses,
    workers: int,
    backend: str,
    backend_url: str | None,
    token_secret_file: str | None,
) -> None:
    """Start relay + transceiver, report ``ready``, stop both on a signal or when one exits."""
    http_host, http_port = addresses.http
    relay_host, relay_port = addresses.relay
    # Local mode: loopback and LAN clients pass the relay's denied ranges (a deployed relay
    # refuses them: relay/addresspolicy.py), and so does the advertised address, which may be
    # in none of them (a public or documentation address): a client on this machine calling
    # it sends from it.
    advertised_network = str(ipaddress.ip_network(addresses.advertised))
    relay = RelayProcess(
        {},
        workers=workers,
        host=addresses.internal_host,
        public_host=relay_host,
        quiet=False,
        allow_networks=(*LOOPBACK_NETWORKS, *PRIVATE_NETWORKS, advertised_network),
        die_with_parent=True,  # started from this (main) thread, which lives as long as `up`
        tcp=addresses.relay_tcp is not None,
    )
    relay.port = relay_port
    if addresses.relay_tcp is not None:
        relay.tcp_port = addresses.relay_tcp[1]
    # Only the relay's internal sockets may send encapsulated datagrams.
    extra = ["--backend", backend, "--drain-grace", "2", "--relay-network", relay.host]
    # By the environment: the URL may hold a credential, and a command line is world-readable.
    env = {"RTCEDGE_BACKEND_URL": backend_url} if backend_url else {}
    if token_secret_file:
        extra += ["--token-secret-file", token_secret_file]
    trx = TransceiverProcess(
        relay,
        host=http_host,
        extra_args=extra,
        extra_env=env,
        quiet=False,
        advertise=(addresses.advertised, relay_port),
        advertise_tcp=(addresses.advertised, relay.tcp_port) if relay.tcp else None,
        die_with_parent=True,
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
        advertised = ""
        if addresses.advertised != relay_host:
            advertised = f" advertised as {addresses.advertised} ({addresses.advertised_why})"
        url = trx.url
        if is_wildcard(http_host):  # the page on every address: name one a browser can open
            url = f"http://{format_host_port(addresses.advertised, http_port)}"
        click.echo(
            f"rtcedge up: ready - open {url}/ and press Talk "
            f"(relay udp {format_host_port(*addresses.relay)}{advertised}"
            + (f", tcp {format_host_port(*addresses.relay_tcp)}" if addresses.relay_tcp else "")
            + ", transceiver media udp "
            f"{format_host_port(*trx.media_address)}); Ctrl-C stops",
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
