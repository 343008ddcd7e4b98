"""What a worker routes by: the hint verifier, the allowlisted transceivers and the routes.

The supervisor publishes a ``RoutingConfig`` (relay.control); a worker applies it here, on its
coarse tick. A hint names a transceiver by id (admission looks it up in ``targets``) or another
cluster (``routes``: that cluster's relay ingresses, relay tiers); a packet on the internal
socket names its sender by address (the hot path looks it up in ``peers``). All tables are
updated in place, so whoever holds them sees every change.

A route is just another ``Target``: its flows carry the same precomputed header and send
descriptor as a transceiver's, so an edge relay's hot path is the same either way. Its id is
``relay.flows.route_id(cluster)``; every address of a route maps to it in ``peers`` (a late
reply from an address it failed over from is still accepted); failover moves its sockaddr.
"""

from __future__ import annotations

import ctypes
from collections.abc import Hashable

from common.hint import HintVerifier
from relay.addrkey import AddressKeys
from relay.control import RoutingConfig
from relay.flows import route_id
from relay.mmsg import sockaddr_bytes
from relay.routehealth import RouteHealth


class Target:
    """An allowlisted transceiver; its sockaddr buffer is updated in place if its address moves,
    so flows that point at it never need rewriting."""

    health: RouteHealth | None = None  # set for routes only
    label = "transceiver"  # the metrics' peer label

    def __init__(self, tid: int, family: int, host: str, port: int) -> None:
        self.tid = tid
        self.family = family
        self._buf = ctypes.create_string_buffer(28)
        self.ptr = ctypes.addressof(self._buf)
        self.set_address(host, port)

    def set_address(self, host: str, port: int) -> None:
        raw = sockaddr_bytes(self.family, host, port)
        ctypes.memmove(self.ptr, raw, len(raw))
        self.address = (host, port)
        self.peer_key = AddressKeys(self.family).from_sockaddr(raw)


class RouteTarget(Target):
    """Another cluster's relay ingresses, most preferred first; sends to the one ``health``
    chooses (relay.routehealth)."""

    def __init__(self, cluster: int, family: int, addresses: tuple[tuple[str, int], ...]) -> None:
        self.cluster = cluster
        self.label = f"cluster_{cluster}"
        super().__init__(route_id(cluster), family, *addresses[0])
        self.update(addresses)

    def update(self, addresses: tuple[tuple[str, int], ...]) -> None:
        """New addresses (a reload): in place, since flows point at this object's sockaddr."""
        self.addresses = addresses
        self.health = RouteHealth(len(addresses))
        keys = AddressKeys(self.family)
        self.peer_keys = [
            keys.from_sockaddr(sockaddr_bytes(self.family, h, p)) for h, p in addresses
        ]
        self.set_address(*addresses[0])

    def follow_health(self) -> bool:
        """Point at the address ``health`` chose; True when that moved the route."""
        assert self.health is not None
        chosen = self.addresses[self.health.current]
        if chosen == self.address:
            return False
        self.set_address(*chosen)
        return True


class Routing:
    """The verifier of the current keyring, the transceivers of the current allowlist and the
    routes to other clusters."""

    def __init__(self, internal_family: int, max_hint_age_s: int) -> None:
        self.internal_family = internal_family
        self.max_hint_age_s = max_hint_age_s
        self.verifier: HintVerifier | None = None  # None until the first configuration
        self.targets: dict[int, Target] = {}  # transceivers and routes, by target id
        self.routes: dict[int, RouteTarget] = {}  # by cluster
        self.peers: dict[Hashable, Target] = {}

    def apply(self, config: RoutingConfig) -> list[int]:
        """Take a new configuration; returns the target ids that left it (the caller drops their
        flows)."""
        self.verifier = HintVerifier(config.keyring, self.max_hint_age_s)
        self._apply_transceivers(config)
        self._apply_routes(config)
        targets = self.targets
        wanted = set(config.transceivers) | {r.tid for r in self.routes.values()}
        gone = [tid for tid in targets if tid not in wanted]
        for tid in gone:
            del targets[tid]
        self.peers.clear()
        self.peers.update((t.peer_key, t) for t in targets.values() if t.health is None)
        for route in self.routes.values():
            self.peers.update((key, route) for key in route.peer_keys)
        return gone

    def _apply_transceivers(self, config: RoutingConfig) -> None:
        """New transceivers into ``targets``; a moved one keeps its object (flows point at it)."""
        targets = self.targets
        for tid, (host, port) in config.transceivers.items():
            target = targets.get(tid)
            if target is None:
                targets[tid] = Target(tid, self.internal_family, host, port)
            elif target.address != (host, port):
                target.set_address(host, port)

    def _apply_routes(self, config: RoutingConfig) -> None:
        """New, changed and removed routes in ``routes``; a new one is a target too (``apply``
        drops the removed ones' targets)."""
        routes = self.routes
        for cluster, addresses in config.routes.items():
            route = routes.get(cluster)
            if route is None:
                route = routes[cluster] = RouteTarget(cluster, self.internal_family, addresses)
                self.targets[route.tid] = route
            elif route.addresses != addresses:
                route.update(addresses)
        for cluster in [c for c in routes if c not in config.routes]:
            del routes[cluster]
