"""The transceiver's configuration: one typed object, built once from the CLI/environment.

Validation raises ``ConfigError`` (common.config) naming the option, so a bad deployment fails
at start.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from common.addr import Addr
from common.config import ConfigError, address_family, check_id_template
from common.hint import Keyring
from common.listener import ListenerLimits
from transceiver.call.lifecycle import FIRST_CHECK_TIMEOUT_S, Limits
from transceiver.call.sctp import MAX_MESSAGE_BYTES, SctpLimits
from transceiver.headroom import LoadLimits
from transceiver.ownership import Peers, SessionRouter
from transceiver.regions import RegionTable
from transceiver.signaling.forward_budget import PeerLimits
from transceiver.signaling.tokens import MIN_SECRET_BYTES


@dataclass(frozen=True)
class TransceiverConfig:
    transceiver_id: int
    cluster: int
    media: tuple[str, int]  # the one UDP socket of this process
    advertise: tuple[str, int]  # the relay's public address, the only candidate in answers
    http: tuple[str, int]
    advertise_tcp: tuple[str, int] | None = None  # the relay's ICE-TCP address, if it has one
    keyring_path: str | None = None
    keyring_json: str | None = None
    backend: str = "echo"
    backend_url: str | None = field(default=None, repr=False)  # may hold a credential
    audio_format: str = "pcm16"  # the echo backend's; a websocket backend picks per session
    # A ceiling under --admit-max-cpu: 85 % of a core / 2.16 % per echo session (bench sessions,
    # 2026-12-01: N=30 at 65 % of the pinned core) = 39; the load admission usually refuses first.
    max_sessions: int = 150
    admit_max_cpu_pct: float = LoadLimits.max_cpu_pct  # refuse above (0: off): transceiver.headroom
    admit_max_loop_lag_ms: float = LoadLimits.max_loop_lag_ms  # refuse above (0: off)
    ice_timeout_s: float = 10.0
    first_check_timeout_s: float = FIRST_CHECK_TIMEOUT_S  # answer -> first authenticated check
    idle_timeout_s: float = 60.0
    max_duration_s: float = 4 * 3600.0
    drain_grace_s: float = 30.0
    auth_token: str | None = field(default=None, repr=False)
    token_secrets: tuple[bytes, ...] = field(default=(), repr=False)  # signed tokens' HMAC keys
    token_max_ttl_s: float = 3600.0  # a signed token valid for longer than this is refused
    client_rate_per_s: float = 1.0  # sessions a client may start per second (0: no limit)...
    client_burst: int = 10  # ...after a burst of this many
    client_max_sessions: int = 0  # live sessions per client (0: no cap)
    trusted_proxies: tuple[str, ...] = ()  # CIDRs whose client-address header is believed
    client_address_header: str = "X-Forwarded-For"
    metrics: tuple[str, int] | None = None  # /metrics listener, never the WHIP port (None: off)
    # A WHIP offer's body, and any request body: browsers' offers are 3-8 KiB
    # (transceiver.signaling.offer).
    max_sdp_bytes: int = 16 * 1024
    body_timeout_s: float = 10.0  # a client must deliver its whole offer within this
    # Both HTTP listeners' (--http, --metrics) connection cap and header timeout, each its own.
    http_limits: ListenerLimits = field(default_factory=ListenerLimits)
    cors_origin: str = "*"
    relay_networks: tuple[str, ...] = ()  # CIDRs encapsulated datagrams may come from; () = any
    address_ttl_s: float = 30.0  # a client address the session left, once silent this long, ends
    regions: tuple[tuple[str, tuple[Addr, ...]], ...] = ()  # name -> relay addresses, preferred 1st
    region_header: str | None = None  # the request header naming the client's region
    region_prefixes: tuple[tuple[str, str], ...] = ()  # (client CIDR, region name)
    backup_candidate: bool = True  # --advertise last in every region's answer
    # Where the other transceivers' WHIP ports are, for requests on sessions they own
    # (transceiver.ownership): ID=HOST:PORT entries, and/or a DNS template with {id}.
    peer_http: tuple[tuple[int, tuple[str, int]], ...] = ()
    peer_http_dns: str | None = None
    peer_timeout_s: float = 5.0  # a forwarded request's whole exchange with the owner
    peer_connect_timeout_s: float = 1.0  # connecting to the owner (within peer_timeout_s)
    # Forwards under way at once (more: 503 + Retry-After), in all, to one owner, from one
    # client; resume claims apart; an owner that timed out is failed fast
    # (transceiver.signaling.forward_budget).
    peer_max_forwards: int = PeerLimits.max_forwards
    peer_max_per_owner: int = PeerLimits.max_per_owner
    peer_max_per_client: int = PeerLimits.max_per_client
    peer_max_claims: int = PeerLimits.max_claims
    peer_fail_fast_s: float = PeerLimits.fail_fast_s
    # On drain, a caller asked to move has this long to claim its resume token; a claimed old
    # call ends this long after the claim at the latest (transceiver.migration).
    migrate_deadline_s: float = 10.0
    # The data channel's bounds per call (transceiver.call.sctp): the receive window (a_rwnd, and
    # what reassembly may hold), TSNs tracked past a gap, events unacknowledged by the caller.
    sctp_receive_window_bytes: int = SctpLimits.receive_window_bytes
    sctp_max_misordered_tsns: int = SctpLimits.max_misordered_tsns
    sctp_max_unacked_bytes: int = SctpLimits.max_unacked_bytes

    def validate(self) -> TransceiverConfig:
        if not 0 <= self.transceiver_id <= 0xFFFF:
            raise ConfigError("--id", f"must be 0..65535, got {self.transceiver_id}")
        if not 0 <= self.cluster <= 255:
            raise ConfigError("--cluster", f"must be 0..255, got {self.cluster}")
        address_family("--media", self.media[0])
        address_family("--advertise", self.advertise[0])
        if self.advertise[1] == 0:
            raise ConfigError("--advertise", "needs the relay's real port, not 0")
        if self.advertise_tcp is not None:
            address_family("--advertise-tcp", self.advertise_tcp[0])
            if self.advertise_tcp[1] == 0:
                raise ConfigError("--advertise-tcp", "needs the relay's real port, not 0")
        if bool(self.keyring_path) == bool(self.keyring_json):
            raise ConfigError("--keyring", "give exactly one of --keyring FILE or --keyring-json")
        if self.backend not in ("echo", "websocket"):
            raise ConfigError("--backend", f"unknown backend {self.backend!r} (echo, websocket)")
        if self.backend == "websocket" and not self.backend_url:
            raise ConfigError("--backend-url", "required with --backend websocket")
        if self.audio_format not in ("pcm16", "opus"):
            raise ConfigError("--audio-format", f"unknown {self.audio_format!r} (pcm16, opus)")
        if self.backend != "echo" and self.audio_format != "pcm16":
            raise ConfigError(
                "--audio-format",
                "only for --backend echo: a websocket backend chooses its format per call",
            )
        for option, value in (
            ("--max-sessions", self.max_sessions),
            ("--ice-timeout", self.ice_timeout_s),
            ("--first-check-timeout", self.first_check_timeout_s),
            ("--token-max-ttl", self.token_max_ttl_s),
            ("--client-burst", self.client_burst),
            ("--idle-timeout", self.idle_timeout_s),
            ("--max-duration", self.max_duration_s),
            ("--max-sdp-bytes", self.max_sdp_bytes),
            ("--body-timeout", self.body_timeout_s),
            ("--address-ttl", self.address_ttl_s),
            ("--migrate-deadline", self.migrate_deadline_s),
        ):
            if value <= 0:
                raise ConfigError(option, f"must be > 0, got {value}")
        for option, value in (
            ("--client-rate", self.client_rate_per_s),
            ("--client-max-sessions", self.client_max_sessions),
            ("--admit-max-cpu", self.admit_max_cpu_pct),
            ("--admit-max-loop-lag", self.admit_max_loop_lag_ms),
        ):
            if value < 0:
                raise ConfigError(option, f"must be >= 0 (0: no limit), got {value}")
        for option, cidrs in (
            ("--relay-network", self.relay_networks),
            ("--trusted-proxy", self.trusted_proxies),
        ):
            for cidr in cidrs:
                try:
                    ipaddress.ip_network(cidr, strict=False)
                except ValueError:
                    raise ConfigError(option, f"not a network: {cidr!r}") from None
        if not self.client_address_header.strip():
            raise ConfigError("--client-address-header", "must name a header")
        self.http_limits.validate("--http-header-timeout", "--http-max-connections")
        if self.metrics is not None:
            address_family("--metrics", self.metrics[0])
            if self.metrics == self.http and self.http[1] != 0:
                raise ConfigError("--metrics", "must not be the --http address")
        for secret in self.token_secrets:
            if len(secret) < MIN_SECRET_BYTES:
                raise ConfigError(
                    "--token-secret-file", f"a secret needs at least {MIN_SECRET_BYTES} bytes"
                )
        if self.admit_max_cpu_pct > 100:
            raise ConfigError(
                "--admit-max-cpu", f"is % of one core, 0-100, got {self.admit_max_cpu_pct}"
            )
        self._validate_sctp()
        if self.drain_grace_s < 0:
            raise ConfigError("--drain-grace", "must be >= 0")
        self.region_table()
        self._validate_peers()
        if self.region_header is not None and not self.trusted_proxies:
            raise ConfigError(
                "--region-header",
                "is believed only from a --trusted-proxy: set it to the proxy that sets the header",
            )
        return self

    def _validate_peers(self) -> None:
        ids = [tid for tid, _ in self.peer_http]
        for tid in ids:
            if not 0 <= tid <= 0xFFFF:
                raise ConfigError("--peer-http", f"transceiver id {tid} out of range 0..65535")
            if ids.count(tid) > 1:
                raise ConfigError("--peer-http", f"transceiver id {tid} given twice")
        if self.peer_http_dns is not None:
            check_id_template("--peer-http-dns", self.peer_http_dns)
        if self.peer_timeout_s <= 0:
            raise ConfigError("--peer-timeout", f"must be > 0, got {self.peer_timeout_s}")
        if self.peer_connect_timeout_s <= 0:
            raise ConfigError(
                "--peer-connect-timeout", f"must be > 0, got {self.peer_connect_timeout_s}"
            )
        for option, value in (
            ("--peer-max-forwards", self.peer_max_forwards),
            ("--peer-max-per-owner", self.peer_max_per_owner),
            ("--peer-max-per-client", self.peer_max_per_client),
            ("--peer-max-claims", self.peer_max_claims),
        ):
            if value < 1:
                raise ConfigError(option, f"must be >= 1, got {value}")
        if self.peer_fail_fast_s < 0:
            raise ConfigError(
                "--peer-fail-fast", f"must be >= 0 (0: off), got {self.peer_fail_fast_s}"
            )

    def peer_limits(self) -> PeerLimits:
        return PeerLimits(
            max_forwards=self.peer_max_forwards,
            max_per_owner=self.peer_max_per_owner,
            max_per_client=self.peer_max_per_client,
            max_claims=self.peer_max_claims,
            fail_fast_s=self.peer_fail_fast_s,
        )

    def _validate_sctp(self) -> None:
        # A window smaller than two of the largest messages could stall one of them mid-way.
        if self.sctp_receive_window_bytes < 2 * MAX_MESSAGE_BYTES:
            raise ConfigError(
                "--sctp-receive-window",
                f"must be >= {2 * MAX_MESSAGE_BYTES} bytes, got {self.sctp_receive_window_bytes}",
            )
        if not 16 <= self.sctp_max_misordered_tsns <= 65536:
            raise ConfigError(
                "--sctp-max-misordered-tsns",
                f"must be 16..65536, got {self.sctp_max_misordered_tsns}",
            )
        if self.sctp_max_unacked_bytes < MAX_MESSAGE_BYTES:
            raise ConfigError(
                "--sctp-max-unacked",
                f"must be >= {MAX_MESSAGE_BYTES} bytes, got {self.sctp_max_unacked_bytes}",
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
