"""``rtcedge up``: the whole path on one machine, for trying it out and for browser tests.

A relay (2 pinned workers) on one UDP port, one transceiver (echo backend by default) behind it,
and the page served by the transceiver, all on loopback (IPv4 or IPv6) with a fresh keyring;
with ``--agent``, the example voice agent too, as the transceiver's realtime backend. It
prints a line with ``ready`` once a call can be made, and only then: the HTTP port is checked
free before anything starts, and the readiness probe counts only an answer from its own
transceiver. A relay on a wildcard (``0.0.0.0``, ``::``) is advertised under ``--advertise`` or
the default route's address, which the ready line names. Ctrl-C, SIGTERM or SIGHUP (a closed
terminal) stops everything it started. If ``up`` itself dies without cleaning up (SIGKILL), its
children get the kernel's parent-death signal (common/lifetime.py): a relay left behind would
keep the UDP port and silently share it with the next ``up``. The processes are the testbed's
(testbed/processes.py, testbed/voice_agent.py), the ones the benchmarks and tests run.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import socket
import sys
import threading

import click

from common.config import format_host_port
from relay.addresspolicy import LOOPBACK_NETWORKS, PRIVATE_NETWORKS
from rtcedge.checks import UpAddresses, UpAdmission, UpBackend, default_route_address, is_wildcard
from rtcedge.https import certificate_hosts, made_certificate
from testbed.processes import RelayProcess, TransceiverProcess
from testbed.voice_agent import VoiceAgentProcess
from transceiver import codec_options
from transceiver.call.libopus import DEFAULTS, EncoderSettings


def run_local(
    addresses: UpAddresses,
    workers: int,
    backend: UpBackend,
    token_secret_file: str | None,
    admission: UpAdmission,
    encoder: EncoderSettings = DEFAULTS,
) -> None:
    """Start relay (+ voice agent) + transceiver, report ``ready``, stop them all on a signal
    or when one exits. ``encoder``: the ``--opus-*`` options, passed on to the transceiver."""
    relay = relay_process(addresses, workers)
    agent = VoiceAgentProcess(die_with_parent=True) if backend.agent else None
    stop = threading.Event()
    # SIGHUP too: by default it would end `up` at once, without stopping its children.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    with contextlib.ExitStack() as files:  # a certificate up makes: its key deleted at the end
        https = None
        if addresses.https.self_signed:
            made = files.enter_context(made_certificate(https_hosts(addresses)))
            https = (made.cert_file, made.key_file)
            for line in made.lines():
                click.echo(line)
        elif addresses.https.on:
            assert addresses.https.cert_file and addresses.https.key_file
            https = (
                os.path.abspath(addresses.https.cert_file),
                os.path.abspath(addresses.https.key_file),
            )
        _run(addresses, relay, agent, backend, token_secret_file, admission, encoder, https, stop)


def https_hosts(addresses: UpAddresses) -> list[str]:
    """What a certificate ``up`` makes is for: the page's address, --http's, --https-name's,
    and for a wildcard the default routes' addresses too (the page on every address)."""
    names = list(addresses.https.names)
    if is_wildcard(addresses.http[0]):
        names += [a for f in (socket.AF_INET, socket.AF_INET6) if (a := default_route_address(f))]
    return certificate_hosts(addresses.page_host, addresses.http[0], names)


def _run(
    addresses: UpAddresses,
    relay: RelayProcess,
    agent: VoiceAgentProcess | None,
    backend: UpBackend,
    token_secret_file: str | None,
    admission: UpAdmission,
    encoder: EncoderSettings,
    https: tuple[str, str] | None,
    stop: threading.Event,
) -> None:
    """``run_local``'s processes, ``https`` the (certificate, key) files of --http or None."""
    trx: TransceiverProcess | None = None
    try:
        if agent is not None:  # first: the slowest to start, and the transceiver needs its URL
            agent.start(stop=stop)
        trx = transceiver_process(
            addresses, relay, backend, agent, token_secret_file, admission, encoder, https
        )
        relay.start()  # (with the transceiver's address)
        trx.start()
        click.echo(ready_line(addresses, trx, backend, agent))
        sys.stdout.flush()
        children = {"relay": relay.proc, "transceiver": trx.proc}
        if agent is not None:
            children["voice agent"] = agent.proc
        while not stop.wait(0.5):
            for name, proc in children.items():
                if proc is not None and proc.poll() is not None:
                    raise click.ClickException(f"{name} exited with status {proc.returncode}")
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        if trx is not None:
            trx.stop(timeout_s=10)
        if agent is not None:  # after the transceiver, which closes its calls' WebSockets
            agent.stop()
        relay.stop()
        click.echo("rtcedge up: stopped")


