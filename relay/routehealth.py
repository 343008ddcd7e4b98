"""Which address of a route (another cluster's relay ingress) an edge sends to: probes, failover.

A route lists its cluster's relay ingress addresses in order of preference (``--route``). Every
``--route-probe-interval`` a worker probes each of them (common.encap ``probe``); an address is
down once ``DOWN_AFTER`` probes in a row went unanswered, and up again on one answer. The route
uses the first address that is up; when all are down it keeps the first (nothing better to try,
and the probes go on). Sans-I/O: the worker sends the probes this returns and reports answers;
nonces come from the ``nonce`` callable given (random in the relay, fixed in tests).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from common.encap import PROBE_NONCE_LEN

DOWN_AFTER = 3


class RouteHealth:
    """Probe state of one route's addresses, and the address to use."""

    def __init__(
        self,
        addresses: int,
        nonce: Callable[[], bytes] = lambda: os.urandom(PROBE_NONCE_LEN),
        down_after: int = DOWN_AFTER,
    ) -> None:
        if addresses < 1:
            raise ValueError("a route has at least one address")
        self.down_after = down_after
        self.unanswered = [0] * addresses  # probes in a row without an answer
        self.outstanding: list[bytes | None] = [None] * addresses  # the last probe's nonce
        # The one before: an answer slower than the probe interval still counts.
        self.previous: list[bytes | None] = [None] * addresses
        self._nonce = nonce
        self.failovers = 0
        self.current = 0

    def up(self, index: int) -> bool:
        return self.unanswered[index] < self.down_after

    def probe_round(self) -> list[tuple[int, bytes]]:
        """Time for the next probes: count the last round's silence, return (address index,
        nonce) to send now."""
        due = []
        for i, nonce in enumerate(self.outstanding):
            if nonce is not None:  # the previous probe got no answer (yet)
                self.unanswered[i] += 1
            self.previous[i] = nonce
            fresh = self._nonce()
            self.outstanding[i] = fresh
            due.append((i, fresh))
        self._choose()
        return due

    def answered(self, nonce: bytes) -> bool:
        """A probe reply arrived with ``nonce``; False when it answers no outstanding probe."""
        for i, (sent, before) in enumerate(zip(self.outstanding, self.previous, strict=True)):
            if nonce in (sent, before):
                if nonce == sent:
                    self.outstanding[i] = None
                self.previous[i] = None
                self.unanswered[i] = 0
                self._choose()
                return True
        return False

    def _choose(self) -> None:
        best = next((i for i in range(len(self.unanswered)) if self.up(i)), 0)
        if best != self.current:
            self.current = best
            self.failovers += 1
