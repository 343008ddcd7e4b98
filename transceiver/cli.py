"""``transceiver serve``: one process = one transceiver id = one UDP socket."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import time
from typing import Any

import click
from aiohttp import web

from common.config import ConfigError, parse_host_port, parse_transceiver
from common.listener import HEADER_TIMEOUT_S, MAX_CONNECTIONS, ListenerLimits
from common.options import (
    ENV_PREFIX,
    env_option,
    log_level_option,
    refuse_secrets_on_command_line,
    refuse_url_credentials_on_command_line,
    setup_logging,
)
from transceiver.call.lifecycle import FIRST_CHECK_TIMEOUT_S
from transceiver.call.sctp import SctpLimits
from transceiver.config import TransceiverConfig
from transceiver.headroom import LoadLimits
from transceiver.regions import parse_region, parse_region_prefix
from transceiver.signaling.forward_budget import PeerLimits
from transceiver.signaling.listener import GuardedListener
from transceiver.signaling.tokens import mint, parse_secrets, read_secrets_file

log = logging.getLogger("rtcedge.transceiver")

# Options that carry a secret: accepted from the environment (or a file), never from the command
# line, where every local user reads them (ps, /proc/<pid>/cmdline).
SECRET_OPTIONS = {"keyring_json": "--keyring-json", "auth_token": "--auth-token"}
# URL options that may hold a credential (a user, a password, a token parameter): such a URL is
# taken from the environment only.
CREDENTIAL_URL_OPTIONS = {"backend_url": "--backend-url"}
NO_RELAY_NETWORK_WARNING = (
    "--relay-network is not set: ANY host that can send UDP to the media port %s:%d can "
    "speak for any client (encapsulated datagrams name the client they carry) and move a "
    "call's media. Set --relay-network (RTCEDGE_RELAY_NETWORKS) to the relays' network."
)

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
Every option can also be set by the environment variable shown in brackets; secrets
(--keyring-json, --auth-token, the token secret) only by the environment or a file.
SIGTERM, SIGINT and SIGHUP drain: /readyz turns 503, no new sessions, live ones get
--drain-grace seconds.
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
@env_option(
    "--keyring-json",
    env="KEYRING_JSON",
    default=None,
    help="Hint keyring JSON, inline (environment only: a secret).",
)
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
    help="The relay's public HOST:PORT: the ICE candidate of every answer (with --region, the "
    "last and lowest-priority one of a region's answers).",
)
@env_option(
    "--advertise-tcp",
    env="ADVERTISE_TCP",
    default=None,
    help="The relay's public TCP HOST:PORT (its --listen-tcp): every answer also names a "
    "passive ICE-TCP candidate there (RFC 6544), below every UDP one, for callers whose "
    "networks drop UDP [default: none].",
)
@env_option(
    "--http",
    env="HTTP",
    default="127.0.0.1:8080",
    show_default=True,
    help="HOST:PORT for WHIP, /healthz, /readyz and the page (the public port).",
)
@env_option(
    "--metrics",
    env="METRICS",
    default="127.0.0.1:9479",
    show_default=True,
    help="HOST:PORT for /metrics (and /healthz, /readyz), or 'off'. Never on the --http port, "
    "which the ingress makes public.",
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
    "--backend-url",
    env="BACKEND_URL",
    default=None,
    help="ws:// or wss:// URL for --backend websocket; one holding a credential (a user, a "
    "password, token=...) only by the environment.",
)
@env_option(
    "--audio-format",
    env="AUDIO_FORMAT",
    default="pcm16",
    show_default=True,
    type=click.Choice(["pcm16", "opus"]),
    help="What the echo backend takes: decoded PCM16, or the caller's Opus passed through "
    "(no codec work). A websocket backend chooses per call (docs/backend-protocol.md).",
)
@env_option(
    "--max-sessions",
    env="MAX_SESSIONS",
    type=int,
    default=150,
    show_default=True,
    help="Sessions this process takes at most (one process ~ one core; see docs/benchmarks.md): "
    "a ceiling sized for --audio-format opus; --admit-max-cpu and --admit-max-loop-lag refuse "
    "sooner (pcm16 calls cost ~3x more CPU).",
)
@env_option(
    "--admit-max-cpu",
    env="ADMIT_MAX_CPU",
    type=float,
    default=LoadLimits.max_cpu_pct,
    show_default=True,
    help="Refuse new sessions (503 + Retry-After) while this process uses more than this % of "
    "one core, or would with one more session (connecting ones counted ahead); admit again "
    "under 80 % of it. 0: off.",
)
@env_option(
    "--admit-max-loop-lag",
    env="ADMIT_MAX_LOOP_LAG",
    type=float,
    default=LoadLimits.max_loop_lag_ms,
    show_default=True,
    help="Refuse new sessions while the event loop runs this many ms late (mean over 2 s: the "
    "core is short, whoever takes it); admit again under 80 % of it. 0: off.",
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
    "--first-check-timeout",
    env="FIRST_CHECK_TIMEOUT",
    type=float,
    default=FIRST_CHECK_TIMEOUT_S,
    show_default=True,
    help="Seconds from the answer to the client's first authenticated ICE check; a session "
    "without one ends (first_check_timeout) instead of holding a slot for --ice-timeout.",
)
@env_option(
    "--idle-timeout",
    env="IDLE_TIMEOUT",
    type=float,
    default=60.0,
    show_default=True,
    help="Seconds without audio from the caller before the session ends.",
)
@env_option(
    "--max-duration",
    env="MAX_DURATION",
    type=float,
    default=4 * 3600.0,
    show_default=True,
    help="Seconds a session may last at most, however active; then it ends (max_duration).",
)
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
    "--auth-token",
    env="AUTH_TOKEN",
    default=None,
    help="Accept 'Authorization: Bearer T' with this static token (environment only).",
)
@env_option(
    "--token-secret-file",
    env="TOKEN_SECRET_FILE",
    default=None,
    help="File of secrets (one per line, >= 32 bytes) for short-lived signed tokens (HS256 JWT, "
    "docs/transceiver.md); the first signs, all verify. Or set RTCEDGE_TOKEN_SECRET.",
)
@env_option(
    "--token-max-ttl",
    env="TOKEN_MAX_TTL",
    type=float,
    default=3600.0,
    show_default=True,
    help="Refuse signed tokens that stay valid longer than this many seconds.",
)
@env_option(
    "--client-rate",
    env="CLIENT_RATE",
    type=float,
    default=1.0,
    show_default=True,
    help="New sessions per second one client may start, after --client-burst (0: no limit). "
    "A client is its token's subject, else its address (IPv6: its /64).",
)
@env_option(
    "--client-burst",
    env="CLIENT_BURST",
    type=int,
    default=10,
    show_default=True,
    help="New sessions one client may start at once.",
)
@env_option(
    "--client-max-sessions",
    env="CLIENT_MAX_SESSIONS",
    type=int,
    default=0,
    show_default=True,
    help="Live sessions per client (0: no cap). Only meaningful when clients are told apart: "
    "by token subjects, or by their addresses (directly exposed, or --trusted-proxy).",
)
@env_option(
    "--trusted-proxy",
    "trusted_proxies",
    env="TRUSTED_PROXIES",
    multiple=True,
    help="CIDR of a proxy (your ingress) whose --client-address-header is believed "
    "(repeatable). Without it every client behind the proxy shares one quota.",
)
@env_option(
    "--client-address-header",
    env="CLIENT_ADDRESS_HEADER",
    default="X-Forwarded-For",
    show_default=True,
    help="Where a trusted proxy puts the client's address.",
)
@env_option(
    "--cors-origin",
    env="CORS_ORIGIN",
    default="*",
    show_default=True,
    help="Access-Control-Allow-Origin of every WHIP answer: set it to your page's origin so "
    "only that page's scripts can read answers.",
)
@env_option(
    "--body-timeout",
    env="BODY_TIMEOUT",
    type=float,
    default=10.0,
    show_default=True,
    help="Seconds a client has to send its whole offer (slow clients get 408).",
)
@env_option(
    "--max-sdp-bytes",
    env="MAX_SDP_BYTES",
    type=int,
    default=16 * 1024,
    show_default=True,
    help="Bytes a WHIP offer (any request body) may have; larger: 413 before it is read. "
    "Browsers' offers are 3-8 KiB; the offer's lines are bounded too (docs/transceiver.md).",
)
@env_option(
    "--http-header-timeout",
    env="HTTP_HEADER_TIMEOUT",
    type=float,
    default=HEADER_TIMEOUT_S,
    show_default=True,
    help="Seconds a connection to --http or --metrics has to send a request's headers, from "
    "its accept or its previous response; then it is closed (slowloris; idle keep-alive).",
)
@env_option(
    "--http-max-connections",
    env="HTTP_MAX_CONNECTIONS",
    type=int,
    default=MAX_CONNECTIONS,
    show_default=True,
    help="Connections each of --http and --metrics holds open at once; beyond, a newcomer "
    "gets 503 and is closed at once.",
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
    "--region",
    "regions",
    env="REGIONS",
    multiple=True,
    help="NAME=HOST:PORT[,HOST:PORT...]: the relay addresses an answer advertises to a client "
    "of region NAME, most preferred first (repeatable). --advertise is added last as a backup "
    "unless --no-backup-candidate. Clients of no region get --advertise alone.",
)
@env_option(
    "--region-header",
    env="REGION_HEADER",
    default=None,
    help="Request header naming the client's region (e.g. CloudFront-Viewer-Country), set by "
    "your CDN or load balancer; believed only from a --trusted-proxy.",
)
@env_option(
    "--region-prefix",
    "region_prefixes",
    env="REGION_PREFIXES",
    multiple=True,
    help="CIDR=NAME: clients in CIDR are of region NAME (repeatable; the longest prefix wins), "
    "when --region-header is absent or names no region. The client's address as the quotas "
    "see it (--trusted-proxy).",
)
@env_option(
    "--no-backup-candidate",
    "no_backup_candidate",
    env="NO_BACKUP_CANDIDATE",
    is_flag=True,
    default=False,
    help="Advertise only a region's own addresses, without --advertise as its last, "
    "lowest-priority candidate (which keeps calls connecting while a region's edge is down).",
)
@env_option(
    "--peer-http",
    "peer_http",
    env="PEER_HTTP",
    multiple=True,
    help="ID=HOST:PORT: the WHIP listener of transceiver ID (repeatable; env: space "
    "separated). A DELETE or PATCH for a session another transceiver owns is passed on to it; "
    "without an address for the owner it is 404. An entry for this transceiver's own --id is "
    "ignored, so every transceiver can get the same list.",
)
@env_option(
    "--peer-http-dns",
    env="PEER_HTTP_DNS",
    default=None,
    help="DNS template with {id} for the other transceivers' WHIP listeners, e.g. "
    "'rtcedge-transceiver-{id}.rtcedge-transceiver-headless:8080' (a StatefulSet's pods under "
    "its headless Service); --peer-http entries take precedence.",
)
@env_option(
    "--peer-timeout",
    env="PEER_TIMEOUT",
    type=float,
    default=5.0,
    show_default=True,
    help="Seconds a request passed on to its session's transceiver may take in all; then 503 + "
    "Retry-After.",
)
@env_option(
    "--peer-max-forwards",
    env="PEER_MAX_FORWARDS",
    type=int,
    default=32,
    show_default=True,
    help="DELETE/PATCH requests passed on to other transceivers at once; more are answered "
    "503 + Retry-After.",
)
@env_option(
    "--peer-max-per-owner",
    env="PEER_MAX_PER_OWNER",
    type=int,
    default=PeerLimits.max_per_owner,
    show_default=True,
    help="Of --peer-max-forwards, at most this many to one transceiver: one that hangs holds "
    "no more.",
)
@env_option(
    "--peer-max-per-client",
    env="PEER_MAX_PER_CLIENT",
    type=int,
    default=PeerLimits.max_per_client,
    show_default=True,
    help="Of --peer-max-forwards, at most this many from one client (its address, as for "
    "--client-rate).",
)
@env_option(
    "--peer-max-claims",
    env="PEER_MAX_CLAIMS",
    type=int,
    default=PeerLimits.max_claims,
    show_default=True,
    help="Resume claims (calls moving here) passed on at once, a budget apart from the "
    "forwards; more are answered 503 + Retry-After.",
)
@env_option(
    "--peer-connect-timeout",
    env="PEER_CONNECT_TIMEOUT",
    type=float,
    default=1.0,
    show_default=True,
    help="Seconds to connect to another transceiver, of --peer-timeout.",
)
@env_option(
    "--peer-fail-fast",
    env="PEER_FAIL_FAST",
    type=float,
    default=PeerLimits.fail_fast_s,
    show_default=True,
    help="Seconds a transceiver that timed out is refused at once (503 + Retry-After) instead "
    "of waited for again. 0: off.",
)
@env_option(
    "--migrate-deadline",
    env="MIGRATE_DEADLINE",
    type=float,
    default=10.0,
    show_default=True,
    help="On drain, callers with a data channel are asked to move to another transceiver "
    "(with --peer-http/--peer-http-dns): seconds they have to re-offer, and that their old "
    "call lasts at most once moved.",
)
@env_option(
    "--sctp-receive-window",
    env="SCTP_RECEIVE_WINDOW",
    type=int,
    default=SctpLimits.receive_window_bytes,
    show_default=True,
    help="Bytes of a caller's data channel held for reassembly (the advertised SCTP window): "
    "DATA past it is dropped; a caller that overfills it ends (data_channel_limit).",
)
@env_option(
    "--sctp-max-misordered-tsns",
    env="SCTP_MAX_MISORDERED_TSNS",
    type=int,
    default=SctpLimits.max_misordered_tsns,
    show_default=True,
    help="SCTP TSNs tracked past a gap in a caller's data; DATA farther ahead is dropped.",
)
@env_option(
    "--sctp-max-unacked",
    env="SCTP_MAX_UNACKED",
    type=int,
    default=SctpLimits.max_unacked_bytes,
    show_default=True,
    help="Bytes of events toward a caller sent or waiting and not yet acknowledged; past it "
    "the oldest waiting events are dropped (rtcedge_transceiver_data_channel_dropped).",
)
@log_level_option()
def serve(**opts: Any) -> None:
    """Run a transceiver: WHIP over HTTP, every session's media on one UDP socket."""
    setup_logging(str(opts["log_level"]))
    refuse_secrets_on_command_line(click.get_current_context(), SECRET_OPTIONS)
    refuse_url_credentials_on_command_line(click.get_current_context(), CREDENTIAL_URL_OPTIONS)
    try:
        config = build_config(opts)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    if not config.relay_networks:
        log.warning(NO_RELAY_NETWORK_WARNING, *config.media)
    try:
        asyncio.run(run(config))
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None


