"""What a worker routes by: the hint verifier and the allowlisted transceivers.

The supervisor publishes a ``RoutingConfig`` (relay.control); a worker applies it here, on its
coarse tick. A hint names a transceiver by id (admission looks it up in ``targets``); a packet on
the internal socket names its sender by address (the hot path looks it up in ``peers``). Both
tables are updated in place, so whoever holds them sees every change.
"""

from __future__ import annotations

import ctypes
from collections.abc import Hashable

from common.hint import HintVerifier
from relay.control import RoutingConfig
from relay.mmsg import sockaddr_bytes
from relay.peerkey import PeerKeys


class Target:
    """An allowlisted transceiver; its sockaddr buffer is updated in place if its address moves,
    so flows that point at it never need rewriting."""

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
        self.peer_key = PeerKeys(self.family).from_sockaddr(raw)


class Routing:
    """The verifier of the current keyring and the transceivers of the current allowlist."""

    def __init__(self, internal_family: int, max_hint_age_s: int) -> None:
        self.internal_family = internal_family
        self.max_hint_age_s = max_hint_age_s
        self.verifier: HintVerifier | None = None  # None until the first configuration
        self.targets: dict[int, Target] = {}
        self.peers: dict[Hashable, Target] = {}

    def apply(self, config: RoutingConfig) -> list[int]:
        """Take a new configuration; returns the ids of transceivers that left the allowlist
        (the caller drops their flows)."""
        self.verifier = HintVerifier(config.keyring, self.max_hint_age_s)
        targets = self.targets
        for tid, (host, port) in config.transceivers.items():
            target = targets.get(tid)
            if target is None:
                targets[tid] = Target(tid, self.internal_family, host, port)
            elif target.address != (host, port):
                target.set_address(host, port)
        gone = [tid for tid in targets if tid not in config.transceivers]
        for tid in gone:
            del targets[tid]
        self.peers.clear()
        self.peers.update((t.peer_key, t) for t in targets.values())
        return gone
