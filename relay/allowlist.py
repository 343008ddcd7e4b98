"""Build the transceiver allowlist: the only addresses the relay will ever send a datagram to.

Entries come from static ``--transceiver ID=HOST:PORT`` options and from a DNS template such as
``rtcedge-transceiver-{id}.rtcedge-transceiver:5000`` expanded over ``--transceiver-ids`` (the
stable names of a StatefulSet's pods behind a headless Service). Names are resolved here, in the
supervisor, never in a worker; workers only ever see address literals.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass, field

from common.config import ConfigError, load_keyring, parse_host_port
from relay.config import RelayConfig
from relay.control import RoutingConfig

Resolver = Callable[[str, int, int], str]
log = logging.getLogger("rtcedge.relay")


def resolve_literal(host: str, port: int, family: int) -> str:
    """Resolve one name to one address of ``family`` (the first the resolver returns)."""
    infos = socket.getaddrinfo(host, port, family, socket.SOCK_DGRAM)
    if not infos:
        raise OSError(f"no {family!r} address for {host}")
    return infos[0][4][0]


@dataclass
class AllowlistResolver:
    """Resolves the allowlist's names; keeps an address only while its name keeps resolving.

    A failed lookup keeps the last good address for ``config.dns_grace_s`` after the name last
    resolved: cluster DNS blips (a CoreDNS restart or rollout, a node-local cache reloading,
    timeouts under load) must not drop calls, and removing a transceiver drops every call it
    carries (their packets become ``unknown_transceiver``). Past the grace the entry is removed:
    a name that stays unresolvable is a pod that is gone (scaled down, deleted), and its IP goes
    back to the pool, where another pod may get it; the relay would go on sending clients' media
    to that pod and taking flows from it. So an address outlives its name by at most the grace
    plus one ``--dns-interval``. Sans-I/O: ``now`` is passed in, the resolver is injected.
    """

    config: RelayConfig
    resolver: Resolver = resolve_literal
    known: dict[int, tuple[str, int]] = field(default_factory=dict)
    resolved_at_s: dict[int, float] = field(default_factory=dict)  # last good answer, per id
    errors: int = 0
    expired: int = 0

    def candidates(self) -> dict[int, tuple[str, int]]:
        names = dict(self.config.transceivers)
        template = self.config.transceiver_dns
        if template:
            for tid in self.config.transceiver_ids:
                names.setdefault(
                    tid, parse_host_port("--transceiver-dns", template.replace("{id}", str(tid)))
                )
        return names

    def refresh(self, now: float) -> dict[int, tuple[str, int]]:
        family = self.config.internal_family
        for tid, (host, port) in self.candidates().items():
            try:
                self.known[tid] = (self.resolver(host, port, family), port)
                self.resolved_at_s[tid] = now
            except OSError:
                self.errors += 1
                if tid in self.known and now - self.resolved_at_s[tid] > self.config.dns_grace_s:
                    del self.known[tid], self.resolved_at_s[tid]
                    self.expired += 1
                    log.warning(
                        "transceiver %d (%s) unresolvable for over %.0f s: no longer allowlisted",
                        tid,
                        host,
                        self.config.dns_grace_s,
                    )
        return dict(self.known)


def load_routing(config: RelayConfig, resolver: AllowlistResolver, now: float) -> RoutingConfig:
    """Everything workers route by; raises ConfigError when a static entry cannot be resolved."""
    keyring = load_keyring(config.keyring_path, config.keyring_json)
    transceivers = resolver.refresh(now)
    missing = sorted(set(config.transceivers) - set(transceivers))
    if missing:
        raise ConfigError("--transceiver", f"cannot resolve transceiver ids {missing}")
    return RoutingConfig(keyring=keyring, transceivers=transceivers, routes=resolve_routes(config))


def resolve_routes(
    config: RelayConfig, resolver: Resolver = resolve_literal
) -> dict[int, tuple[tuple[str, int], ...]]:
    """The --route addresses as literals (at start and on SIGHUP; a name that does not resolve
    is a configuration error, the previous configuration stays on a reload)."""
    routes = {}
    for cluster, addresses in config.routes.items():
        resolved = []
        for host, port in addresses:
            try:
                resolved.append((resolver(host, port, config.internal_family), port))
            except OSError as exc:
                raise ConfigError("--route", f"cannot resolve {host}: {exc}") from None
        routes[cluster] = tuple(resolved)
    return routes