def token_secrets(opts: dict[str, Any]) -> tuple[bytes, ...]:
    """The signed tokens' secrets, from RTCEDGE_TOKEN_SECRET or --token-secret-file."""
    env = os.environ.get(f"{ENV_PREFIX}TOKEN_SECRET")
    path = opts["token_secret_file"]
    if env and path:
        raise ConfigError("--token-secret-file", f"give it or {ENV_PREFIX}TOKEN_SECRET, not both")
    if env:
        return parse_secrets(env, f"{ENV_PREFIX}TOKEN_SECRET")
    return read_secrets_file(path) if path else ()


def build_config(opts: dict[str, Any]) -> TransceiverConfig:
    metrics = str(opts["metrics"])
    return TransceiverConfig(
        transceiver_id=opts["transceiver_id"],
        cluster=opts["cluster"],
        media=parse_host_port("--media", opts["media"]),
        advertise=parse_host_port("--advertise", opts["advertise"]),
        advertise_tcp=(
            parse_host_port("--advertise-tcp", opts["advertise_tcp"])
            if opts.get("advertise_tcp")
            else None
        ),
        http=parse_host_port("--http", opts["http"]),
        keyring_path=opts["keyring"],
        keyring_json=opts["keyring_json"],
        backend=opts["backend"],
        backend_url=opts["backend_url"],
        audio_format=opts["audio_format"],
        max_sessions=opts["max_sessions"],
        admit_max_cpu_pct=opts["admit_max_cpu"],
        admit_max_loop_lag_ms=opts["admit_max_loop_lag"],
        ice_timeout_s=opts["ice_timeout"],
        first_check_timeout_s=opts["first_check_timeout"],
        idle_timeout_s=opts["idle_timeout"],
        max_duration_s=opts["max_duration"],
        drain_grace_s=opts["drain_grace"],
        auth_token=opts["auth_token"],
        token_secrets=token_secrets(opts),
        token_max_ttl_s=opts["token_max_ttl"],
        client_rate_per_s=opts["client_rate"],
        client_burst=opts["client_burst"],
        client_max_sessions=opts["client_max_sessions"],
        trusted_proxies=tuple(n for spec in opts["trusted_proxies"] for n in spec.split()),
        client_address_header=opts["client_address_header"],
        metrics=None if metrics == "off" else parse_host_port("--metrics", metrics),
        cors_origin=opts["cors_origin"],
        body_timeout_s=opts["body_timeout"],
        max_sdp_bytes=opts["max_sdp_bytes"],
        http_limits=ListenerLimits(opts["http_header_timeout"], opts["http_max_connections"]),
        relay_networks=tuple(n for spec in opts["relay_networks"] for n in spec.split()),
        address_ttl_s=opts["address_ttl"],
        regions=tuple(parse_region(r) for spec in opts["regions"] for r in spec.split()),
        region_header=opts["region_header"],
        region_prefixes=tuple(
            parse_region_prefix(p) for spec in opts["region_prefixes"] for p in spec.split()
        ),
        backup_candidate=not opts["no_backup_candidate"],
        peer_http=tuple(
            parse_transceiver("--peer-http", p) for spec in opts["peer_http"] for p in spec.split()
        ),
        peer_http_dns=opts["peer_http_dns"],
        peer_timeout_s=opts["peer_timeout"],
        peer_max_forwards=opts["peer_max_forwards"],
        peer_max_per_owner=opts["peer_max_per_owner"],
        peer_max_per_client=opts["peer_max_per_client"],
        peer_max_claims=opts["peer_max_claims"],
        peer_connect_timeout_s=opts["peer_connect_timeout"],
        peer_fail_fast_s=opts["peer_fail_fast"],
        migrate_deadline_s=opts["migrate_deadline"],
        sctp_receive_window_bytes=opts["sctp_receive_window"],
        sctp_max_misordered_tsns=opts["sctp_max_misordered_tsns"],
        sctp_max_unacked_bytes=opts["sctp_max_unacked"],
    ).validate()


