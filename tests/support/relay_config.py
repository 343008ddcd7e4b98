"""A RelayConfig for tests that need one but no sockets: loopback, cluster 0, an empty keyring."""

from __future__ import annotations

from relay.config import RelayConfig


def relay_config(**overrides) -> RelayConfig:
    base = dict(
        listen=("127.0.0.1", 3478),
        internal_host="127.0.0.1",
        internal_port_base=4000,
        cluster=0,
        keyring_json="{}",
    )
    return RelayConfig(**{**base, **overrides})
