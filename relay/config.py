"""The relay's configuration: one typed object built once from the CLI/environment and validated.

Every check raises ``ConfigError`` (common.config) naming the command-line option, so a bad
deployment fails at start with a message that says what to fix.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from common.config import ConfigError, address_family, check_id_template, parse_host_port
from common.listener import ListenerLimits
from relay.addresspolicy import DEFAULT_DENY_NETWORKS, Network
from relay.flowcache import RedisAuth
from relay.flows import FlowLimits
from relay.framing import MAX_RFC4571_FRAME
from relay.tcpconns import TcpLimits

# Open connections to the relay's --metrics listener: probes and a scraper or two need a handful,
# and each connection is a thread of the supervisor while it lasts.
METRICS_MAX_CONNECTIONS = 128
TRANSCEIVER_STUN_RATE_PER_S = 2000  # --transceiver-stun-rate's default


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
    from_env = environ.get("RTCEDGE_REDIS_PASSWORD") or None
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


@dataclass(frozen=True)
class RelayConfig:
    listen: tuple[str, int]
    internal_host: str
    internal_port_base: int
    cluster: int
    workers: int = field(default_factory=lambda: len(os.sched_getaffinity(0)))
    pin: bool = True
    keyring_path: str | None = None
    keyring_json: str | None = None
    transceivers: dict[int, tuple[str, int]] = field(default_factory=dict)
    transceiver_dns: str | None = None
    transceiver_ids: tuple[int, ...] = ()
    dns_interval_s: float = 10.0
    dns_grace_s: float = 60.0
    limits: FlowLimits = field(default_factory=FlowLimits)
    max_hint_age_s: int = 4 * 3600
    metrics: tuple[str, int] | None = ("127.0.0.1", 9478)
    # The --metrics listener's connection cap (each connection is a thread of the supervisor)
    # and header timeout (common.listener).
    metrics_limits: ListenerLimits = field(
        default_factory=lambda: ListenerLimits(max_connections=METRICS_MAX_CONNECTIONS)
    )
    batch_size: int = 256
    socket_buffer_bytes: int = 4 << 20
    restart_backoff_max_s: float = 5.0
    redis_url: str | None = None
    redis_auth: RedisAuth = field(default_factory=RedisAuth)
    redis_timeout_ms: int = 50
    redis_lookups_per_s: int = 200
    # STUN first packets (before the hint's ~9 us HMAC) per source /24 or /64 and second, per
    # worker, bursts of twice that; prefixes tracked at once (beyond: one shared budget).
    first_packet_rate_per_s: int = 500
    first_packet_prefixes: int = 16384
    # Hinted STUN checks forwarded to one transceiver per second, per worker, from clients
    # without a confirmed flow (UDP) or connection (TCP), whatever their prefixes; bursts of as
    # many (relay.admission step 10).
    transceiver_stun_rate_per_s: int = TRANSCEIVER_STUN_RATE_PER_S
    # Client addresses never admitted nor sent to (relay.addresspolicy): the built-in ranges plus
    # --deny-network; --allow-network exceptions win.
    deny_networks: tuple[Network, ...] = field(
        default_factory=lambda: parse_networks("--deny-network", DEFAULT_DENY_NETWORKS)
    )
    allow_networks: tuple[Network, ...] = ()
    # Start even though another live relay holds the public port's claim (relay.portclaim):
    # a restart of the same deployment, which shares the SO_REUSEPORT group on purpose.
    takeover: bool = False
    # Relay tiers. routes: cluster id -> that cluster's relay ingresses, most preferred first
    # (an edge forwards hints for that cluster there, from its internal sockets).
    routes: dict[int, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    route_probe_interval_s: float = 1.0
    # This relay's ingress for other relays (edges) and the only sources it accepts there.
    peer_listen: tuple[str, int] | None = None
    peer_networks: tuple[Network, ...] = ()
    # A peer flow sends replies back through its edge while the edge was heard this recently.
    peer_path_ttl_s: int = 10
    # ICE over TCP (RFC 6544): the public TCP address shared by the workers (SO_REUSEPORT), or
    # None; and its connections' bounds (relay.tcpconns).
    listen_tcp: tuple[str, int] | None = None
    tcp_limits: TcpLimits = field(default_factory=TcpLimits)

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

    def validate(self) -> RelayConfig:
        """Raise ConfigError for the first invalid option; returns self for chaining."""
        self.family  # noqa: B018 - raises for a non-literal
        self.internal_family  # noqa: B018
        if not 1 <= self.workers <= 256:
            raise ConfigError("--workers", f"must be 1..256, got {self.workers}")
        if not 0 < self.internal_port_base <= 65535 - self.workers + 1:
            raise ConfigError(
                "--internal", f"port base {self.internal_port_base} leaves no room for the workers"
            )
        if not 0 <= self.cluster <= 255:
            raise ConfigError("--cluster", f"must be 0..255, got {self.cluster}")
        if bool(self.keyring_path) == bool(self.keyring_json):
            raise ConfigError("--keyring", "give exactly one of --keyring FILE or --keyring-json")
        if not self.transceivers and not self.transceiver_dns and not self.routes:
            raise ConfigError(
                "--transceiver",
                "give at least one --transceiver or --transceiver-dns (or, for an edge relay "
                "without transceivers, a --route)",
            )
        self._validate_tiers()
        self._validate_tcp()
        if self.transceiver_dns:
            check_id_template("--transceiver-dns", self.transceiver_dns)
            if not self.transceiver_ids:
                raise ConfigError("--transceiver-ids", "required with --transceiver-dns")
        if self.dns_interval_s <= 0:
            raise ConfigError("--dns-interval", "must be > 0")
        if self.dns_grace_s < 2 * self.dns_interval_s:
            raise ConfigError(
                "--dns-grace",
                f"must be at least twice --dns-interval ({self.dns_interval_s:g} s): one failed"
                " lookup must not remove a transceiver and drop its calls",
            )
        self.metrics_limits.validate("--metrics-header-timeout", "--metrics-max-connections")
        if not 1 <= self.batch_size <= 256:
            raise ConfigError("--batch", f"must be 1..256, got {self.batch_size}")
        lim = self.limits
        for option, value in (
            ("--max-pending-flows", lim.max_pending_flows),
            ("--max-pending-per-ufrag", lim.max_pending_per_ufrag),
            ("--pending-ufrag-refill", lim.pending_ufrag_refill_s),
            ("--max-pending-per-prefix", lim.max_pending_per_prefix),
            ("--pending-ttl", lim.pending_ttl_s),
            ("--max-flows", lim.max_confirmed_flows),
            ("--max-flows-per-transceiver", lim.max_flows_per_transceiver),
            ("--max-flows-per-hint", lim.max_flows_per_hint),
            ("--idle-ttl", lim.idle_ttl_s),
            ("--max-hint-age", self.max_hint_age_s),
            ("--first-packet-rate", self.first_packet_rate_per_s),
            ("--transceiver-stun-rate", self.transceiver_stun_rate_per_s),
        ):
            if value <= 0:
                raise ConfigError(option, f"must be > 0, got {value}")
        if self.redis_url is not None and not self.redis_url.startswith(
            ("redis://", "rediss://", "unix://")
        ):
            raise ConfigError("--redis-url", "must start with redis://, rediss:// or unix://")
        if self.redis_auth.ca_file and not (self.redis_url or "").startswith("rediss://"):
            raise ConfigError("--redis-ca-file", "needs a rediss:// (TLS) --redis-url")
        if self.redis_timeout_ms <= 0 or self.redis_lookups_per_s <= 0:
            raise ConfigError("--redis-timeout-ms", "Redis timeout and lookup rate must be > 0")
        if lim.idle_ttl_s < 4:
            raise ConfigError(
                "--idle-ttl", "must be at least 4 s (ICE consent checks come every ~5 s)"
            )
        return self

    def _validate_tcp(self) -> None:
        if self.listen_tcp is None:
            return
        if address_family("--listen-tcp", self.listen_tcp[0]) != self.family:
            raise ConfigError(
                "--listen-tcp",
                "must be of --listen's address family: both carry the same clients' flows "
                "(one encapsulation family per relay)",
            )
        lim = self.tcp_limits
        for option, value in (
            ("--tcp-max-connections", lim.max_connections),
            ("--tcp-max-per-prefix", lim.max_per_prefix),
            ("--tcp-max-pending", lim.max_pending),
            ("--tcp-pending-timeout", lim.pending_timeout_s),
            ("--tcp-write-buffer", lim.max_write_bytes),
            ("--tcp-max-per-hint", lim.max_per_hint),
            ("--tcp-frame-rate", lim.frame_rate_per_s),
            ("--tcp-byte-rate", lim.byte_rate_per_s),
            ("--tcp-frames-per-read", lim.max_frames_per_read),
        ):
            if value <= 0:
                raise ConfigError(option, f"must be > 0, got {value}")
        if not 20 <= lim.max_frame_bytes <= MAX_RFC4571_FRAME:
            raise ConfigError(
                "--tcp-max-frame",
                f"must be 20..{MAX_RFC4571_FRAME} (a STUN header is 20 bytes, an RFC 4571 length "
                f"field 16 bits), got {lim.max_frame_bytes}",
            )

    def _validate_tiers(self) -> None:
        if self.cluster in self.routes:
            raise ConfigError(
                "--route",
                f"cluster {self.cluster} is this relay's own --cluster: its hints go to its "
                "transceivers, not to a route",
            )
        for cluster, addresses in self.routes.items():
            if not addresses:
                raise ConfigError("--route", f"cluster {cluster} has no address")
            for host, _ in addresses:
                if address_family("--route", host) != self.internal_family:
                    raise ConfigError(
                        "--route",
                        f"{host} is not of --internal's address family: routes are sent from "
                        "the internal sockets",
                    )
        if self.route_probe_interval_s <= 0:
            raise ConfigError("--route-probe-interval", "must be > 0")
        if self.peer_path_ttl_s <= 0:
            raise ConfigError("--peer-path-ttl", "must be > 0")
        if self.peer_listen is None:
            if self.peer_networks:
                raise ConfigError("--peer-network", "has no effect without --peer-listen")
            return
        self.peer_family  # noqa: B018 - raises for a non-literal
        if not self.peer_networks:
            raise ConfigError(
                "--peer-network",
                "required with --peer-listen: the networks of the edge relays allowed to send "
                "to it (everything else is dropped as peer_denied)",
            )
        if self.peer_listen == self.listen:
            raise ConfigError("--peer-listen", "must differ from --listen")
