"""Rate limits and bounded tables as plain objects: a bucket per key, what a full table does."""

from __future__ import annotations

import pytest

from relay.flowcache import NegativeCache
from relay.ratelimit import KeyedBuckets, TokenBucket


def takes(buckets: KeyedBuckets, key, now: float, n: int) -> int:
    return sum(buckets.allow(key, now) for _ in range(n))


def test_a_key_gets_its_burst_at_once_then_its_rate():
    b = KeyedBuckets(rate_per_s=2, burst=5, capacity=10)
    assert takes(b, "k", now=0, n=20) == 5
    assert takes(b, "k", now=1, n=20) == 2, "two more tokens a second later"
    assert takes(b, "k", now=100, n=20) == 5, "never more than the burst after a long pause"


def test_keys_have_their_own_buckets():
    b = KeyedBuckets(rate_per_s=1, burst=2, capacity=10)
    assert takes(b, "a", 0, 5) == 2 and takes(b, "b", 0, 5) == 2


def test_slow_rates_refill_one_token_per_interval():
    b = KeyedBuckets(rate_per_s=0.1, burst=8, capacity=10)  # a hint: 8, then one per 10 s
    assert takes(b, "hint", 0, 20) == 8
    assert takes(b, "hint", 9, 5) == 0
    assert takes(b, "hint", 10, 5) == 1
    assert takes(b, "hint", 30, 5) == 2


def test_prune_forgets_only_keys_whose_bucket_is_full_again():
    b = KeyedBuckets(rate_per_s=1, burst=3, capacity=10)
    takes(b, "busy", 0, 3)  # full again at t=3
    takes(b, "light", 0, 1)  # full again at t=1
    assert b.prune(1) == 1 and "light" not in b and "busy" in b
    assert b.prune(3) == 1 and len(b) == 0


def test_a_full_overflow_table_makes_newcomers_share_one_bucket():
    b = KeyedBuckets(rate_per_s=1, burst=4, capacity=3, overflow=True)
    for key in range(3):
        assert b.allow(key, 0)
    assert takes(b, "new", 0, 10) == 4 and "new" not in b, "the overflow bucket's burst"
    assert takes(b, "other", 0, 10) == 0, "shared: spent by the first newcomer"
    assert takes(b, 0, 0, 10) == 3, "keys in the table keep their own buckets"
    b.prune(10)
    assert b.allow("new", 10) and "new" in b, "room again once the table is pruned"


def test_a_full_table_without_overflow_forgets_its_least_recently_used_key():
    b = KeyedBuckets(rate_per_s=1, burst=3, capacity=2)
    b.allow("a", 0)
    b.allow("b", 0)
    b.allow("a", 0)  # a used last: b is the least recently used
    assert b.allow("c", 0) and "b" not in b and "a" in b and b.forgotten == 1
    takes(b, "a", 0, 5)
    assert not b.allow("a", 0)  # a refusal is no use: c stays the least recently used
    assert b.allow("d", 0) and "c" not in b and "a" in b and len(b) == 2


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError):
        KeyedBuckets(rate_per_s=0, burst=1, capacity=1)
    with pytest.raises(ValueError):
        KeyedBuckets(rate_per_s=1, burst=0, capacity=1)


def test_single_token_bucket():
    t = TokenBucket(rate_per_s=10, burst=2)
    assert [t.allow(0.0) for _ in range(3)] == [True, True, False]
    assert t.allow(0.1)


def test_the_redis_negative_cache_is_bounded_and_forgets_after_its_ttl():
    cache = NegativeCache(ttl_s=5, capacity=3)
    for key in range(3):
        cache.add(key, now=0)
    assert cache.fresh(0, now=4) and not cache.fresh(0, now=5), "expired after its TTL"
    cache.add(9, now=0)
    cache.add(10, now=0)  # full: cleared rather than grown
    assert len(cache.until) == 1 and 10 in cache


@pytest.mark.parametrize("now", [0.0, 100.0, 4462.0, 10_000.0, 1_000_000.3])
def test_a_burst_is_exactly_burst_whatever_the_clock_reads(now):
    """Adding the interval up to ``burst`` times leaves float error: the burst's last arrival
    was refused or not depending on the clock's magnitude (seen as a test that failed as the
    machine's uptime grew)."""
    buckets = KeyedBuckets(50, 100, capacity=4)
    allowed = sum(buckets.allow("k", now) for _ in range(150))
    assert allowed == 100
