"""The transceiver's configuration: one typed object, built once from the CLI/environment.

Validation raises ``ConfigError`` naming the option, so a bad deployment fails at start.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from relay.config import ConfigError, address_family, parse_host_port

__all__ = ["ConfigError", "TransceiverConfig", "parse_host_port"]


@dataclass(frozen=True)
class TransceiverConfig:
    transceiver_id: int
    cluster: int
    media: tuple[str, int]  # the one UDP socket of this process
    advertise: tuple[str, int]  # the relay's public address, the only candidate in answers
    http: tuple[str, int]
    keyring_path: str | None = None
    keyring_json: str | None = None
    backend: str = "echo"
    backend_url: str | None = None
    max_sessions: int = 20  # ~1 core: bench sessions measured ~4.3% of a core per echo session
    ice_timeout_s: float = 10.0
    idle_timeout_s: float = 60.0
    max_duration_s: float = 4 * 3600.0
    drain_grace_s: float = 30.0
    auth_token: str | None = None
    max_sdp_bytes: int = 64 * 1024
    body_timeout_s: float = 10.0  # a client must deliver its whole offer within this
    cors_origin: str = "*"
    relay_networks: tuple[str, ...] = ()  # CIDRs encapsulated datagrams may come from; () = any
    address_ttl_s: float = 30.0  # a client address the session left, once silent this long, ends

    def validate(self) -> TransceiverConfig:
        if not 0 <= self.transceiver_id <= 0xFFFF:
            raise ConfigError("--id", f"must be 0..65535, got {self.transceiver_id}")
        if not 0 <= self.cluster <= 255:
            raise ConfigError("--cluster", f"must be 0..255, got {self.cluster}")
        address_family("--media", self.media[0])
        address_family("--advertise", self.advertise[0])
        if self.advertise[1] == 0:
            raise ConfigError("--advertise", "needs the relay's real port, not 0")
        if bool(self.keyring_path) == bool(self.keyring_json):
            raise ConfigError("--keyring", "give exactly one of --keyring FILE or --keyring-json")
        if self.backend not in ("echo", "websocket"):
            raise ConfigError("--backend", f"unknown backend {self.backend!r} (echo, websocket)")
        if self.backend == "websocket" and not self.backend_url:
            raise ConfigError("--backend-url", "required with --backend websocket")
        for option, value in (
            ("--max-sessions", self.max_sessions),
            ("--ice-timeout", self.ice_timeout_s),
            ("--idle-timeout", self.idle_timeout_s),
            ("--max-duration", self.max_duration_s),
            ("--max-sdp-bytes", self.max_sdp_bytes),
            ("--body-timeout", self.body_timeout_s),
            ("--address-ttl", self.address_ttl_s),
        ):
            if value <= 0:
                raise ConfigError(option, f"must be > 0, got {value}")
        for cidr in self.relay_networks:
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                raise ConfigError("--relay-network", f"not a network: {cidr!r}") from None
        if self.drain_grace_s < 0:
            raise ConfigError("--drain-grace", "must be >= 0")
        return self
