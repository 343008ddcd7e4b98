"""Build the transceiver allowlist: the only addresses the relay will ever send a datagram to.

Entries come from static ``--transceiver ID=HOST:PORT`` options and from a DNS template such as
``rtcedge-transceiver-{id}.rtcedge-transceiver:5000`` expanded over ``--transceiver-ids`` (the
stable names of a StatefulSet's pods behind a headless Service). Names are resolved here, in the
supervisor, never in a worker; workers only ever see address literals.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass, field

from common.hint import Keyring
from relay.config import ConfigError, RelayConfig, parse_host_port
from relay.control import RoutingConfig

Resolver = Callable[[str, int, int], str]


def resolve_literal(host: str, port: int, family: int) -> str:
    """Resolve one name to one address of ``family`` (the first the resolver returns)."""
    infos = socket.getaddrinfo(host, port, family, socket.SOCK_DGRAM)
    if not infos:
        raise OSError(f"no {family!r} address for {host}")
    return infos[0][4][0]


@dataclass
class AllowlistResolver:
    """Keeps the last good address of every transceiver; a failed lookup keeps the old one.

    Keeping the last known address on a transient DNS failure avoids dropping live calls when the
    cluster DNS hiccups; the entry still only ever holds what DNS or the operator said.
    """

    config: RelayConfig
    resolver: Resolver = resolve_literal
    known: dict[int, tuple[str, int]] = field(default_factory=dict)
    errors: int = 0

    def candidates(self) -> dict[int, tuple[str, int]]:
        names = dict(self.config.transceivers)
        template = self.config.transceiver_dns
        if template:
            for tid in self.config.transceiver_ids:
                names.setdefault(
                    tid, parse_host_port("--transceiver-dns", template.replace("{id}", str(tid)))
                )
        return names

    def refresh(self) -> dict[int, tuple[str, int]]:
        family = self.config.internal_family
        for tid, (host, port) in self.candidates().items():
            try:
                self.known[tid] = (self.resolver(host, port, family), port)
            except OSError:
                self.errors += 1
        return dict(self.known)


def load_keyring(path: str | None, inline_json: str | None) -> Keyring:
    """The keyring from ``--keyring FILE`` or ``--keyring-json``; ConfigError names the option."""
    try:
        if inline_json:
            return Keyring.from_json(inline_json)
        if not path:
            raise ValueError("no keyring given")
        return Keyring.load(path)
    except (OSError, ValueError) as exc:
        option = "--keyring-json" if inline_json else "--keyring"
        raise ConfigError(option, f"cannot load keyring: {exc}") from exc


def load_routing(config: RelayConfig, resolver: AllowlistResolver) -> RoutingConfig:
    """Everything workers route by; raises ConfigError when a static entry cannot be resolved."""
    keyring = load_keyring(config.keyring_path, config.keyring_json)
    transceivers = resolver.refresh()
    missing = sorted(set(config.transceivers) - set(transceivers))
    if missing:
        raise ConfigError("--transceiver", f"cannot resolve transceiver ids {missing}")
    return RoutingConfig(keyring=keyring, transceivers=transceivers)
