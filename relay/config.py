"""The relay's configuration: one typed object built once from the CLI/environment and validated.

Each option is declared once, on its field (``common.options.option``): ``relay serve``'s click
options and the config they make come from these fields. Every check raises ``ConfigError``
(common.config) naming the command-line option, so a bad deployment fails at start with a
message that says what to fix.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property

import click

from common.config import (
    ConfigError,
    address_family,
    check_id_template,
    format_host_port,
    parse_host_port,
    parse_transceiver,
)
from common.listener import HEADER_TIMEOUT_S, ListenerLimits
from common.options import (
    POSITIVE,
    REQUIRED,
    at_least,
    between,
    check_fields,
    host_port,
    host_port_or_none,
    host_port_or_off,
    ip_literal,
    must,
    option,
    unique_map,
)
from relay.addresspolicy import DEFAULT_DENY_NETWORKS, Network
from relay.flowcache import RedisAuth
from relay.flows import FlowLimits
from relay.framing import MAX_RFC4571_FRAME
from relay.tcpconns import TcpLimits

# Open connections to the relay's --metrics listener: probes and a scraper or two need a handful,
# and each connection is a thread of the supervisor while it lasts.
METRICS_MAX_CONNECTIONS = 128
TRANSCEIVER_STUN_RATE_PER_S = 2000  # --transceiver-stun-rate's default
COALESCE_US = 1000  # --coalesce-us's default (docs/relay.md, "The hot path")
MAX_COALESCE_US = 1000
REDIS_PASSWORD_ENV = "RTCEDGE_REDIS_PASSWORD"
EXTRA = "relay.extraArgs"  # the chart sets the option only through its pass-through
FILE = click.Path(dir_okay=False)
_FLOWS, _TCP = FlowLimits(), TcpLimits()  # their defaults are the options'


def parse_route(option: str, text: str) -> tuple[int, tuple[tuple[str, int], ...]]:
    """'CLUSTER=HOST:PORT[,HOST:PORT...]' -> (cluster, addresses in order of preference)."""
    ident, sep, rest = text.partition("=")
    if not sep or not rest:
        raise ConfigError(option, f"expected CLUSTER=HOST:PORT[,HOST:PORT...], got {text!r}")
    try:
        cluster = int(ident)
    except ValueError:
        raise ConfigError(option, f"cluster id must be a number, got {ident!r}") from None
    if not 0 <= cluster <= 255:
        raise ConfigError(option, f"cluster id {cluster} out of range 0..255")
    addresses = tuple(parse_host_port(option, a) for a in rest.split(",") if a)
    if len(set(addresses)) != len(addresses):
        raise ConfigError(option, f"an address is given twice in {text!r}")
    return cluster, addresses


def parse_id_range(option: str, text: str) -> tuple[int, ...]:
    """'0-15' or '0,1,5-7' -> the ids, for expanding a DNS template."""
    ids: list[int] = []
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            ids.extend(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise ConfigError(option, f"expected ids like 0-15 or 0,2,4-6, got {text!r}") from None
    if not ids or min(ids) < 0 or max(ids) > 0xFFFF:
        raise ConfigError(option, f"ids must be within 0..65535, got {text!r}")
    return tuple(sorted(set(ids)))


def parse_networks(option: str, values: Iterable[str]) -> tuple[Network, ...]:
    """CIDRs from a repeated option, each value possibly comma or space separated (the
    environment's form); a host address with a prefix length (10.0.0.1/8) is refused as a typo."""
    networks = []
    for value in values:
        for item in value.replace(",", " ").split():
            try:
                networks.append(ipaddress.ip_network(item, strict=True))
            except ValueError as exc:
                raise ConfigError(
                    option, f"{item!r} is not a network in CIDR form ({exc})"
                ) from None
    return tuple(networks)


def redis_password(path: str | None, environ: Mapping[str, str]) -> str | None:
    """The Redis password from ``--redis-password-file`` or ``RTCEDGE_REDIS_PASSWORD`` (the
    environment only: a secret on a command line is readable by every local user)."""
    from_env = environ.get(REDIS_PASSWORD_ENV) or None
    if not path:
        return from_env
    if from_env:
        raise ConfigError(
            "--redis-password-file", "give the file or RTCEDGE_REDIS_PASSWORD, not both"
        )
    try:
        with open(path, encoding="utf-8") as f:
            password = f.read().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("--redis-password-file", f"cannot read {path}: {exc}") from None
    if not password:
        raise ConfigError("--redis-password-file", f"{path} is empty")
    return password


def usable_cpus(option: str, workers: int | None) -> int:
    """--workers, or the CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if workers is None else workers


def id_range_or_none(option: str, text: str | None) -> tuple[int, ...]:
    return parse_id_range(option, str(text)) if text else ()


def denied_networks(option: str, given: Iterable[str]) -> tuple[Network, ...]:
    """The built-in ranges, then those given: added to, never instead of."""
    return parse_networks(option, DEFAULT_DENY_NETWORKS) + parse_networks(option, given)


def redis_password_of(option: str, path: str | None) -> str | None:
    return redis_password(path, os.environ)


def dns_template(option: str, template: str) -> None:
    """An empty --transceiver-dns is none (no template to check), as it always was."""
    if template:
        check_id_template(option, template)


def routes_have_addresses(option: str, routes: dict[int, tuple[tuple[str, int], ...]]) -> None:
    for cluster, addresses in routes.items():
        if not addresses:
            raise ConfigError(option, f"cluster {cluster} has no address")


ABOVE_ZERO = must(lambda v: v > 0, "must be > 0")
IDLE_TTL_FLOOR = must(lambda v: v >= 4, "must be at least 4 s (ICE consent checks come every ~5 s)")
REDIS_SCHEMES = must(
    lambda url: url.startswith(("redis://", "rediss://", "unix://")),
    "must start with redis://, rediss:// or unix://",
)
TCP_FRAME = must(
    lambda v: 20 <= v <= MAX_RFC4571_FRAME,
    f"must be 20..{MAX_RFC4571_FRAME} (a STUN header is 20 bytes, an RFC 4571 length field 16 "
    "bits), got {}",
)


@dataclass(frozen=True, kw_only=True)
class RelayConfig:
    """What ``relay serve`` runs with; the options in ``--help`` order."""

    listen: tuple[str, int] = option(
        "--listen",
        default="0.0.0.0:3478",
        parse=host_port,
        check=ip_literal,
        chart="relay.port",
        help="Public UDP address shared by all workers (SO_REUSEPORT).",
    )
    internal_host: str = option(
        "--internal",
        default="127.0.0.1:4000",
        parse=host_port,
        into=("internal_host", "internal_port_base"),
        check=ip_literal,
        code_default=REQUIRED,
        chart="relay.internalPortBase",
        help="Internal HOST:PORT_BASE; worker i binds PORT_BASE+i and talks to transceivers "
        "from it.",
    )
    workers: int = option(
        "--workers",
        type=int,
        parse=usable_cpus,
        check=between(1, 256),
        chart="relay.workers",
        help="Worker processes [default: usable CPU count].",
    )
    pin: bool = option(
        "--pin/--no-pin", default=True, chart="relay.pin", help="Pin each worker to one CPU."
    )
    cluster: int = option(
        "--cluster",
        default=0,
        check=between(0, 255),
        chart="clusterId",
        help="This relay's cluster id (0-255); hints for other clusters go to their --route, or "
        "are dropped (unknown_cluster).",
    )
    keyring_path: str | None = option(
        "--keyring",
        type=FILE,
        chart="keyring.secretKey",
        help="Hint keyring JSON file (a mounted Kubernetes Secret).",
    )
    keyring_json: str | None = option(
        "--keyring-json",
        chart="relay.extraEnv",
        help="Hint keyring JSON given inline instead of --keyring. Set it through the environment "
        "(RTCEDGE_KEYRING_JSON): on the command line, which every local user can read (ps), it is "
        "refused.",
    )
    transceivers: dict[int, tuple[str, int]] = option(
        "--transceiver",
        env="TRANSCEIVERS",
        multiple=True,
        parse=unique_map(parse_transceiver, "transceiver id {} given twice"),
        chart=EXTRA,
        help="Allowlisted transceiver ID=HOST:PORT (repeatable; env: space separated).",
    )
    transceiver_dns: str | None = option(
        "--transceiver-dns",
        check=dns_template,
        chart="transceiver.mediaPort",
        help="DNS template with {id}, e.g. 'rtcedge-transceiver-{id}.rtcedge-transceiver:5000'.",
    )
    transceiver_ids: tuple[int, ...] = option(
        "--transceiver-ids",
        parse=id_range_or_none,
        chart="relay.transceiverIds",
        help="Ids to expand the DNS template with, e.g. 0-15.",
    )
    dns_interval_s: float = option(
        "--dns-interval",
        default=10.0,
        check=ABOVE_ZERO,
        chart="relay.dnsIntervalSeconds",
        help="Seconds between background re-resolutions of the DNS template.",
    )
    dns_grace_s: float = option(
        "--dns-grace",
        default=60.0,
        chart="relay.dnsGraceSeconds",
        help="Seconds a transceiver whose name stopped resolving stays allowlisted (DNS blips must "
        "not drop calls); then it is removed. At least twice --dns-interval.",
    )
    # The flow tables' bounds, per worker (relay.flows, the ``limits`` below).
    max_pending_flows: int = option(
        "--max-pending-flows",
        default=_FLOWS.max_pending_flows,
        check=POSITIVE,
        chart=EXTRA,
        help="Pending flows per worker; a full table evicts the oldest pending flow of the hint "
        "holding the most.",
    )
    max_pending_per_ufrag: int = option(
        "--max-pending-per-ufrag",
        default=_FLOWS.max_pending_per_ufrag,
        check=POSITIVE,
        chart=EXTRA,
        help="Pending flows one hint may open at once; then one more per --pending-ufrag-refill.",
    )
    pending_ufrag_refill_s: int = option(
        "--pending-ufrag-refill",
        default=_FLOWS.pending_ufrag_refill_s,
        check=POSITIVE,
        chart=EXTRA,
        help="Seconds for a hint to earn back one pending flow (a call that rebinds its NAT needs "
        "one now and then).",
    )
    max_pending_per_prefix: int = option(
        "--max-pending-per-prefix",
        default=_FLOWS.max_pending_per_prefix,
        check=POSITIVE,
        chart=EXTRA,
        help="Pending flows per source /24 (IPv4) or /64 (IPv6); at the cap the prefix's oldest "
        "is evicted.",
    )
    # Also how long an admitted ICE-TCP connection waits for its transceiver (``tcp_limits``).
    pending_ttl_s: int = option(
        "--pending-ttl",
        default=_FLOWS.pending_ttl_s,
        check=POSITIVE,
        chart=EXTRA,
        help="Seconds a pending flow (or an admitted ICE-TCP connection) waits for its "
        "transceiver's reply.",
    )
    max_confirmed_flows: int = option(
        "--max-flows",
        default=_FLOWS.max_confirmed_flows,
        check=POSITIVE,
        chart="relay.maxFlows",
        help="Confirmed flows per worker; a full table evicts the flow idle longest.",
    )
    max_flows_per_transceiver: int = option(
        "--max-flows-per-transceiver",
        default=_FLOWS.max_flows_per_transceiver,
        check=POSITIVE,
        chart=EXTRA,
        help="Confirmed flows per worker of one transceiver (its sessions x their client "
        "addresses); at the cap its flow idle longest is evicted.",
    )
    max_flows_per_hint: int = option(
        "--max-flows-per-hint",
        default=_FLOWS.max_flows_per_hint,
        check=POSITIVE,
        chart=EXTRA,
        help="Confirmed flows per worker of one session's hint (a session has ~4 client addresses "
        "at most); at the cap its flow idle longest is evicted.",
    )
    # Also an ICE-TCP connection's idle timeout (``tcp_limits``).
    idle_ttl_s: int = option(
        "--idle-ttl",
        default=_FLOWS.idle_ttl_s,
        check=(POSITIVE, IDLE_TTL_FLOOR),
        chart="relay.idleTtlSeconds",
        help="Seconds a confirmed flow lives without traffic from its transceiver.",
    )
    max_hint_age_s: int = option(
        "--max-hint-age",
        default=4 * 3600,
        check=POSITIVE,
        chart="relay.maxHintAgeSeconds",
        help="Maximum session age in seconds; older hints are rejected.",
    )
    metrics: tuple[str, int] | None = option(
        "--metrics",
        default="127.0.0.1:9478",
        parse=host_port_or_off,
        chart="relay.metricsPort",
        help="HOST:PORT for /metrics, /healthz and /readyz, or 'off'.",
    )
    # The --metrics listener's header timeout and connection cap (each connection is a thread
    # of the supervisor): ``metrics_limits`` (common.listener).
    metrics_header_timeout_s: float = option(
        "--metrics-header-timeout",
        default=HEADER_TIMEOUT_S,
        check=POSITIVE,
        chart=EXTRA,
        help="Seconds a connection to --metrics has to send its request's headers; then it is "
        "closed (slowloris).",
    )
    metrics_max_connections: int = option(
        "--metrics-max-connections",
        default=METRICS_MAX_CONNECTIONS,
        check=at_least(1),
        chart=EXTRA,
        help="Connections --metrics holds open at once (each a thread); beyond, a newcomer gets "
        "503 and is closed at once.",
    )
    batch_size: int = option(
        "--batch",
        default=256,
        check=between(1, 256),
        chart=EXTRA,
        help="Datagrams per recvmmsg/sendmmsg call.",
    )
    # The worker loop's coalescing wait (relay.worker.Worker.run): after a round that found a
    # few datagrams while they arrive densely, sleep this long before the next recvmmsg.
    coalesce_us: int = option(
        "--coalesce-us",
        default=COALESCE_US,
        check=between(0, MAX_COALESCE_US),
        chart=EXTRA,
        help="Microseconds a worker waits for datagrams to gather after a round that found only "
        "a few, while they come at least two per wait (0-1000, 0: never): fewer wake-ups at "
        "moderate load, at most this much added latency.",
    )
    socket_buffer_bytes: int = option(
        "--socket-buffer",
        default=4 << 20,
        chart="relay.socketBufferBytes",
        help="SO_RCVBUF/SO_SNDBUF bytes per socket.",
    )
    redis_url: str | None = option(
        "--redis-url",
        check=REDIS_SCHEMES,
        chart="redis.url",
        help="Optional Redis for faster recovery after a relay restart, e.g. redis://redis:6379/0. "
        "A URL holding a credential (a user, a password) only by the environment; the password "
        "is better in RTCEDGE_REDIS_PASSWORD or --redis-password-file.",
    )
    # How the relay authenticates to Redis and checks its certificate: ``redis_auth``.
    redis_password: str | None = option(
        "--redis-password-file",
        type=FILE,
        parse=redis_password_of,
        env_secret=REDIS_PASSWORD_ENV,
        code_default=None,
        repr=False,
        chart="redis.auth",
        help="File holding the Redis password; or the password itself in RTCEDGE_REDIS_PASSWORD "
        "(environment only: never give a secret on the command line).",
    )
    redis_ca_file: str | None = option(
        "--redis-ca-file",
        type=FILE,
        chart="redis.tls",
        help="CA bundle that signed a rediss:// server's certificate [default: the system CAs].",
    )
    redis_timeout_ms: int = option(
        "--redis-timeout-ms",
        default=50,
        chart=EXTRA,
        help="Timeout of one Redis operation; the relay never waits for Redis to forward.",
    )
    redis_lookups_per_s: int = option(
        "--redis-lookups-per-s",
        default=200,
        chart=EXTRA,
        help="Per worker, lookups for packets of unknown clients.",
    )
    # STUN first packets (before the hint's ~9 us HMAC) per source /24 or /64 and second, per
    # worker, bursts of twice that; prefixes tracked at once (beyond: one shared budget).
    first_packet_rate_per_s: int = option(
        "--first-packet-rate",
        default=500,
        check=POSITIVE,
        chart=EXTRA,
        help="Per worker, STUN first packets per second one source /24 (IPv4) or /64 (IPv6) may "
        "send before their hint's HMAC is checked; bursts of twice that. 16384 prefixes are "
        "tracked; beyond, new prefixes share one such budget.",
    )
    first_packet_prefixes: int = 16384
    # Hinted STUN checks forwarded to one transceiver per second, per worker, from clients
    # without a confirmed flow (UDP) or connection (TCP), whatever their prefixes; bursts of as
    # many (relay.admission step 10).
    transceiver_stun_rate_per_s: int = option(
        "--transceiver-stun-rate",
        default=TRANSCEIVER_STUN_RATE_PER_S,
        check=POSITIVE,
        chart=EXTRA,
        help="Per worker, hinted STUN checks per second forwarded to one transceiver from clients "
        "without a confirmed flow, from any prefixes (bursts of as many); beyond, dropped as "
        "transceiver_stun_rate.",
    )
    # Client addresses never admitted nor sent to (relay.addresspolicy): the built-in ranges plus
    # --deny-network; --allow-network exceptions win.
    deny_networks: tuple[Network, ...] = option(
        "--deny-network",
        env="DENY_NETWORKS",
        multiple=True,
        parse=denied_networks,
        chart="relay.denyNetworks",
        help="Client CIDR the relay never admits a flow from nor sends to, in addition to the "
        "built-in special-purpose ranges (loopback, private RFC 1918/100.64/10/fc00::/7, "
        "link-local, multicast, reserved, documentation, IPv4-mapped; docs/relay.md). "
        "Repeatable; env: comma separated.",
    )
    allow_networks: tuple[Network, ...] = option(
        "--allow-network",
        env="ALLOW_NETWORKS",
        multiple=True,
        parse=parse_networks,
        chart="relay.allowNetworks",
        help="Client CIDR allowed even though a denied range holds it, e.g. 10.0.0.0/8 when "
        "clients reach the relay over a private network, 127.0.0.0/8 on one machine. Wins over "
        "--deny-network. Repeatable; env: comma separated.",
    )
    # Start even though another live relay holds the public port's claim (relay.portclaim):
    # a restart of the same deployment, which shares the SO_REUSEPORT group on purpose.
    takeover: bool = option(
        "--takeover",
        is_flag=True,
        default=False,
        chart=EXTRA,
        help="Start even though another live relay holds the --listen port, and share it with "
        "that relay (SO_REUSEPORT) until it stops: for a restart of the same deployment. Without "
        "it a relay refuses a port another relay holds, naming its pid.",
    )
    # Relay tiers. routes: cluster id -> that cluster's relay ingresses, most preferred first
    # (an edge forwards hints for that cluster there, from its internal sockets).
    routes: dict[int, tuple[tuple[str, int], ...]] = option(
        "--route",
        env="ROUTES",
        multiple=True,
        parse=unique_map(parse_route, "cluster {} given twice"),
        check=routes_have_addresses,
        chart="globalRelay.routes",
        help="CLUSTER=HOST:PORT[,HOST:PORT...]: forward hints for another cluster to its relays' "
        "--peer-listen addresses, most preferred first (failover by probes). Repeatable; env: "
        "space separated. With a route, --transceiver is optional (an edge relay).",
    )
    route_probe_interval_s: float = option(
        "--route-probe-interval",
        default=1.0,
        check=ABOVE_ZERO,
        chart="globalRelay.routeProbeIntervalSeconds",
        help="Seconds between probes of each route address; one is down after 3 unanswered "
        "probes, up again on one answer.",
    )
    # This relay's ingress for other relays (edges) and the only sources it accepts there.
    peer_listen: tuple[str, int] | None = option(
        "--peer-listen",
        parse=host_port_or_none,
        check=ip_literal,
        chart="globalRelay.peerIngress.port",
        help="HOST:PORT where this relay takes encapsulated datagrams from edge relays (the "
        "address their --route names; replies leave from it). Needs --peer-network.",
    )
    peer_networks: tuple[Network, ...] = option(
        "--peer-network",
        env="PEER_NETWORKS",
        multiple=True,
        parse=parse_networks,
        chart="globalRelay.peerIngress.networks",
        help="CIDR of edge relays --peer-listen accepts; other sources are dropped (peer_denied). "
        "Repeatable; env: comma separated.",
    )
    # A peer flow sends replies back through its edge while the edge was heard this recently.
    peer_path_ttl_s: int = option(
        "--peer-path-ttl",
        default=10,
        check=ABOVE_ZERO,
        chart="globalRelay.peerIngress.pathTtlSeconds",
        help="Seconds replies for a client go back through the edge it last came through; after "
        "that without a packet from that edge they go to the client directly.",
    )
    # ICE over TCP (RFC 6544): the public TCP address shared by the workers (SO_REUSEPORT), or
    # None; and its connections' bounds, checked only with it (``tcp_limits``, relay.tcpconns).
    listen_tcp: tuple[str, int] | None = option(
        "--listen-tcp",
        parse=host_port_or_none,
        check=ip_literal,
        chart="relay.tcp.port",
        help="Public TCP HOST:PORT for ICE over TCP (RFC 6544, RFC 4571 framing), shared by all "
        "workers (SO_REUSEPORT), of --listen's address family [default: off].",
    )
    tcp_max_connections: int = option(
        "--tcp-max-connections",
        default=_TCP.max_connections,
        check=POSITIVE,
        only_with="listen_tcp",
        chart=EXTRA,
        help="Per worker, TCP connections open at once; a full worker evicts its oldest pending "
        "connection, or refuses the newcomer when none is pending.",
    )
    tcp_max_per_prefix: int = option(
        "--tcp-max-per-prefix",
        default=_TCP.max_per_prefix,
        check=POSITIVE,
        only_with="listen_tcp",
        chart=EXTRA,
        help="Per worker, TCP connections of one source /24 (IPv4) or /64 (IPv6); at the cap the "
        "prefix's oldest pending connection is evicted, or the newcomer refused.",
    )
    tcp_max_pending: int = option(
        "--tcp-max-pending",
        default=_TCP.max_pending,
        check=POSITIVE,
        only_with="listen_tcp",
        chart=EXTRA,
        help="Per worker, TCP connections without a valid first frame; beyond, the oldest is "
        "evicted.",
    )
    tcp_pending_timeout_s: int = option(
        "--tcp-pending-timeout",
        default=_TCP.pending_timeout_s,
        check=POSITIVE,
        only_with="listen_tcp",
        chart=EXTRA,
        help="Seconds a TCP connection may go without a valid first frame, or hold a half frame.",
    )
    tcp_max_frame_bytes: int = option(
        "--tcp-max-frame",
        default=_TCP.max_frame_bytes,
        check=TCP_FRAME,
        only_with="listen_tcp",
        chart=EXTRA,
        help="Largest RFC 4571 frame taken from a client; a longer one closes the connection.",
    )
    tcp_max_write_bytes: int = option(
        "--tcp-write-buffer",
        default=_TCP.max_write_bytes,
        check=POSITIVE,
        only_with="listen_tcp",
        chart=EXTRA,
        help="Bytes queued toward a TCP client that does not read; beyond, the connection is "
        "closed (a slow reader is dropped, not buffered).",
    )
    tcp_max_per_hint: int = option(
        "--tcp-max-per-hint",
        default=_TCP.max_per_hint,
        check=POSITIVE,
        only_with="listen_tcp",
        chart=EXTRA,
        help="Per worker, TCP connections admitted with one hint; at the cap its oldest "
        "unconfirmed connection is evicted, or the newcomer closed.",
    )
    tcp_frame_rate_per_s: int = option(
        "--tcp-frame-rate",
        default=_TCP.frame_rate_per_s,
        check=POSITIVE,
        only_with="listen_tcp",
        chart=EXTRA,
        help="Frames per second one confirmed TCP connection may send (bursts of a quarter "
        "second's worth); beyond, dropped as frame_rate.",
    )
    tcp_byte_rate_per_s: int = option(
        "--tcp-byte-rate",
        default=_TCP.byte_rate_per_s,
        check=POSITIVE,
        only_with="listen_tcp",
        chart=EXTRA,
        help="Payload bytes per second one confirmed TCP connection may send (bursts of a quarter "
        "second's worth); beyond, dropped as byte_rate.",
    )
    tcp_max_frames_per_read: int = option(
        "--tcp-frames-per-read",
        default=_TCP.max_frames_per_read,
        check=POSITIVE,
        only_with="listen_tcp",
        chart=EXTRA,
        help="Frames taken from one TCP connection per round; the rest waits in the kernel, so "
        "the TCP window throttles a fast sender.",
    )
    internal_port_base: int  # the port of --internal: worker i binds internal_port_base + i
    restart_backoff_max_s: float = 5.0

    @property
    def family(self) -> int:
        return address_family("--listen", self.listen[0])

    @property
    def internal_family(self) -> int:
        return address_family("--internal", self.internal_host)

    @property
    def peer_family(self) -> int:
        assert self.peer_listen is not None
        return address_family("--peer-listen", self.peer_listen[0])

    @cached_property
    def limits(self) -> FlowLimits:
        return FlowLimits(
            max_pending_flows=self.max_pending_flows,
            max_pending_per_ufrag=self.max_pending_per_ufrag,
            pending_ufrag_refill_s=self.pending_ufrag_refill_s,
            max_pending_per_prefix=self.max_pending_per_prefix,
            pending_ttl_s=self.pending_ttl_s,
            max_confirmed_flows=self.max_confirmed_flows,
            max_flows_per_transceiver=self.max_flows_per_transceiver,
            max_flows_per_hint=self.max_flows_per_hint,
            idle_ttl_s=self.idle_ttl_s,
        )

    @cached_property
    def tcp_limits(self) -> TcpLimits:
        return TcpLimits(
            max_connections=self.tcp_max_connections,
            max_per_prefix=self.tcp_max_per_prefix,
            max_pending=self.tcp_max_pending,
            pending_timeout_s=self.tcp_pending_timeout_s,
            idle_timeout_s=self.idle_ttl_s,
            max_frame_bytes=self.tcp_max_frame_bytes,
            max_write_bytes=self.tcp_max_write_bytes,
            # An admitted connection waits for its transceiver as long as a pending UDP flow.
            unconfirmed_timeout_s=self.pending_ttl_s,
            max_per_hint=self.tcp_max_per_hint,
            frame_rate_per_s=self.tcp_frame_rate_per_s,
            byte_rate_per_s=self.tcp_byte_rate_per_s,
            max_frames_per_read=self.tcp_max_frames_per_read,
        )

    @cached_property
    def metrics_limits(self) -> ListenerLimits:
        return ListenerLimits(self.metrics_header_timeout_s, self.metrics_max_connections)

    @cached_property
    def redis_auth(self) -> RedisAuth:
        return RedisAuth(password=self.redis_password, ca_file=self.redis_ca_file)

    def validate(self) -> RelayConfig:
        """Raise ConfigError for the first invalid option; returns self for chaining. Each
        field's own checks first (on the field), then the rules that span fields."""
        check_fields(self)
        if not 0 < self.internal_port_base <= 65535 - self.workers + 1:
            raise ConfigError(
                "--internal", f"port base {self.internal_port_base} leaves no room for the workers"
            )
        self._validate_sources()
        self._validate_tiers()
        tcp = self.listen_tcp
        if tcp is not None and address_family("--listen-tcp", tcp[0]) != self.family:
            raise ConfigError(
                "--listen-tcp",
                "must be of --listen's address family: both carry the same clients' flows "
                "(one encapsulation family per relay)",
            )
        if self.dns_grace_s < 2 * self.dns_interval_s:
            raise ConfigError(
                "--dns-grace",
                f"must be at least twice --dns-interval ({self.dns_interval_s:g} s): one failed"
                " lookup must not remove a transceiver and drop its calls",
            )
        if self.redis_ca_file and not (self.redis_url or "").startswith("rediss://"):
            raise ConfigError("--redis-ca-file", "needs a rediss:// (TLS) --redis-url")
        if self.redis_timeout_ms <= 0 or self.redis_lookups_per_s <= 0:
            raise ConfigError("--redis-timeout-ms", "Redis timeout and lookup rate must be > 0")
        return self

    def _validate_transceiver_families(self) -> None:
        """A --transceiver address literal of the other family than --internal could never be
        sent to (it used to fail later as "cannot resolve transceiver ids [0]"); a name is
        resolved in --internal's family at start."""
        ours = ipaddress.ip_address(self.internal_host).version
        for tid, (host, port) in sorted(self.transceivers.items()):
            try:
                theirs = ipaddress.ip_address(host).version
            except ValueError:
                continue  # a name
            if theirs != ours:
                raise ConfigError(
                    "--transceiver",
                    f"{tid}={format_host_port(host, port)} is IPv{theirs}, --internal "
                    f"({self.internal_host}) IPv{ours}: the relay sends to its transceivers "
                    "from its internal sockets; give both of one family",
                )

    def _validate_sources(self) -> None:
        """Where the keyring and the transceivers come from."""
        if bool(self.keyring_path) == bool(self.keyring_json):
            raise ConfigError("--keyring", "give exactly one of --keyring FILE or --keyring-json")
        if not self.transceivers and not self.transceiver_dns and not self.routes:
            raise ConfigError(
                "--transceiver",
                "give at least one --transceiver or --transceiver-dns (or, for an edge relay "
                "without transceivers, a --route)",
            )
        if self.transceiver_dns and not self.transceiver_ids:
            raise ConfigError("--transceiver-ids", "required with --transceiver-dns")

    def _validate_tiers(self) -> None:
        self._validate_transceiver_families()
        if self.cluster in self.routes:
            raise ConfigError(
                "--route",
                f"cluster {self.cluster} is this relay's own --cluster: its hints go to its "
                "transceivers, not to a route",
            )
        for addresses in self.routes.values():
            for host, _ in addresses:
                if address_family("--route", host) != self.internal_family:
                    raise ConfigError(
                        "--route",
                        f"{host} is not of --internal's address family: routes are sent from "
                        "the internal sockets",
                    )
        if self.peer_listen is None:
            if self.peer_networks:
                raise ConfigError("--peer-network", "has no effect without --peer-listen")
            return
        if not self.peer_networks:
            raise ConfigError(
                "--peer-network",
                "required with --peer-listen: the networks of the edge relays allowed to send "
                "to it (everything else is dropped as peer_denied)",
            )
        if self.peer_listen == self.listen:
            raise ConfigError("--peer-listen", "must differ from --listen")
