"""Per-client quotas on session creation: how fast and how many sessions one client may start.

A WHIP client that may POST (no token configured, or one that holds a valid token) could
otherwise hold every session slot of a transceiver: each offer takes a slot until ICE connects
or times out. Two bounds per client, both sans-I/O with ``now`` passed in:

- ``RateLimiter``: a token bucket per client (``burst`` offers at once, then ``rate_per_s``).
- ``SessionsPerClient``: at most ``cap`` live sessions per client.

Both count by client key (``transceiver.signaling.clients``: who the client is, its token's
subject, else its address).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Container

MAX_CLIENTS = 4096  # buckets kept; ~200 B each, so < 1 MiB


class RateLimiter:
    """Token buckets, one per client key, in a table of at most ``max_clients``.

    Attacker: any WHIP client, with as many source addresses (or token subjects) as it likes.
    Bound: ``max_clients`` buckets; a new client beyond it evicts the one touched longest ago.
    Evicting gives that client a fresh bucket, so only an attacker cycling more than
    ``max_clients`` keys gains, and it still meets the per-client session cap and the
    transceiver's session limit. A bucket idle long enough to be full equals no bucket.
    """

    def __init__(self, rate_per_s: float, burst: int, max_clients: int = MAX_CLIENTS) -> None:
        self.rate_per_s = rate_per_s
        self.burst = float(burst)
        self.max_clients = max_clients
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, at

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, key: str, now: float) -> float:
        """Spend one token: 0.0 if allowed, else the seconds until one is available."""
        bucket = self._buckets.pop(key, None)
        if bucket is None:
            tokens = self.burst
            if len(self._buckets) >= self.max_clients:
                self._buckets.popitem(last=False)
        else:
            tokens, at = bucket
            tokens = min(self.burst, tokens + max(0.0, now - at) * self.rate_per_s)
        if tokens >= 1.0:
            self._buckets[key] = (tokens - 1.0, now)
            return 0.0
        self._buckets[key] = (tokens, now)
        return (1.0 - tokens) / self.rate_per_s


class SessionsPerClient:
    """Live sessions per client key, so that one client cannot hold every slot.

    Bound: one entry per session still live or ended since the last ``reserve`` (so at most the
    transceiver's session limit + 1), and one count per client with an offer in flight (each
    such request is bounded in time by the body timeout, and in number by the rate limit).
    """

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._owner: dict[str, str] = {}  # session id -> client key
        self._in_flight: dict[str, int] = {}  # client key -> offers being answered

    def reserve(self, key: str, live: Container[str]) -> bool:
        """Hold a slot for ``key`` while its offer is answered, if it is under the cap.

        Counting the offers in flight closes the gap between the check and the session's
        existence: concurrent POSTs of one client cannot all pass. Forgets sessions that are no
        longer ``live``.
        """
        for session_id in [s for s in self._owner if s not in live]:
            del self._owner[session_id]
        held = sum(1 for k in self._owner.values() if k == key) + self._in_flight.get(key, 0)
        if held >= self.cap:
            return False
        self._in_flight[key] = self._in_flight.get(key, 0) + 1
        return True

    def settle(self, key: str, session_id: str | None) -> None:
        """The reserved slot became ``session_id``, or (None) is free again."""
        left = self._in_flight.pop(key, 1) - 1
        if left > 0:
            self._in_flight[key] = left
        if session_id is not None:
            self._owner[session_id] = key


def retry_after_s(seconds: float) -> int:
    """A Retry-After value: whole seconds, at least 1."""
    return max(1, math.ceil(seconds))
