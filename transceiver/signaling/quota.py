"""Per-client quotas on session creation: who the client is, how fast and how many it may start.

A WHIP client that may POST (no token configured, or one that holds a valid token) could
otherwise hold every session slot of a transceiver: each offer takes a slot until ICE connects
or times out. Two bounds per client, both sans-I/O with ``now`` passed in:

- ``RateLimiter``: a token bucket per client (``burst`` offers at once, then ``rate_per_s``).
- ``SessionsPerClient``: at most ``cap`` live sessions per client.

The client is the subject of its signed token when it has one (users behind one NAT then do not
share a quota), else its address: the TCP peer, or, only when the peer is a trusted proxy, the
address that proxy reports in a header such as X-Forwarded-For (``client_address``). IPv6
addresses count by their /64, the block one subscriber usually gets.
"""

from __future__ import annotations

import ipaddress
import math
from collections import OrderedDict
from collections.abc import Container, Sequence

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
MAX_CLIENTS = 4096  # buckets kept; ~200 B each, so < 1 MiB
IPV6_PREFIX = 64


def client_address(
    peer: str | None, forwarded: str | None, trusted: Sequence[Network]
) -> str | None:
    """The client's IP: the peer, or what trusted proxies in front of us say it is.

    A proxy appends the address it got the request from to the header, so the list reads
    client, proxy1, proxy2...; only the entries our trusted proxies added can be believed. We
    walk it from the right and take the first address that is not a trusted proxy (anything
    to its left was written by the client itself). An entry that is not an IP stops the walk.
    """
    address = _ip(peer)
    if address is None or not forwarded or not _within(address, trusted):
        return peer
    for entry in reversed(forwarded.split(",")):
        hop = _ip(entry.strip())
        if hop is None:
            break
        address = hop
        if not _within(hop, trusted):
            break
    return str(address)


def from_trusted_proxy(peer: str | None, trusted: Sequence[Network]) -> bool:
    """Whether the TCP peer is one of our trusted proxies: only then are its headers believed."""
    address = _ip(peer)
    return address is not None and _within(address, trusted)


def client_key(address: str | None, subject: str | None = None) -> str:
    """The quota key: the token's subject, else the address (an IPv6 one by its /64)."""
    if subject:
        return f"sub:{subject}"
    ip = _ip(address)
    if ip is None:
        return f"addr:{address or ''}"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return f"addr:{ip.ipv4_mapped}"
        return f"addr:{ipaddress.IPv6Network((ip, IPV6_PREFIX), strict=False)}"
    return f"addr:{ip}"


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


def retry_after(seconds: float) -> str:
    """A Retry-After value: whole seconds, at least 1."""
    return str(max(1, math.ceil(seconds)))


def _ip(text: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if not text:
        return None
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None


def _within(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, nets: Sequence[Network]) -> bool:
    return any(ip.version == net.version and ip in net for net in nets)