def relay_process(addresses: UpAddresses, workers: int) -> RelayProcess:
    """The relay on ``--relay``, in local mode."""
    # Local mode: loopback and LAN clients pass the relay's denied ranges (a deployed relay
    # refuses them: relay/addresspolicy.py), and so does the advertised address, which may be
    # in none of them (a public or documentation address): a client on this machine calling
    # it sends from it.
    advertised_network = str(ipaddress.ip_network(addresses.advertised))
    relay = RelayProcess(
        {},
        workers=workers,
        host=addresses.internal_host,
        public_host=addresses.relay[0],
        quiet=False,
        allow_networks=(*LOOPBACK_NETWORKS, *PRIVATE_NETWORKS, advertised_network),
        die_with_parent=True,  # started from this (main) thread, which lives as long as `up`
        tcp=addresses.relay_tcp is not None,
    )
    relay.port = addresses.relay[1]
    if addresses.relay_tcp is not None:
        relay.tcp_port = addresses.relay_tcp[1]
    return relay


def transceiver_process(
    addresses: UpAddresses,
    relay: RelayProcess,
    backend: UpBackend,
    agent: VoiceAgentProcess | None,
    token_secret_file: str | None,
    admission: UpAdmission,
    encoder: EncoderSettings = DEFAULTS,
    https: tuple[str, str] | None = None,
) -> TransceiverProcess:
    """The transceiver on ``--http``, behind ``relay``, with ``up``'s backend options (at the
    voice agent with ``--agent``), its load admission and its encoder's, every one said."""
    # Only the relay's internal sockets may send encapsulated datagrams.
    extra = ["--drain-grace", "2", "--relay-network", relay.host]
    extra += admission.transceiver_options()
    # The transceiver starts without our RTCEDGE_* variables: each option is passed on here,
    # the URL and the key by the environment (a command line is world-readable).
    backend_args, env = backend.transceiver_options(
        agent.backend_url if agent else None, agent.key if agent else None
    )
    extra += backend_args + codec_options.arguments(encoder)
    if token_secret_file:
        extra += ["--token-secret-file", token_secret_file]
    trx = TransceiverProcess(
        relay,
        host=addresses.http[0],
        extra_args=extra,
        extra_env=env,
        quiet=False,
        advertise=(addresses.advertised, addresses.relay[1]),
        advertise_tcp=(addresses.advertised, relay.tcp_port) if relay.tcp else None,
        die_with_parent=True,
        https=https,
    )
    trx.http_port = addresses.http[1]
    relay.transceivers = {trx.tid: trx.media_address}
    return trx


def ready_line(
    addresses: UpAddresses,
    trx: TransceiverProcess,
    backend: UpBackend,
    agent: VoiceAgentProcess | None,
) -> str:
    """``ready`` and where to go: the page(s), the relay, the backend when not the echo."""
    http_port = addresses.http[1]
    # The page on every address for a wildcard: name one a browser can open.
    scheme = "https" if trx.https else "http"
    url = f"{scheme}://{format_host_port(addresses.page_host, http_port)}"
    advertised = ""
    if addresses.advertised != addresses.relay[0]:
        advertised = f" advertised as {addresses.advertised} ({addresses.advertised_why})"
    tcp = f", tcp {format_host_port(*addresses.relay_tcp)}" if addresses.relay_tcp else ""
    where = f"open {url}/ and press Talk"
    if backend.backend == "realtime":  # the URL is not shown: it may hold a credential
        model = f"the voice agent at {agent.url}" if agent else "the model server"
        where = f"open {url}/realtime to talk to {model} (or {url}/ and press Talk)"
    elif backend.backend == "websocket":
        where += " (backend websocket)"
    return (
        f"rtcedge up: ready - {where} (relay udp {format_host_port(*addresses.relay)}"
        f"{advertised}{tcp}, transceiver media udp {format_host_port(*trx.media_address)}); "
        "Ctrl-C stops"
    )
