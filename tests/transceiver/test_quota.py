"""Per-client quotas as numbers: who the client is, token buckets, live sessions per client."""

from __future__ import annotations

import ipaddress

from transceiver.signaling.clients import client_address, client_key
from transceiver.signaling.quota import RateLimiter, SessionsPerClient, retry_after_s

PROXIES = [ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("fd00::/8")]


def test_the_forwarded_header_counts_only_from_a_trusted_proxy():
    # From the proxy: the rightmost address that is not a proxy.
    assert client_address("10.1.2.3", "198.51.100.7", PROXIES) == "198.51.100.7"
    assert client_address("10.1.2.3", "1.1.1.1, 198.51.100.7, 10.9.9.9", PROXIES) == (
        "198.51.100.7"
    ), "the client wrote 1.1.1.1 itself; only what proxies appended is believed"
    assert client_address("fd00::1", "2001:db8::5", PROXIES) == "2001:db8::5"
    # From anyone else, the header is the client's own claim: ignored.
    assert client_address("203.0.113.9", "198.51.100.7", PROXIES) == "203.0.113.9"
    assert client_address("203.0.113.9", "198.51.100.7", []) == "203.0.113.9"
    # Garbage stops the walk at the last address a proxy vouched for.
    assert client_address("10.1.2.3", "198.51.100.7, junk", PROXIES) == "10.1.2.3"
    assert client_address("10.1.2.3", "", PROXIES) == "10.1.2.3"
    assert client_address("10.1.2.3", "10.4.4.4", PROXIES) == "10.4.4.4", "all proxies: leftmost"
    assert client_address(None, "198.51.100.7", PROXIES) is None


def test_keys_are_the_subject_else_the_address_and_an_ipv6_subscriber_is_its_64():
    assert client_key("198.51.100.7", "alice") == "sub:alice"
    assert client_key("198.51.100.7") == "addr:198.51.100.7"
    assert client_key("2001:db8:1:2:aaaa::1") == client_key("2001:db8:1:2:bbbb::9")
    assert client_key("2001:db8:1:2::1") != client_key("2001:db8:1:3::1")
    assert client_key("::ffff:198.51.100.7") == "addr:198.51.100.7"
    assert client_key(None) == "addr:"


def test_a_bucket_allows_its_burst_then_its_rate_and_says_when():
    limiter = RateLimiter(rate_per_s=0.5, burst=2)
    assert limiter.take("a", 0.0) == 0.0
    assert limiter.take("a", 0.0) == 0.0
    assert limiter.take("a", 0.0) == 2.0, "one token per 2 s"
    assert limiter.take("a", 1.0) == 1.0
    assert limiter.take("a", 2.0) == 0.0
    assert limiter.take("b", 2.0) == 0.0, "another client has its own bucket"
    assert limiter.take("a", 1000.0) == 0.0 and limiter.take("a", 1000.0) == 0.0
    assert limiter.take("a", 1000.0) > 0, "refills to the burst, never beyond"
    assert retry_after_s(0.2) == 1 and retry_after_s(2.0) == 2 and retry_after_s(2.1) == 3


def test_the_bucket_table_is_bounded_and_evicts_the_longest_untouched():
    limiter = RateLimiter(rate_per_s=1.0, burst=1, max_clients=3)
    for i, key in enumerate("abc"):
        limiter.take(key, float(i))
    limiter.take("a", 3.0)  # refused (empty), and touched: now the newest
    limiter.take("d", 3.0)  # evicts b, touched longest ago
    assert len(limiter) == 3
    for _ in range(10_000):
        limiter.take("x", 4.0)
    assert len(limiter) == 3
    assert limiter.take("b", 3.0) == 0.0, "an evicted client starts afresh"


def test_live_sessions_per_client_count_offers_in_flight():
    cap = SessionsPerClient(cap=2)
    live: set[str] = set()
    assert cap.reserve("a", live) and cap.reserve("a", live)
    assert not cap.reserve("a", live), "two offers in flight already"
    assert cap.reserve("b", live), "another client is not affected"
    cap.settle("a", "s1")
    live.add("s1")
    cap.settle("a", None)  # that offer failed: its slot is free again
    assert cap.reserve("a", live)
    cap.settle("a", "s2")
    live.add("s2")
    assert not cap.reserve("a", live)
    live.discard("s1")  # a session ended
    assert cap.reserve("a", live)
