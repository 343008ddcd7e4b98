"""The transceiver's configuration: one typed object, built once from the CLI/environment.

Each option is declared once, on its field (``common.options.option``): ``transceiver serve``'s
click options and the config they make come from these fields. Validation raises
``ConfigError`` (common.config) naming the option, so a bad deployment fails at start.
"""

from __future__ import annotations

import datetime
import importlib.util
import ipaddress
import json
import os
import ssl
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from common.addr import Addr
from common.config import ConfigError, check_id_template, parse_transceiver
from common.hint import Keyring
from common.listener import HEADER_TIMEOUT_S, MAX_CONNECTIONS, ListenerLimits
from common.options import (
    ENV_PREFIX,
    POSITIVE,
    at_least,
    between,
    check_fields,
    each,
    each_word,
    host_port,
    host_port_or_none,
    host_port_or_off,
    ip_literal,
    must,
    option,
    words,
)
from transceiver import codec_options as codec
from transceiver import https_options
from transceiver.backend import SAMPLE_RATES, Backend
from transceiver.backends import create_backend
from transceiver.backends.plugins import (
    BackendFactory,
    BackendOptions,
    PluginError,
    build,
    is_reference,
    listing,
    load_factory,
    resolve,
)
from transceiver.backends.realtime.policy import ClientEventPolicy, load_policy
from transceiver.call.libopus import EncoderSettings
from transceiver.call.lifecycle import FIRST_CHECK_TIMEOUT_S, Limits
from transceiver.call.sctp import MAX_MESSAGE_BYTES, SctpLimits
from transceiver.headroom import LoadLimits
from transceiver.ownership import Peers, SessionRouter
from transceiver.regions import RegionTable, parse_region, parse_region_prefix
from transceiver.signaling import tls
from transceiver.signaling.forward_budget import PeerLimits
from transceiver.signaling.realtime_secrets import parse_session
from transceiver.signaling.tokens import MIN_SECRET_BYTES, parse_secrets

if TYPE_CHECKING:
    from transceiver.backends.grpc import GrpcBackendConfig
    from transceiver.backends.media_streams import MediaStreamsBackendConfig
    from transceiver.backends.realtime.backend import RealtimeBackendConfig
    from transceiver.backends.websocket import WebSocketBackendConfig

TOKEN_SECRET_ENV = f"{ENV_PREFIX}TOKEN_SECRET"
REALTIME_KEY_ENV = f"{ENV_PREFIX}REALTIME_KEY"
BACKEND_KEY_ENV = f"{ENV_PREFIX}BACKEND_KEY"
BACKENDS = ("echo", "websocket", "realtime", "media-streams", "grpc")
# The options of a backend that dials a network service (a key, a CA): which backends take them
# (and every plugin: its factory judges them).
NETWORK_BACKENDS = ("websocket", "realtime", "media-streams", "grpc")
LIST_BACKENDS = "list"  # --backend list: print what is available, and exit
EXTRA = "transceiver.extraArgs"  # the chart sets the option only through its pass-through
_PEERS, _SCTP = PeerLimits(), SctpLimits()  # their defaults are the options'


def secret_text(option: str, path: str | None, env: str) -> tuple[str, str] | None:
    """A secret option's text and where it came from (the variable, or the option), from the
    variable ``env`` or the file ``path`` (never the command line: the file's name is)."""
    value = os.environ.get(env)
    if value and path:
        raise ConfigError(option, f"give it or {env}, not both")
    if value:
        return value, env
    if not path:
        return None
    try:
        return Path(path).read_text(), option
    except OSError as exc:
        raise ConfigError(option, f"cannot read {path}: {exc.strerror}") from None


def read_token_secrets(option: str, path: str | None) -> tuple[bytes, ...]:
    """The signed tokens' secrets, from RTCEDGE_TOKEN_SECRET or --token-secret-file."""
    found = secret_text(option, path, TOKEN_SECRET_ENV)
    return parse_secrets(*found) if found else ()


def read_realtime_keys(option: str, path: str | None) -> tuple[bytes, ...]:
    """The operator's Realtime API keys, from RTCEDGE_REALTIME_KEY or --realtime-key-file."""
    found = secret_text(option, path, REALTIME_KEY_ENV)
    return parse_secrets(*found) if found else ()


def read_backend_key(option: str, path: str | None) -> str | None:
    """The model server's API key: the first line that is not blank or a ``#`` comment."""
    found = secret_text(option, path, BACKEND_KEY_ENV)
    if found is None:
        return None
    text, where = found
    lines = [line.strip() for line in text.splitlines()]
    keys = [line for line in lines if line and not line.startswith("#")]
    if len(keys) != 1 or any(c.isspace() or not c.isprintable() for c in keys[0]):
        raise ConfigError(where, "expected one key on one line")
    return keys[0]


