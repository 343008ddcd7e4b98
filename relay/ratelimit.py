"""Rate limits of the relay's slow paths: one token bucket, and bounded tables of them by key.

Sans-I/O: ``now`` (seconds, any monotonic clock; the worker passes its coarse tick) comes in.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass


@dataclass
class TokenBucket:
    """Allows ``rate_per_s`` operations per second with bursts of ``burst``."""

    rate_per_s: float
    burst: float
    tokens: float = 0.0
    updated: float = 0.0

    def __post_init__(self) -> None:
        self.tokens = self.burst

    def allow(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate_per_s)
        self.updated = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class KeyedBuckets:
    """A token bucket per key (``burst`` at once, then ``rate_per_s``), at most ``capacity`` keys.

    Each bucket is one float, its *theoretical arrival time* (GCRA, the ATM Forum's generic
    cell rate algorithm, as many API gateways use it): the time at which the key's bucket would
    be full again. A key whose time has passed is the same as a key never seen, so ``prune`` (the
    worker's tick) drops it, and the table holds only keys that spent tokens recently.

    A full table (more recent keys than ``capacity``) does one of two things, chosen by the user:
    - ``overflow=True``: keys not in the table share one extra bucket of the same rate and burst.
      A flood from more keys than the table holds (spoofed sources) then costs at most that one
      bucket's rate beyond the table, at the price of slowing other newcomers during the flood.
    - ``overflow=False``: the least recently used key is forgotten (its next use starts with a
      full bucket). For keys that cost the attacker something to obtain (a valid hint), so that
      having more of them than the table holds never locks out anyone else.
    """

    def __init__(
        self, rate_per_s: float, burst: int, capacity: int, *, overflow: bool = False
    ) -> None:
        if rate_per_s <= 0 or burst < 1 or capacity < 1:
            raise ValueError("rate, burst and capacity must be positive")
        self.interval_s = 1.0 / rate_per_s
        # ``burst`` arrivals at once fit; the tiny slack absorbs the float error that adding
        # ``interval_s`` up to ``burst`` times leaves (otherwise the last one of a burst is
        # refused or not depending on the clock's magnitude).
        self.tolerance_s = burst * self.interval_s + self.interval_s * 1e-6
        self.capacity = capacity
        self.overflow = overflow
        self._due: dict[Hashable, float] = {}  # oldest first (overflow=False: least recent)
        self._overflow_due = 0.0
        self.forgotten = 0  # keys dropped from a full table (overflow=False)

    def __len__(self) -> int:
        return len(self._due)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._due

    def allow(self, key: Hashable, now: float) -> bool:
        """Take one token from ``key``'s bucket; False when it is empty.

        A refusal for a key that is not in the table afterwards came from the overflow bucket.
        """
        table = self._due
        due = table.get(key)
        if due is None:
            if len(table) >= self.capacity:
                if self.overflow:
                    due = max(self._overflow_due, now)
                    if due + self.interval_s - now > self.tolerance_s:
                        return False
                    self._overflow_due = due + self.interval_s
                    return True
                del table[next(iter(table))]
                self.forgotten += 1
            due = now
        else:
            if due < now:
                due = now
            if due + self.interval_s - now > self.tolerance_s:
                return False
            if not self.overflow:
                del table[key]  # re-inserted below: the table stays in least-recent-use order
        table[key] = due + self.interval_s
        return True

    def prune(self, now: float) -> int:
        """Forget keys whose bucket is full again; returns how many."""
        table = self._due
        stale = [key for key, due in table.items() if due <= now]
        for key in stale:
            del table[key]
        return len(stale)