async def run(config: TransceiverConfig, ready: asyncio.Event | None = None) -> None:
    """Serve until SIGTERM, SIGINT or SIGHUP, then drain."""
    from transceiver.server import TransceiverServer
    from transceiver.signaling.http import make_app, make_metrics_app

    server = TransceiverServer(config)
    await server.start()
    listeners: list[GuardedListener] = []
    apps = [("--http", config.http, make_app(server))]
    if config.metrics is not None:
        apps.append(("--metrics", config.metrics, make_metrics_app(server)))
    for option, (host, port), app in apps:
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
            await listener.start(host, port)
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
        "transceiver %d: media %s, advertising %s (regions: %s), http %s, metrics %s",
        config.transceiver_id,
        server.media_address,
        config.advertise,
        server.regions.describe(),
        config.http,
        config.metrics or "off",
    )
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


@main.command()
@env_option(
    "--token-secret-file",
    env="TOKEN_SECRET_FILE",
    default=None,
    help="The secrets file the transceivers read (its first secret signs); or set "
    "RTCEDGE_TOKEN_SECRET.",
)
@click.option("--ttl", type=float, default=300.0, show_default=True, help="Seconds valid.")
@click.option("--subject", default=None, help="Who the token is for ('sub'; goes to the backend).")
def token(token_secret_file: str | None, ttl: float, subject: str | None) -> None:
    """Print a short-lived signed WHIP token (what your app's backend does; for trying it out).

    \b
    RTCEDGE_TOKEN_SECRET="$(cat secret)" transceiver token --subject alice --ttl 60
    """
    try:
        secrets = token_secrets({"token_secret_file": token_secret_file})
        if not secrets:
            raise ConfigError("--token-secret-file", f"give it or set {ENV_PREFIX}TOKEN_SECRET")
        if ttl <= 0:
            raise ConfigError("--ttl", f"must be > 0, got {ttl}")
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(mint(secrets[0], time.time(), ttl, subject))