def list_backends(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """``--backend list``'s callback (an eager option: before the required ones are missed):
    print the built-in backends and the installed plugins, and exit 0."""
    if value == LIST_BACKENDS and not ctx.resilient_parsing:
        click.echo(listing(BACKENDS))
        ctx.exit(0)
    return value


def takes_credentials(backend: str) -> bool:
    """Whether --backend dials a network service that may take a key and a CA: a built-in of
    NETWORK_BACKENDS, or a plugin (which judges its options itself)."""
    return backend in NETWORK_BACKENDS or backend not in BACKENDS


def read_json_file(option: str, path: str) -> object:
    try:
        return json.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(option, f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ConfigError(option, f"{path} is not JSON: {exc}") from None


def read_realtime_session(option: str, path: str | None) -> dict[str, Any] | None:
    """The operator's Realtime session (``parse_session``'s rules: its audio formats are ours)."""
    if path is None:
        return None
    given = read_json_file(option, path)  # its ConfigError names the option already
    try:
        return parse_session(given, "the session")
    except ValueError as exc:
        raise ConfigError(option, str(exc)) from None


def read_realtime_policy(option: str, path: str | None) -> ClientEventPolicy | None:
    if path is None:
        return None
    try:
        return load_policy(Path(path).read_text(), option)
    except OSError as exc:
        raise ConfigError(option, f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ConfigError(option, str(exc).removeprefix(f"{option}: ")) from None


def is_network(cidr: str) -> bool:
    try:
        ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return False
    return True


def peer_ids_once(option: str, peers: tuple[tuple[int, tuple[str, int]], ...]) -> None:
    ids = [tid for tid, _ in peers]
    for tid in ids:
        if not 0 <= tid <= 0xFFFF:
            raise ConfigError(option, f"transceiver id {tid} out of range 0..65535")
        if ids.count(tid) > 1:
            raise ConfigError(option, f"transceiver id {tid} given twice")


REAL_PORT = must(lambda addr: addr[1] != 0, "needs the relay's real port, not 0")
CIDRS = each(must(is_network, "not a network: {!r}"))
NO_LIMIT = at_least(0, " (0: no limit)")
SECRETS_LONG_ENOUGH = each(
    must(lambda s: len(s) >= MIN_SECRET_BYTES, f"a secret needs at least {MIN_SECRET_BYTES} bytes")
)


@dataclass(frozen=True, kw_only=True)
class TransceiverConfig:
    """What ``transceiver serve`` runs with; the options in ``--help`` order."""

    transceiver_id: int = option(
        "--id",
        env="TRANSCEIVER_ID",
        type=int,
        required=True,
        check=between(0, 65535),
        chart="transceiver.idSource",
        help="This transceiver's id (the relay's allowlist maps it to --media).",
    )
    cluster: int = option(
        "--cluster", default=0, check=between(0, 255), chart="clusterId", help="Cluster id."
    )
    keyring_path: str | None = option(
        "--keyring", chart="keyring.secretKey", help="Hint keyring JSON file."
    )
    keyring_json: str | None = option(
        "--keyring-json",
        chart="transceiver.extraEnv",
        help="Hint keyring JSON, inline (environment only: a secret).",
    )
    media: Addr = option(  # the one UDP socket of this process
        "--media",
        default="127.0.0.1:5000",
        parse=host_port,
        check=ip_literal,
        chart="transceiver.mediaPort",
        help="HOST:PORT of the one UDP socket for every session.",
    )
    advertise: Addr = option(  # the relay's public address, the only candidate in answers
        "--advertise",
        required=True,
        parse=host_port,
        check=(ip_literal, REAL_PORT),
        chart="relay.publicAddress",
        help="The relay's public HOST:PORT: the ICE candidate of every answer (with --region, "
        "the last and lowest-priority one of a region's answers).",
    )
    advertise_tcp: Addr | None = option(  # the relay's ICE-TCP address, if it has one
        "--advertise-tcp",
        parse=host_port_or_none,
        check=(ip_literal, REAL_PORT),
        chart="relay.tcp.publicAddress",
        help="The relay's public TCP HOST:PORT (its --listen-tcp): every answer also names a "
        "passive ICE-TCP candidate there (RFC 6544), below every UDP one, for callers whose "
        "networks drop UDP [default: none].",
    )
    http: Addr = option(
        "--http",
        default="127.0.0.1:8080",
        parse=host_port,
        chart="transceiver.httpPort",
        help="HOST:PORT for WHIP, /healthz, /readyz and the page (the public port).",
    )
    # TLS on --http (transceiver.signaling.tls): a trial off loopback, where a browser gives the
    # page no microphone over plain http; a deployment ends TLS at its ingress instead.
    https_cert: str | None = https_options.cert()
    https_key: str | None = https_options.key()
    # /metrics listener, never the WHIP port; built in code (tests, rtcedge up): off.
    metrics: Addr | None = option(
        "--metrics",
        default="127.0.0.1:9479",
        parse=host_port_or_off,
        check=ip_literal,
        code_default=None,
        chart="transceiver.metricsPort",
        help="HOST:PORT for /metrics (and /healthz, /readyz), or 'off'. Never on the --http "
        "port, which the ingress makes public.",
    )
    backend: str = option(  # a built-in's name, or a plugin's (transceiver.backends.plugins)
        "--backend",
        default="echo",
        metavar="NAME|MODULE:FACTORY|list",
        is_eager=True,
        callback=list_backends,
        check=must(lambda b: b != LIST_BACKENDS, "list: only on a command line"),
        chart="transceiver.backend",
        help="Where callers' audio and events go: echo, websocket (our protocol), realtime "
        "(a Realtime-API model server, docs/realtime.md), media-streams (a telephony bot "
        "over Twilio's Media Streams, docs/media-streams.md), grpc (our protocol over gRPC), a "
        "plugin's name, or MODULE:FACTORY, an in-process backend (docs/plugins.md); 'list' "
        "shows them and exits.",
    )
    backend_url: str | None = option(  # may hold a credential
        "--backend-url",
        repr=False,
        chart="transceiver.backendUrl",
        help="ws:// or wss:// URL for --backend websocket, realtime or media-streams, grpc:// or "
        "grpcs://HOST:PORT for --backend grpc (a plugin gets it as given); one holding a "
        "credential (a user, a password, token=...) only by the environment.",
    )
    backend_key: str | None = option(  # the model server's API key: a bearer on its WebSocket
        "--backend-key-file",
        parse=read_backend_key,
        env_secret=BACKEND_KEY_ENV,
        repr=False,
        chart="transceiver.backendKeySecret",
        help="File holding the backend's API key (--backend websocket, realtime, media-streams, "
        "grpc or a plugin), sent as its bearer ('Authorization: Bearer'); or set "
        "RTCEDGE_BACKEND_KEY.",
    )
    backend_ca_file: str | None = option(
        "--backend-ca-file",
        check=must(os.path.isfile, "no such file: {!r}"),
        chart="transceiver.backendTls",
        help="CA bundle that signs a wss:// or grpcs:// --backend-url's server (--backend "
        "websocket, realtime, media-streams, grpc or a plugin; default: the system's).",
    )
    audio_rate: int | None = option(
        "--audio-rate",
        type=click.Choice([str(rate) for rate in SAMPLE_RATES]),
        parse=lambda _option, given: None if given is None else int(given),
        chart=EXTRA,
        help="PCM16 rate, in Hz, of the echo and realtime backends [default: echo 48000, "
        "realtime 24000]; a websocket or grpc backend chooses per call, media-streams is 8000.",
    )
    realtime_session: dict[str, Any] | None = option(  # the operator's session.update, first event
        "--realtime-session-file",
        parse=read_realtime_session,
        code_default=None,
        chart=EXTRA,
        help="JSON file of the Realtime session (model, instructions, voice, tools...) sent to "
        "the model server first on every call; apps and callers may not change it.",
    )
    realtime_policy: ClientEventPolicy | None = option(
        "--realtime-policy-file",
        parse=read_realtime_policy,
        code_default=None,
        chart=EXTRA,
        help="JSON file of the caller events the model server may get, by type and field, and "
        "their rate (docs/realtime.md, 'What a caller may send') [default: the built-in list].",
    )
    realtime_keys: tuple[bytes, ...] = option(  # the operator's API keys: app servers hold them
        "--realtime-key-file",
        parse=read_realtime_keys,
        env_secret=REALTIME_KEY_ENV,
        code_default=(),
        repr=False,
        chart=EXTRA,
        help="File of API keys (one per line, >= 32 bytes) that app servers present to POST "
        "/v1/realtime/client_secrets and /v1/realtime/calls; or set RTCEDGE_REALTIME_KEY.",
    )
    audio_format: str = option(  # the echo backend's; a websocket backend picks per session
        "--audio-format",
        default="pcm16",
        type=click.Choice(["pcm16", "opus"]),
        check=must(lambda f: f in ("pcm16", "opus"), "unknown {!r} (pcm16, opus)"),
        chart=EXTRA,
        help="What the echo backend takes: decoded PCM16, or the caller's Opus passed through "
        "(no codec work). A websocket backend chooses per call (docs/backend-protocol.md).",
    )
    # The outbound Opus encoder's (transceiver.codec_options, where they are declared).
    opus_application: str = codec.application()
    opus_bitrate_bps: int = codec.bitrate()
    opus_complexity: int = codec.complexity()
    opus_fec: bool = codec.fec()
    opus_packet_loss_pct: int = codec.packet_loss()
    opus_dtx: bool = codec.dtx()
    # A ceiling under --admit-max-cpu: 85 % of a core / 2.16 % per echo session (bench sessions,
    # 2026-12-01: N=30 at 65 % of the pinned core) = 39; the load admission usually refuses first.
    max_sessions: int = option(
        "--max-sessions",
        default=150,
        check=POSITIVE,
        chart="transceiver.maxSessions",
        help="Sessions this process takes at most (one process ~ one core; see "
        "docs/benchmarks.md): a ceiling sized for --audio-format opus; --admit-max-cpu and "
        "--admit-max-loop-lag refuse sooner (pcm16 calls cost ~3x more CPU).",
    )
    # Refuse above (0: off): transceiver.headroom.
    admit_max_cpu_pct: float = option(
        "--admit-max-cpu",
        default=LoadLimits.max_cpu_pct,
        check=(NO_LIMIT, must(lambda v: v <= 100, "is % of one core, 0-100, got {}")),
        chart=EXTRA,
        help="Refuse new sessions (503 + Retry-After) while this process uses more than this % "
        "of one core, or would with one more session (connecting ones counted ahead); admit "
        "again under 80 % of it. 0: off.",
    )
    admit_max_loop_lag_ms: float = option(
        "--admit-max-loop-lag",
        default=LoadLimits.max_loop_lag_ms,
        check=NO_LIMIT,
        chart=EXTRA,
        help="Refuse new sessions while the event loop runs this many ms late (mean over 2 s: "
        "the core is short, whoever takes it); admit again under 80 % of it. 0: off.",
    )
    ice_timeout_s: float = option(
        "--ice-timeout",
        default=10.0,
        check=POSITIVE,
        chart="transceiver.iceTimeoutSeconds",
        help="Seconds from the offer to a connected session.",
    )
    first_check_timeout_s: float = option(  # answer -> first authenticated check
        "--first-check-timeout",
        default=FIRST_CHECK_TIMEOUT_S,
        check=POSITIVE,
        chart=EXTRA,
        help="Seconds from the answer to the client's first authenticated ICE check; a session "
        "without one ends (first_check_timeout) instead of holding a slot for --ice-timeout.",
    )
    idle_timeout_s: float = option(
        "--idle-timeout",
        default=60.0,
        check=POSITIVE,
        chart="transceiver.idleTimeoutSeconds",
        help="Seconds without audio from the caller before the session ends.",
    )
    max_duration_s: float = option(
        "--max-duration",
        default=4 * 3600.0,
        check=POSITIVE,
        chart="transceiver.maxDurationSeconds",
        help="Seconds a session may last at most, however active; then it ends (max_duration).",
    )
    # A client address the session left, once silent this long, ends.
    address_ttl_s: float = option(
        "--address-ttl",
        default=30.0,
        check=POSITIVE,
        chart=EXTRA,
        help="Seconds a client address the session moved away from (NAT rebinding, another "
        "relay) stays routable once silent.",
    )
    drain_grace_s: float = option(
        "--drain-grace",
        default=30.0,
        check=must(lambda v: v >= 0, "must be >= 0"),
        chart="transceiver.drainGraceSeconds",
        help="Seconds live sessions get after SIGTERM.",
    )
    auth_token: str | None = option(
        "--auth-token",
        repr=False,
        chart="transceiver.authToken",
        help="Accept 'Authorization: Bearer T' with this static token (environment only).",
    )
    token_secrets: tuple[bytes, ...] = option(  # signed tokens' HMAC keys
        "--token-secret-file",
        parse=read_token_secrets,
        env_secret=TOKEN_SECRET_ENV,
        code_default=(),
        repr=False,
        check=each(
            must(
                lambda s: len(s) >= MIN_SECRET_BYTES,
                f"a secret needs at least {MIN_SECRET_BYTES} bytes",
            )
        ),
        chart=EXTRA,
        help="File of secrets (one per line, >= 32 bytes) for short-lived signed tokens (HS256 "
        "JWT, docs/transceiver.md); the first signs, all verify. Or set RTCEDGE_TOKEN_SECRET.",
    )
    token_max_ttl_s: float = option(  # a signed token valid for longer than this is refused
        "--token-max-ttl",
        default=3600.0,
        check=POSITIVE,
        chart=EXTRA,
        help="Refuse signed tokens that stay valid longer than this many seconds.",
    )
    client_rate_per_s: float = option(  # sessions a client may start per second (0: no limit)...
        "--client-rate",
        default=1.0,
        check=NO_LIMIT,
        chart=EXTRA,
        help="New sessions per second one client may start, after --client-burst (0: no "
        "limit). A client is its token's subject, else its address (IPv6: its /64).",
    )
    client_burst: int = option(  # ...after a burst of this many
        "--client-burst",
        default=10,
        check=POSITIVE,
        chart=EXTRA,
        help="New sessions one client may start at once.",
    )
    client_max_sessions: int = option(  # live sessions per client (0: no cap)
        "--client-max-sessions",
        default=0,
        check=NO_LIMIT,
        chart=EXTRA,
        help="Live sessions per client (0: no cap). Only meaningful when clients are told apart: "
        "by token subjects, or by their addresses (directly exposed, or --trusted-proxy).",
    )
    trusted_proxies: tuple[str, ...] = option(  # CIDRs whose client-address header is believed
        "--trusted-proxy",
        env="TRUSTED_PROXIES",
        multiple=True,
        parse=words,
        check=CIDRS,
        chart="transceiver.trustedProxies",
        help="CIDR of a proxy (your ingress) whose --client-address-header is believed "
        "(repeatable). Without it every client behind the proxy shares one quota.",
    )
    client_address_header: str = option(
        "--client-address-header",
        default="X-Forwarded-For",
        check=must(lambda name: name.strip(), "must name a header"),
        chart="transceiver.clientAddressHeader",
        help="Where a trusted proxy puts the client's address.",
    )
    cors_origin: str = option(
        "--cors-origin",
        default="*",
        chart="transceiver.corsOrigin",
        help="Access-Control-Allow-Origin of every WHIP answer: set it to your page's origin so "
        "only that page's scripts can read answers.",
    )
    body_timeout_s: float = option(  # a client must deliver its whole offer within this
        "--body-timeout",
        default=10.0,
        check=POSITIVE,
        chart=EXTRA,
        help="Seconds a client has to send its whole offer (slow clients get 408).",
    )
    # A WHIP offer's body, and any request body: browsers' offers are 3-8 KiB
    # (transceiver.signaling.offer).
    max_sdp_bytes: int = option(
        "--max-sdp-bytes",
        default=16 * 1024,
        check=POSITIVE,
        chart=EXTRA,
        help="Bytes a WHIP offer (any request body) may have; larger: 413 before it is read. "
        "Browsers' offers are 3-8 KiB; the offer's lines are bounded too (docs/transceiver.md).",
    )
    # Both HTTP listeners' (--http, --metrics) header timeout and connection cap, each its own:
    # ``http_limits``.
    http_header_timeout_s: float = option(
        "--http-header-timeout",
        default=HEADER_TIMEOUT_S,
        check=POSITIVE,
        chart=EXTRA,
        help="Seconds a connection to --http or --metrics has to send a request's headers, from "
        "its accept or its previous response; then it is closed (slowloris; idle keep-alive).",
    )
    http_max_connections: int = option(
        "--http-max-connections",
        default=MAX_CONNECTIONS,
        check=at_least(1),
        chart=EXTRA,
        help="Connections each of --http and --metrics holds open at once; beyond, a newcomer "
        "gets 503 and is closed at once.",
    )
    relay_networks: tuple[str, ...] = option(  # CIDRs encapsulated datagrams may come from
        "--relay-network",
        env="RELAY_NETWORKS",
        multiple=True,
        parse=words,
        check=CIDRS,
        chart="transceiver.relayNetworks",
        help="CIDR that encapsulated datagrams may come from (repeatable; default: any). Set it "
        "to the relays' network: an encapsulated datagram names the client it speaks for.",
    )
    regions: tuple[tuple[str, tuple[Addr, ...]], ...] = option(  # name -> relays, preferred 1st
        "--region",
        env="REGIONS",
        multiple=True,
        parse=each_word(lambda _, text: parse_region(text)),
        chart="transceiver.regions",
        help="NAME=HOST:PORT[,HOST:PORT...]: the relay addresses an answer advertises to a "
        "client of region NAME, most preferred first (repeatable). --advertise is added last as "
        "a backup unless --no-backup-candidate. Clients of no region get --advertise alone.",
    )
    region_header: str | None = option(  # the request header naming the client's region
        "--region-header",
        chart="transceiver.regionHeader",
        help="Request header naming the client's region (e.g. CloudFront-Viewer-Country), set by "
        "your CDN or load balancer; believed only from a --trusted-proxy.",
    )
    region_prefixes: tuple[tuple[str, str], ...] = option(  # (client CIDR, region name)
        "--region-prefix",
        env="REGION_PREFIXES",
        multiple=True,
        parse=each_word(lambda _, text: parse_region_prefix(text)),
        chart="transceiver.regionPrefixes",
        help="CIDR=NAME: clients in CIDR are of region NAME (repeatable; the longest prefix "
        "wins), when --region-header is absent or names no region. The client's address as the "
        "quotas see it (--trusted-proxy).",
    )
    backup_candidate: bool = option(  # --advertise last in every region's answer
        "--no-backup-candidate",
        is_flag=True,
        default=False,
        parse=lambda _, no_backup: not no_backup,
        chart="transceiver.backupCandidate",
        help="Advertise only a region's own addresses, without --advertise as its last, "
        "lowest-priority candidate (which keeps calls connecting while a region's edge is down).",
    )
    # Where the other transceivers' WHIP ports are, for requests on sessions they own
    # (transceiver.ownership): ID=HOST:PORT entries, and/or a DNS template with {id}.
    peer_http: tuple[tuple[int, Addr], ...] = option(
        "--peer-http",
        multiple=True,
        parse=each_word(parse_transceiver),
        check=peer_ids_once,
        chart=EXTRA,
        help="ID=HOST:PORT: the WHIP listener of transceiver ID (repeatable; env: space "
        "separated). A DELETE or PATCH for a session another transceiver owns is passed on to "
        "it; without an address for the owner it is 404. An entry for this transceiver's own "
        "--id is ignored, so every transceiver can get the same list.",
    )
    peer_http_dns: str | None = option(
        "--peer-http-dns",
        check=check_id_template,
        chart="transceiver.httpPort",
        help="DNS template with {id} for the other transceivers' WHIP listeners, e.g. "
        "'rtcedge-transceiver-{id}.rtcedge-transceiver-headless:8080' (a StatefulSet's pods "
        "under its headless Service); --peer-http entries take precedence.",
    )
    peer_timeout_s: float = option(  # a forwarded request's whole exchange with the owner
        "--peer-timeout",
        default=5.0,
        check=POSITIVE,
        chart=EXTRA,
        help="Seconds a request passed on to its session's transceiver may take in all; then "
        "503 + Retry-After.",
    )
    # Forwards under way at once (more: 503 + Retry-After), in all, to one owner, from one
    # client; resume claims apart; an owner that timed out is failed fast
    # (transceiver.signaling.forward_budget).
    peer_max_forwards: int = option(
        "--peer-max-forwards",
        default=_PEERS.max_forwards,
        check=at_least(1),
        chart=EXTRA,
        help="DELETE/PATCH requests passed on to other transceivers at once; more are answered "
        "503 + Retry-After.",
    )
    peer_max_per_owner: int = option(
        "--peer-max-per-owner",
        default=_PEERS.max_per_owner,
        check=at_least(1),
        chart=EXTRA,
        help="Of --peer-max-forwards, at most this many to one transceiver: one that hangs holds "
        "no more.",
    )
    peer_max_per_client: int = option(
        "--peer-max-per-client",
        default=_PEERS.max_per_client,
        check=at_least(1),
        chart=EXTRA,
        help="Of --peer-max-forwards, at most this many from one client (its address, as for "
        "--client-rate).",
    )
    peer_max_claims: int = option(
        "--peer-max-claims",
        default=_PEERS.max_claims,
        check=at_least(1),
        chart=EXTRA,
        help="Resume claims (calls moving here) passed on at once, a budget apart from the "
        "forwards; more are answered 503 + Retry-After.",
    )
    peer_connect_timeout_s: float = option(  # connecting to the owner (within peer_timeout_s)
        "--peer-connect-timeout",
        default=1.0,
        check=POSITIVE,
        chart=EXTRA,
        help="Seconds to connect to another transceiver, of --peer-timeout.",
    )
    peer_fail_fast_s: float = option(
        "--peer-fail-fast",
        default=_PEERS.fail_fast_s,
        check=at_least(0, " (0: off)"),
        chart=EXTRA,
        help="Seconds a transceiver that timed out is refused at once (503 + Retry-After) "
        "instead of waited for again. 0: off.",
    )
    # On drain, a caller asked to move has this long to claim its resume token; a claimed old
    # call ends this long after the claim at the latest (transceiver.migration).
    migrate_deadline_s: float = option(
        "--migrate-deadline",
        default=10.0,
        check=POSITIVE,
        chart=EXTRA,
        help="On drain, callers with a data channel are asked to move to another transceiver "
        "(with --peer-http/--peer-http-dns): seconds they have to re-offer, and that their old "
        "call lasts at most once moved.",
    )
    # The data channel's bounds per call (transceiver.call.sctp): the receive window (a_rwnd, and
    # what reassembly may hold), TSNs tracked past a gap, events unacknowledged by the caller.
    # A window smaller than two of the largest messages could stall one of them mid-way.
    sctp_receive_window_bytes: int = option(
        "--sctp-receive-window",
        default=_SCTP.receive_window_bytes,
        check=must(
            lambda v: v >= 2 * MAX_MESSAGE_BYTES,
            f"must be >= {2 * MAX_MESSAGE_BYTES} bytes, got {{}}",
        ),
        chart=EXTRA,
        help="Bytes of a caller's data channel held for reassembly (the advertised SCTP window): "
        "DATA past it is dropped; a caller that overfills it ends (data_channel_limit).",
    )
    sctp_max_misordered_tsns: int = option(
        "--sctp-max-misordered-tsns",
        default=_SCTP.max_misordered_tsns,
        check=between(16, 65536),
        chart=EXTRA,
        help="SCTP TSNs tracked past a gap in a caller's data; DATA farther ahead is dropped.",
    )
    sctp_max_unacked_bytes: int = option(
        "--sctp-max-unacked",
        default=_SCTP.max_unacked_bytes,
        check=must(
            lambda v: v >= MAX_MESSAGE_BYTES, f"must be >= {MAX_MESSAGE_BYTES} bytes, got {{}}"
        ),
        chart=EXTRA,
        help="Bytes of events toward a caller sent or waiting and not yet acknowledged; past it "
        "the oldest waiting events are dropped (rtcedge_transceiver_data_channel_dropped).",
    )

    def validate(self) -> TransceiverConfig:
        """Raise ConfigError for the first invalid option; returns self for chaining. Each
        field's own checks first (on the field), then the rules that span fields."""
        check_fields(self)
        if bool(self.keyring_path) == bool(self.keyring_json):
            raise ConfigError("--keyring", "give exactly one of --keyring FILE or --keyring-json")
        self._check_backend()
        self.opus_settings()
        if bool(self.https_cert) != bool(self.https_key):
            missing = "--https-key" if self.https_cert else "--https-cert"
            raise ConfigError(missing, "--https-cert and --https-key go together")
        self.https_context  # noqa: B018 (reads and checks both files)
        if self.metrics is not None and self.metrics == self.http and self.http[1] != 0:
            raise ConfigError("--metrics", "must not be the --http address")
        self.region_table()
        if self.region_header is not None and not self.trusted_proxies:
            raise ConfigError(
                "--region-header",
                "is believed only from a --trusted-proxy: set it to the proxy that sets the header",
            )
        return self

    def _check_backend(self) -> None:
        """The backend options agree with --backend, and the backend can be built from them."""
        backend = self.backend
        if self.backend_plugin is not None:  # its factory judges the options, at make_backend
            self._check_realtime_only()
            return
        if backend != "echo" and not self.backend_url:
            raise ConfigError("--backend-url", f"required with --backend {backend}")
        if backend == "echo" and self.backend_url:
            raise ConfigError(
                "--backend-url", "the echo backend takes none: add --backend websocket or realtime"
            )
        if backend != "echo" and self.audio_format != "pcm16":
            raise ConfigError(
                "--audio-format",
                f"only for --backend echo: {backend} sends and takes PCM16 (a websocket "
                "backend chooses its format per call)",
            )
        if backend in ("websocket", "grpc") and self.audio_rate is not None:
            raise ConfigError("--audio-rate", f"a {backend} backend chooses its rate per call")
        if backend == "media-streams" and self.audio_rate is not None:
            raise ConfigError("--audio-rate", "media streams are 8000 Hz mu-law, always")
        if not takes_credentials(backend):
            self._check_network_only()
        if backend != "realtime":
            self._check_realtime_only()
        try:
            self._build_backend_config()
        except ValueError as exc:
            raise ConfigError("--backend-url", str(exc)) from None

    def _check_network_only(self) -> None:
        """The key and the CA are for the backends that take them (NETWORK_BACKENDS)."""
        network_only = {
            "--backend-key-file": self.backend_key is not None,
            "--backend-ca-file": self.backend_ca_file is not None,
        }
        for flag, given in network_only.items():
            if given:
                raise ConfigError(
                    flag, f"only for --backend {', '.join(NETWORK_BACKENDS)} or a plugin"
                )

    def _check_realtime_only(self) -> None:
        """No option of the realtime backend is given to another."""
        realtime_only = {
            "--realtime-session-file": self.realtime_session is not None,
            "--realtime-policy-file": self.realtime_policy is not None,
            "--realtime-key-file": bool(self.realtime_keys),
        }
        for flag, given in realtime_only.items():
            if given:
                raise ConfigError(flag, "only for --backend realtime")

    def _build_backend_config(self) -> None:
        """Build the backend's own configuration, whose checks raise ValueError (its URL)."""
        if self.backend == "realtime":
            self.realtime_backend_config()
        elif self.backend == "media-streams":
            self.media_streams_backend_config()
        elif self.backend == "grpc":
            self.grpc_backend_config()
        elif self.backend == "websocket":
            self.websocket_backend_config()

    @cached_property
    def backend_plugin(self) -> tuple[str, BackendFactory] | None:
        """(module:factory, the factory) of a plugin --backend, None for a built-in; imported
        once (ConfigError naming --backend when it cannot be found or imported)."""
        try:
            reference = resolve(self.backend, BACKENDS)
        except PluginError as exc:
            raise ConfigError("--backend", str(exc)) from None
        if reference is None:
            return None
        try:
            return reference, load_factory(reference)
        except PluginError as exc:
            raise ConfigError("--backend", self._plugin_message(exc)) from None

    def _plugin_message(self, exc: PluginError) -> str:
        """A plugin's error, led by the name it was given as (an entry point's)."""
        return str(exc) if is_reference(self.backend) else f"{self.backend}: {exc}"

    def backend_options(self) -> BackendOptions:
        """What a plugin's factory gets: the backend options as set."""
        return BackendOptions(
            url=self.backend_url,
            key=self.backend_key,
            ca_file=self.backend_ca_file,
            audio_format=self.audio_format,
            sample_rate=self.audio_rate,
        )

    def websocket_backend_config(self) -> WebSocketBackendConfig:
        """The websocket backend's configuration (ValueError on a bad URL)."""
        from transceiver.backends.websocket import WebSocketBackendConfig

        return WebSocketBackendConfig(
            url=self.backend_url or "", bearer=self.backend_key, ca_file=self.backend_ca_file
        )

    def realtime_backend_config(self) -> RealtimeBackendConfig:
        """The realtime backend's configuration (ValueError on a bad URL)."""
        from transceiver.backends.realtime.backend import RealtimeBackendConfig

        extra: dict[str, Any] = {}
        if self.audio_rate is not None:
            extra["sample_rate"] = self.audio_rate
        if self.realtime_policy is not None:
            extra["policy"] = self.realtime_policy
        return RealtimeBackendConfig(
            url=self.backend_url or "",
            api_key=self.backend_key,
            ca_file=self.backend_ca_file,
            session=self.realtime_session or {},
            **extra,
        )

    def media_streams_backend_config(self) -> MediaStreamsBackendConfig:
        """The media-streams backend's configuration (ValueError on a bad URL)."""
        from transceiver.backends.media_streams import MediaStreamsBackendConfig

        return MediaStreamsBackendConfig(
            url=self.backend_url or "", bearer=self.backend_key, ca_file=self.backend_ca_file
        )

    def grpc_backend_config(self) -> GrpcBackendConfig:
        """The grpc backend's configuration (ValueError on a bad URL); ConfigError naming
        --backend when grpcio, an extra, is not installed."""
        from transceiver.backends.grpc import GrpcBackendConfig

        if importlib.util.find_spec("grpc") is None:
            raise ConfigError("--backend", "grpc needs the grpc extra: pip install 'rtcedge[grpc]'")
        return GrpcBackendConfig(
            url=self.backend_url or "", bearer=self.backend_key, ca_file=self.backend_ca_file
        )

    def make_backend(self) -> Backend:
        """The backend --backend names, built from its options (a plugin's factory is called
        here, once: ConfigError naming --backend when it fails)."""
        if self.backend_plugin is not None:
            reference, factory = self.backend_plugin
            try:
                return build(factory, self.backend_options(), reference)
            except PluginError as exc:
                raise ConfigError("--backend", self._plugin_message(exc)) from None
        if self.backend == "grpc":
            from transceiver.backends.grpc.backend import GrpcBackend  # imports grpc: only here

            return GrpcBackend(self.grpc_backend_config())
        if self.backend == "media-streams":
            from transceiver.backends.media_streams import MediaStreamsBackend

            return MediaStreamsBackend(self.media_streams_backend_config())
        if self.backend == "realtime":
            from transceiver.backends.realtime import RealtimeBackend

            return RealtimeBackend(self.realtime_backend_config())
        if self.backend == "websocket":
            from transceiver.backends.websocket import WebSocketBackend

            return WebSocketBackend(self.websocket_backend_config())
        rate = {} if self.audio_rate is None else {"sample_rate": self.audio_rate}
        return create_backend("echo", audio_format=self.audio_format, **rate)

    def opus_settings(self) -> EncoderSettings:
        """The outbound encoder's settings (ConfigError naming the option for a bad one)."""
        return codec.settings_of({name: getattr(self, name) for name in codec.FIELDS})

    @cached_property
    def https_context(self) -> ssl.SSLContext | None:
        """The --http listener's TLS context, None for plain http (ConfigError naming
        --https-cert or --https-key for a bad file)."""
        if not (self.https_cert and self.https_key):
            return None
        return tls.server_context(
            self.https_cert, self.https_key, datetime.datetime.now(datetime.UTC)
        )

    @cached_property
    def http_limits(self) -> ListenerLimits:
        return ListenerLimits(self.http_header_timeout_s, self.http_max_connections)

    def peer_limits(self) -> PeerLimits:
        return PeerLimits(
            max_forwards=self.peer_max_forwards,
            max_per_owner=self.peer_max_per_owner,
            max_per_client=self.peer_max_per_client,
            max_claims=self.peer_max_claims,
            fail_fast_s=self.peer_fail_fast_s,
        )

    def sctp_limits(self) -> SctpLimits:
        return SctpLimits(
            self.sctp_receive_window_bytes,
            self.sctp_max_misordered_tsns,
            self.sctp_max_unacked_bytes,
        )

    def peers(self) -> Peers:
        """The other transceivers' WHIP addresses; an entry for this one's own id is never
        used (the same list can go to every pod)."""
        return Peers(dict(self.peer_http), self.peer_http_dns)

    def session_router(self, keyring: Keyring) -> SessionRouter:
        """Resource ids older than the longest session name nothing (issued-at is rounded down
        to the minute)."""
        return SessionRouter(
            keyring, self.cluster, self.transceiver_id, self.peers(), self.max_duration_s + 60
        )

    def region_table(self) -> RegionTable:
        """The regions' chooser (ConfigError naming the option on a bad entry)."""
        return RegionTable(
            self.advertise,
            self.regions,
            self.region_prefixes,
            self.region_header,
            self.backup_candidate,
        )

    def load_limits(self) -> LoadLimits:
        return LoadLimits(self.admit_max_cpu_pct, self.admit_max_loop_lag_ms)

    def lifecycle_limits(self) -> Limits:
        return Limits(
            self.ice_timeout_s, self.idle_timeout_s, self.max_duration_s, self.first_check_timeout_s
        )

    def trusted_proxy_networks(self) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
        return [ipaddress.ip_network(n, strict=False) for n in self.trusted_proxies]
